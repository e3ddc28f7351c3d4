// The writer of each format in the registry (registry.cpp), with the pure functions
// behind them that tests call. docs/formats.md "Export" describes every output.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "tools/export/export.h"

namespace tierflow::exporter {

// report-json, report-csv, chrome: what `tierflow sim --json`, `--csv` and `--timeline`
// write for the same plan, byte for byte (report_writers.cpp).
void write_report_json(const ExportInput& in, const std::string& out);
void write_report_csv(const ExportInput& in, const std::string& out);
void write_chrome(const ExportInput& in, const std::string& out);

// plan-json: the plan in canonical `tierflow.plan/2` form (plan_writer.cpp).
void write_plan_json(const ExportInput& in, const std::string& out);
/// The canonical text for a plan written to `out` ("-": references relative to the
/// working folder).
std::string plan_json(const ExportInput& in, const std::string& out);

// csv: one row per program step (steps_csv.cpp).
void write_steps_csv(const ExportInput& in, const std::string& out);
/// The columns, in order (pinned by tests/export/golden/steps_columns.txt).
inline constexpr std::array<std::string_view, 23> kStepColumns = {
    "program", "device",      "step",     "kind",     "target",    "name",
    "class",   "layer",       "bytes",    "flops",    "from_tier", "to_tier",
    "route",   "anchor_step", "event",    "waits",    "issue_ps",  "start_ps",
    "end_ps",  "duration_ps", "queue_ps", "stall_ps", "exposed_ps"};
std::string steps_csv(const ExportInput& in);

// chakra: one Chakra execution trace per program (chakra_writer.cpp).
void write_chakra(const ExportInput& in, const std::string& out);
/// The trace of program `program`: the bytes of `STEM.PROGRAM.et`.
std::string chakra_trace(const ExportInput& in, size_t program);
/// The file stem: ExportOptions::stem, else the plan file's name without extension.
std::string chakra_stem(const ExportInput& in);

}  // namespace tierflow::exporter
