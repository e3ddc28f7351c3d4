// `tierflow whatif`: capacity questions answered by search (tools/study/whatif.h).
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_whatif_command(CLI::App& app);

}  // namespace tierflow::cli
