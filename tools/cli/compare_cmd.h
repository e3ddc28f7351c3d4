// `tierflow compare`: every policy side by side on one workload and topology.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_compare_command(CLI::App& app);

}  // namespace tierflow::cli
