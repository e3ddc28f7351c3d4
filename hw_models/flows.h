// Transfers as flows sharing bandwidth-limited resources, with max-min fair rates: the one
// model of bandwidth sharing, over the resources of a Fabric (hw_models/fabric.h). The
// simulator drives it in simulated time (sim/simulator.cpp); the replayer's paced copies
// take their rates from it in plan time (tools/replay/cpu_backend.cpp).
//
// Glossary
//   resource    something with a capacity in bytes/s that flows share: a tier's read or
//               write port, one direction of a link (both directions for half duplex).
//   flow        the bandwidth-taking phase of one transfer: bytes left, the resources it
//               crosses and its current rate.
//   max-min     rates such that no flow can go faster without slowing a flow that is not
//               faster than it; found by progressive filling: raise every unfrozen flow's
//               rate together until some resource is full, freeze the flows crossing it,
//               repeat. (Shares closer than about 2^-45 of their value count as equal:
//               see fill().)
//   component   the resources and flows connected through shared resources; a start or
//               finish changes rates only inside its component, so only that is re-solved.
//               Components are kept as flows start and finish: a start joins the
//               components its route touches; a finish may split its component, which a
//               search from the finished flow's resources settles at the next solve().
//   dirty       a component whose flow set changed since the last solve().
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

namespace tierflow::hw {

/// Time in picoseconds, as the simulator and the replayer count it.
using Time = int64_t;

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

  /// Re-solves the dirty components. Afterwards changed_flows() lists the flows whose
  /// rate changed, in the order progressive filling froze them, and changed_resources()
  /// the resources re-solved and those left without flows.
  void solve(Time now);
  [[nodiscard]] const std::vector<uint32_t>& changed_flows() const { return changed_flows_; }
  [[nodiscard]] const std::vector<uint32_t>& changed_resources() const { return comp_res_; }
  [[nodiscard]] bool dirty() const { return !dirty_groups_.empty() || !emptied_.empty(); }

  [[nodiscard]] double rate(uint32_t flow) const { return rate_[flow]; }
  /// Whether a component whose flows all cross the same resources is solved by the short
  /// way (on by default; the same rates, to the bit, as progressive filling): off, every
  /// component of two or more flows is filled (tests compare the two).
  void set_one_route_shortcut(bool on) { one_route_ = on; }
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
  /// A connected component: its resources with flows, and how many flows it has.
  struct Group {
    std::vector<uint32_t> res;
    size_t flows = 0;
    bool dirty = false;  ///< listed in dirty_groups_
  };
  /// An entry of progressive filling: the bits of a resource's fair share when it was
  /// set (ordered like the doubles), with the lowest bits replaced by the resource index
  /// (for ties and to find the resource); one integer compare orders two entries.
  using Key = uint64_t;
  /// A leaf with no entry (above every share).
  static constexpr Key kDone = ~Key{0};
  /// Spare entries at the start of the per-resource solve arrays, which the padding of
  /// short routes reaches (see kPadHop in flows.cpp).
  static constexpr uint32_t kSpares = 8;
  static constexpr uint32_t kNone = UINT32_MAX;
  /// Index of resource `r` in the per-resource solve arrays.
  static uint32_t entry(uint32_t r) { return r + kSpares; }
  /// What one solve works on: the resources of its dirty components (listed in
  /// res_scratch_, those with flows first) and how many flows they have.
  struct Component {
    size_t resources = 0;
    size_t flows = 0;
    size_t busy = 0;  ///< resources with flows
  };

  void touch(uint32_t r, Time now);
  /// Takes from flow `f` the bytes it moved at `rate` since it was last drained.
  void drain(uint32_t f, double rate, Time now);
  uint32_t new_group();
  void mark_dirty(uint32_t g);
  /// Moves the resources of group `from` into group `to`.
  void merge(uint32_t from, uint32_t to);
  /// Puts resource `r` (in no group) into group `g`.
  void join(uint32_t r, uint32_t g);
  /// Takes resource `r` out of its group.
  void leave(uint32_t r);
  /// Splits the groups that the finishes since the last solve disconnected.
  void split();
  /// Searches from `sources` (two or more resources of one group) and moves each part
  /// they turn out to be apart in into a group of its own.
  void search_apart(std::span<const uint32_t> sources);
  /// Whether `sources` (two to 64 resources) are connected through the resources that
  /// the flows on each of them cross: the common case after a finish in a dense
  /// component, settled without branching on every resource.
  bool joined_nearby(std::span<const uint32_t> sources);
  /// Lists the resources of the dirty groups and the resources left without flows.
  Component gather();
  /// Sets the rates of the component's flows (two or more) by progressive filling, and
  /// the peak rates of its resources with flows; lists the flows whose rate changed.
  void fill(const Component& c, Time now);
  /// fill() of a component whose flows (two or more) all cross the same resources, each
  /// once: every flow takes the share of the resource that saturates first, found the way
  /// fill() finds it, with the same rates, changed flows and peaks. False, doing nothing,
  /// when the flows' routes differ.
  bool fill_one_route(const Component& c, Time now);
  [[nodiscard]] std::span<const uint32_t> route(uint32_t f) const {
    return {route_.data() + routes_[f].begin, routes_[f].hops};
  }

  // Per resource.
  std::vector<double> capacity_;
  std::vector<std::vector<uint32_t>> res_flows_;  ///< flows crossing it, in start order
  std::vector<Time> last_change_;
  std::vector<ResourceStats> stats_;
  std::vector<uint32_t> group_;      ///< its group while it has flows, else kNone
  std::vector<uint32_t> group_pos_;  ///< its index in its group's list
  std::vector<uint64_t> seen_;       ///< search epoch of split()
  std::vector<uint32_t> seen_by_;    ///< which search of split() reached it
  // By entry(r), for joined_nearby(): the sources whose flows reach it, valid in the pass
  // its tag names.
  std::vector<uint64_t> near_mark_ = std::vector<uint64_t>(kSpares);
  std::vector<uint64_t> near_tag_ = std::vector<uint64_t>(kSpares);
  std::vector<uint64_t> emptied_at_;  ///< the solve that lists it as left without flows
  // Solve state, at entry(r), after the spares that the padding of short routes reaches.
  std::vector<Filling> filling_ = std::vector<Filling>(kSpares);
  // Per flow.
  std::vector<Route> routes_;
  std::vector<uint32_t> route_;    ///< routes, short ones padded to four hops
  std::vector<double> remaining_;  ///< bytes left at `updated_`
  std::vector<double> rate_;       ///< bytes/s
  std::vector<Time> updated_;
  std::vector<uint64_t> frozen_at_;  ///< the solve whose filling last froze it
  std::vector<uint64_t> flow_seen_;  ///< search epoch of split()
  std::vector<uint32_t> flow_seen_by_;
  std::vector<uint8_t> live_;
  std::vector<uint32_t> free_flows_;
  // Components.
  std::vector<Group> groups_;
  std::vector<uint32_t> free_groups_;
  std::vector<uint32_t> dirty_groups_;
  std::vector<uint32_t> emptied_;  ///< resources left without flows since the last solve
  std::vector<uint32_t> cut_;      ///< resources a finish may have disconnected
  uint64_t epoch_ = 0;             ///< solves so far
  uint64_t search_ = 0;            ///< epochs of split()'s searches
  // Scratch.
  std::vector<std::vector<uint32_t>> search_res_;    ///< by search of split(): resources reached
  std::vector<uint32_t> search_flows_;  ///< by search of split(): flows reached
  std::vector<uint32_t> search_head_;    ///< next resource to expand
  std::vector<uint32_t> search_parent_;  ///< union-find of searches that met
  std::vector<uint32_t> search_open_;    ///< by root: its searches with resources to expand
  std::vector<uint32_t> comp_res_;
  std::vector<uint32_t> res_scratch_;   ///< room for every resource
  std::vector<uint32_t> frozen_;        ///< flows one saturation freezes, room for all plus one
  std::vector<double> old_rate_;        ///< by index in changed_flows_: the rate before
  std::vector<uint32_t> settled_;       ///< resources whose flows froze elsewhere, room for all
  std::vector<Key> tree_;               ///< winner tree of filling's entries
  std::vector<uint32_t> leaf_;          ///< by resource: its leaf in the tree while filling
  std::vector<double> reciprocal_ = {0.0};  ///< 1 / n, for n up to the most flows on a resource
  std::vector<uint32_t> changed_flows_;
  bool one_route_ = true;
};

}  // namespace tierflow::hw
