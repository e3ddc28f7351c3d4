// `tierflow sim`: run a plan on a topology and report makespan, stalls, memory, links.
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_sim_command(CLI::App& app);

}  // namespace tierflow::cli
