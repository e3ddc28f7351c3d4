// `tierflow hw show`: the resolved topology as a text report or JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "hw_models/topology.h"

namespace tierflow::hw {

/// Tiers, switches, links, routes to and from each device's local tier (and peer
/// routes), and capacity and compute totals per device and per supernode.
std::string show_text(const Topology& t);
/// The same content with numbers in base units (bytes, bytes/s, ps, FLOP/s).
nlohmann::ordered_json show_json(const Topology& t);

}  // namespace tierflow::hw
