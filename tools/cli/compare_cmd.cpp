#include "tools/cli/compare_cmd.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/io.h"
#include "core/plan_json.h"
#include "planner/planner.h"
#include "sim/timeline.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/compare.h"
#include "tools/study/study.h"
#include "tools/study/target.h"

namespace tierflow::cli {
namespace {

struct CompareOptions {
  ScenarioFlags f;
  std::string timeline, plans_dir;
  std::string output = "-";
  std::vector<std::string> policies;
  bool json = false, csv = false, quiet = false;
};

int run_compare(const CompareOptions& o) {
  const study::Scenario base = to_scenario(o.f);
  for (const std::string& w : study::model_warnings(base)) fmt::print(stderr, "warning: {}\n", w);
  if (const std::string n = study::context_note(base); !n.empty())
    fmt::print(stderr, "note: {}\n", n);
  study::Study study;
  const auto topo = study.topology(base);
  const planner::Target target = study::make_target(*topo, base.device, base.devices, "--device");

  // Policies, then output paths, are checked before anything is made or planned.
  study::check_policies(o.policies, "--policies");
  // A folder made here is removed again if no plan lands in it.
  const MadeDir plans_dir(o.plans_dir,
                          !o.plans_dir.empty() && make_output_dir(o.plans_dir, "--plans"));
  check_outputs({{"-o", o.output}, {"--timeline", o.timeline}});

  // Progress on a terminal only, on one line that the table replaces.
  const bool tty = !o.quiet && isatty(fileno(stderr)) != 0;
  const study::Comparison cmp = study::compare(
      study, base, o.policies, "--policies", [&](size_t i, size_t n, const std::string& name) {
        if (tty) fmt::print(stderr, "\r\033[Kplanning {} ({} of {}) ...", name, i + 1, n);
      });
  if (tty) fmt::print(stderr, "\r\033[K");
  // Every output, each plan's included, is checked again before the first is written, now
  // that every input is read: one over an input or over another output writes none.
  std::vector<std::string> plans(cmp.trials.size());
  for (size_t i = 0; i < cmp.trials.size() && !o.plans_dir.empty(); ++i) {
    if (cmp.trials[i].main().outcome.ok) plans[i] = o.plans_dir + "/" + cmp.stems[i] + ".json";
  }
  std::vector<OutputArg> outputs = {{"-o", o.output}, {"--timeline", o.timeline}};
  for (const std::string& path : plans) outputs.push_back({"--plans", path});
  check_outputs(outputs);
  OutputSet files;  // the plans, the table and the timeline appear together
  for (size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].empty()) continue;
    const study::Trial& t = cmp.trials[i];
    files.add(plans[i],
              write_plan(study::plan_for_file(t, t.main(), plans[i]), t.main().workload.get()));
  }
  const auto format = o.json  ? study::CompareFormat::kJson
                      : o.csv ? study::CompareFormat::kCsv
                              : study::CompareFormat::kText;
  files.add(o.output, study::render_comparison(cmp, base, *topo, target, format));
  const study::Trial* best = cmp.best ? &cmp.trials[*cmp.best] : nullptr;
  if (best != nullptr) {
    study::write_plan_timeline(files.open(o.timeline), *best->main().outcome.plan,
                               *best->main().workload, *topo);
  }
  files.publish();
  if (!o.timeline.empty() && best != nullptr && !o.json && !o.csv)
    fmt::print(stderr, "timeline of the best plan ({}): {}\n", best->scenario.policy, o.timeline);
  return static_cast<int>(best == nullptr ? ExitCode::kInfeasible : ExitCode::kOk);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  study::set_command_defaults(o->f.gen.gen, study::Command::kCompare);
  CLI::App* cmd = app.add_subcommand(
      "compare", "every policy side by side: makespan, memory, traffic, gap to the bounds");
  add_target_flags(cmd, o->f);
  add_workload_flags(cmd, o->f);
  cmd->add_option("--policies", o->policies, "policies to compare (default: all)")->delimiter(',');
  cmd->add_option("--timeline", o->timeline, "write the best plan's Chrome trace here");
  cmd->add_option("--plans", o->plans_dir, "write each policy's plan (workload inline) here");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->add_flag("--csv", o->csv, "print one row per policy with the study's stable columns");
  cmd->add_flag("--quiet", o->quiet, "no progress on the terminal");
  cmd->add_option("-o,--output", o->output, "write the table here instead of stdout");
  cmd->callback([o] {
    if (o->json && o->csv) throw CLI::ValidationError("--json and --csv exclude each other");
    throw CommandResult(run_compare(*o));
  });
}

}  // namespace tierflow::cli
