#include "tools/plan_cmd.h"

#include <fmt/format.h>

#include <memory>

#include "core/plan_json.h"
#include "tools/cli_common.h"

namespace tierflow::cli {

void add_plan_commands(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* plan = app.add_subcommand("plan", "make, check and explain plans");
  plan->require_subcommand(1);
  CLI::App* verify = plan->add_subcommand(
      "verify", "check a plan against its workload: references and the residency rules");
  verify->add_option("file", *file, "plan JSON (tierflow.plan/1)")->required();
  verify->callback([file] {
    const LoadedPlan p = read_plan(*file);
    size_t steps = 0;
    for (const Program& prog : p.plan.programs) steps += prog.steps.size();
    fmt::print("ok: {}: {} programs, {} steps over {} ops and {} tensors\n", *file,
               p.plan.programs.size(), steps, p.workload.ops.size(), p.workload.tensors.size());
    throw CommandResult(0);
  });
}

}  // namespace tierflow::cli
