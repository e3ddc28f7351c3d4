// `tierflow sweep`: a spec's points planned and simulated on all cores into a SQLite
// database, resumable and shardable; `sweep merge` joins shards, `sweep export` prints rows
// (tools/study/sweep.h, tools/study/result_db.h; docs/sweeps.md).
#pragma once

#include <CLI/CLI.hpp>

namespace tierflow::cli {

void add_sweep_command(CLI::App& app);

}  // namespace tierflow::cli
