// Transfers as flows sharing bandwidth-limited resources, with max-min fair rates.
//
// Glossary
//   resource    something with a capacity in bytes/s that flows share: a tier's read or
//               write port, one direction of a link (both directions for half duplex).
//   flow        the bandwidth-taking phase of one transfer: bytes left, the resources it
//               crosses and its current rate.
//   max-min     rates such that no flow can go faster without slowing a flow that is not
//               faster than it; found by progressive filling: raise every unfrozen flow's
//               rate together until some resource is full, freeze the flows crossing it,
//               repeat.
//   component   the resources and flows connected through shared resources; a start or
//               finish changes rates only inside its component, so only that is re-solved.
//   dirty       a resource whose flow set changed since the last solve().
//
// Rates change only at solve(). Between solves a flow's bytes drain linearly, so its
// completion time is now + remaining / rate, rounded up to a whole picosecond:
//
//   flow A alone on a 1 GB/s link:    |==== A 1 GB/s ====|
//   B joins at t:                     |== A 1 ==|= A 0.5, B 0.5 =|== B 1 ==|
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/kernel/event_queue.h"

namespace tierflow::sim {

inline constexpr uint32_t kNoFlow = UINT32_MAX;

struct ResourceStats {
  Time busy_ps = 0;        ///< time with at least one flow taking bandwidth
  double flow_ps = 0;      ///< integral of the number of flows over time (mean concurrency)
  double bytes = 0;        ///< bytes that crossed the resource
  double peak_rate = 0;    ///< highest total rate seen, bytes/s
};

class FlowNetwork {
 public:
  /// Adds a resource with `capacity` bytes/s (> 0); returns its index.
  uint32_t add_resource(double capacity);
  [[nodiscard]] size_t resources() const { return capacity_.size(); }
  [[nodiscard]] double capacity(uint32_t r) const { return capacity_[r]; }

  /// Starts a flow of `bytes` (> 0) over `resources` at `now`. It has no rate until the
  /// next solve(). Returns its id (ids of finished flows are reused).
  uint32_t start(std::span<const uint32_t> resources, double bytes, Time now);
  /// Removes a flow whose last byte landed at `now`.
  void finish(uint32_t flow, Time now);

  /// Re-solves the components of the dirty resources. Afterwards changed_flows() lists
  /// the flows whose rate changed and changed_resources() the resources re-solved.
  void solve(Time now);
  [[nodiscard]] const std::vector<uint32_t>& changed_flows() const { return changed_flows_; }
  [[nodiscard]] const std::vector<uint32_t>& changed_resources() const { return comp_res_; }
  [[nodiscard]] bool dirty() const { return !dirty_.empty(); }

  [[nodiscard]] double rate(uint32_t flow) const { return rate_[flow]; }
  /// Time at which the flow's last byte lands if rates stay as they are.
  [[nodiscard]] Time completion(uint32_t flow) const;
  /// Sum of the rates of the flows on a resource.
  [[nodiscard]] double load(uint32_t r) const;
  [[nodiscard]] size_t active(uint32_t r) const { return res_flows_[r].size(); }
  /// Statistics up to `now` (call at the end of the run).
  [[nodiscard]] ResourceStats stats(uint32_t r, Time now) const;

 private:
  // Structure of arrays: progressive filling walks only the arrays it needs, in the
  // cache lines of the component's resources and flows.
  struct Route {
    uint32_t begin = 0;  ///< first of its resources in route_
    uint32_t hops = 0;
    uint32_t room = 0;   ///< entries reserved at `begin` for this flow id
  };
  /// Progressive-filling state of a resource.
  struct Filling {
    double left = 0;      ///< capacity not given to frozen flows
    double unfrozen = 0;  ///< flows not frozen yet (a double: it divides `left`)
  };
  /// An entry of progressive filling: the bits of a resource's fair share when it was
  /// set (ordered like the doubles), the resource index for ties (deterministic), then
  /// its leaf in the winner tree; one integer compare orders two entries.
  __extension__ using Share = unsigned __int128;
  /// A leaf with no entry (above every share).
  static constexpr Share kDone = ~Share{0};
  /// Spare entries at the start of the per-resource solve arrays, which the padding of
  /// short routes reaches (see kPadHop in flows.cpp).
  static constexpr uint32_t kSpares = 8;
  /// Index of resource `r` in the per-resource solve arrays.
  static uint32_t entry(uint32_t r) { return r + kSpares; }
  /// The component a solve works on, listed in res_scratch_ and flow_scratch_.
  struct Component {
    size_t resources = 0;
    size_t flows = 0;
    size_t busy = 0;  ///< resources with flows
  };

  void touch(uint32_t r, Time now);
  void drain(uint32_t f, Time now);
  /// Lists the component of the dirty resources, drains its flows to `now` and unfreezes
  /// them (rate -1, the rate before in old_rate_).
  Component grow_component(Time now);
  /// Sets the rates of the component's flows (two or more) by progressive filling, and
  /// the peak rates of its resources with flows.
  void fill(const Component& c);
  /// Gives leaf `leaf` of the winner tree the entry `key` and updates its ancestors.
  void set_leaf(uint32_t leaf, Share key);
  [[nodiscard]] std::span<const uint32_t> route(uint32_t f) const {
    return {route_.data() + routes_[f].begin, routes_[f].hops};
  }

  // Per resource.
  std::vector<double> capacity_;
  std::vector<std::vector<uint32_t>> res_flows_;  ///< flows crossing it, in start order
  std::vector<Time> last_change_;
  std::vector<ResourceStats> stats_;
  // Solve state, at entry(r), after the spares that the padding of short routes reaches.
  std::vector<uint64_t> res_mark_ = std::vector<uint64_t>(kSpares);  ///< search epoch
  std::vector<Filling> filling_ = std::vector<Filling>(kSpares);
  // Per flow.
  std::vector<Route> routes_;
  std::vector<uint32_t> route_;    ///< routes, short ones padded to four hops
  std::vector<double> remaining_;  ///< bytes left at `updated_`
  std::vector<double> rate_;       ///< bytes/s; -1 while a solve has not frozen it
  std::vector<Time> updated_;
  std::vector<uint64_t> flow_mark_;
  std::vector<uint8_t> live_;
  std::vector<uint32_t> free_flows_;
  std::vector<uint32_t> dirty_;
  uint64_t epoch_ = 0;
  // Scratch of the last solve.
  std::vector<uint32_t> comp_res_;
  std::vector<uint32_t> res_scratch_;   ///< room for every resource, plus one
  std::vector<uint32_t> flow_scratch_;  ///< room for every flow, plus one
  std::vector<double> old_rate_;        ///< rates before the solve, by component index
  std::vector<uint32_t> frozen_;        ///< flows one saturation freezes, room for all plus one
  std::vector<uint32_t> settled_;       ///< resources whose flows froze elsewhere, room for all
  std::vector<Share> tree_;             ///< winner tree: node i holds the lesser of 2i and 2i + 1
  size_t leaf_base_ = 1;                ///< index of the first leaf
  std::vector<uint32_t> changed_flows_;
};

}  // namespace tierflow::sim
