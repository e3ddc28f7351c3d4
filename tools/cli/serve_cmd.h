// `tierflow serve`: requests of a trace served by replicas of a model with a tiered KV cache.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_serve_command(CLI::App& app);

}  // namespace tierflow::cli
