// The C++ side of the Python API (docs/python.md): each call of `import tierflow` as a
// function of plain C++ values over the study layer, free of Python types so that the
// binding (module.cpp) runs it with the interpreter lock released.
//
// Glossary
//   handle    what a Python object holds: a loaded topology, a workload, a plan outcome or a
//             simulation, with what it came from (file, overrides, description).
//   fields    scenario fields as (path, value text) pairs, applied in order with
//             study::set_field (`batch`, `policy`, `tiers.hbm.capacity`, `model.layers`);
//             besides those, `hw` (a path or a shipped name), `set` (a topology
//             override PATH=VALUE) and `threads`.
//   source    the name errors carry for input that has no file: the Python function
//             ("tierflow.whatif") or argument ("budget").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/planner.h"
#include "tools/study/replay_vs_sim.h"
#include "tools/study/result_db.h"
#include "tools/study/scenario.h"
#include "tools/study/serve.h"
#include "tools/study/study.h"
#include "tools/study/target.h"
#include "tools/study/sweep.h"
#include "tools/study/whatif.h"

namespace tierflow::python {

using Fields = std::vector<std::pair<std::string, std::string>>;

struct TopologyHandle {
  std::shared_ptr<const hw::Topology> topology;
  std::string file;               ///< the YAML it was read from, absolute
  std::string sha256;             ///< of the bytes read (a saved plan names them)
  std::vector<std::string> sets;  ///< PATH=VALUE overrides applied
};

struct WorkloadHandle {
  std::shared_ptr<const Workload> workload;
  std::string description;  ///< "llama-3-8b decode, batch 1, ..." or the file read
  std::vector<std::string> warnings;  ///< e.g. a context past the model's declared maximum
  std::string file;                   ///< the JSON it was read from, absolute; empty when generated
};

/// tierflow.plan()'s arguments: the CLI's `plan` settings (study/target.h).
using PlanOptions = study::PlanSettings;

struct PlanHandle {
  planner::PlanOutcome outcome;      ///< its `plan` moved to `plan`
  std::shared_ptr<const Plan> plan;  ///< null when no plan was made
  TopologyHandle topology;
  WorkloadHandle workload;
};

struct SimRequest {
  bool wait_when_full = false;  ///< --on-full wait: a full tier stalls instead of failing
  std::string timeline;         ///< Chrome trace to write; empty: none
};

struct SimulationHandle {
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<const Workload> workload;
  std::shared_ptr<const hw::Topology> topology;
  std::string plan_name;     ///< the file read, or the plan's name
  study::PhaseResult phase;  ///< `sim` set; the derived metrics when it ran without error
};

struct WhatIfRequest {
  study::Question question = study::Question::kMinMemory;
  std::string max_overhead = "1%";
  double min_throughput = 0;
  double max_tpot_ms = 0;
  std::vector<study::Axis> vary;
  std::string plan_out;  ///< write the (first) answer's plan there, as --plan-out
};

struct Table {
  std::vector<std::string> columns;
  std::vector<std::string> types;  ///< per column: a kCellTypeNames word, or "" (see the cells)
  std::vector<std::vector<study::Cell>> rows;
};

struct SweepRequest {
  std::string path;  ///< a spec file, or else
  std::string text;  ///< the spec's text, named `name`, relative paths from `dir`
  std::string name = "<spec>";
  std::string dir = ".";
  std::string db = ":memory:";
  unsigned jobs = 0;
  std::string shard = "0/1";
  bool retry_failed = false;
};

struct SweepResult {
  Table table;
  study::SweepSummary summary;
  std::string name;
  std::string sweep_id;
  std::string db;
};

/// A scenario from fields (see the glossary); InputError at `source` for a bad one. With
/// a command, it starts from that command's decode (study::set_command_defaults), as the
/// CLI's does; a context not among the fields is cut to the model's maximum (as the CLI's
/// trace gen, compare and whatif cut theirs).
study::Scenario scenario_of(const Fields& fields, std::string_view source,
                            std::optional<study::Command> command = std::nullopt);

/// `name` a path or a shipped topology name; empty: the default topology.
TopologyHandle load_topology(const std::string& name, const std::vector<std::string>& sets);

/// The file of `t`, for a call that reads it again (with more overrides, or as a scenario's
/// `hw`); InputError when it changed (or went) since load_topology read it: the answer
/// would be about another machine than the Topology says.
std::string unchanged_topology_file(const TopologyHandle& t);

/// The workload of the scenario `fields` describe (model or hf_config or workload file,
/// generator fields, model.KEY overrides).
WorkloadHandle generate(const Fields& fields);
WorkloadHandle load_workload(const std::string& path);

/// Plans `w` on `t` with the simulator in the loop. "Does not fit" is a result.
PlanHandle make_plan(const TopologyHandle& t, const WorkloadHandle& w, const PlanOptions& o);
/// The plan's JSON as `tierflow plan -o PATH` would write it for the folder of `path`,
/// with the workload inline. InputError when no plan was made.
std::string plan_json(const PlanHandle& p, const std::string& path);
/// Writes plan_json to `path` (atomically); InputError when `path` is empty, or is the
/// plan's topology or workload file.
void save_plan(const PlanHandle& p, const std::string& path);

/// Simulates a plan that plan() made, on its own topology or `topology`.
SimulationHandle simulate(const PlanHandle& p, const TopologyHandle* topology, const SimRequest& r);
/// Simulates a plan file on `hw` (empty: the topology the plan names) with `sets` after the
/// plan's own overrides. A plan that breaks a rule is an InputError at its JSON position.
SimulationHandle simulate_file(const std::string& path, const std::string& hw,
                               const std::vector<std::string>& sets, const SimRequest& r);
/// The simulator's report (tierflow.report/1), or its table for people.
nlohmann::ordered_json report_json(const SimulationHandle& s, bool with_transfers);
std::string report_text(const SimulationHandle& s);

/// tierflow.replay()'s arguments: the CLI's `replay` settings, and a timeline to write.
struct ReplayRequest {
  study::ReplaySettings settings;  ///< `cli` false: errors name the Python arguments
  std::string timeline;            ///< the measured timeline (Chrome trace); empty: none
  /// A recorded replay (`tierflow replay --json`) scored again instead of a run, as
  /// --measured (study::rescore_replay); empty: run the backend.
  std::string measured;
};

/// A plan run for real and by the simulator (study::replay_plan).
struct ReplayHandle {
  std::optional<RunError> error;  ///< why it did not run to the end; none when it did
  bool ran = false;               ///< it ran (not refused before its first step)
  std::string json;   ///< the `tierflow replay --json` document, when it ran
  std::string table;  ///< what `tierflow replay` prints, when it ran
};

/// Replays a plan that plan() made, on its own topology or `topology`.
ReplayHandle replay(const PlanHandle& p, const TopologyHandle* topology, const ReplayRequest& r);
/// Replays a plan file on `hw` (empty: the topology the plan names) with `sets` after the
/// plan's own overrides, as `tierflow replay --plan` does.
ReplayHandle replay_file(const std::string& path, const std::string& hw,
                         const std::vector<std::string>& sets, const ReplayRequest& r);

/// What tierflow.serve() gives back: the `tierflow serve --json` summary, the `-o` CSV and
/// the trace's notes.
struct ServeOutput {
  std::string json;
  std::string csv;
  std::vector<std::string> notes;
};

/// `tierflow serve` from (argument, value text) pairs named as the CLI's flags with `_`
/// (trace, arrivals, hw, set (repeated), model, hf_config, model_set (repeated), tp,
/// replicas, device, router, token_budget, max_seqs, kv_tiers, load, slo, rate_scale, first,
/// block_tokens, warmup, weight_dtype, kv_dtype, act_dtype, cache_only, timeline, report:
/// the HTML page as --report writes it, of the answer's run with find).
ServeOutput serve(const Fields& fields);

/// One plan of tierflow.report() or tierflow.export(): a Plan (run on `topology`, or on its
/// own when null) or a plan file (`hw`: a topology instead of its own, "" for none; `sets`
/// after the plan's, as `--hw`/`--set`).
struct PlanSource {
  const PlanHandle* plan = nullptr;
  const TopologyHandle* topology = nullptr;
  std::string path;
  std::string hw;
  std::vector<std::string> sets;
};

/// `tierflow report`: the HTML page of the plans (each simulated with its time series),
/// written atomically to `output` when not empty; `errors`, one per run that stopped
/// ("NAME: message"), the page drawing it up to the stop (the CLI's exit 1 or 3).
struct ReportResult {
  std::string html;
  std::vector<std::string> errors;
};
ReportResult report(const std::vector<PlanSource>& plans, bool wait_when_full, size_t top,
                    const std::string& output);

/// `tierflow export`: one plan in `format` (exporter::formats()) to `output` (a file, or a
/// folder for chakra). Throws InputError; a simulation that stops writes nothing and is
/// returned ("NAME: message"), as the CLI's exit 1 or 3; so are the notes of what was written
/// (ExportOutcome::notes), which Python warns as the CLI prints them.
struct ExportResult {
  std::optional<std::string> error;
  std::vector<std::string> notes;
};
ExportResult export_plan(const PlanSource& plan, const std::string& format,
                         const std::string& output, bool wait_when_full, bool inline_workload,
                         const std::string& stem);

/// The `tierflow whatif --json` document (tierflow.whatif/1) for the scenario of `fields`,
/// and what the CLI prints on stderr besides it (a lenient import's warnings; the model's
/// warnings and a context cut are in the answers' notes, as the CLI writes them).
struct WhatIfResult {
  nlohmann::ordered_json doc;
  std::vector<std::string> warnings;
};
WhatIfResult whatif(const Fields& fields, const WhatIfRequest& r);

/// study::compare as rows: one study row per trial (per policy; with realistic MoE
/// routing, each policy's realistic row then its oracle row), as `tierflow compare --csv`.
struct CompareResult {
  Table table;
  double reference_s = 0;  ///< the resident plan on unlimited memory
  std::string best;        ///< the best trial's label ("" when none ran)
  std::vector<std::string> warnings;  ///< e.g. a context past the model's declared maximum
};
CompareResult compare(const Fields& fields, const std::vector<std::string>& policies);

/// Runs the spec's points (those not yet in `db`) and returns the results table.
SweepResult sweep(const SweepRequest& r);

}  // namespace tierflow::python
