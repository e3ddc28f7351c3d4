// The per-step CSV: one row per program step, every time an integer picosecond count.
#include <fmt/format.h>

#include <iterator>

#include "core/io.h"
#include "core/table.h"
#include "tools/export/step_table.h"
#include "tools/export/writers.h"

namespace tierflow::exporter {
namespace {

/// An integer cell, empty when unset.
std::string opt(int64_t v) {
  return v == kUnset ? std::string() : std::to_string(v);
}

}  // namespace

std::string steps_csv(const ExportInput& in) {
  std::string out;
  for (size_t i = 0; i < kStepColumns.size(); ++i) {
    if (i > 0) out += ',';
    out += kStepColumns[i];
  }
  out += '\n';
  auto it = std::back_inserter(out);
  for (size_t p = 0; p < in.plan.programs.size(); ++p) {
    for (const StepRow& r : step_rows(in, p)) {
      const Step& s = *r.step;
      const bool compute = s.kind == StepKind::kCompute;
      std::string name, cls, flops, event;
      int32_t layer = -1;
      if (compute) {
        const Op& op = in.workload.ops[s.target];
        name = op.name;
        cls = name_of(op.kind);
        layer = op.layer;
        flops = fmt::format("{}", op.flops);
      } else {
        const Tensor& t = in.workload.tensors[s.target];
        name = t.name;
        cls = kTensorKindNames[static_cast<size_t>(t.kind)];
        layer = t.layer;
      }
      if (s.event != kNoEvent) event = std::to_string(s.event);
      const int64_t duration = r.start_ps >= 0 && r.end_ps >= 0 ? r.end_ps - r.start_ps : kUnset;
      fmt::format_to(
          it, "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", p,
          in.plan.programs[p].device, r.index, kStepKindNames[static_cast<size_t>(s.kind)],
          s.target, csv_field(name), cls, layer, step_bytes(in.workload, s), flops, r.from_tier,
          r.to_tier, csv_field(fmt::format("{}", fmt::join(r.route, ";"))),
          r.anchor >= 0 ? std::to_string(r.anchor) : "", event,
          fmt::format("{}", fmt::join(s.wait, ";")), opt(r.issue_ps), opt(r.start_ps),
          opt(r.end_ps), opt(duration), opt(r.queue_ps), opt(r.stall_ps), opt(r.exposed_ps));
    }
  }
  return out;
}

void write_steps_csv(const ExportInput& in, const std::string& out) {
  write_file_atomic(out, steps_csv(in));
}

}  // namespace tierflow::exporter
