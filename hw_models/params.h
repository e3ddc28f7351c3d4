// The declared parameters of every topology object (core/schema.h): the single source
// of the YAML keys, their types, units, defaults and descriptions.
#pragma once

#include "core/schema.h"
#include "hw_models/topology.h"

namespace tierflow::hw {

const schema::Schema<System>& system_schema();
const schema::Schema<Device>& device_schema();
const schema::Schema<Tier>& tier_schema();
const schema::Schema<Switch>& switch_schema();
const schema::Schema<Link>& link_schema();
const schema::Schema<RoutePin>& route_schema();

/// The top-level keys of a topology file, in documentation order, with descriptions.
const std::vector<schema::TopKey>& top_level_keys();

/// The format tag a topology file must carry (`tierflow: hw/1`).
inline constexpr std::string_view kFormatTag = "hw/1";

}  // namespace tierflow::hw
