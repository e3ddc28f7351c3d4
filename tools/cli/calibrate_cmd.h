// `tierflow calibrate`: measures the machine a replay backend runs on and writes a topology.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_calibrate_command(CLI::App& app);

}  // namespace tierflow::cli
