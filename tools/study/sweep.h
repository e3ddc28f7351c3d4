// A sweep: a spec's axes over scenario fields, every point planned and simulated on all
// cores, each point's row committed to a SQLite database the moment it finishes
// (tools/study/result_db.h), so that a rerun resumes and shards of one spec merge
// (ARCHITECTURE §9, §11; docs/sweeps.md).
//
// Glossary
//   spec      a YAML file: `base` (the scenario every point starts from, any field that
//             --vary and set_field() take) and `axes`, a list of groups.
//   group     one item of `axes`: a mapping of one path to its values (an axis, crossed
//             with the other groups) or of several paths with equally many values
//             (zipped: they advance together). The first group varies slowest.
//   point     one scenario of the grid, numbered from 0 in grid order; its number is its
//             identity in the database and decides its shard.
//   shard     `--shard I/N` (0 <= I < N): the points whose number is I modulo N.
//   sweep id  SHA-256 over every point's inputs and the bytes of the files they read:
//             a database holds the rows of one sweep id; merge refuses mixed ids.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.h"
#include "tools/study/scenario.h"
#include "tools/study/serve.h"

namespace tierflow::study {

class ResultDb;

/// One item of a spec's `axes`: a single axis, or several zipped ones of equal length.
struct AxisGroup {
  std::vector<Axis> axes;
  SourcePos pos;
  std::vector<std::vector<SourcePos>> value_pos;  ///< per axis, per value (errors point there)
};

struct SweepSpec {
  /// `kind:` of the spec: step points plan and simulate a scenario (the default); serve
  /// points run the serving engine (tools/study/serve.h) on `serve_base` and its axes.
  enum class Kind { kStep, kServe };
  Kind kind = Kind::kStep;
  std::string file;  ///< where it was read from; positions name it
  std::string dir;   ///< relative file values (hw, model YAML, hf_config, workload) start here
  std::string name;  ///< `name:`, default the file's stem
  std::string description;
  std::string text;  ///< the spec as written (kept in result databases)
  Scenario base;
  ServeSettings serve_base;  ///< kind serve: what every point starts from
  /// Kind serve: where each field of `base` was written (errors about it point there).
  std::map<std::string, SourcePos, std::less<>> base_pos;
  std::vector<AxisGroup> groups;

  [[nodiscard]] bool serving() const { return kind == Kind::kServe; }

  /// Every axis path in group order (the database's axis columns).
  [[nodiscard]] std::vector<std::string> axis_paths() const;
  /// Number of points: the product of the groups' lengths.
  [[nodiscard]] int64_t size() const;
};

/// Reads a spec and validates it whole before anything runs: YAML syntax, keys (with
/// "did you mean"), every axis value, every topology with the overrides its points use,
/// every model and policy. Throws InputError at file:line:col. Relative paths in the
/// spec (hw, model YAML, hf_config, workload) are taken from the spec's folder; a bare
/// name such as `h100-sxm-8gpu` is a shipped topology.
SweepSpec load_sweep_spec(const std::string& path);
/// The same from text; `name` stands for the file in positions, relative paths are taken
/// from `dir`.
SweepSpec parse_sweep_spec(const std::string& text, const std::string& name,
                           const std::string& dir = ".");

struct SweepPoint {
  int64_t index = 0;  ///< in grid order over the whole spec, shards apart
  Scenario scenario;    ///< kind step
  ServeSettings serve;  ///< kind serve
  std::vector<std::string> values;  ///< one per axis path, as the spec wrote it
};

/// The points of the spec, first group slowest.
std::vector<SweepPoint> sweep_points(const SweepSpec& spec);

/// Checks each topology or model value of `axes` (`--vary`) alone on `base`, before any
/// work: an error sits at `source`, naming the path, not at the override it becomes
/// (`--set:1:7`).
void check_axes(const Scenario& base, const std::vector<Axis>& axes, std::string_view source);

/// The most points one sweep spec may have (docs/cli.md, "Limits"); every point is built
/// before the first runs.
inline constexpr int64_t kMaxSweepPoints = 1'000'000;

/// See the glossary. Reads the topology, model and workload files the points use.
std::string sweep_id(const SweepSpec& spec);

struct Shard {
  int64_t index = 0;
  int64_t count = 1;
  [[nodiscard]] bool holds(int64_t point) const { return point % count == index; }
  [[nodiscard]] std::string text() const;  ///< "I/N"
};
/// "I/N" with 0 <= I < N; InputError at `source` otherwise.
Shard parse_shard(std::string_view text, std::string_view source = "--shard");

/// Exit class of a point, as the CLI's exit codes: 0 ok, 1 infeasible (does not fit),
/// 2 bad input, 3 internal error.
struct SweepProgress {
  int64_t total = 0;    ///< points of the shard
  int64_t done = 0;     ///< recorded, this run and before
  int64_t ok = 0;
  int64_t infeasible = 0;
  int64_t failed = 0;
  double elapsed_s = 0;  ///< this run
  int64_t ran = 0;       ///< points this run finished
};

struct SweepOptions {
  unsigned jobs = 0;  ///< concurrent points; 0: one per hardware thread
  Shard shard;
  bool retry_failed = false;  ///< rerun points recorded as failed (exit class 2 or 3)
  /// Told after each point (from the thread that records it).
  std::function<void(const SweepProgress&)> progress;
};

struct SweepSummary {
  int64_t points = 0;   ///< in the shard
  int64_t skipped = 0;  ///< already recorded before this run
  int64_t ran = 0;
  int64_t ok = 0;
  int64_t infeasible = 0;
  int64_t failed = 0;  ///< over the whole database, this run and before
  double seconds = 0;
  /// Points run now whose row has notes (its `notes` column), and the first of them by
  /// point number with its notes.
  int64_t noted = 0;
  int64_t first_noted = -1;
  std::string first_notes;
};

/// Runs the points of `o.shard` that `db` has not recorded (and, with retry_failed, those
/// recorded as failed), `o.jobs` at a time, committing each row as it finishes. Points
/// that share a workload run next to each other so it is generated once. A point that
/// throws is recorded with its error and exit class; nothing is retried silently.
SweepSummary run_sweep(const SweepSpec& spec, ResultDb& db, const SweepOptions& o);

/// "[#########.........]  35/72  ok 30  infeasible 5  failed 0  5.2 points/s  ETA 0:07"
std::string sweep_progress_line(const SweepProgress& p);
/// What `sweep --dry-run` prints: the points, those `shard` holds, each axis's values.
std::string sweep_dry_run_text(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                               const Shard& shard);
/// What a finished sweep prints: points (of the shard), ran and skipped, the rate on
/// `jobs` jobs, the counts by status, where the results are.
std::string sweep_summary_text(const SweepSpec& spec, const ResultDb& db, const SweepSummary& s,
                               const Shard& shard, size_t points, unsigned jobs,
                               const std::string& output);
/// Writes the database's rows as CSV to `csv` and as JSON Lines to `jsonl` (each unless
/// empty; "-": stdout).
void export_results(const ResultDb& db, const std::string& csv, const std::string& jsonl);

}  // namespace tierflow::study
