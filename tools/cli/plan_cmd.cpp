#include "tools/cli/plan_cmd.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "core/io.h"
#include "core/json_reader.h"
#include "core/json_writer.h"
#include "core/plan_json.h"
#include "core/sha256.h"
#include "core/table.h"
#include "core/units.h"
#include "core/workload_json.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "planner/print.h"
#include "planner/reproducer.h"
#include "sim/timeline.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/sim_evaluator.h"
#include "tools/study/study.h"
#include "tools/study/target.h"

namespace tierflow::cli {

namespace fs = std::filesystem;

namespace {

struct PlanCliOptions {
  ScenarioFlags f;  ///< the target flags (--hw, --set, --device, --devices, --budget, --pin, --threads)
  std::string workload, policy = "tierflow", pipeline, max_overhead, output;
  std::string timeline, print_after, reproducer;
  bool explain = false, stats = false, print_after_all = false, verify_each = false;
};

std::string summary(const planner::PlanOutcome& o, const Workload& w, const hw::Topology& topo) {
  std::string out;
  out += fmt::format("pipeline  {}\n", o.pipeline);
  out += fmt::format("budget    {} per device\n", to_string_approx(Bytes{o.budget}));
  const auto& b = o.bounds;
  const std::string pinned = b.pinned_ps > 0
                                 ? fmt::format(", pinned {} from '{}' at {:.1f} GB/s",
                                               to_string_approx(Bytes{b.pinned_bytes}),
                                               topo.tiers[b.pinned_tier].id, b.pinned_rate / 1e9)
                                 : "";
  out += fmt::format(
      "bounds    residency {} (op '{}'), makespan {} (compute {}, traffic {} "
      "at {:.1f} GB/s{})\n",
      to_string_approx(Bytes{b.residency}), w.ops.empty() ? "" : w.ops[b.residency_op].name,
      to_string_approx(Duration{b.makespan_ps}), to_string_approx(Duration{b.compute_ps}),
      to_string_approx(Bytes{b.traffic_bytes}), b.ingress / 1e9, pinned);
  if (!o.ok) return out;
  out += fmt::format("estimate  peak {} (resident would need {})\n",
                     to_string_approx(Bytes{o.estimated_peak}),
                     to_string_approx(Bytes{o.resident_peak}));
  if (o.evaluation && o.evaluation->ok) {
    const auto& e = *o.evaluation;
    out += fmt::format(
        "simulated makespan {} ({:.3f} x bound), device peak {} ({:.3f} x residency bound)\n",
        to_string_approx(Duration{e.makespan_ps}),
        b.makespan_ps > 0 ? static_cast<double>(e.makespan_ps) / static_cast<double>(b.makespan_ps) : 0.0,
        to_string_approx(Bytes{e.device_peak}),
        b.residency > 0 ? static_cast<double>(e.device_peak) / static_cast<double>(b.residency) : 0.0);
  } else if (o.evaluation) {
    out += fmt::format("simulation failed: {}\n", o.evaluation->error);
  }
  return out;
}

/// The tierflow policy's portfolio as tried: per pipeline, its number (the best marked *),
/// how it fared and what it tries, then the pipeline as --pipeline takes it.
std::string portfolio_text(const planner::PlanOutcome& o) {
  if (o.portfolio.empty()) return "";
  std::string out = fmt::format(
      "\ntierflow portfolio: {} of {} pipelines tried, the best (*) then refined; skipped: not "
      "simulated (a repeated plan, or copies alone at least as long as the best so far)\n",
      std::count_if(o.portfolio.begin(), o.portfolio.end(),
                    [](const planner::PortfolioTrial& p) { return p.result.rfind("not run", 0) != 0; }),
      planner::tierflow_portfolio().size());
  size_t width = 0;
  for (const planner::PortfolioTrial& p : o.portfolio) width = std::max(width, p.result.size());
  for (size_t i = 0; i < o.portfolio.size(); ++i) {
    const planner::PortfolioTrial& p = o.portfolio[i];
    const std::string number = fmt::format("{}{}", p.best ? "*" : "", i + 1);
    out += fmt::format("  {:>3}  {:<{}}  {}\n", number, p.result, width, p.tries);
    out += fmt::format("  {:>3}  {:<{}}  {}\n", "", "", width, p.pipeline);
  }
  return out;
}

std::string explain(const planner::PlanOutcome& o, const Workload& w, const hw::Topology& topo) {
  std::string out = "\nlargest offloaded tensors:\n";
  Table t({"tensor", "bytes", "tier", "fetches", "stores", "off device", "copy time", "exposed",
           "verdict"},
          {Table::Align::kLeft, Table::Align::kRight, Table::Align::kLeft, Table::Align::kRight,
           Table::Align::kRight, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
           Table::Align::kLeft});
  for (size_t i = 0; i < std::min<size_t>(15, o.offloads.size()); ++i) {
    const auto& f = o.offloads[i];
    t.add_row({w.tensors[f.tensor].name, to_string_approx(Bytes{f.bytes}),
               f.tier == planner::kNone ? "-" : topo.tiers[f.tier].id, std::to_string(f.fetches),
               std::to_string(f.stores), to_string_approx(Duration{f.gap_ps}),
               to_string_approx(Duration{f.transfer_ps}), to_string_approx(Duration{f.exposed_ps}),
               f.exposed_ps > 0 ? "exposed" : (f.gap_ps >= f.transfer_ps ? "hidden" : "hidden (sim)")});
  }
  if (o.offloads.empty()) {
    out += "  (none)\n";
  } else {
    out += t.render();
    if (o.offloads.size() > 15) out += fmt::format("  ... and {} more\n", o.offloads.size() - 15);
  }
  for (const std::string& n : o.notes) out += fmt::format("note: {}\n", n);
  out += portfolio_text(o);
  for (const std::string& warn : planner::plan_warnings(o)) out += fmt::format("warning: {}\n", warn);
  return out;
}

std::string stats_text(const planner::PlanOutcome& o) {
  std::string out = "\nstatistics:\n";
  for (const auto& s : o.stats) out += fmt::format("  {:<10} {:<36} {}\n", s.pass, s.name, s.value);
  return out;
}

void write_reproducer(const PlanCliOptions& o, const planner::PlanOutcome& out,
                      const std::string& workload_sha256) {
  const planner::Reproducer r{.workload = o.workload,
                              .workload_sha256 = workload_sha256,
                              .topology = o.f.hw,
                              .pipeline = out.pipeline,
                              .budget = out.budget,
                              .failure = out.reason};
  write_file_atomic(o.reproducer, planner::reproducer_json(r));
}

int run_plan(const PlanCliOptions& o) {
  // Read once: the plan names the SHA-256 of the bytes it was made on.
  const std::string topology_text = read_text_file(o.f.hw);
  const hw::Topology topo = hw::load_topology_text(topology_text, o.f.hw, hw::LoadOptions{o.f.sets, false});
  // The text stays mapped: the plan and the reproducer name the SHA-256 of what was read.
  const FileText workload_text(o.workload);
  const Workload w = read_workload_text(workload_text.view(), o.workload);
  // Outputs that are inputs are refused before planning, not after (the reproducer too,
  // though it is only written when a pass fails).
  for (const std::string* out : {&o.output, &o.timeline, &o.reproducer}) {
    if (!out->empty()) check_output_path(*out);
  }
  planner::PlanRequest req;
  study::check_policy(o.policy, "--policy");
  req.policy = o.policy;
  req.pipeline = o.pipeline;
  if (!o.pipeline.empty()) (void)planner::Pipeline::parse(o.pipeline);  // errors before work
  req.target = study::make_target(topo, o.f.device, o.f.devices, "--device");
  if (!o.f.budget.empty()) req.target.budget = study::parse_budget(o.f.budget, "--budget");
  study::check_budget(topo, req.target, "--budget");
  if (!o.max_overhead.empty()) {
    req.max_overhead = study::parse_overhead(o.max_overhead, "--max-overhead");
  }
  req.pins = study::parse_pins(o.f.pins, topo);
  req.verify_each = o.verify_each;
  req.threads = o.f.threads;
  if (o.print_after_all || !o.print_after.empty()) {
    req.after_pass = [&](std::string_view pass, const planner::PlanState& s) {
      if (!o.print_after_all && pass != o.print_after) return;
      const std::optional<Plan>& plan = s.emitted.last();
      fmt::print("// after {}\n{}", pass, plan ? planner::plan_text(*plan, w) : planner::runs_text(s));
    };
  }
  study::SimEvaluator eval(w, topo);
  req.evaluator = &eval;
  planner::PlanOutcome out = planner::make_plan(w, topo, req);
  if (!o.f.sets.empty()) fmt::print("overrides {}\n", fmt::join(o.f.sets, " "));
  fmt::print("{}", summary(out, w, topo));
  if (!out.ok) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}: {}\n", o.workload, out.reason);
    if (!out.infeasible) {
      if (o.reproducer.empty()) {
        fmt::print(stderr, "note: rerun with --reproducer FILE to save a reproducer of this failure\n");
      } else {
        write_reproducer(o, out, sha256_hex(workload_text.view()));
        fmt::print(stderr, "note: reproducer written to {}\n", o.reproducer);
      }
      return static_cast<int>(ExitCode::kInternal);
    }
    return static_cast<int>(ExitCode::kInfeasible);
  }
  if (o.explain) fmt::print("{}", explain(out, w, topo));
  if (o.stats) fmt::print("{}", stats_text(out));
  if (!o.output.empty()) {
    Plan& plan = *out.plan;  // written as it is, with its references (no copy: a plan of
                             // 100,000 programs is gigabytes)
    const fs::path dir = fs::absolute(o.output).parent_path();
    plan.workload_ref = {fs::relative(fs::absolute(o.workload), dir).string(), sha256_hex(workload_text.view())};
    plan.topology_ref = {fs::relative(fs::absolute(o.f.hw), dir).string(),
                         sha256_hex(topology_text), o.f.sets};
    study::record_outcome(plan, out);
    write_file_atomic(o.output, write_plan(plan, nullptr));
  }
  if (!o.timeline.empty()) {
    sim::Timeline tl(o.timeline);
    sim::SimOptions so;
    so.timeline = &tl;
    (void)sim::simulate(*out.plan, w, topo, so);
    tl.finish();
  }
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
  for (const auto& p : planner::policies()) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  plan->add_option("--policy", o->policy, fmt::format("one of: {} (default tierflow)", names));
  plan->add_option("--pipeline", o->pipeline,
                   "passes to run instead of the policy's, e.g. place,liveness,select,insert,verify");
  plan->add_option("--max-overhead", o->max_overhead,
                   "minimise device memory with the makespan within this overhead, e.g. 1%");
  plan->add_option("-o,--output", o->output, "write the plan JSON here");
  plan->add_option("--timeline", o->timeline, "write the simulated plan's Chrome trace here");
  plan->add_flag("--explain", o->explain, "list the largest offloaded tensors and why; warnings");
  plan->add_flag("--stats", o->stats, "print the passes' counters");
  plan->add_flag("--print-after-all", o->print_after_all, "print the plan after every pass");
  plan->add_option("--print-after", o->print_after, "print the plan after the named pass");
  plan->add_flag("--verify-each", o->verify_each, "check the plan rules after every pass");
  plan->add_option("--reproducer", o->reproducer,
                   "where to write a reproducer if a pass fails (none is written unless asked)");
  plan->callback([o, plan] {
    if (!plan->get_subcommands().empty()) return;
    if (o->workload.empty()) {
      throw CLI::ValidationError("plan needs --workload (or: plan verify FILE)");
    }
    o->f.hw = o->f.hw.empty() ? study::default_topology() : study::find_topology(o->f.hw, "--hw");
    if (!o->f.budget.empty() && !o->max_overhead.empty()) {
      throw CLI::ValidationError("--budget and --max-overhead exclude each other");
    }
    throw CommandResult(run_plan(*o));
  });

  auto file = std::make_shared<std::string>();
  CLI::App* verify = plan->add_subcommand(
      "verify", "check a plan against its workload: references and the residency rules");
  verify->add_option("file", *file, "plan JSON (tierflow.plan/2)")->required();
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
