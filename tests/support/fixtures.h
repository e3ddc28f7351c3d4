// Shared test fixtures: tests/fixtures/unit_hw.yaml (four devices, hbm per device 128 B,
// ddr per socket, ssd per host; its diagram is in the file) loaded with overrides, and
// small workloads the planner tests share.
#pragma once

#include <string>
#include <vector>

#include "core/workload.h"
#include "hw_models/topology.h"

namespace tierflow::testing {

/// tests/fixtures/unit_hw.yaml with `sets` applied (PATH=VALUE, in order).
hw::Topology unit_hw(std::vector<std::string> sets = {});

/// x (4 B) and three 32 B weights read in turn, w0 w1 w2 w0 w1 w2 w0 w1 w2, one per op of
/// `flops`, each op also reading the 4 B activation of the op before.
Workload cycle_workload(double flops = 100);

}  // namespace tierflow::testing
