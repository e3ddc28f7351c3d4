// Shared test fixtures: tests/fixtures/unit_hw.yaml (four devices, hbm per device 128 B,
// ddr per socket, ssd per host; its diagram is in the file) loaded with overrides.
#pragma once

#include <string>
#include <vector>

#include "hw_models/topology.h"

namespace tierflow::testing {

/// tests/fixtures/unit_hw.yaml with `sets` applied (PATH=VALUE, in order).
hw::Topology unit_hw(std::vector<std::string> sets = {});

}  // namespace tierflow::testing
