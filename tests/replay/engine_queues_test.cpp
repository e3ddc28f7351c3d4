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

struct Started {
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> list;
  std::string order() const {
    std::string out;
    for (const auto& [x, held] : list) out += std::to_string(x) + " ";
    return out;
  }
};

}  // namespace

TEST_CASE("engine queues: a copy waits until first in every queue of its route") {
  // Groups 0 and 2 have one engine, group 1 two.
  const std::vector<int> counts{1, 2, 1};
  EngineQueues q = EngineQueues::numbered(counts);
  REQUIRE(q.groups() == 3);
  const std::vector<std::vector<uint32_t>> routes{{0, 1}, {1, 2}, {0}, {2}};
  Started s;
  auto route_of = [&](uint32_t x) { return std::span<const uint32_t>(routes[x]); };
  auto start = [&](uint32_t x, std::vector<uint32_t> held) {
    s.list.emplace_back(x, std::move(held));
  };

  // t0: copy 0 takes group 0 and one engine of group 1; copy 1 takes the other engine of
  // group 1 and group 2.
  for (uint32_t x : {0U, 1U}) {
    q.enqueue(x, routes[x]);
    q.start_ready(route_of, start);
  }
  CHECK(s.order() == "0 1 ");
  CHECK(s.list[0].second == std::vector<uint32_t>{0, 0});
  CHECK(s.list[1].second == std::vector<uint32_t>{1, 0});
  // Copies 2 and 3 queue behind them.
  for (uint32_t x : {2U, 3U}) {
    q.enqueue(x, routes[x]);
    q.start_ready(route_of, start);
  }
  CHECK(s.order() == "0 1 ");
  // Copy 1 ends: group 2 frees, copy 3 starts; group 0 is still held by copy 0.
  q.release(routes[1], s.list[1].second);
  q.start_ready(route_of, start);
  CHECK(s.order() == "0 1 3 ");
  // Copy 0 ends: copy 2 gets group 0's engine.
  q.release(routes[0], s.list[0].second);
  q.start_ready(route_of, start);
  CHECK(s.order() == "0 1 3 2 ");
  CHECK(s.list[3].second == std::vector<uint32_t>{0});
}

TEST_CASE("engine queues: FIFO blocks a later copy even when its own groups are idle") {
  // Two groups of one engine. Copy 0 holds group 0; copy 1 (groups 0 and 1) queues behind
  // it; copy 2 (group 1 only) is behind copy 1 in group 1 and must wait for it.
  const std::vector<int> counts{1, 1};
  EngineQueues q = EngineQueues::numbered(counts);
  const std::vector<std::vector<uint32_t>> routes{{0}, {0, 1}, {1}};
  Started s;
  auto route_of = [&](uint32_t x) { return std::span<const uint32_t>(routes[x]); };
  auto start = [&](uint32_t x, std::vector<uint32_t> held) {
    s.list.emplace_back(x, std::move(held));
  };
  for (uint32_t x : {0U, 1U, 2U}) {
    q.enqueue(x, routes[x]);
    q.start_ready(route_of, start);
  }
  CHECK(s.order() == "0 ");
  q.release(routes[0], s.list[0].second);
  q.start_ready(route_of, start);
  CHECK(s.order() == "0 1 ");
  q.release(routes[1], s.list[1].second);
  q.start_ready(route_of, start);
  CHECK(s.order() == "0 1 2 ");
}

TEST_CASE("engine queues: given engine ids are taken first to last and come back") {
  EngineQueues q(std::vector<std::vector<uint32_t>>{{7, 9}});
  const std::vector<uint32_t> route{0};
  Started s;
  auto route_of = [&](uint32_t) { return std::span<const uint32_t>(route); };
  auto start = [&](uint32_t x, std::vector<uint32_t> held) {
    s.list.emplace_back(x, std::move(held));
  };
  for (uint32_t x : {0U, 1U, 2U}) q.enqueue(x, route);
  q.start_ready(route_of, start);
  REQUIRE(s.list.size() == 2);
  CHECK(s.list[0].second == std::vector<uint32_t>{7});
  CHECK(s.list[1].second == std::vector<uint32_t>{9});
  q.release(route, s.list[1].second);  // the second engine frees first
  q.start_ready(route_of, start);
  REQUIRE(s.list.size() == 3);
  CHECK(s.list[2].second == std::vector<uint32_t>{9});
}
