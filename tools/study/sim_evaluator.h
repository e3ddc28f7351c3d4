// The simulator behind the planner's PlanEvaluator interface: the planner scores plans
// through it without linking the simulator.
#pragma once

#include <atomic>

#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/pass.h"
#include "sim/simulator.h"

namespace tierflow::study {

/// Thread-safe: the planner may score several plans at once.
class SimEvaluator : public planner::PlanEvaluator {
 public:
  SimEvaluator(const Workload& w, const hw::Topology& t) : w_(w), t_(t) {}
  planner::Evaluation evaluate(const Plan& plan) override;
  [[nodiscard]] bool thread_safe() const override { return true; }
  [[nodiscard]] uint64_t runs() const { return runs_.load(); }

 private:
  const Workload& w_;
  const hw::Topology& t_;
  std::atomic<uint64_t> runs_{0};
};

/// The device-tier peak of a simulation: the largest over the programs' device tiers.
uint64_t device_peak(const sim::SimResult& r, const hw::Topology& t, const Plan& plan);

}  // namespace tierflow::study
