// Lower bounds every plan is measured against (ARCHITECTURE §8).
//
//   residency  the most bytes one op needs on the device at once: its inputs, updates,
//              outputs and workspace. No plan peaks lower.
//   traffic    bytes that must reach the device tier under the budget, for this execution
//              order: cut the order into windows; what a window uses that it does not
//              produce is either on the device when it starts (at most the budget) or
//              fetched inside it, so each window fetches at least (its bytes - budget).
//              Windows: halvings of the order, and passes through the layers (each
//              decode token; forward; backward) grouped by powers of two. Also Belady's
//              MIN paging of the external tensors byte by byte (tensors partly evictable)
//              with the whole budget as cache, each op's tensors on the device together,
//              and the best warm start (no plan fetches fewer bytes); the largest of these
//              is kept. Tensors the user pins to another tier (`--pin weight=ddr`) are
//              homed there, so they take no part in the warm start: each one used is
//              fetched at least once, with or without a budget.
//   ingress    an upper bound on the bytes per second the device tier can receive from
//              all offload tiers together: per last link crossed, the smaller of its
//              bandwidth and the sum of the routes through it; at most the tier's write
//              bandwidth; and at most this program's share of the offload tiers' read
//              ports and route links when programs share them (a pool and its fabric
//              link, a socket's DDR).
//   pinned     tensors pinned off the device cross their tier's read port (and route) at
//              least once: per tier, their bytes over this program's share of the
//              narrowest of its read port and route links; the slowest tier is kept.
//   makespan   max(compute on the one engine, traffic / ingress, pinned).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "planner/state.h"

namespace tierflow::planner {

struct Bounds {
  uint64_t residency = 0;
  uint32_t residency_op = 0;  ///< the op that needs it
  int64_t compute_ps = 0;
  uint64_t traffic_bytes = 0;
  double ingress = 0;  ///< bytes/s; 0 = no offload tier
  int64_t traffic_ps = 0;
  uint64_t pinned_bytes = 0;     ///< used tensors pinned to `pinned_tier`, off the device
  uint32_t pinned_tier = kNone;  ///< the tier whose pinned bytes take longest to read
  double pinned_rate = 0;        ///< bytes/s: this program's share of that tier's path
  int64_t pinned_ps = 0;
  int64_t makespan_ps = 0;
};

Bounds lower_bounds(PlanState& s);

/// What the `reorder` pass made of an order (planner/passes/reorder.cpp): whether it
/// changed it, to what, and the stats and notes it reported.
struct Reordering {
  bool changed = false;
  std::vector<uint32_t> order;  ///< when changed
  std::vector<std::pair<std::string, double>> stats;
  std::vector<std::string> notes;
};

/// The traffic bound's bytes, remembered for one workload: they depend on the order, the
/// budget and the tensors pinned off the device, not on the links or the policy, so the
/// points of a sweep that share a workload compute them once per order and budget; and
/// the liveness of each order, which depends on nothing else. Set PlanRequest::traffic_memo
/// to one made for the workload planned (Study keeps one per workload); thread-safe.
class TrafficMemo {
 public:
  explicit TrafficMemo(const Workload& w) : w_(&w) {}
  /// The bytes for `s` (of this memo's workload) with `cold` its tensors pinned off the
  /// device, from `compute` when not yet known.
  uint64_t get(const PlanState& s, const std::vector<bool>& cold,
               const std::function<uint64_t()>& compute);
  /// The (order, budget, pins) cases remembered.
  size_t size();
  /// The liveness of this memo's workload in `order` (the same for every plan of it in
  /// that order), from `compute` when not yet known.
  std::shared_ptr<const Liveness> liveness(
      const Workload& w, const std::vector<uint32_t>& order,
      const std::function<std::shared_ptr<const Liveness>()>& compute);
  /// What `reorder` with `options` (its mode and keep rule as bits) makes of `order` of
  /// this memo's workload (the same on every topology), from `compute` when not yet known.
  std::shared_ptr<const Reordering> reordering(const Workload& w,
                                               const std::vector<uint32_t>& order, int options,
                                               const std::function<Reordering()>& compute);

 private:
  struct Entry {
    size_t order = 0;  ///< index into orders_
    uint64_t budget = 0;
    std::vector<bool> cold;
    uint64_t bytes = 0;
  };
  const Workload* w_;
  std::mutex mu_;
  /// Index of `order` in orders_, added when new. Call with mu_ held.
  size_t order_index(const std::vector<uint32_t>& order);
  std::vector<std::vector<uint32_t>> orders_;  ///< each order once (a few per workload)
  std::vector<Entry> entries_;                 ///< one per order, budget and pins
  /// Per index of orders_: its liveness, once asked for.
  std::vector<std::shared_ptr<const Liveness>> liveness_;
  /// Per (index of orders_, reorder options): what reorder made of it.
  std::map<std::pair<size_t, int>, std::shared_ptr<const Reordering>> reorderings_;
};

}  // namespace tierflow::planner
