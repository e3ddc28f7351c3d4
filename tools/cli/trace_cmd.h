// `tierflow trace ...` subcommands.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

/// Adds `trace gen|info|import` to `app`.
void add_trace_commands(CLI::App& app);

}  // namespace tierflow::cli
