// RescoredQueue against the textbook lazily re-scored max-heap it replaces: on seeded
// random groups whose scores drop as entries are taken (select's link load), both must
// return the same entries in the same order, ties included.
#include "planner/rescored_queue.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <queue>
#include <random>
#include <vector>

using tierflow::planner::RescoredQueue;

namespace {

/// Groups share a "link" (few links, so many groups drop together); a group's score is
/// base x horizon / (load + cost) once the load passes the horizon, as select scores.
struct Model {
  std::vector<double> base;
  std::vector<int64_t> cost;
  std::vector<uint32_t> link;
  std::vector<int64_t> load;
  int64_t horizon = 1000;
  [[nodiscard]] double now(uint32_t g) const {
    const int64_t after = load[link[g]] + cost[g];
    return after <= horizon ? base[g]
                            : base[g] * static_cast<double>(horizon) / static_cast<double>(after);
  }
};

std::vector<uint32_t> textbook(Model m, const std::vector<uint32_t>& group, uint32_t take) {
  using Entry = std::pair<double, uint32_t>;
  auto later = [](const Entry& a, const Entry& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> heap(later);
  for (uint32_t i = 0; i < group.size(); ++i) heap.emplace(m.base[group[i]], i);
  std::vector<uint32_t> out;
  while (!heap.empty() && out.size() < take) {
    const auto [key, i] = heap.top();
    heap.pop();
    const double now = m.now(group[i]);
    if (now < key && !heap.empty() && now < heap.top().first) {
      heap.emplace(now, i);
      continue;
    }
    out.push_back(i);
    if (i % 3 != 0) m.load[m.link[group[i]]] += m.cost[group[i]];  // some are not taken
  }
  return out;
}

std::vector<uint32_t> rescored(Model m, const std::vector<uint32_t>& group, uint32_t take) {
  std::vector<double> score(group.size());
  for (uint32_t i = 0; i < group.size(); ++i) score[i] = m.base[group[i]];
  RescoredQueue q(group, score);
  std::vector<uint32_t> out;
  while (!q.empty() && out.size() < take) {
    const uint32_t i = q.pop([&](uint32_t g) { return m.now(g); });
    out.push_back(i);
    if (i % 3 != 0) m.load[m.link[group[i]]] += m.cost[group[i]];
  }
  return out;
}

}  // namespace

TEST_CASE("RescoredQueue picks what the lazily re-scored heap picks") {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Model m;
    const uint32_t groups = 1 + static_cast<uint32_t>(rng() % 40);
    const uint32_t links = 1 + static_cast<uint32_t>(rng() % 3);
    m.load.assign(links, 0);
    for (uint32_t g = 0; g < groups; ++g) {
      // Few distinct values, so that equal scores (ties) are common.
      m.base.push_back(static_cast<double>(1 + rng() % 6) * (rng() % 4 == 0 ? 0.5 : 1.0));
      m.cost.push_back(static_cast<int64_t>(1 + rng() % 4) * 50);
      m.link.push_back(static_cast<uint32_t>(rng() % links));
    }
    // Groups with equal base, cost and link behave alike, as select's equal candidates do.
    std::vector<uint32_t> group;
    const uint32_t entries = static_cast<uint32_t>(rng() % 300);
    for (uint32_t i = 0; i < entries; ++i) group.push_back(static_cast<uint32_t>(rng() % groups));
    const auto take = static_cast<uint32_t>(rng() % (entries + 1));
    CHECK(rescored(m, group, take) == textbook(m, group, take));
    CHECK(rescored(m, group, entries) == textbook(m, group, entries));
  }
}
