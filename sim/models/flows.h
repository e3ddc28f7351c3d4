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
  [[nodiscard]] size_t resources() const { return res_.size(); }
  [[nodiscard]] double capacity(uint32_t r) const { return res_[r].capacity; }

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

  [[nodiscard]] double rate(uint32_t flow) const { return flows_[flow].rate; }
  /// Time at which the flow's last byte lands if rates stay as they are.
  [[nodiscard]] Time completion(uint32_t flow) const;
  /// Sum of the rates of the flows on a resource.
  [[nodiscard]] double load(uint32_t r) const;
  [[nodiscard]] size_t active(uint32_t r) const { return res_[r].flows.size(); }
  /// Statistics up to `now` (call at the end of the run).
  [[nodiscard]] ResourceStats stats(uint32_t r, Time now) const;

 private:
  struct Resource {
    double capacity = 0;
    std::vector<uint32_t> flows;  ///< flows crossing it, in start order
    Time last_change = 0;
    ResourceStats stats;
    uint64_t mark = 0;  ///< component search epoch
    // Progressive-filling scratch.
    double left = 0;
    uint32_t unfrozen = 0;
    uint32_t version = 0;
  };
  struct Share {
    double share;
    uint32_t resource;
    uint32_t version;
    /// Heap order: smallest share first, ties by resource index (deterministic).
    static bool later(const Share& a, const Share& b) {
      return a.share > b.share || (a.share == b.share && a.resource > b.resource);
    }
  };
  struct Flow {
    std::vector<uint32_t> res;
    double remaining = 0;  ///< bytes left at `updated`
    double rate = 0;       ///< bytes/s
    Time updated = 0;
    uint64_t mark = 0;
    bool live = false;
  };

  void touch(uint32_t r, Time now);
  void drain(Flow& f, Time now);

  std::vector<Resource> res_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_flows_;
  std::vector<uint32_t> dirty_;
  uint64_t epoch_ = 0;
  // Scratch of the last solve.
  std::vector<uint32_t> comp_res_;
  std::vector<uint32_t> comp_flows_;
  std::vector<Share> heap_;
  std::vector<uint32_t> changed_flows_;
  std::vector<double> old_rate_;
};

}  // namespace tierflow::sim
