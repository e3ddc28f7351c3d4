// `tierflow plan ...` subcommands (the planner itself lands with the planner issue).
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

/// Adds `plan verify` to `app`.
void add_plan_commands(CLI::App& app);

}  // namespace tierflow::cli
