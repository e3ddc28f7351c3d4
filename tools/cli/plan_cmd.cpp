#include "tools/cli/plan_cmd.h"

#include <fmt/format.h>

#include <memory>

#include "core/io.h"
#include "core/plan_json.h"
#include "core/sha256.h"
#include "core/workload_json.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "planner/print.h"
#include "planner/reproducer.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/plan_report.h"
#include "tools/study/sim_evaluator.h"
#include "tools/study/study.h"
#include "tools/study/target.h"

namespace tierflow::cli {

namespace {

struct PlanCliOptions {
  ScenarioFlags f;  ///< --hw, --set, --device, --devices, --budget, --pin, --threads
  std::string workload, policy, pipeline, max_overhead, output;  // policy: tierflow
  std::string timeline, print_after, reproducer;
  bool explain = false, stats = false, print_after_all = false, verify_each = false;
};

int run_plan(const PlanCliOptions& o) {
  // Read once (the workload stays mapped): the plan names the SHA-256 of the bytes read.
  const std::string topology_text = read_text_file(o.f.hw);
  const hw::Topology topo =
      hw::load_topology_text(topology_text, o.f.hw, hw::LoadOptions{o.f.sets, false});
  const FileText workload_text(o.workload);
  const Workload w = read_workload_text(workload_text.view(), o.workload);
  check_outputs({{"-o", o.output}, {"--timeline", o.timeline}, {"--reproducer", o.reproducer}});
  planner::PlanRequest req =
      study::plan_request(topo,
                          {o.policy, o.pipeline, o.f.device, o.f.devices, o.f.budget,
                           o.max_overhead, o.f.pins, o.verify_each, o.f.threads},
                          /*cli=*/true);
  if (o.print_after_all || !o.print_after.empty()) {
    req.after_pass = [&](std::string_view pass, const planner::PlanState& s) {
      if (!o.print_after_all && pass != o.print_after) return;
      const std::optional<Plan>& plan = s.emitted.last();
      fmt::print("// after {}\n{}", pass,
                 plan ? planner::plan_text(*plan, w) : planner::runs_text(s));
    };
  }
  study::check_tp_group(topo, req.target, w, o.workload);  // before planning
  study::SimEvaluator eval(w, topo);
  req.evaluator = &eval;
  const std::vector<OpKind> on_host = study::host_ops(topo, o.f.on_host);
  planner::PlanOutcome out = study::plan_for(w, topo, req, on_host);
  const std::string host_line = study::plan_on_host(out, w, topo, req, on_host);
  if (!o.f.sets.empty()) fmt::print("overrides {}\n", fmt::join(o.f.sets, " "));
  fmt::print("{}{}", study::plan_summary(out, w, topo), host_line);
  if (!out.ok) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}: {}\n", o.workload, out.reason);
    if (out.infeasible) return static_cast<int>(ExitCode::kInfeasible);
    if (o.reproducer.empty()) {
      fmt::print(stderr,
                 "note: rerun with --reproducer FILE to save a reproducer of this failure\n");
    } else {
      write_file_atomic(o.reproducer,
                        planner::reproducer_json({o.workload, sha256_hex(workload_text.view()),
                                                  o.f.hw, out.pipeline, out.budget, out.reason}));
      fmt::print(stderr, "note: reproducer written to {}\n", o.reproducer);
    }
    return static_cast<int>(ExitCode::kInternal);
  }
  if (o.explain) fmt::print("{}", study::plan_explain(out, w, topo));
  if (o.stats) fmt::print("{}", study::plan_stats(out));
  if (const auto failed = study::plan_simulation_failure(out)) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}: {} (nothing written)\n", o.workload, failed->second);
    return static_cast<int>(failed->first);
  }
  OutputSet outputs;  // the plan and its timeline appear together
  if (!o.output.empty()) {
    Plan& plan = *out.plan;  // as it is, with its references (no copy: it may be gigabytes)
    study::refer_inputs(plan, o.output, o.f.hw, sha256_hex(topology_text), o.f.sets, o.workload,
                        sha256_hex(workload_text.view()));
    study::record_outcome(plan, out);
    outputs.add(o.output, write_plan(plan, nullptr));
  }
  study::write_plan_timeline(outputs.open(o.timeline), *out.plan, w, topo);
  outputs.publish();
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace

void add_plan_commands(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan", "make a plan (--workload, --hw, --policy) or check one (plan verify FILE)");
  plan->require_subcommand(0, 1);
  add_target_flags(plan, o->f);
  plan->add_option("--workload", o->workload, "workload JSON (tierflow.workload/1)");
  std::string names;
  for (const auto& p : planner::policies())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  plan->add_option("--policy", o->policy, fmt::format("one of: {} (default tierflow)", names));
  plan->add_option(
      "--pipeline", o->pipeline,
      "passes to run instead of the policy's, e.g. place,liveness,select,insert,verify");
  plan->add_option("--max-overhead", o->max_overhead,
                   "minimise device memory with the makespan within this overhead, e.g. 1%");
  plan->add_option("-o,--output", o->output, "write the plan JSON here");
  plan->add_option("--timeline", o->timeline, "write the simulated plan's Chrome trace here");
  plan->add_flag("--explain", o->explain, "list the largest offloaded tensors and why; warnings");
  plan->add_flag("--stats", o->stats, "print the passes' counters");
  plan->add_flag("--print-after-all", o->print_after_all, "print the plan after every pass");
  plan->add_option("--print-after", o->print_after, "print the plan after the named pass")
      ->check(kPassName);
  plan->add_flag("--verify-each", o->verify_each, "check the plan rules after every pass");
  plan->add_option("--reproducer", o->reproducer,
                   "where to write a reproducer if a pass fails (none is written unless asked)");
  plan->callback([o, plan] {
    if (!plan->get_subcommands().empty()) return;
    if (o->workload.empty())
      throw CLI::ValidationError("plan needs --workload (or: plan verify FILE)");
    o->f.hw = o->f.hw.empty() ? study::default_topology() : study::find_topology(o->f.hw, "--hw");
    throw CommandResult(run_plan(*o));
  });

  auto file = std::make_shared<std::string>();
  CLI::App* verify = plan->add_subcommand(
      "verify",
      "check a plan against its workload: references, residency rules, waits across programs");
  verify->add_option("file", *file, "plan JSON (tierflow.plan/2)")->required();
  verify->callback([file] {
    const LoadedPlan p = read_plan(*file);
    if (const std::string why = study::plan_binding_error(p, *file); !why.empty())
      throw InputError::at(SourcePos{*file}, "{}", why);
    fmt::print("ok: {}: {}\n", *file, study::plan_counts_text(p.plan, p.workload));
    throw CommandResult(0);
  });
}

}  // namespace tierflow::cli
