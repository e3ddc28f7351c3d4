#include "planner/planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/checked.h"
#include "core/diagnostics.h"
#include "core/units.h"
#include "planner/outcome.h"
#include "planner/search.h"

namespace tierflow::planner {
namespace {

constexpr std::string_view kTierflowPipeline =
    "reorder,place{multi=true},liveness,select,insert,schedule,refine,verify";

/// What the tierflow policy scores with the simulator (planner/search.h): its own selection
/// at several headrooms and prefetch leads, the budget's room given to the latest or the
/// soonest prefetch first, and ranking every gap by its score where a step's copies outlast
/// its compute (its first pass takes only gaps whose estimated compute hides the copy; when
/// nothing hides, that filter keeps small tensors and offloads them instead of large ones
/// that are needed early: 1,304 more copies for the same bytes on the H200 full-size case); Belady
/// paging (evict the furthest next use) from a warm start with look-ahead prefetching, the fewest
/// fetches where reuse is irregular (MoE experts), by op count (`reactive`, one look-ahead of 512
/// ops: shorter ones never did better on the scenario set) and in estimated time as the link frees
/// (`belady`); the baselines' selections scheduled on multi-tier placement; and the other policies
/// as they are. Plans that repeat one already scored, or whose copies alone take longer than the
/// best so far, are not simulated; nor are the selections leaving more of the budget free when the
/// selection they vary already copies for longer than the best plan takes. The best is then
/// refined. On a workload of kSearchCutOps ops or more
/// only the entries marked `large` run: the own selection that fetches right before use
/// with both schedules (what won at 1 M ops), `belady` (what won on MoE decode), and the
/// baselines as they are.
constexpr PortfolioEntry kPortfolio[] = {
    {"reorder,place{multi=true},liveness,select,insert,schedule,verify",
     "own selection, prefetches one copy time ahead, the latest-needed given room first"},
    {"reorder,place{multi=true},liveness,select{lead=0},insert,schedule,verify",
     "own selection assuming fetches right before use (the least memory per offload)", true},
    {"reorder,place{multi=true},liveness,select{lead=0},insert,schedule{room=soonest},verify",
     "the same, the budget's room to the soonest-needed prefetch first", true},
    {"reorder,place{multi=true},liveness,select{preferred=0,lead=0},insert,"
     "schedule{room=soonest},verify",
     "the same ranking every gap by its score, hidden or not (a step bound by its copies)"},
    {.pipeline =
         "reorder,place{multi=true},liveness,select{headroom=0.02,lead=0},insert,schedule,verify",
     .tries = "own selection leaving 2% of the budget for the schedule to prefetch into",
     .variant_of = 1},
    {.pipeline = "reorder,place{multi=true},liveness,select{headroom=0.05},insert,schedule,verify",
     .tries = "own selection leaving 5% of the budget free",
     .variant_of = 0},
    {.pipeline = "reorder,place{multi=true},liveness,select{headroom=0.1},insert,schedule,verify",
     .tries = "own selection leaving 10% of the budget free",
     .variant_of = 0},
    {"reorder{mode=hoist},place{multi=true},liveness,select,insert,schedule,verify",
     "optimizer updates hoisted to right after their inputs, then own selection"},
    {"reorder{mode=hoist},place{multi=true},liveness,select{lead=0},insert,schedule,verify",
     "hoisted, selection assuming fetches right before use"},
    {"reorder{mode=hoist},place{multi=true},liveness,select{preferred=1.5},insert,"
     "schedule{preferred=1.5},verify",
     "hoisted, only gaps that hide a copy 1.5 times over, prefetches landing that early"},
    {"reorder,place{multi=true},liveness,distance,insert,schedule,verify",
     "the distance baseline's selection, scheduled on multi-tier placement"},
    {"reorder,place{multi=true},liveness,layerwise,insert,schedule,verify",
     "the layerwise baseline's streaming, scheduled on multi-tier placement"},
    {"reorder,place{multi=true},liveness,reactive{evict=furthest,warm=true},insert,schedule,"
     "verify",
     "paging by op count: evict the furthest next use, warm start"},
    {"reorder,place{multi=true},liveness,reactive{evict=furthest,warm=true,ahead=512},insert,"
     "schedule,verify",
     "the same with a 512-op look-ahead fetching what comes next (MoE experts)", false, true},
    {"reorder,place{multi=true},liveness,reactive{evict=furthest,keep=0.8},insert,schedule,"
     "verify",
     "the most used tensors kept in 80% of the budget, the rest paged furthest-first"},
    {"reorder,place{multi=true},liveness,belady,insert,verify",
     "Belady paging in estimated time, prefetching as the link frees", true},
    {"place,liveness,select,insert,schedule,verify", "hyperoffload as it is", true},
    {"place,liveness,distance{select=16,prefetch=4,release=0},insert,verify", "distance as it is",
     true},
    {"place,liveness,layerwise{ahead=1},insert,verify", "layerwise as it is", true},
    {"place,liveness,reactive,insert,verify", "reactive as it is", true},
};

/// The policy's pipeline at one budget; tierflow scores its portfolio and refines the best.
PlanOutcome plan_at(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                    uint64_t budget) {
  if (!req.pipeline.empty()) return run_pipeline(w, t, req, req.pipeline, budget);
  const Policy* p = find_policy(req.policy);
  if (req.policy != "tierflow" || req.evaluator == nullptr) {
    return run_pipeline(w, t, req, p->pipeline, budget);
  }
  return search_portfolio(w, t, req, kPortfolio, budget);
}

}  // namespace

std::span<const PortfolioEntry> tierflow_portfolio() {
  return kPortfolio;
}

const std::vector<Policy>& policies() {
  static const std::vector<Policy> list = {
      {"resident", "place,liveness,insert,verify",
       "no offload; activations freed at last use (may not fit)"},
      {"reactive", "place,liveness,reactive,insert,verify",
       "fetch on a miss, evict least recently used (a runtime without look-ahead)"},
      {"layerwise", "place,liveness,layerwise{ahead=1},insert,verify",
       "stream every weight, the next layer's during this one (DeepSpeed ZeRO style)"},
      {"distance", "place,liveness,distance{select=16,prefetch=4,release=0},insert,verify",
       "op-count distances for select, prefetch and release (MindSpore's strategy)"},
      {"hyperoffload", "place,liveness,select,insert,schedule,verify",
       "lifetime analysis, cost model, execution-order refinement (the HyperOffload planner)"},
      {"tierflow", kTierflowPipeline,
       "all of the above, multi-tier placement, reordering, simulator in the loop"},
  };
  return list;
}

const Policy* find_policy(std::string_view name) {
  for (const Policy& p : policies()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string unknown_policy_hint(std::string_view name) {
  std::vector<std::string_view> names;
  for (const Policy& p : policies()) names.push_back(p.name);
  std::string hint = did_you_mean(name, names);  // typos, 'hyper-offload' among them
  if (!hint.empty()) return hint;
  // Other systems by the name users know them by, each with the policy that stands for
  // its strategy (ARCHITECTURE §8).
  struct Alias {
    std::string_view key;  ///< lower case, '-' between words
    std::string_view system;
    std::string_view policy;
  };
  static constexpr Alias kAliases[] = {
      {"flexgen", "FlexGen", "layerwise"},
      {"deepspeed", "DeepSpeed", "layerwise"},
      {"zero", "ZeRO", "layerwise"},
      {"zero-inference", "ZeRO-Inference", "layerwise"},
      {"zero-offload", "ZeRO-Offload", "layerwise"},
      {"mindspore", "MindSpore", "distance"},
      {"lru", "LRU eviction", "reactive"},
      {"vllm", "vLLM", "reactive"},
      {"uvm", "UVM (unified memory)", "reactive"},
  };
  std::string key(name);
  for (char& c : key) {
    c = c == '_' || c == ' ' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (const Alias& a : kAliases) {
    if (a.key == key) {
      return fmt::format("; {} is closest to policy '{}': {}", a.system, a.policy,
                         find_policy(a.policy)->summary);
    }
  }
  return fmt::format("; the policies are {}", fmt::join(names, ", "));
}

PlanOutcome make_plan(const Workload& w, const hw::Topology& t, const PlanRequest& req) {
  const uint64_t budget = resolved(t, req.target).budget;
  PlanOutcome full = plan_at(w, t, req, budget);
  if (req.max_overhead < 0 || !full.ok || !full.evaluation || !full.evaluation->ok) return full;

  // The unconstrained best is the resident plan with unlimited memory: one engine, no
  // transfers, so exactly the compute sum. Bisection on the budget finds the smallest
  // that keeps the simulated makespan within the overhead of it.
  const int64_t limit = scaled_ps(full.bounds.compute_ps, 1.0 + req.max_overhead);
  if (full.evaluation->makespan_ps > limit) {
    full.ok = false;
    full.infeasible = true;
    full.reason = fmt::format(
        "does not fit within the overhead: at the full budget {} the makespan is {}, above "
        "{} = (1 + {}) x the compute time {}",
        to_string_approx(Bytes{budget}), to_string_approx(Duration{full.evaluation->makespan_ps}),
        to_string_approx(Duration{limit}), req.max_overhead,
        to_string_approx(Duration{full.bounds.compute_ps}));
    return full;
  }
  // Bisection on the budget between `lo`, below which no probe met the overhead (at
  // first the residency bound: nothing fits below it), and `hi`, the least budget whose
  // plan did (`best`). `hi` is only ever a budget that was planned: a plan's peak below its
  // budget says nothing of a plan made for that peak. Before the bisection, the peak the
  // full budget's plan reached, or the resident peak if lower, is tried: it does not depend
  // on the full budget (the ceiling), so neither does the answer, and where everything
  // must stay on the device (steady-state decode) it is the answer. Midpoints are
  // geometric (the ends may be orders of magnitude apart) and the search goes on until the
  // ends are within 0.5% of `hi`: about ten plans, however far apart they start.
  auto meets = [&](const PlanOutcome& o) {
    return o.ok && o.evaluation && o.evaluation->ok && o.evaluation->makespan_ps <= limit;
  };
  uint64_t lo = std::max<uint64_t>(1, full.bounds.residency);
  uint64_t hi = budget;
  PlanOutcome best = std::move(full);
  uint32_t plans = 1;
  bool lo_tried = false;
  const uint64_t top = std::min({budget, best.evaluation->device_peak, best.resident_peak});
  if (top > lo && top < hi) {
    PlanOutcome o = plan_at(w, t, req, top);
    ++plans;
    if (meets(o)) {
      hi = top;
      best = std::move(o);
    } else {
      lo = top;
      lo_tried = true;
    }
  }
  while (hi > lo && hi - lo > std::max<uint64_t>(1, hi / 200)) {
    const auto geometric =
        static_cast<uint64_t>(std::sqrt(static_cast<double>(lo) * static_cast<double>(hi)));
    const uint64_t mid = std::clamp(geometric, lo + 1, hi - 1);
    PlanOutcome o = plan_at(w, t, req, mid);
    ++plans;
    if (meets(o)) {
      hi = mid;
      best = std::move(o);
    } else {
      lo = mid;
      lo_tried = true;
    }
  }
  best.notes.push_back(fmt::format(
      "max-overhead {}: budget {} keeps the makespan within {} (compute {} x {}); {} plans, "
      "{} {}",
      req.max_overhead, to_string_approx(Bytes{best.budget}), to_string_approx(Duration{limit}),
      to_string_approx(Duration{best.bounds.compute_ps}), 1.0 + req.max_overhead, plans,
      lo_tried ? "the highest budget that does not:" : "the residency bound:",
      to_string_approx(Bytes{lo})));
  return best;
}

std::vector<std::string> plan_warnings(const PlanOutcome& o) {
  std::vector<std::string> out;
  if (!o.ok) return out;
  uint64_t moved = 0;
  for (const OffloadInfo& i : o.offloads) moved += i.bytes * (i.fetches + i.stores);
  if (o.resident_peak <= o.budget && moved > 0) {
    out.push_back(fmt::format("everything fits ({} of {}), yet the plan moves {}",
                              to_string_approx(Bytes{o.resident_peak}),
                              to_string_approx(Bytes{o.budget}), to_string_approx(Bytes{moved})));
  }
  if (o.resident_peak > o.budget && o.offloads.empty()) {
    out.push_back(fmt::format("the resident peak {} exceeds the budget {}, yet nothing is "
                              "offloaded",
                              to_string_approx(Bytes{o.resident_peak}),
                              to_string_approx(Bytes{o.budget})));
  }
  return out;
}

}  // namespace tierflow::planner
