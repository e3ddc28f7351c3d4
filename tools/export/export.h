// Writers that take a plan out of tierflow, one per format, behind one registry
// (ARCHITECTURE §9, docs/formats.md "Export"). `tierflow export` is a thin loop over it.
//
// Glossary
//   format     a registry entry: name (the `--format` spelling), one-line description,
//              whether OUT is a file or a folder, what it needs from the simulation, and
//              its writer function.
//   OUT        where a format writes: one file ("-" = standard output), or a folder that
//              receives one file per program (created when missing).
//   simulated  every format but plan-json runs the plan once through sim::simulate and
//              writes simulated times; a run that fails writes nothing.
//   streamed   a format whose output is produced while simulating (chrome: the timeline
//              streams to OUT); its writer only completes the file.
//
// Adding a format: declare `void write_x(const ExportInput&, const std::string& out)` in
// writers.h, define it in its own .cpp under tools/export/ (listed in its CMakeLists.txt),
// add one row to the table in registry.cpp, and document it in docs/formats.md. The
// writer writes OUT atomically (core/io.h), the same bytes for the same inputs, and throws
// InputError for what the user can fix.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "sim/simulator.h"
#include "sim/timeline.h"

namespace tierflow::exporter {

/// What OUT names.
enum class OutputKind { kFile, kFolder };

/// What a format needs from the simulation.
enum class SimNeed {
  kNone,      ///< not simulated (plan-json)
  kResult,    ///< SimResult and per-step times
  kTimeline,  ///< as kResult, with the Chrome timeline streamed to OUT while simulating
};

/// Choices that some formats read; the others ignore them.
struct ExportOptions {
  /// When a tier is full: fail, or wait for memory (as `tierflow sim --on-full`).
  sim::OnFull on_full = sim::OnFull::kFail;
  /// plan-json: embed the workload instead of referencing its file.
  bool inline_workload = false;
  /// chakra: file names are `STEM.PROGRAM.et`; empty = the plan file's name without
  /// its extension. A stem with a '/' (or "." or "..") is an error.
  std::string stem;
  std::string_view stem_flag = "--stem";  ///< how errors name `stem` (Python: "stem")
  /// The topology the export used, as given on the command line: plan-json records it
  /// (empty `hw` = the plan's own topology reference; `sets` are appended to the plan's).
  std::string hw;
  std::vector<std::string> sets;
};

/// Everything a writer reads. `sim` and `step_times` are set when the format's SimNeed
/// is not kNone (the simulation then succeeded: every step ran); `timeline` only for
/// kTimeline.
struct ExportInput {
  const Plan& plan;
  const Workload& workload;
  const hw::Topology& topology;
  std::string plan_file;  ///< as given; relative references in the plan start at its folder
  const hw::BoundPlan* bound = nullptr;  ///< set with `sim`: the plan on `topology`
  const sim::SimResult* sim = nullptr;
  /// Per program and step, from sim::SimOptions::step_times.
  const std::vector<std::vector<sim::StepTime>>* step_times = nullptr;
  sim::Timeline* timeline = nullptr;  ///< streamed to OUT; the writer calls finish()
  ExportOptions options;
  /// What the writer tells the user once written (ExportOutcome::notes).
  std::vector<std::string>* notes = nullptr;
};

/// Writes OUT (a file path, "-", or a folder that exists). Throws InputError.
using WriteFn = void (*)(const ExportInput& in, const std::string& out);

/// One row of the registry.
struct Format {
  std::string_view name;
  std::string_view description;
  OutputKind output = OutputKind::kFile;
  SimNeed sim = SimNeed::kResult;
  WriteFn write = nullptr;
};

/// Every format, in the order `--list-formats` prints them.
std::span<const Format> formats();

/// The format named `name`. Throws InputError at `source` naming the nearest one.
const Format& find_format(std::string_view name, std::string_view source = "--format");

/// The registry as an aligned table: name, output kind, description; one line each.
std::string formats_table();

/// How an export ended: a simulation error means nothing was written.
struct ExportOutcome {
  std::optional<sim::SimError> error;
  /// Written, and worth knowing (the CLI prints them as notes, Python warns them): e.g.
  /// traces of another export left in a Chakra folder.
  std::vector<std::string> notes;
};

/// Runs one export: checks OUT against the format's output kind (a folder format needs a
/// folder path, not "-" or an existing file; a file format needs a file path, not an
/// existing folder), simulates the plan once if the format needs it, then calls the
/// writer. Throws InputError for a bad OUT or an unwritable one. `plan` must be verified
/// when the format is not simulated (the simulator checks the rules itself).
ExportOutcome run_export(const Format& format, const Plan& plan, const Workload& workload,
                         const hw::Topology& topology, const std::string& plan_file,
                         const std::string& out, const ExportOptions& options);

}  // namespace tierflow::exporter
