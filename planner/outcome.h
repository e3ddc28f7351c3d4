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
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

/// Where a pipeline goes on from: the initial state after the pipeline's leading prefix
/// passes (reorder, place, liveness; maybe none), what they reported, the lower bounds of
/// that state, and the largest resident profile of the initial state.
struct StartState {
  PlanState state;
  PassReport report;
  PassResult result = PassResult::kUnchanged;
  std::string failure;  ///< the prefix's, as Pipeline::run words it
  Bounds bounds;        ///< lower_bounds(state), also where a failed prefix stopped
  uint64_t resident_peak = 0;
};

/// The start states of the plans of one workload on one topology, each computed once (by
/// the first plan that needs it) per target, budget and prefix: the points of a sweep
/// that differ only in policy share them. It holds the kKept states made last (a search
/// over budgets makes new ones at each: those of old budgets are made again if asked for).
/// Thread-safe. PlanRequest::start_memo.
class StartMemo {
 public:
  /// The state under `key`, made by `make` if no plan has made it yet.
  std::shared_ptr<const StartState> get(const std::string& key,
                                        const std::function<StartState()>& make);
  /// States held now.
  [[nodiscard]] size_t size() {
    const std::lock_guard lock(m_);
    return slots_.size();
  }
  /// The most states held: four per target and budget (the initial state, after
  /// `place,liveness`, after the search's two reorders), for two of them.
  static constexpr size_t kKept = 8;

  /// The score of a plan that the pipeline `key` names (memo_key() + "|" + its text) will
  /// make again: a search scored a plan that one of its entries, a baseline policy as it
  /// is, would repeat; that policy's own plan takes the score instead of simulating the
  /// same plan again (when its fingerprint matches). Kept until taken, the kKeptScores
  /// last (each may hold a simulation of many megabytes).
  void put_score(const std::string& key, uint64_t fingerprint, const Evaluation& e);
  /// The score put under `key` for a plan of `fingerprint`, removed; none if there is none
  /// or it is of another plan.
  std::optional<Evaluation> take_score(const std::string& key, uint64_t fingerprint);
  static constexpr size_t kKeptScores = 4;

 private:
  struct Slot {
    std::once_flag once;
    std::shared_ptr<const StartState> state;
  };
  std::mutex m_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;
  std::deque<std::string> order_;  ///< keys of slots_, oldest first
  std::map<std::string, std::pair<uint64_t, Evaluation>> scores_;
  std::deque<std::string> score_order_;  ///< keys of scores_, oldest first
};

/// The part of a StartMemo key that names the request's target and the budget; with a
/// pipeline (a prefix, or a whole one for a score), the key of what it makes.
std::string memo_key(const PlanRequest& req, uint64_t budget);
std::string memo_key(const PlanRequest& req, uint64_t budget, std::string_view pipeline);

/// Passes at the start of `p` that only prepare the state (reorder, place, liveness):
/// the prefix a StartState holds.
size_t leading_prefix(const Pipeline& p);

/// The request's StartMemo when its plans may share start states with other requests'
/// (no pins, nothing printed or checked after each pass), else null.
StartMemo* shared_memo(const PlanRequest& req);

/// The start state after the passes of `prefix` (none: the initial state) for `req` at
/// `budget`: from `memo` (made there by the first to ask), or made for this call when
/// `memo` is null. Its `state.policy` is that of the request that made it: set your own
/// on a copy.
std::shared_ptr<const StartState> start_state(const Workload& w, const hw::Topology& t,
                                              const PlanRequest& req, uint64_t budget,
                                              const Pipeline* prefix, StartMemo* memo);
/// The policy a request's plans are named for (PlanState::policy).
std::string plan_policy(const PlanRequest& req);

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
