#include "tools/cli/whatif_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <unistd.h>

#include "core/io.h"
#include "core/json_tree.h"
#include "core/plan_json.h"
#include "core/table.h"
#include "core/units.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/cli/whatif_serve.h"
#include "tools/study/sweep.h"
#include "tools/study/target.h"
#include "tools/study/whatif.h"
#include "tools/study/whatif_json.h"

namespace tierflow::cli {
namespace {

struct WhatIfCliOptions {
  ScenarioFlags f;
  WhatIfServeFlags serve;
  std::string question = "min-memory";
  std::string max_overhead = "1%";
  double min_throughput = 0, max_tpot = 0;
  std::vector<std::string> vary;
  std::string output = "-", plan_out;
  bool json = false, quiet = false;
};

int run_whatif(const WhatIfCliOptions& o) {
  const study::Scenario base = to_scenario(o.f);
  study::WhatIfOptions w;
  w.question = static_cast<study::Question>(*index_of(study::kQuestionNames, o.question));
  w.max_overhead = study::parse_overhead(o.max_overhead, "--max-overhead");
  w.min_throughput = o.min_throughput;
  w.max_tpot_ms = o.max_tpot;
  const bool tty = !o.quiet && isatty(fileno(stderr)) != 0;
  if (tty) w.progress = [](const std::string& line) { fmt::print(stderr, "\r\033[K{}", line); };
  std::vector<study::Axis> axes;
  for (const std::string& v : o.vary) axes.push_back(study::parse_axis(v, "--vary"));
  study::check_whatif_grid(base, w, axes, "--vary");
  study::check_axes(base, axes, "--vary");
  const auto grid = study::expand_grid(base, axes);

  study::Study study;
  const auto topo = study.topology(base);
  check_outputs({{"-o", o.output}, {"--plan-out", o.plan_out}});
  std::vector<study::Answer> answers;
  for (const auto& [s, values] : grid) {
    answers.push_back(study::whatif(study, s, w));
  }
  if (tty) fmt::print(stderr, "\r\033[K");

  std::vector<std::vector<std::string>> values;
  for (const auto& point : grid) values.push_back(point.second);
  const std::string text =
      o.json ? json_text(study::whatif_json(w, base, *topo, axes, values, answers))
             : study::whatif_text(w, base, *topo, axes, values, answers);
  // The answer and its plan appear together; with no plan to write, neither is written.
  const std::pair<std::string, std::string> outputs[] = {
      {o.output, text},
      {o.plan_out, o.plan_out.empty()
                       ? std::string()
                       : study::answer_plan_json(answers.front(), o.plan_out, "--plan-out")}};
  write_files_atomic(outputs);
  bool any = false;
  for (const auto& a : answers) any = any || a.found;
  return static_cast<int>(any ? ExitCode::kOk : ExitCode::kInfeasible);
}

}  // namespace

void add_whatif_command(CLI::App& app) {
  auto o = std::make_shared<WhatIfCliOptions>();
  // The default question: Llama-3.1-70B decode, batch 16, 32k context, on one H100.
  study::set_command_defaults(o->f.gen.gen, study::Command::kWhatIf);
  CLI::App* cmd = app.add_subcommand(
      "whatif",
      "capacity questions answered by search: min-memory, max-batch, max-context, upgrade; "
      "of a service (--trace or --arrivals): max-rate, min-replicas, min-devices, "
      "min-capacity:TIER, split, upgrade");
  cmd->add_option("--question", o->question,
                  "min-memory, max-batch, max-context or upgrade; of a service: max-rate, "
                  "min-replicas, min-devices, min-capacity:TIER, split or upgrade")
      ->capture_default_str();
  add_whatif_serve_flags(cmd, o->serve);
  auto* overhead =
      cmd->add_option("--max-overhead", o->max_overhead,
                      "min-memory: latency within this of the fastest possible, e.g. 1%")
          ->capture_default_str();
  auto* throughput =
      cmd->add_option("--min-throughput", o->min_throughput,
                      "max-batch/max-context: tokens/s at least (a request: generation throughput)")
          ->check(kPositiveFinite);
  auto* tpot =
      cmd->add_option("--max-tpot", o->max_tpot,
                      "max-batch/max-context: TPOT at most, e.g. 50ms (a bare number is ms)")
          ->transform(kMilliseconds)
          ->check(kPositiveFinite);
  cmd->add_option("--vary", o->vary,
                  "PATH=V1,V2,...: answer for each value of a topology or generator field "
                  "(repeatable: a grid)");
  cmd->add_option("--policy", o->f.policy, "planning policy (default tierflow)");
  add_target_flags(cmd, o->f);
  add_workload_flags(cmd, o->f);
  cmd->add_option("--plan-out", o->plan_out, "write the plan that achieves the answer here");
  cmd->add_flag("--json", o->json, "print JSON (tierflow.whatif/1)");
  cmd->add_flag("--quiet", o->quiet, "no progress on the terminal");
  cmd->add_option("-o,--output", o->output, "write the answer here instead of stdout");
  cmd->callback([o, cmd, overhead, throughput, tpot] {
    if (o->serve.asked()) {
      throw CommandResult(run_whatif_serve(cmd, o->f, o->serve, o->question, o->json, o->quiet,
                                           o->output));
    }
    check_step_question(o->question);
    // A limit the question does not use is refused, not ignored.
    if (overhead->count() > 0 && o->question != "min-memory") {
      throw CLI::ValidationError("--max-overhead",
                                 "applies to --question min-memory only (not " + o->question + ")");
    }
    const bool search = o->question == "max-batch" || o->question == "max-context";
    for (const CLI::Option* opt : {throughput, tpot}) {
      if (opt->count() > 0 && !search) {
        throw CLI::ValidationError(opt->get_name(),
                                   "applies to --question max-batch and "
                                   "max-context only (not " +
                                       o->question + ")");
      }
    }
    throw CommandResult(run_whatif(*o));
  });
}

}  // namespace tierflow::cli
