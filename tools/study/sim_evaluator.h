// The simulator behind the planner's PlanEvaluator interface: the planner scores plans
// through it without linking the simulator.
#pragma once

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "core/kinds.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/pass.h"
#include "sim/simulator.h"

namespace tierflow::study {

/// A simulation behind a score, as simulate() gives it with SimEvaluator's options
/// (transfers kept, no live tensors listed) and each op's end (SimOptions::op_end).
struct SimRun {
  sim::SimResult result;
  std::vector<sim::Time> op_end;
};

/// Thread-safe: the planner may score several plans at once.
class SimEvaluator : public planner::PlanEvaluator {
 public:
  /// With `keep_runs`, each evaluation carries its SimRun (take_run()): the caller takes
  /// the simulation of the plan it gets instead of running it again.
  SimEvaluator(const Workload& w, const hw::Topology& t, bool keep_runs = false)
      : w_(w), t_(t), keep_runs_(keep_runs) {}
  planner::Evaluation evaluate(const Plan& plan, bool verified) override {
    return run(plan, verified, 0, 0);
  }
  /// Stops the simulation once the plan surely ends after `after_ps` (SimOptions::
  /// stop_after).
  planner::Evaluation evaluate_until(const Plan& plan, bool verified, int64_t after_ps,
                                     double ingress) override {
    return run(plan, verified, after_ps, ingress);
  }
  [[nodiscard]] bool thread_safe() const override { return true; }
  [[nodiscard]] uint64_t runs() const { return runs_.load(); }

  /// Takes the simulation out of `e` (which then carries none), or null. A run made by
  /// this evaluator is never const: whoever holds the only reference may move from it.
  static std::shared_ptr<const SimRun> take_run(planner::Evaluation& e) {
    return std::static_pointer_cast<const SimRun>(std::exchange(e.run, nullptr));
  }

 private:
  planner::Evaluation run(const Plan& plan, bool verified, int64_t after_ps, double ingress);

  const Workload& w_;
  const hw::Topology& t_;
  bool keep_runs_ = false;
  std::atomic<uint64_t> runs_{0};
};

/// Scores a plan of the step planner::host_planned() makes as it will run: its ops of
/// `kinds` moved to the host CPU (planner::move_to_host), simulated on the whole workload
/// `w`, host steps included. A plan that breaks a rule of the planned step is scored (as
/// failing) on that step. Thread-safe.
class HostMoveEvaluator : public planner::PlanEvaluator {
 public:
  HostMoveEvaluator(const Workload& planned, const Workload& w, const hw::Topology& t,
                    std::vector<OpKind> kinds)
      : planned_w_(planned),
        planned_(planned, t),
        whole_(w, t),
        w_(w),
        t_(t),
        kinds_(std::move(kinds)) {}
  planner::Evaluation evaluate(const Plan& plan, bool verified) override;
  [[nodiscard]] bool thread_safe() const override { return true; }

 private:
  const Workload& planned_w_;
  SimEvaluator planned_;
  SimEvaluator whole_;
  const Workload& w_;
  const hw::Topology& t_;
  std::vector<OpKind> kinds_;
};

/// The device-tier peak of a simulation: the largest over the programs' device tiers
/// (0 when the plan did not bind).
uint64_t device_peak(const sim::SimResult& r);

}  // namespace tierflow::study
