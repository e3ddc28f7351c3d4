#include "tools/cli/report_cmd.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "core/io.h"
#include "core/units.h"
#include "sim/report.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/export/html_report.h"

namespace tierflow::cli {
namespace {

struct ReportCliOptions {
  std::vector<std::string> plans;
  std::string hw;
  std::vector<std::string> sets;
  std::string on_full = "fail";
  std::string output = "-";
  size_t top = 40;
};

int run_report(const ReportCliOptions& o) {
  std::vector<exporter::ReportRun> runs;
  const sim::OnFull on_full = o.on_full == "wait" ? sim::OnFull::kWait : sim::OnFull::kFail;
  for (const std::string& plan : o.plans) {
    runs.push_back(exporter::run_for_report(plan, o.hw, o.sets, on_full));
  }
  check_outputs({{"-o", o.output}});  // every plan read: one over an input writes nothing
  exporter::ReportOptions ro;
  ro.top_waits = o.top;
  write_file_atomic(o.output, exporter::html_report(runs, ro));
  // A run that stopped is drawn up to the stop; it is still an error of the command.
  // As sim says it: a broken rule or programs waiting on each other at the step's position.
  for (const exporter::ReportRun& r : runs) {
    if (r.result.error) (void)print_run_error(r.file, *r.result.error);
  }
  if (o.output != "-") {
    fmt::print(stderr, "wrote {}: {} plan{}\n", o.output, runs.size(), runs.size() == 1 ? "" : "s");
  }
  return exporter::report_exit_code(runs);
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "simulate plans and write a self-contained HTML page: memory by tensor kind, link "
      "bandwidth, activity and exposed waits over time; with several plans, a comparison");
  cmd->add_option("plans", o->plans, "plan JSON files (tierflow.plan/2), e.g. DIR/*.json")
      ->required();
  add_plan_topology_flags(cmd, o->hw, o->sets);
  cmd->add_option("--on-full", o->on_full,
                  "when a tier is full: fail (the default; the page shows the error) or wait")
      ->check(CLI::IsMember({"fail", "wait"}));
  cmd->add_option("--top", o->top, "rows of the exposed-wait table (default 40)")
      ->check(CLI::Range(0, 1'000'000));
  cmd->add_option("-o,--output", o->output, "write the page here (default: standard output)");
  cmd->callback([o] { throw CommandResult(run_report(*o)); });
}

}  // namespace tierflow::cli
