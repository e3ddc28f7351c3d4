// Shared test fixtures: tests/fixtures/unit_hw.yaml (four devices, hbm per device 128 B,
// ddr per socket, ssd per host; its diagram is in the file) loaded with overrides, and
// the small workloads and helpers the planner tests share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/workload.h"
#include "hw_models/topology.h"

namespace tierflow::testing {

/// tests/fixtures/unit_hw.yaml with `sets` applied (PATH=VALUE, in order).
hw::Topology unit_hw(std::vector<std::string> sets = {});
/// unit_hw() with 64 MiB of hbm and of ddr: room for any small workload, so that only the
/// budget a test gives limits the device.
hw::Topology roomy_unit_hw();

/// A GPU box without GPUDirect Storage, as YAML: `devices` GPUs (hbm 1 TB/s), host ddr
/// (100 GB/s), ssd (10 GB/s read, 5 write), pcie hbm-ddr at 25 GB/s per device, nvme
/// ddr-ssd at 64 GB/s, no latencies; `routes` (YAML list items) under `routes:`.
std::string bounce_box_yaml(int devices, const std::string& routes);

/// x (4 B) and three 32 B weights read in turn, w0 w1 w2 w0 w1 w2 w0 w1 w2, one per op of
/// `flops`, each op also reading the 4 B activation of the op before.
Workload cycle_workload(double flops = 100);

/// The message ("--pipeline:1:7: expected a pass name") of the InputError that parsing
/// `pipeline` throws; empty when it parses.
std::string pipeline_error(std::string_view pipeline);

}  // namespace tierflow::testing
