#include "tools/cli/sim_cmd.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "core/io.h"
#include "core/plan_json.h"
#include "hw_models/loader.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/study.h"

namespace tierflow::cli {
namespace {

struct SimCliOptions {
  std::string hw;
  std::string plan;
  std::vector<std::string> sets;
  std::string on_full = "fail";
  std::string timeline;
  std::string output = "-";
  std::string transfers;
  bool json = false;
  bool csv = false;
  size_t top = 10;
};

int run_sim(const SimCliOptions& o) {
  // Rules are checked by the simulator, which also says when a broken step is reached.
  const LoadedPlan lp = read_plan(o.plan, /*verify=*/false);
  const hw::Topology topo = study::plan_topology(lp.plan, o.plan, o.hw, o.sets);
  check_outputs({{"-o", o.output}, {"--timeline", o.timeline}, {"--transfers", o.transfers}});

  // The report, the timeline and the transfers appear together (OutputSet).
  OutputSet outputs;
  std::unique_ptr<sim::Timeline> tl;
  if (!o.timeline.empty()) tl = std::make_unique<sim::Timeline>(*outputs.open(o.timeline));
  sim::SimOptions so;
  so.on_full = o.on_full == "wait" ? sim::OnFull::kWait : sim::OnFull::kFail;
  so.timeline = tl.get();
  so.live_top = o.top;
  const sim::SimResult r = sim::simulate(lp.plan, lp.workload, topo, so);
  // A plan that does not bind to the topology ran nothing: an empty report would only take
  // the place of the user's file. The error alone.
  if (r.error && r.device_tier == SIZE_MAX) return print_run_error(o.plan, *r.error);
  if (tl) tl->finish();

  std::vector<std::string> sets = lp.plan.topology_ref.sets;
  sets.insert(sets.end(), o.sets.begin(), o.sets.end());
  const sim::ReportContext ctx{lp.plan, lp.workload, topo, o.plan, sets};
  const std::string report = o.json  ? sim::report_json(r, ctx, /*with_transfers=*/true)
                             : o.csv ? sim::report_csv(r, ctx)
                                     : sim::report_table(r, ctx);
  outputs.add(o.output, report);
  if (!o.transfers.empty()) outputs.add(o.transfers, sim::transfers_csv(r, ctx));
  outputs.publish();

  if (!r.error) return static_cast<int>(ExitCode::kOk);
  return print_run_error(o.plan, *r.error);
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto o = std::make_shared<SimCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "simulate a plan on a topology: makespan, stalls, memory per tier, link load");
  cmd->add_option("--plan", o->plan, "plan JSON (tierflow.plan/2)")->required();
  add_plan_topology_flags(cmd, o->hw, o->sets);
  cmd->add_option("--on-full", o->on_full,
                  "when a tier is full: fail (the default: an error naming the step) or wait (a "
                  "memory stall)")
      ->check(CLI::IsMember({"fail", "wait"}));
  cmd->add_option("--timeline", o->timeline,
                  "write a Chrome trace (open in ui.perfetto.dev), streamed while simulating");
  cmd->add_flag("--json", o->json, "print the report as JSON, every transfer included");
  cmd->add_flag("--csv", o->csv, "print the report as CSV rows: section,name,metric,value");
  cmd->add_option("--transfers", o->transfers, "write one CSV row per transfer to FILE");
  cmd->add_option("--top", o->top, "largest live tensors listed per tier (default 10)")
      ->check(CLI::Range(0, 1'000'000));
  cmd->add_option("-o,--output", o->output, "write the report to FILE instead of stdout");
  cmd->callback([o] {
    if (o->json && o->csv) throw CLI::ValidationError("--json and --csv exclude each other");
    throw CommandResult(run_sim(*o));
  });
}

}  // namespace tierflow::cli
