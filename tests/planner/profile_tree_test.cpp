// ProfileTree against a plain array on seeded random range adds (levels stay non-negative,
// as byte counts do): range max, whole max, argmax and last_above must agree.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "planner/offload.h"

using namespace tierflow::planner;

namespace {

/// Seeded random range adds and queries on profiles of up to `max_n` positions, against a
/// plain array.
void check_against_array(uint64_t seeds, uint32_t max_n) {
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const auto n = static_cast<uint32_t>(1 + rng() % max_n);
    std::vector<int64_t> plain(n);
    for (auto& x : plain) x = static_cast<int64_t>(rng() % 50);
    std::vector<uint64_t> levels(plain.begin(), plain.end());
    ProfileTree tree(levels);
    auto pick = [&] {
      auto a = static_cast<uint32_t>(rng() % (n + 2));
      auto b = static_cast<uint32_t>(rng() % (n + 2));
      if (a > b) std::swap(a, b);
      return std::pair{a, b};
    };
    for (int step = 0; step < 300; ++step) {
      const auto [from, to] = pick();
      const uint32_t last = std::min(to, n - 1);
      switch (rng() % 4) {
        case 0: {  // add, never below zero
          int64_t delta = static_cast<int64_t>(rng() % 40) - 15;
          if (from <= last) {
            const int64_t low = *std::min_element(plain.begin() + from, plain.begin() + last + 1);
            delta = std::max(delta, -low);
            for (uint32_t i = from; i <= last; ++i) plain[i] += delta;
          }
          tree.add(from, to, delta);
          break;
        }
        case 1: {
          int64_t want = 0;
          for (uint32_t i = from; i <= last && from <= last; ++i) want = std::max(want, plain[i]);
          CHECK(tree.max(from, to) == static_cast<uint64_t>(want));
          break;
        }
        case 2: {
          const auto threshold = static_cast<uint64_t>(rng() % 60);
          uint32_t want = kNone;
          for (uint32_t i = from; i <= last && from <= last; ++i) {
            if (plain[i] > static_cast<int64_t>(threshold)) want = i;
          }
          CHECK(tree.last_above(from, to, threshold) == want);
          break;
        }
        default: {
          const auto top = std::max_element(plain.begin(), plain.end());
          CHECK(tree.max() == static_cast<uint64_t>(*top));
          CHECK(tree.argmax() == static_cast<uint32_t>(top - plain.begin()));
          break;
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("ProfileTree agrees with a plain array") {
  // Profiles within a few blocks, and profiles of many blocks (ranges that cover whole
  // blocks and end inside others).
  check_against_array(200, 70);
  check_against_array(40, 3000);
}

TEST_CASE("ProfileTree::add_all is add() of each piece") {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const auto n = static_cast<uint32_t>(1 + rng() % 300);
    std::vector<uint64_t> levels(n);
    for (auto& x : levels) x = 1000 + rng() % 50;
    ProfileTree one(levels), all(levels);
    for (int step = 0; step < 20; ++step) {
      // Ascending disjoint spans, some past the end (clamped as add() clamps them).
      std::vector<std::pair<Span, int64_t>> pieces;
      uint32_t at = static_cast<uint32_t>(rng() % 4);
      while (at < n + 3) {
        const uint32_t to = at + static_cast<uint32_t>(rng() % 6);
        pieces.push_back({{at, to}, static_cast<int64_t>(rng() % 40) - 20});
        at = to + 1 + static_cast<uint32_t>(rng() % 5);
      }
      for (const auto& [span, delta] : pieces) one.add(span.from, span.to, delta);
      all.add_all(pieces);
      CHECK(all.max() == one.max());
      CHECK(all.argmax() == one.argmax());
      for (uint32_t i = 0; i < n; ++i) {
        REQUIRE(all.max(i, i) == one.max(i, i));
        const uint32_t j = i + static_cast<uint32_t>(rng() % (n - i));
        REQUIRE(all.max(i, j) == one.max(i, j));
      }
    }
  }
}
