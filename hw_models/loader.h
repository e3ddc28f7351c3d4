// Strict loading of topology files (`tierflow: hw/1`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hw_models/topology.h"

namespace tierflow::hw {

struct LoadOptions {
  /// `--set PATH=VALUE` overrides, applied after reading and before validation. PATH is
  /// `name`, `description`, `system.KEY`, or `devices|tiers|switches|links.ID.KEY`.
  std::vector<std::string> overrides;
  /// Every number must resolve to a citation (its own `source:` or its object's).
  bool require_sources = false;
  /// How positions name the overrides: `--set:N:COL` (the CLI), `set:N:COL` (Python).
  std::string sets_flag = "--set";
};

/// How a message tells the user to override a field: `assignment` ("tiers.hbm.capacity=...")
/// after the CLI's flag (`--set tiers.hbm.capacity=...`) or as Python's argument
/// (`set=tiers.hbm.capacity=...`), as `flag` (LoadOptions::sets_flag) names it.
std::string override_hint(std::string_view flag, std::string_view assignment);

/// Loads, validates and resolves routes. Throws InputError naming file:line:col.
Topology load_topology(const std::string& path, const LoadOptions& options = {});
/// The same from YAML text; `name` stands for the file in positions.
Topology load_topology_text(const std::string& text, const std::string& name,
                            const LoadOptions& options = {});

}  // namespace tierflow::hw
