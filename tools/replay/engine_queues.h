// The copy engines of a replay backend (ARCHITECTURE §10): one FIFO queue per engine group
// (a link direction or a tier port with its own engines), shared by the CPU and CUDA
// backends so that both start copies by the simulator's rule.
//
// Glossary
//   group    the engines of one resource of a route; a copy takes one engine of every
//            group on its route.
//   engine   an id the backend gives each engine of a group (the CPU backend numbers them,
//            the CUDA backend gives each its stream's lane).
//   ready    a queued copy is first in the queue of every group on its route, and each of
//            those groups has an idle engine: it starts, holding one engine per group.
//
//   group 0: [c1][c3]      c1 is first in groups 0 and 1: it starts when both have an
//   group 1: [c1][c2]      idle engine; c2 waits for c1 in group 1 even if group 2 is idle.
//   group 2: [c2]
//
// Not thread-safe: the backend calls it under its own lock.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace tierflow::replay {

class EngineQueues {
 public:
  EngineQueues() = default;
  /// Group g has the engines engines[g], taken first to last.
  explicit EngineQueues(std::vector<std::vector<uint32_t>> engines);
  /// Groups of `count[g]` engines numbered 0..count[g]-1.
  static EngineQueues numbered(std::span<const int> count);

  [[nodiscard]] size_t groups() const { return groups_.size(); }

  /// Queues copy `x` on the groups of `route` (each valid, x not queued yet).
  void enqueue(uint32_t x, std::span<const uint32_t> route);

  /// Starts every ready copy, group by group, until none is: for each, takes one engine
  /// of every group of route_of(x) (held[i] from group route_of(x)[i]) and calls
  /// start(x, held).
  template <class RouteOf, class Start>
  void start_ready(RouteOf&& route_of, Start&& start) {
    bool again = true;
    while (again) {
      again = false;
      for (Group& g : groups_) {
        if (g.queue.empty() || g.idle.empty()) continue;
        const uint32_t x = g.queue.front();
        const std::span<const uint32_t> route = route_of(x);
        if (!ready(x, route)) continue;
        std::vector<uint32_t> held;
        held.reserve(route.size());
        for (uint32_t e : route) {
          Group& r = groups_[e];
          held.push_back(r.idle.back());
          r.idle.pop_back();
          r.queue.pop_front();
        }
        start(x, std::move(held));
        again = true;
      }
    }
  }

  /// A copy on `route` that held the engines `held` has ended: they are idle again.
  void release(std::span<const uint32_t> route, std::span<const uint32_t> held);

 private:
  struct Group {
    std::vector<uint32_t> idle;  ///< idle engines, the next taken last
    std::deque<uint32_t> queue;  ///< copies, FIFO
  };
  [[nodiscard]] bool ready(uint32_t x, std::span<const uint32_t> route) const;

  std::vector<Group> groups_;
};

}  // namespace tierflow::replay
