// What the planner works on: the workload, the topology, the target (which device class,
// how many programs, the device budget) and the plan under construction as residency
// runs, which `insert` turns into plan steps (ARCHITECTURE §6, §8).
//
// Glossary
//   position   an index into the execution order: position i runs op order[i].
//   slot       where cache steps go: slot j is before the compute step at position j
//              (slot 0 = program start, slot n = after the last compute). Steps in slot j
//              are issued when the compute at position j-1 finishes (their anchor).
//   run        one stay of a tensor on the device tier: allocated at `alloc`, used at
//              positions `first`..`last`, released (stored if needed, then detached) in
//              slot `release`. Its bytes count at positions alloc..release-1, plus the
//              positions the store needs to land (`hold`).
//   home       where a tensor's durable copy lives: the device tier (resident from the
//              start) or an offload tier (prefetched for every run).
//   offload    a tensor with more than one run, or an external tensor homed off the
//              device.
//   estimate   times from the topology's cost model with nothing else running (no
//              stalls, transfers alone on their route); the simulator refines them.
//
//   slot:      0        1        2        3
//   compute:     [op0]    [op1]    [op2]
//   prefetch t in slot 1: issued when op0 ends, allocated from position 1 on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/emit.h"
#include "planner/pins.h"

namespace tierflow::planner {

class TrafficMemo;

inline constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

/// The device class, number of programs and memory budget a plan is made for.
struct Target {
  size_t device_class = 0;  ///< index into Topology::devices
  uint32_t devices = 1;     ///< programs (the same program on each device)
  size_t device_tier = 0;   ///< topology tier the programs compute from
  /// Device-tier bytes a program may use. A request may leave it 0, which stands for the
  /// device tier's usable capacity; resolved() turns that into bytes, and a PlanState's
  /// target is always resolved, so that no pass gives 0 a meaning of its own.
  uint64_t budget = 0;
};

/// `target` with its budget resolved: 0 becomes the device tier's usable capacity (the
/// one place a budget of 0 is read).
Target resolved(const hw::Topology& t, Target target);
/// The tiers a program on `device_tier` can offload to (routes both ways), fastest route
/// into the device first.
std::vector<uint32_t> offload_tiers(const hw::Topology& t, size_t device_tier);

struct Run {
  uint32_t alloc = 0;        ///< slot of the prefetch (fetched runs) or the producer's position
  uint32_t first = 0;        ///< first use (position)
  uint32_t last = 0;         ///< last use (position)
  uint32_t release = kNone;  ///< slot of the detach; kNone = stays to the end
  bool fetched = false;      ///< starts with a prefetch from the tensor's offload tier
  bool store = false;        ///< stored to the offload tier before the detach
  uint32_t hold = 0;         ///< positions after `release` until the store has landed
};

/// The residency decisions for one tensor.
struct Residency {
  uint32_t tier = kNone;         ///< offload tier (topology index); kNone: never leaves
  bool home_off_device = false;  ///< external tensor homed on `tier`
  bool pinned = false;           ///< placed by the user: select may not undo it
  std::vector<Run> runs;         ///< empty: never on the device (unused)
  /// A pinned external that select fetched once and keeps: select may split it again at its
  /// gaps (never undo its tier).
  bool pin_kept = false;
};

/// Per-op and per-tensor estimates on the target (ARCHITECTURE §8: raw facts, then
/// derived times).
struct Costs {
  std::vector<int64_t> op_ps;     ///< per op: roofline time + launch overhead
  std::vector<int64_t> start_ps;  ///< per position (n+1 entries): estimated start time
  /// Per topology tier: its routes to and from the device tier (null when missing); the
  /// fetch and store times below are transfer_time_alone over them.
  struct Route {
    const hw::Route* in = nullptr;   ///< tier -> device tier
    const hw::Route* out = nullptr;  ///< device tier -> tier
  };
  std::vector<Route> routes;
  [[nodiscard]] int64_t fetch_ps(uint32_t tier, uint64_t bytes) const;
  [[nodiscard]] int64_t store_ps(uint32_t tier, uint64_t bytes) const;
  /// The fetch and store times above for every tensor size of the workload (`sizes`,
  /// ascending), per tier: looked up instead of computed again.
  std::vector<uint64_t> sizes;
  std::vector<std::vector<int64_t>> fetch_by_size, store_by_size;
  /// Estimated time between slot a and slot b (b >= a).
  [[nodiscard]] int64_t span_ps(uint32_t a, uint32_t b) const { return start_ps[b] - start_ps[a]; }
};

/// Uses of each tensor in execution order (positions, ascending) and whether each use
/// modifies it.
struct Liveness {
  std::vector<std::vector<uint32_t>> uses;
  std::vector<std::vector<bool>> modifies;
  std::vector<uint32_t> born;  ///< per tensor: producer position, or kNone (external)
  /// Produced tensors the step leaves behind (outputs, KV written by prefill or decode):
  /// kept on the device to the end, or stored to their offload tier before leaving it.
  std::vector<bool> persists;
};

struct PlanState {
  PlanState(const Workload& w, const hw::Topology& t, Target target);

  const Workload& w;
  const hw::Topology& topo;
  Target target;                  ///< resolved (its budget is bytes, never "the capacity")
  std::string policy = "custom";  ///< written into the plan's meta

  std::vector<uint32_t> order;  ///< position -> op
  std::vector<Residency> tensors;
  /// Per topology tier: bytes a program may keep there (capacity over the programs
  /// sharing an instance); 0 = not an offload tier.
  std::vector<uint64_t> tier_room;
  /// Per topology tier: bytes this program's offloaded tensors keep there (home copies
  /// and stored copies; a copy, once there, stays to the end).
  std::vector<uint64_t> tier_used;
  /// Offload tiers, fastest route into the device tier first.
  std::vector<uint32_t> offload_tiers;

  /// Analyses: valid until `order` changes. Shared, never modified once computed: copies
  /// of a state (the tierflow policy runs several pipelines from one) share them.
  std::shared_ptr<const Costs> costs;
  std::shared_ptr<const Liveness> liveness;
  /// The traffic bound's bytes remembered across plans of this workload (planner/bounds.h;
  /// PlanRequest::traffic_memo), or none.
  std::shared_ptr<TrafficMemo> traffic_memo;
  /// The memory profile of the runs as a start state left them (planner/outcome.h), until
  /// a pass runs: the first pass that fits the runs (begin_fitting) takes it instead of
  /// computing it again. Pipeline::run drops it after every pass.
  std::shared_ptr<const std::vector<uint64_t>> start_profile;
  /// User pins (planner/pins.h) and, per tensor, the tier they home it on (kNone: the
  /// policy's choice). Set both with set_pins().
  std::vector<Pin> pins;
  std::vector<uint32_t> pin_tier;
  void set_pins(std::vector<Pin> p) {
    pin_tier = pinned_tiers(w, p);
    pins = std::move(p);
  }
  /// The plan the runs emit, once `insert` has run, and its score (planner/emit.h).
  EmittedPlan emitted;
  /// The plan as the runs now stand (emitted when stale).
  const Plan& plan() { return emitted.plan(*this); }

  [[nodiscard]] uint32_t positions() const { return static_cast<uint32_t>(order.size()); }
  /// Computes the analyses that are missing.
  const Costs& ensure_costs();
  const Liveness& ensure_liveness();
  /// Drops the analyses (after reordering).
  void invalidate();
};

/// Whether a tensor with these decisions keeps a copy on its offload tier.
bool holds_copy(const Residency& r);

/// Per position: device-tier bytes in use (runs, static homes, workspace); the size is
/// the number of positions (at least 1).
std::vector<uint64_t> memory_profile(const PlanState& s);
/// The largest value of a memory profile (never empty).
inline uint64_t profile_peak(const std::vector<uint64_t>& profile) {
  return *std::max_element(profile.begin(), profile.end());
}
/// The largest value of memory_profile(s).
inline uint64_t memory_peak(const PlanState& s) {
  return profile_peak(memory_profile(s));
}

/// One run per tensor covering all its uses, nothing offloaded: what `resident` keeps.
void reset_resident(PlanState& s);

/// How split_runs places each run's prefetch and release.
struct SplitOptions {
  bool home_off_device = false;  ///< external tensors: homed on `tier`, fetched for every run
  uint32_t tier = kNone;         ///< the offload tier
  double preferred = 1.0;        ///< prefetch this many transfer times ahead (estimated time)
  uint32_t lead_ops = kNone;     ///< instead: this many positions ahead
  uint32_t release_delay = 0;    ///< detach this many positions after the last use
  bool spill_at_end = false;     ///< a persisting produced tensor: stored and detached after its
                                 ///< last use instead of kept on the device
};

/// Runs of tensor `t` when split at the given gaps (ascending indices into its uses: gap
/// g lies between use g and use g+1). Stores and holds follow the modification rules:
/// a run stores when the device copy is the only current one and a later run, or the
/// home copy of an external tensor, needs it.
std::vector<Run> split_runs(const PlanState& s, uint32_t t, const std::vector<uint32_t>& gaps,
                            const SplitOptions& o);

/// Positions a store of `bytes` to `tier` released in slot `release` needs to land.
uint32_t store_hold(const PlanState& s, uint32_t tier, uint64_t bytes, uint32_t release);

/// The earliest slot whose estimated start leaves `need_ps` before the slot `before`
/// (at least `floor`).
uint32_t slot_ahead(const Costs& c, uint32_t before, int64_t need_ps, uint32_t floor);

}  // namespace tierflow::planner
