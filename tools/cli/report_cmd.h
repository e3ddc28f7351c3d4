// `tierflow report`: simulate one or more plans and write a self-contained HTML page with
// plots (tools/export/html_report.h).
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_report_command(CLI::App& app);

}  // namespace tierflow::cli
