// `tierflow replay`: run a plan for real on a backend and compare with the simulator.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_replay_command(CLI::App& app);

}  // namespace tierflow::cli
