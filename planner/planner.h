// The planner's front door: named policies (pipelines), budget modes, lower bounds and
// what --explain prints (ARCHITECTURE §8).
//
// Glossary
//   policy        a named pipeline: resident, reactive, layerwise, distance, hyperoffload,
//                 tierflow.
//   budget        device-tier bytes per program; by default the device tier's capacity.
//   max-overhead  the other budget mode: the smallest budget whose makespan stays within
//                 (1 + x) of the compute time (the makespan with unlimited memory), found
//                 by bisection with the evaluator.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "planner/bounds.h"
#include "planner/pass.h"

namespace tierflow::planner {

class StartMemo;

struct Policy {
  std::string_view name;
  std::string_view pipeline;
  std::string_view summary;
};
const std::vector<Policy>& policies();
const Policy* find_policy(std::string_view name);

/// One pipeline of the tierflow policy's portfolio (planner/search.h) and what it tries.
struct PortfolioEntry {
  std::string_view pipeline;
  std::string_view tries;
  /// Run when the search is cut (planner/search.h, kSearchCutOps): the pipelines that win
  /// on large workloads, and the baselines as they are (tierflow is never worse).
  bool large = false;
  /// Run only on workloads with routed experts (realize.h's has_routed_experts): it looks
  /// ahead for the experts the next tokens read; on dense workloads, whose reuse the
  /// furthest-next-use pager already sees, it wins nowhere in the scenario set and costs
  /// several times that pager.
  bool experts = false;
  /// A variant of the entry at this index (the same selection leaving more of the budget
  /// free), or -1. It runs after the other entries, and only when that entry's copies
  /// alone do not already rule it out against the best plan they found (planner/search.h).
  /// A rule of thumb, not a bound: leaving more room fetches more as a rule, so such a
  /// variant would copy for longer still. It changed no plan of the scenario set or the
  /// sweep benchmark (docs/performance.md); it spares the variants' selections on the
  /// points whose best plan pages (the sweep's small batches).
  int variant_of = -1;
};
/// The tierflow policy's portfolio, in the order it is tried (the first of equal plans
/// wins).
std::span<const PortfolioEntry> tierflow_portfolio();

/// The text to append to "unknown policy 'NAME'": "; did you mean 'X'?" for the
/// policies `did_you_mean` finds (`hyper-offload` among them); else, for another system's
/// name (FlexGen, DeepSpeed, ZeRO, ZeRO-Inference, ZeRO-Offload, MindSpore, LRU, vLLM,
/// UVM; any case, '_' or ' ' for '-'), the policy that stands for its strategy,
/// "; FlexGen is closest to policy 'layerwise': <its summary>"; else "; the policies are
/// resident, reactive, ...". Never empty.
std::string unknown_policy_hint(std::string_view name);

/// Workloads this large (ops) get the tierflow policy's cut portfolio (planner/search.h;
/// docs/performance.md: at 1 M ops the whole portfolio took about 20 s and 2.5 GB on two
/// cores).
inline constexpr size_t kSearchCutOps = 500'000;

/// The policy a plan is made with when none is named.
inline constexpr std::string_view kDefaultPolicy = "tierflow";

struct PlanRequest {
  std::string policy = std::string(kDefaultPolicy);
  std::string pipeline;  ///< overrides the policy's pipeline when set
  Target target;
  std::vector<Pin> pins;     ///< planner/pins.h
  double max_overhead = -1;  ///< >= 0: minimise the budget within this makespan overhead
  PlanEvaluator* evaluator = nullptr;
  /// Threads the tierflow policy runs its pipelines on; 0: one per hardware thread. The
  /// plan is the same whatever the number.
  unsigned threads = 0;
  bool verify_each = false;
  /// The tierflow policy runs only the portfolio's `large` entries on workloads of this
  /// many ops or more (tests lower it).
  size_t search_cut_ops = kSearchCutOps;
  /// A pipeline of the tierflow policy's portfolio to run and score first (e.g. the one
  /// that won a similar point of a sweep): its makespan bounds the search's gate from the
  /// start. The plan chosen is the same with any hint or none; only the work to find it
  /// changes. A hint that is no portfolio entry is ignored, and so is any hint when the
  /// search runs on more than one thread (the probe would run alone while the others wait).
  std::string hint;
  /// Shared by plans of the same workload (made for it): the traffic bound computed once
  /// per order and budget (planner/bounds.h). None: computed for each plan.
  std::shared_ptr<TrafficMemo> traffic_memo;
  /// Shared by plans of the same workload on the same topology (made for that pair): the
  /// states their pipelines start from, computed once per target, budget and leading
  /// prefix passes (planner/outcome.h). None: computed for each plan.
  std::shared_ptr<StartMemo> start_memo;
  /// Called after each pass (--print-after); the state's emitted.last() is its plan from
  /// `insert` on.
  std::function<void(std::string_view pass, const PlanState&)> after_pass;
};

/// How one pipeline of the portfolio fared, for --explain.
struct PortfolioTrial {
  std::string pipeline;
  std::string tries;  ///< what it tries (the portfolio table's words)
  /// The simulated makespan, "does not fit", or "skipped: WHY" (not simulated: the plan
  /// repeats an earlier one, or its copies alone take at least the best makespan so far).
  std::string result;
  bool best = false;  ///< the plan kept (before refine)
};

/// One offloaded tensor, for --explain.
struct OffloadInfo {
  uint32_t tensor = 0;
  uint64_t bytes = 0;
  uint32_t fetches = 0;
  uint32_t stores = 0;
  int64_t gap_ps = 0;       ///< estimated time off the device, summed
  int64_t transfer_ps = 0;  ///< estimated copy time, summed
  int64_t exposed_ps = 0;   ///< simulated wait on its copies (with an evaluator)
  uint32_t tier = kNone;
};

struct PlanOutcome {
  bool ok = false;
  bool infeasible = false;  ///< the target cannot be met (exit 1); else a failure is a bug
  std::string reason;
  std::string pipeline;  ///< as run
  uint64_t budget = 0;
  std::optional<Plan> plan;
  Bounds bounds;
  uint64_t estimated_peak = 0;
  int64_t estimated_compute_ps = 0;
  std::optional<Evaluation> evaluation;
  std::vector<Stat> stats;
  std::vector<std::string> notes;
  std::vector<OffloadInfo> offloads;      ///< largest first
  std::vector<PortfolioTrial> portfolio;  ///< the tierflow policy's: each pipeline tried
  uint64_t resident_peak = 0;             ///< the estimated peak with nothing offloaded
};

/// Plans `w` on `t` for the request; never throws for an infeasible target (a result).
PlanOutcome make_plan(const Workload& w, const hw::Topology& t, const PlanRequest& request);

/// Warnings for --explain: offloading while everything fits, nothing offloaded under a
/// budget that is exceeded, offload tiers over their room.
std::vector<std::string> plan_warnings(const PlanOutcome& o);

}  // namespace tierflow::planner
