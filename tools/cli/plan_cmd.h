// `tierflow plan` (make a plan; `plan verify FILE`).
#pragma once

#include <CLI/CLI.hpp>


namespace tierflow::cli {

/// Adds `plan` and `plan verify` to `app`.
void add_plan_commands(CLI::App& app);

}  // namespace tierflow::cli
