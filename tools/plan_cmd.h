// `tierflow plan` (make a plan; `plan verify FILE`) and the pieces `tierflow compare`
// shares with it.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/state.h"

namespace tierflow::cli {

/// Adds `plan` and `plan verify` to `app`.
void add_plan_commands(CLI::App& app);

std::string file_sha256(const std::string& path);
uint64_t parse_budget(const std::string& text, std::string_view flag);
/// The device class (id, or the first), its device tier and the number of programs (0 =
/// every device of the class).
planner::Target make_target(const hw::Topology& topo, const std::string& device, uint32_t devices,
                            std::string_view source);
/// KIND=TIER pins, tiers as topology indices.
std::vector<std::pair<TensorKind, uint32_t>> parse_pins(const std::vector<std::string>& pins,
                                                        const hw::Topology& topo);

}  // namespace tierflow::cli
