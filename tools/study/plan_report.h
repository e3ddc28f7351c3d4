// What `tierflow plan` prints about a plan it made: the summary (pipeline, budget, bounds,
// estimate, simulated result), --explain (the largest offloaded tensors and why, notes,
// the tierflow portfolio as tried, warnings) and --stats (the passes' counters).
#pragma once

#include <string>

#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/planner.h"

namespace tierflow::study {

std::string plan_summary(const planner::PlanOutcome& o, const Workload& w,
                         const hw::Topology& topo);
/// The tierflow policy's portfolio as tried: per pipeline, its number (the best marked *),
/// how it fared and what it tries, then the pipeline as --pipeline takes it; empty for
/// other policies.
std::string plan_portfolio(const planner::PlanOutcome& o);
std::string plan_explain(const planner::PlanOutcome& o, const Workload& w,
                         const hw::Topology& topo);
std::string plan_stats(const planner::PlanOutcome& o);

}  // namespace tierflow::study
