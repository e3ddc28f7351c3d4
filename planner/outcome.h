// One pipeline run and what it reports (the PlanOutcome): the state every pipeline starts
// from, concluding a run, the offloaded tensors --explain lists, comparing two outcomes.
//
// Glossary
//   outcome      what make_plan returns for one pipeline at one budget: the plan, its
//                bounds, estimates, score, counters and notes, or why it failed.
//   fingerprint  a hash of program 0's steps and the homes (or of a state's decisions):
//                equal plans, equal prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "planner/planner.h"

namespace tierflow::planner {

/// Runs `pipeline` at `budget`; scores the plan when the request has an evaluator.
PlanOutcome run_pipeline(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                         std::string_view pipeline, uint64_t budget);

/// The state every pipeline starts from: the workload's order, costs and liveness done,
/// every tensor resident.
PlanState initial_state(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                        uint64_t budget);
/// A context with the request's evaluator, --verify-each and --print-after.
PassContext context_for(const PlanRequest& req);

/// Fills what a finished pipeline run reports: counters, notes and the failure, or the
/// estimated peak of its plan (emitted when no pass did). Returns whether it succeeded.
bool conclude(PlanOutcome& out, PlanState& s, PassContext& ctx, PassResult r);

/// The evaluator's score of the plan as `s`'s runs stand (emitted when stale), telling it
/// whether the verify pass already checked that plan.
Evaluation evaluate(PlanEvaluator& evaluator, PlanState& s);

/// Completes a concluded outcome: its score (the one kept with the emitted plan, or the
/// evaluator's when given and the outcome has none yet), the offloaded tensors, and the
/// plan, moved out of `s.emitted`.
void report(PlanOutcome& out, PlanState& s, PlanEvaluator* evaluator);

/// The offloaded tensors, largest first, with the exposed time the evaluation measured.
std::vector<OffloadInfo> offloads_of(const PlanState& s, const std::optional<Evaluation>& ev);

/// Whether `a` is a better outcome than `b`: it succeeded, its plan ran, a shorter
/// makespan, then a lower device peak.
bool better_than(const PlanOutcome& a, const PlanOutcome& b);

/// FNV-1a over the steps of program 0 and the homes.
uint64_t fingerprint(const Plan& p);
/// FNV-1a over a state's decisions: the order, the tiers' room and use, and every tensor's
/// tier, flags and runs. Equal states, equal prints (the search's test for a repeated
/// selection: what the passes after it read).
uint64_t fingerprint(const PlanState& s);

/// Bytes the runs prefetch (one prefetch step per fetched run once emitted).
uint64_t fetched_bytes(const PlanState& s);

/// Whether anything leaves the device (what offloads_of() would list).
bool moves_anything(const PlanState& s);

}  // namespace tierflow::planner
