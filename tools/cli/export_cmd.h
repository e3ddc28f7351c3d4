// `tierflow export`: a plan written out in another tool's format (tools/export).
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_export_command(CLI::App& app);

}  // namespace tierflow::cli
