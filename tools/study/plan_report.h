// What `tierflow plan` prints about a plan it made: the summary (pipeline, budget, bounds,
// estimate, simulated result), --explain (the largest offloaded tensors and why, notes,
// the tierflow portfolio as tried, warnings) and --stats (the passes' counters).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/diagnostics.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/planner.h"
#include "tools/study/study.h"

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
/// A plan whose own simulation failed is no answer (nothing is written): the exit code its
/// failure's class gives (past the time limit or a topology mismatch: bad input; a tier over
/// capacity: infeasible; anything else: the planner's bug) and the message; nullopt when
/// the simulation ran (or was not run).
std::optional<std::pair<ExitCode, std::string>> plan_simulation_failure(
    const planner::PlanOutcome& o);
/// `--on-host` for `tierflow plan`: `kinds` (when any) of the plan `out` made moved to the
/// host CPU (study::move_to_host()) and the moved plan scored with req.evaluator; returns
/// the `on host` line to print (empty without kinds or without a plan).
std::string plan_on_host(planner::PlanOutcome& out, const Workload& w, const hw::Topology& topo,
                         const planner::PlanRequest& req, const std::vector<OpKind>& kinds);
/// What `--on-host` did, for a line of its own: how many ops of which kinds the host CPU
/// runs next to which tier, and how many stay on the device and why.
std::string on_host_summary(const std::vector<OpKind>& kinds, const HostMove& m,
                            const hw::Topology& topo);

/// "2 programs, 190 steps over 48 ops and 70 tensors": what `plan verify` read.
std::string plan_counts_text(const Plan& plan, const Workload& w);

}  // namespace tierflow::study
