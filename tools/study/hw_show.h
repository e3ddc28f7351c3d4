// `tierflow hw show` and Python's Topology: the resolved topology as a text report or JSON
// (presentation for both front ends, over hw_models).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "hw_models/topology.h"

namespace tierflow::study {

struct ShowOptions {
  /// List the route of every ordered pair of tiers, not only those of local tiers.
  bool all_routes = false;
};

/// Tiers, switches, links, routes to and from each device's local tier (and peer
/// routes), and capacity and compute totals per device and per supernode.
std::string show_text(const hw::Topology& t, const ShowOptions& options = {});
/// The same content with numbers in base units (bytes, bytes/s, ps, FLOP/s).
nlohmann::ordered_json show_json(const hw::Topology& t);

}  // namespace tierflow::study
