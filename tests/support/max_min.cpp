#include "tests/support/max_min.h"

#include <algorithm>

#include "core/diagnostics.h"

namespace tierflow {

std::vector<double> max_min_rates(const std::vector<double>& capacity,
                                  const std::vector<std::vector<uint32_t>>& routes) {
  std::vector<double> left = capacity;
  std::vector<double> unfrozen(capacity.size(), 0);
  for (const auto& route : routes) {
    TF_ASSERT(!route.empty(), "a flow crosses no resource");
    for (uint32_t r : route) unfrozen[r] += 1;
  }
  std::vector<double> rate(routes.size(), -1);
  for (size_t frozen = 0; frozen < routes.size();) {
    size_t best = capacity.size();
    for (size_t r = 0; r < capacity.size(); ++r) {
      if (unfrozen[r] > 0 &&
          (best == capacity.size() || left[r] / unfrozen[r] < left[best] / unfrozen[best])) {
        best = r;
      }
    }
    const double share = std::max(0.0, left[best] / unfrozen[best]);
    for (size_t f = 0; f < routes.size(); ++f) {
      const auto& route = routes[f];
      if (rate[f] >= 0 || std::find(route.begin(), route.end(), best) == route.end()) continue;
      rate[f] = share;
      ++frozen;
      for (uint32_t r : route) {
        left[r] -= share;
        unfrozen[r] -= 1;
      }
    }
  }
  return rate;
}

}  // namespace tierflow
