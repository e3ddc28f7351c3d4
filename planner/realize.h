// MoE routing without foresight: a plan made on the routing a runtime can know (the
// expected distribution) turned into the plan a runtime would run once the router has
// picked its experts (a realized, seeded routing).
//
// Glossary
//   planned    the workload the plan was made on (W_e): expected routing.
//   realized   the workload that runs (W_r): the same generator options with seeded routing.
//              Every op and tensor but the routed experts' ops and outputs has the same
//              name in both.
//   group      the routed expert ops of one MoE layer in one pass: the ops named
//              PREFIX + "expert" + N that share PREFIX (e.g. "t3.L7.").
//   hit        a realized expert whose weight is resident on the device when its op runs.
//   miss       one that is not: a demand prefetch (`demand: true`) is inserted right before
//              its op, which waits on it (the copy is on the critical path), and a detach
//              right after it.
//   wasted     a prefetched copy that no compute step reads before it is released (or the
//              program ends): traffic spent on an expert the router did not pick.
//
// Per group, the realized ops take the planned ops' places in the program: a hit keeps its
// own place (with the waits and cache steps the plan gave it); the misses fill the places
// of planned experts that were not picked, in expert order; misses beyond those follow the
// group's last place; places left over are dropped. Every cache step of the plan is kept
// (a prefetch of an expert that is not picked is wasted traffic, not undone); steps on
// planned expert outputs that the realized workload lacks are dropped, and the realized
// experts' new outputs are detached after their last reader.
//
// Memory: without an expert cache, at most one demand copy is resident at a time (its
// detach issues, with the next demand prefetch, when its op ends), so a plan made for a
// budget of B - demand_reserve() never holds more than B (with the planner's own estimate
// of its peak).
//
// The expert cache (ExpertCache, what MoE-Infinity and other expert-offloading runtimes
// keep): demand-fetched experts stay on the device across tokens, in a cache of a given
// size on top of the plan, until the cache's policy evicts them (a detach, issued before
// the demand or predicted fetch that needs the room):
//   lru        evicts the expert used longest ago;
//   lfu        the one picked least often so far (activation frequency), the least
//              recently used of equals.
// A realized expert whose weight the cache holds is a hit. A prefetch the plan makes of a
// weight the cache holds is moot (dropped): the plan takes that copy over from the cache
// (the cache frees its bytes, the plan's own detach releases it later). With `predict`,
// when a layer's router has run, the next MoE layer's experts picked most often so far (as
// many as that layer picked on its last pass) are prefetched into the cache, behind the
// current layer's compute. The current layer's picks (and those predictions) are pinned
// until the next router: a fetch evicts only unpinned experts, or, when every cached one
// is pinned, the pins go. A plan made for B - max(demand_reserve(), cache bytes) never
// holds more than B. With a plan made without the routed experts
// (without_routed_experts()), every expert is the cache's; a cached weight is never
// released for want of later readers (that would be foresight of the routing).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/plan.h"
#include "core/workload.h"

namespace tierflow::planner {

struct RoutingStats {
  uint64_t expert_ops = 0;    ///< realized routed expert ops, over all programs
  uint64_t hits = 0;          ///< of those, with the weight resident when the op runs
  uint64_t misses = 0;        ///< demand prefetches inserted
  uint64_t miss_bytes = 0;    ///< their bytes
  uint64_t wasted = 0;        ///< prefetched copies released (or left) unread
  uint64_t wasted_bytes = 0;  ///< their bytes
  uint64_t evictions = 0;     ///< experts the cache detached to make room
  uint64_t predicted = 0;     ///< experts the predictor prefetched into the cache
  uint64_t predicted_bytes = 0;
};

enum class ExpertCacheKind { kOff, kLru, kLfu };

/// How a runtime keeps experts on the device across tokens (see the glossary).
struct ExpertCache {
  ExpertCacheKind kind = ExpertCacheKind::kOff;
  uint64_t bytes = 0;    ///< device bytes it may hold beyond the plan; 0 when off
  bool predict = false;  ///< prefetch each next layer's most frequently picked experts
  [[nodiscard]] bool on() const { return kind != ExpertCacheKind::kOff; }
};

/// "none", "lru:8GiB", "lfu:8GiB", each cache optionally with ",predict". InputError at
/// `source` naming what is wrong.
ExpertCache parse_expert_cache(std::string_view text, std::string_view source);
/// The cache as parse_expert_cache() reads it ("none" when off).
std::string to_string(const ExpertCache& c);

struct RealizedPlan {
  Plan plan;  ///< over the realized workload; verifies
  RoutingStats stats;
};

/// Whether `w` has routed expert ops (a group, see the glossary).
bool has_routed_experts(const Workload& w);

/// The device bytes a realized plan may need beyond the planned one: the largest routed
/// expert weight of `w` (0 without routed experts).
uint64_t demand_reserve(const Workload& w);

/// The device bytes to leave a plan made on the expected routing for running it on
/// `realized` with `cache`: demand_reserve(realized) without a cache, else the cache's bytes; plus the
/// outputs of the largest realized expert group (each live until the combine, produced in
/// an order the plan did not see; the planned group's outputs are gone).
/// InputError at `source` when the cache cannot hold the largest routed expert.
uint64_t routing_reserve(const Workload& realized, const ExpertCache& cache, std::string_view source);

/// `w` without its routed experts: their ops, their outputs and the weights only they
/// read (a router's output stays; the combine reads what is left). What a plan is made on
/// when a runtime's expert cache owns the experts: the plan covers the rest.
Workload without_routed_experts(const Workload& w);

/// `plan` (made on `planned`) turned into a plan for `realized` (see the glossary), with
/// the expert cache `cache` (bytes checked by routing_reserve()). `planned` may lack the
/// routed experts' weights (without_routed_experts()) when `expert_home` names the tier
/// they live on (added to the plan's tiers); every routed expert is then the cache's.
/// Throws InputError when the workloads differ in more than the routed experts; a
/// realized plan that does not verify is a bug (std::logic_error).
RealizedPlan realize_routing(const Plan& plan, const Workload& planned, const Workload& realized,
                             const ExpertCache& cache = {}, const std::string& expert_home = {});

}  // namespace tierflow::planner
