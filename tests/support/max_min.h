// Max-min fair rates by progressive filling, written plainly: what the incremental flow
// solver (hw_models/flows.h, which the simulator and the replayer share) computes, in a form
// short enough to check by eye. A test oracle only: the solver is tested against it.
//
//   while some flow is unfrozen: the resource with the least fair share (capacity left
//   over the crossings of its unfrozen flows; ties to the lower index) saturates, and its
//   unfrozen flows freeze at that share.
//
// A route may cross a resource twice (it then takes two shares there). Quadratic in the
// number of flows and resources.
#pragma once

#include <cstdint>
#include <vector>

namespace tierflow {

/// The max-min fair rate of each route over resources of `capacity` (each route crosses
/// at least one resource).
std::vector<double> max_min_rates(const std::vector<double>& capacity,
                                  const std::vector<std::vector<uint32_t>>& routes);

}  // namespace tierflow
