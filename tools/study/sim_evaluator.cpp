#include "tools/study/sim_evaluator.h"

#include <algorithm>
#include <memory>

#include "planner/host_steps.h"

namespace tierflow::study {

uint64_t device_peak(const sim::SimResult& r) {
  uint64_t peak = 0;
  for (const sim::TierResult& tr : r.tiers) {
    if (tr.tier == r.device_tier) peak = std::max(peak, tr.peak);
  }
  return peak;
}

planner::Evaluation SimEvaluator::run(const Plan& plan, bool verified, int64_t after_ps,
                                      double ingress) {
  sim::SimOptions o;
  o.verified = verified;
  o.keep_transfers = true;
  o.live_top = 0;
  if (after_ps > 0 && ingress > 0) {
    o.stop_after = after_ps;
    o.ingress = ingress;
  }
  auto run = std::make_shared<SimRun>();
  if (keep_runs_) o.op_end = &run->op_end;
  run->result = sim::simulate(plan, w_, t_, o);
  const sim::SimResult& r = run->result;
  ++runs_;
  planner::Evaluation e;
  if (r.stopped) {
    e.ok = false;
    e.stopped = true;
    e.makespan_ps = r.makespan;
    e.error = "stopped: it ends after the limit";
    return e;
  }
  if (keep_runs_) e.run = run;
  if (r.error) {
    e.ok = false;
    e.error = r.error->message;
    e.error_kind = r.error->kind;
    return e;
  }
  e.makespan_ps = r.makespan;
  e.device_peak = device_peak(r);
  // Up to the last event a transfer completes: those after it were exposed for no time.
  uint32_t events = 0;
  for (const sim::TransferRecord& tr : r.transfers) events = std::max(events, tr.event + 1);
  e.exposed_by_event.assign(events, 0);
  for (const sim::TransferRecord& tr : r.transfers) e.exposed_by_event[tr.event] += tr.exposed;
  return e;
}

planner::Evaluation HostMoveEvaluator::evaluate(const Plan& plan, bool verified) {
  // A plan of the planned step that breaks one of its rules cannot be moved: its score
  // says where it breaks.
  if (!verified && verify_plan(plan, planned_w_).has_value()) {
    return planned_.evaluate(plan, false);
  }
  const planner::HostPlan h = planner::move_to_host(plan, w_, t_, kinds_, "--on-host");
  return whole_.evaluate(h.plan, /*verified=*/true);
}

}  // namespace tierflow::study
