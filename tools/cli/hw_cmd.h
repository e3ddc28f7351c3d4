// `tierflow hw ...` subcommands.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

/// Adds `hw validate|show|describe` to `app`.
void add_hw_commands(CLI::App& app);

}  // namespace tierflow::cli
