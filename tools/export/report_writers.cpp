// The simulator's own outputs as export formats: the same functions `tierflow sim` calls,
// so that the bytes are the same.
#include "core/diagnostics.h"
#include "core/io.h"
#include "sim/report.h"
#include "tools/export/writers.h"

namespace tierflow::exporter {
namespace {

sim::ReportContext context(const ExportInput& in) {
  return sim::ReportContext{in.plan, in.workload, in.topology, in.plan_file};
}

}  // namespace

void write_report_json(const ExportInput& in, const std::string& out) {
  write_file_atomic(out, sim::report_json(*in.sim, context(in), /*with_transfers=*/true));
}

void write_report_csv(const ExportInput& in, const std::string& out) {
  write_file_atomic(out, sim::report_csv(*in.sim, context(in)));
}

void write_chrome(const ExportInput& in, const std::string& /*out*/) {
  // The timeline streamed to OUT while the plan was simulated (SimNeed::kTimeline).
  TF_ASSERT(in.timeline != nullptr, "chrome export without a streamed timeline");
  in.timeline->finish();
}

}  // namespace tierflow::exporter
