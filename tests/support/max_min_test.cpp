// The test oracle tests/support/max_min.h on systems small enough to fill by hand (the
// flow solver is checked against it on random networks in tests/hw_models/flows_test.cpp).
#include "tests/support/max_min.h"

#include <doctest/doctest.h>

using namespace tierflow;

TEST_CASE("max-min: a share one flow cannot use goes to the others") {
  // Resources: L0 10, L1 2, and caps of 100 for flows A, B, C (resources 2, 3, 4).
  // A crosses L0; B crosses L0 and L1; C crosses L1.
  // Shares: L1 2/2 = 1 is least: B = C = 1. Then L0 has 10 - 1 = 9 for A alone: A = 9.
  const std::vector<double> capacity{10, 2, 100, 100, 100};
  const std::vector<std::vector<uint32_t>> routes{{0, 2}, {0, 1, 3}, {1, 4}};
  CHECK(max_min_rates(capacity, routes) == std::vector<double>{9, 1, 1});
}

TEST_CASE("max-min: a flow's own cap, ties and a route crossing a resource twice") {
  // R 6 carries A (cap 1: resource 1) and B twice. A's cap is the least share (1): A = 1.
  // Then R has 5 left for B's two crossings: B = 2.5.
  CHECK(max_min_rates({6, 1}, {{0, 1}, {0, 0}}) == std::vector<double>{1, 2.5});
  // Two resources with equal shares: the lower index saturates first, same rates.
  CHECK(max_min_rates({2, 2}, {{0}, {0, 1}, {1}}) == std::vector<double>{1, 1, 1});
}
