// plan-json: the plan rewritten in canonical `tierflow.plan/2` form. The references it
// keeps still name the same files from OUT's folder, so the written plan reads, verifies
// and simulates like the input (with the --hw and --set of the export recorded).
#include <filesystem>

#include "core/io.h"
#include "core/json_reader.h"
#include "core/plan_json.h"
#include "core/sha256.h"
#include "tools/export/writers.h"

namespace tierflow::exporter {

std::string plan_json(const ExportInput& in, const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path plan_dir = fs::absolute(in.plan_file).parent_path();
  const fs::path out_dir = out == "-" ? fs::current_path() : fs::absolute(out).parent_path();
  // A path the plan gives relative to its own folder, relative to OUT's folder instead.
  const auto rebase = [&](const std::string& file) {
    const fs::path p(file);
    if (p.is_absolute()) return file;
    return fs::relative(plan_dir / p, out_dir).string();
  };

  Plan plan = in.plan;
  if (!in.options.hw.empty()) {
    plan.topology_ref.file = fs::relative(fs::absolute(in.options.hw), out_dir).string();
    plan.topology_ref.sha256 = sha256_hex(FileText(in.options.hw).view());
  } else if (!plan.topology_ref.file.empty()) {
    plan.topology_ref.file = rebase(plan.topology_ref.file);
  }
  plan.topology_ref.sets.insert(plan.topology_ref.sets.end(), in.options.sets.begin(),
                                in.options.sets.end());
  const bool inline_workload = in.options.inline_workload || plan.workload_ref.file.empty();
  if (inline_workload) {
    plan.workload_ref = {};
  } else {
    plan.workload_ref.file = rebase(plan.workload_ref.file);
  }
  return write_plan(plan, inline_workload ? &in.workload : nullptr);
}

void write_plan_json(const ExportInput& in, const std::string& out) {
  write_file_atomic(out, plan_json(in, out));
}

}  // namespace tierflow::exporter
