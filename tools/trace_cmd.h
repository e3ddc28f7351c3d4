// `tierflow trace ...` subcommands.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

/// Adds `trace gen|info|import` to `app`.
void add_trace_commands(CLI::App& app);

/// The folder holding hw/ and models/: $TIERFLOW_CONFIG_DIR, else the source tree's configs/.
std::string config_dir();

}  // namespace tierflow::cli
