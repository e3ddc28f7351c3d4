#include "tools/study/plan_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/table.h"
#include "core/units.h"
#include "planner/host_steps.h"

namespace tierflow::study {

std::string plan_summary(const planner::PlanOutcome& o, const Workload& w,
                         const hw::Topology& topo) {
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
        b.makespan_ps > 0 ? static_cast<double>(e.makespan_ps) / static_cast<double>(b.makespan_ps)
                          : 0.0,
        to_string_approx(Bytes{e.device_peak}),
        b.residency > 0 ? static_cast<double>(e.device_peak) / static_cast<double>(b.residency)
                        : 0.0);
  } else if (o.evaluation) {
    out += fmt::format("simulation failed: {}\n", o.evaluation->error);
  }
  return out;
}

std::optional<std::pair<ExitCode, std::string>> plan_simulation_failure(
    const planner::PlanOutcome& o) {
  if (!o.evaluation || o.evaluation->ok || !o.evaluation->error_kind) return std::nullopt;
  const RunError::Kind kind = *o.evaluation->error_kind;
  const ExitCode code = kind == RunError::Kind::kTimeLimit || kind == RunError::Kind::kTopology
                            ? ExitCode::kBadInput
                        : kind == RunError::Kind::kCapacity ? ExitCode::kInfeasible
                                                            : ExitCode::kInternal;
  return std::pair{code, "the plan's simulation failed: " + o.evaluation->error};
}

std::string plan_on_host(planner::PlanOutcome& out, const Workload& w, const hw::Topology& topo,
                         const planner::PlanRequest& req, const std::vector<OpKind>& kinds) {
  if (!out.ok || kinds.empty()) return "";
  const HostMove m = move_to_host(out, w, topo, req, kinds);
  if (!out.evaluation) out.evaluation = req.evaluator->evaluate(*out.plan, /*verified=*/true);
  return fmt::format("on host   {}\n", on_host_summary(kinds, m, topo));
}

std::string on_host_summary(const std::vector<OpKind>& kinds, const HostMove& m,
                            const hw::Topology& topo) {
  std::string out =
      fmt::format("{} {} op{} per device run by the host CPU next to '{}'", m.moved,
                  planner::host_ops_text(kinds), m.moved == 1 ? "" : "s", topo.system.cpu.tier);
  if (m.kept > 0) out += fmt::format("; {} stay on the device ({})", m.kept, m.why_kept);
  return out;
}

std::string plan_portfolio(const planner::PlanOutcome& o) {
  if (o.portfolio.empty()) return "";
  std::string out = fmt::format(
      "\ntierflow portfolio: {} of {} pipelines tried, the best (*) then refined; skipped: not "
      "simulated (a repeated plan, or copies alone at least as long as the best so far)\n",
      std::count_if(
          o.portfolio.begin(), o.portfolio.end(),
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

std::string plan_explain(const planner::PlanOutcome& o, const Workload& w,
                         const hw::Topology& topo) {
  std::string out = "\nlargest offloaded tensors:\n";
  Table t({"tensor", "bytes", "tier", "fetches", "stores", "off device", "copy time", "exposed",
           "verdict"},
          {Table::Align::kLeft, Table::Align::kRight, Table::Align::kLeft, Table::Align::kRight,
           Table::Align::kRight, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
           Table::Align::kLeft});
  for (size_t i = 0; i < std::min<size_t>(15, o.offloads.size()); ++i) {
    const auto& f = o.offloads[i];
    t.add_row(
        {w.tensors[f.tensor].name, to_string_approx(Bytes{f.bytes}),
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
  out += plan_portfolio(o);
  for (const std::string& warn : planner::plan_warnings(o))
    out += fmt::format("warning: {}\n", warn);
  return out;
}

std::string plan_stats(const planner::PlanOutcome& o) {
  std::string out = "\nstatistics:\n";
  for (const auto& s : o.stats) out += fmt::format("  {:<10} {:<36} {}\n", s.pass, s.name, s.value);
  return out;
}

std::string plan_counts_text(const Plan& plan, const Workload& w) {
  size_t steps = 0;
  for (const Program& prog : plan.programs) steps += prog.steps.size();
  return fmt::format("{}, {} steps over {} ops and {} tensors",
                     count_text(plan.programs.size(), "program"), steps, w.ops.size(),
                     w.tensors.size());
}

}  // namespace tierflow::study
