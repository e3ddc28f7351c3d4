// The registry of export formats and the one loop that runs any of them.
#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <memory>
#include <system_error>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/table.h"
#include "tools/export/export.h"
#include "tools/export/writers.h"

namespace tierflow::exporter {
namespace {

// One row per format; `tierflow export --list-formats` prints them in this order.
constexpr std::array kFormats = {
    Format{"chakra", "Chakra execution traces for ASTRA-sim, one STEM.PROGRAM.et per program",
           OutputKind::kFolder, SimNeed::kResult, &write_chakra},
    Format{"csv", "one row per program step: tiers, route, anchor, waits, simulated times (ps)",
           OutputKind::kFile, SimNeed::kResult, &write_steps_csv},
    Format{"chrome", "the simulated timeline as a Chrome trace (sim --timeline)", OutputKind::kFile,
           SimNeed::kTimeline, &write_chrome},
    Format{"plan-json", "the plan in canonical tierflow.plan/2 form (not simulated)",
           OutputKind::kFile, SimNeed::kNone, &write_plan_json},
    Format{"report-json", "the simulation report as JSON (sim --json)", OutputKind::kFile,
           SimNeed::kResult, &write_report_json},
    Format{"report-csv", "the simulation report as section,name,metric,value rows (sim --csv)",
           OutputKind::kFile, SimNeed::kResult, &write_report_csv},
};

/// Checks OUT for `f` before anything runs; creates a folder OUT that does not exist yet
/// (true when it did).
bool prepare_out(const Format& f, const std::string& out) {
  namespace fs = std::filesystem;
  const SourcePos at{out};
  std::error_code ec;
  const fs::file_status st = out == "-" ? fs::file_status{} : fs::status(out, ec);
  if (f.output == OutputKind::kFile) {
    if (fs::is_directory(st)) {
      throw InputError::at(at, "is a folder, but format '{}' writes one file: name a file", f.name);
    }
    return false;
  }
  if (out == "-") {
    throw InputError::at(SourcePos{"-o"},
                         "format '{}' writes a folder (one file per program), not standard "
                         "output: name a folder",
                         f.name);
  }
  if (fs::is_directory(st)) return false;
  if (fs::exists(st)) {
    throw InputError::at(at, "is a file, but format '{}' writes a folder (one file per program)",
                         f.name);
  }
  fs::create_directory(out, ec);
  if (ec) throw InputError::at(at, "cannot create the folder: {}", ec.message());
  return true;
}

}  // namespace

std::span<const Format> formats() {
  return kFormats;
}

const Format& find_format(std::string_view name, std::string_view source) {
  for (const Format& f : kFormats) {
    if (f.name == name) return f;
  }
  std::vector<std::string_view> names;
  for (const Format& f : kFormats) names.push_back(f.name);
  throw InputError::at(SourcePos{std::string(source)},
                       "unknown format '{}'{} (tierflow export --list-formats lists them)", name,
                       did_you_mean(name, names));
}

std::string formats_table() {
  Table t({"format", "writes", "description"});
  for (const Format& f : kFormats) {
    t.add_row({std::string(f.name), f.output == OutputKind::kFolder ? "folder" : "file",
               std::string(f.description)});
  }
  return t.render(/*indent=*/0);
}

ExportOutcome run_export(const Format& format, const Plan& plan, const Workload& workload,
                         const hw::Topology& topology, const std::string& plan_file,
                         const std::string& out, const ExportOptions& options) {
  const std::string& stem = options.stem;
  if (stem.find('/') != std::string::npos || stem == "." || stem == "..") {
    throw InputError::at(SourcePos{std::string(options.stem_flag)}, "'{}' is not a file name stem",
                         stem);
  }
  // A folder made here is removed again if the export fails before writing into it.
  const MadeDir folder(out, prepare_out(format, out));
  ExportInput in{plan, workload, topology, plan_file};
  in.options = options;
  ExportOutcome outcome;
  in.notes = &outcome.notes;
  if (format.sim == SimNeed::kNone) {
    format.write(in, out);
    return outcome;
  }
  std::unique_ptr<sim::Timeline> timeline;
  if (format.sim == SimNeed::kTimeline) timeline = std::make_unique<sim::Timeline>(out);
  std::vector<std::vector<sim::StepTime>> step_times;
  sim::SimOptions so;
  so.on_full = options.on_full;
  so.timeline = timeline.get();
  so.step_times = &step_times;
  const hw::Binding bound = hw::bind(plan, workload, topology);
  const sim::SimResult result = bound.bound ? sim::simulate(*bound.bound, so)
                                            : sim::unbound_result(plan, workload, *bound.error);
  // A failed run leaves no output (an unfinished timeline removes its temp file, and a
  // folder made for the output goes again).
  if (result.error) return ExportOutcome{result.error};
  in.bound = &*bound.bound;
  in.sim = &result;
  in.step_times = &step_times;
  in.timeline = timeline.get();
  format.write(in, out);
  return outcome;
}

}  // namespace tierflow::exporter
