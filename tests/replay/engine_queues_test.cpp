// The copy engines' start rule shared by the replay backends (tools/replay/engine_queues.h):
// FIFO per group, a copy starts only when first in every group of its route with an idle
// engine there, engines taken first to last and given back on release.
#include "tools/replay/engine_queues.h"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using namespace tierflow::replay;

namespace {

/// Copies x = 0, 1, ... on routes[x], queued and ended one call at a time.
struct Bench {
  EngineQueues q;
  std::vector<std::vector<uint32_t>> routes;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> started;  ///< (copy, engines held)

  void start_ready() {
    q.start_ready(
        [&](uint32_t x) { return std::span<const uint32_t>(routes[x]); },
        [&](uint32_t x, std::vector<uint32_t> held) { started.emplace_back(x, std::move(held)); });
  }
  void queue(uint32_t x) {
    q.enqueue(x, routes[x]);
    start_ready();
  }
  void end(uint32_t x) {
    for (const auto& [y, held] : started) {
      if (y == x) q.release(routes[x], held);
    }
    start_ready();
  }
  [[nodiscard]] std::string order() const {
    std::string out;
    for (const auto& [x, held] : started) out += std::to_string(x) + " ";
    return out;
  }
};

}  // namespace

TEST_CASE("engine queues: a copy waits until first in every queue of its route") {
  // Groups 0 and 2 have one engine, group 1 two.
  const std::vector<int> counts{1, 2, 1};
  Bench b{EngineQueues::numbered(counts), {{0, 1}, {1, 2}, {0}, {2}}, {}};
  REQUIRE(b.q.groups() == 3);
  // Copy 0 takes group 0 and one engine of group 1; copy 1 the other engine of group 1 and
  // group 2.
  b.queue(0);
  b.queue(1);
  CHECK(b.order() == "0 1 ");
  CHECK(b.started[0].second == std::vector<uint32_t>{0, 0});
  CHECK(b.started[1].second == std::vector<uint32_t>{1, 0});
  // Copies 2 and 3 queue behind them.
  b.queue(2);
  b.queue(3);
  CHECK(b.order() == "0 1 ");
  // Copy 1 ends: group 2 frees, copy 3 starts; group 0 is still held by copy 0.
  b.end(1);
  CHECK(b.order() == "0 1 3 ");
  // Copy 0 ends: copy 2 gets group 0's engine.
  b.end(0);
  CHECK(b.order() == "0 1 3 2 ");
  CHECK(b.started[3].second == std::vector<uint32_t>{0});
}

TEST_CASE("engine queues: FIFO blocks a later copy even when its own groups are idle") {
  // Two groups of one engine. Copy 0 holds group 0; copy 1 (groups 0 and 1) queues behind
  // it; copy 2 (group 1 only) is behind copy 1 in group 1 and must wait for it.
  const std::vector<int> counts{1, 1};
  Bench b{EngineQueues::numbered(counts), {{0}, {0, 1}, {1}}, {}};
  for (uint32_t x : {0U, 1U, 2U}) b.queue(x);
  CHECK(b.order() == "0 ");
  b.end(0);
  CHECK(b.order() == "0 1 ");
  b.end(1);
  CHECK(b.order() == "0 1 2 ");
}

TEST_CASE("engine queues: given engine ids are taken first to last and come back") {
  Bench b{EngineQueues(std::vector<std::vector<uint32_t>>{{7, 9}}), {{0}, {0}, {0}}, {}};
  for (uint32_t x : {0U, 1U, 2U}) b.queue(x);
  REQUIRE(b.started.size() == 2);
  CHECK(b.started[0].second == std::vector<uint32_t>{7});
  CHECK(b.started[1].second == std::vector<uint32_t>{9});
  b.end(1);  // the second engine frees first
  REQUIRE(b.started.size() == 3);
  CHECK(b.started[2].second == std::vector<uint32_t>{9});
}
