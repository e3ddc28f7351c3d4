// The Python API's calls over the study layer (api.h): scenarios from fields, plans,
// simulations, what-if answers, compare and sweep tables.
#include "tools/python/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <type_traits>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/plan_json.h"
#include "core/sha256.h"
#include "core/workload_json.h"
#include "hw_models/loader.h"
#include "planner/pass.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "tools/export/export.h"
#include "tools/export/html_report.h"
#include "tools/export/serve_report.h"
#include "tools/study/compare.h"
#include "tools/study/plan_report.h"
#include "tools/study/row.h"
#include "tools/study/serve_find.h"
#include "tools/study/sim_evaluator.h"
#include "tools/study/sweep.h"
#include "tools/study/target.h"
#include "tools/study/whatif_json.h"
#include "traces/hf_import.h"

namespace tierflow::python {
namespace {

std::vector<std::string> row_column_types() {
  std::vector<std::string> out;
  for (const study::Column& c : study::columns()) {
    out.emplace_back(study::kCellTypeNames[static_cast<size_t>(c.type)]);
  }
  return out;
}

std::vector<std::string> row_column_names() {
  std::vector<std::string> out;
  for (const study::Column& c : study::columns()) out.push_back(c.name);
  return out;
}

SimulationHandle run_simulation(std::shared_ptr<const Plan> plan, std::shared_ptr<const Workload> w,
                                std::shared_ptr<const hw::Topology> topo, std::string name,
                                const SimRequest& r) {
  // The timeline file is opened first: a path that cannot be written fails before the run.
  std::unique_ptr<sim::Timeline> tl;
  if (!r.timeline.empty()) tl = std::make_unique<sim::Timeline>(r.timeline);
  sim::SimOptions so;
  so.on_full = r.wait_when_full ? sim::OnFull::kWait : sim::OnFull::kFail;
  so.timeline = tl.get();
  SimulationHandle s{std::move(plan), std::move(w), std::move(topo), std::move(name), {}};
  s.phase.phase = "step";
  s.phase.workload = s.workload;
  s.phase.sim = sim::simulate(*s.plan, *s.workload, *s.topology, so);
  if (tl) tl->finish();
  if (!s.phase.sim->error) {
    // summarize() reads the plan from the outcome; it is held in `plan` after that.
    s.phase.outcome.ok = true;
    s.phase.outcome.plan = *s.plan;
    study::summarize(s.phase, *s.topology);
    s.phase.outcome.plan.reset();
  }
  return s;
}

/// `hw` as --hw takes it: a shipped name or a file; "" stays "" (the plan's own).
std::string topology_file(const std::string& hw) {
  return hw.empty() ? hw : study::find_topology(hw, "topology");
}

/// The settings were checked (`checked`) before any file was read, as the CLI does.
ReplayHandle run_replay(const LoadedPlan& lp, const hw::Topology& topo, const ReplayRequest& r,
                        const study::CheckedReplay& checked) {
  if (!r.measured.empty()) guard_file(r.measured, "the recorded replay it scores");
  if (!r.timeline.empty()) check_output_path(r.timeline);
  const study::ReplayOutcome out = r.measured.empty()
                                       ? study::replay_plan(lp, topo, r.settings, checked)
                                       : study::rescore_replay(lp, topo, r.measured);
  ReplayHandle h;
  if (out.refused) {
    h.error = out.refused;
    return h;
  }
  const study::ReplayVsSim& x = *out.runs;
  h.error = x.replay.error;
  h.ran = study::replay_ran(x.replay);
  if (h.ran) {
    h.json = study::replay_json(lp, topo, x);
    h.table = study::replay_table(lp, topo, x);
    if (!r.timeline.empty()) {
      OutputSet files;
      study::write_replay_timeline(*files.open(r.timeline), lp, x.replay);
      files.publish();
    }
  }
  return h;
}

}  // namespace

study::Scenario scenario_of(const Fields& fields, std::string_view source,
                            std::optional<study::Command> command) {
  study::Scenario s;
  s.naming = study::Naming::kFields;  // errors name the keywords, not the CLI's flags
  s.workload.sets_flag = "model_set";
  s.workload.model_flag = "model";
  s.workload.lenient_flag = "lenient=True";
  if (command) study::set_command_defaults(s.workload.gen, *command);
  bool context_given = false;
  for (const auto& [path, value] : fields) {
    if (path == "hw") {
      s.hw = study::find_topology(value, "hw");
    } else if (path == "set") {
      if (value.find('=') == std::string::npos) {
        throw InputError::at(SourcePos{"set"}, "'{}' is not PATH=VALUE", value);
      }
      s.sets.push_back(value);
    } else if (path == "threads") {
      unsigned n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size()) {
        throw InputError::at(SourcePos{"threads"}, "'{}' is not a count of threads", value);
      }
      s.threads = n;
    } else {
      context_given = context_given || path == "context";
      try {
        study::set_field(s, path, value, source);
      } catch (const InputError& e) {
        // An error of the argument is at the argument (e.file its name, as docs/python.md
        // says), not at the function: "weight_dtype: 'bf61' is not ...".
        if (e.pos().file != source || e.pos().line > 0) throw;
        std::string message = e.message();
        if (const std::string prefix = path + ": "; message.starts_with(prefix)) {
          message.erase(0, prefix.size());
        }
        throw InputError::at(SourcePos{path}, "{}", message);
      }
    }
  }
  // A context not given is a default: cut to the model's maximum, as the CLI cuts it.
  if (!context_given) study::cut_default_context(s);
  return s;
}

TopologyHandle load_topology(const std::string& name, const std::vector<std::string>& sets) {
  TopologyHandle t;
  const std::string found =
      name.empty() ? study::default_topology() : study::find_topology(name, "path");
  // Absolute: the same file after os.chdir. Read once: what is loaded is what is hashed.
  t.file = std::filesystem::absolute(found).lexically_normal().string();
  t.sets = sets;
  const std::string text = read_text_file(found);
  t.sha256 = sha256_hex(text);
  t.topology = std::make_shared<const hw::Topology>(
      hw::load_topology_text(text, found, hw::LoadOptions{sets, false, "set"}));
  return t;
}

std::string unchanged_topology_file(const TopologyHandle& t) {
  std::string text;
  try {
    text = read_text_file(t.file);
  } catch (const InputError& e) {
    throw InputError(e.pos(), e.message() + " (it was there when load_topology read it)");
  }
  if (sha256_hex(text) != t.sha256) {
    throw InputError::at(SourcePos{t.file},
                         "changed since load_topology read it: load it again (the Topology holds "
                         "the machine as it was read then)");
  }
  return t.file;
}

namespace {

/// The importer's warnings of a lenient Hugging Face import: the CLI prints them, Python
/// warns them.
void add_import_warnings(const study::Scenario& s, std::vector<std::string>& out) {
  const study::WorkloadSource& w = s.workload;
  if (w.hf_config.empty() || !w.hf_lenient) return;
  std::vector<std::string> warnings;
  (void)traces::import_hf_config(w.hf_config, {true, &warnings, w.lenient_flag});
  for (std::string& x : warnings) out.push_back(std::move(x));
}

}  // namespace

WorkloadHandle generate(const Fields& fields) {
  const study::Scenario s = scenario_of(fields, "tierflow.generate");
  study::Study study;
  WorkloadHandle h{study.workload(s, s.workload.gen), study::describe_workload(s), {}};
  add_import_warnings(s, h.warnings);
  if (std::string n = study::context_note(s); !n.empty()) h.warnings.push_back(std::move(n));
  for (std::string& w : study::model_warnings(s)) h.warnings.push_back(std::move(w));
  return h;
}

WorkloadHandle load_workload(const std::string& path) {
  return {std::make_shared<const Workload>(read_workload(path)),
          path,
          {},
          std::filesystem::absolute(path).lexically_normal().string()};
}

PlanHandle make_plan(const TopologyHandle& t, const WorkloadHandle& w, const PlanOptions& o) {
  const hw::Topology& topo = *t.topology;
  planner::PlanRequest req = study::plan_request(topo, o, /*cli=*/false);
  const std::vector<OpKind> on_host = study::host_ops(topo, o.on_host, "on_host");
  study::SimEvaluator eval(*w.workload, topo);
  req.evaluator = &eval;
  planner::PlanOutcome out = study::plan_for(*w.workload, topo, req, on_host);
  (void)study::plan_on_host(out, *w.workload, topo, req, on_host);  // moves them, as plan does
  PlanHandle p{std::move(out), nullptr, t, w};
  if (p.outcome.plan) {
    // The plan as `tierflow plan -o` writes it (its budget, pipeline and bounds), so that
    // simulate() and replay() of it run what they run of the saved file.
    study::record_outcome(*p.outcome.plan, p.outcome);
    p.plan = std::make_shared<const Plan>(std::move(*p.outcome.plan));
    p.outcome.plan.reset();
  }
  return p;
}

std::string plan_json(const PlanHandle& p, const std::string& path) {
  if (!p.plan) {
    throw InputError::at(SourcePos{path}, "no plan to write: {}", p.outcome.reason);
  }
  // Named as `tierflow plan -o` names them: the topology relative to the plan's folder; the
  // workload inline.
  Plan plan = *p.plan;
  // The hash of what was loaded: a file edited since then no longer matches, and the CLI
  // refuses the saved plan instead of running it on another machine.
  study::refer_inputs(plan, path, p.topology.file, p.topology.sha256, p.topology.sets);
  study::record_outcome(plan, p.outcome);
  return write_plan(plan, p.workload.workload.get());
}

void save_plan(const PlanHandle& p, const std::string& path) {
  if (path.empty()) throw InputError::at(SourcePos{"path"}, "an empty path: give a file name");
  const OutputGuardScope scope;
  guard_file(p.topology.file, "the plan's topology");
  if (!p.workload.file.empty()) guard_file(p.workload.file, "the plan's workload");
  check_output_path(path);
  write_file_atomic(path, plan_json(p, path));
}

SimulationHandle simulate(const PlanHandle& p, const TopologyHandle* topology,
                          const SimRequest& r) {
  const OutputGuardScope scope;  // the timeline may not replace the plan's topology
  guard_file(p.topology.file, "the plan's topology");
  if (topology != nullptr) guard_file(topology->file, "the topology it runs on");
  if (!p.plan) throw InputError::at(SourcePos{"plan"}, "no plan was made: {}", p.outcome.reason);
  return run_simulation(p.plan, p.workload.workload,
                        topology != nullptr ? topology->topology : p.topology.topology,
                        p.plan->name, r);
}

SimulationHandle simulate_file(const std::string& path, const std::string& hw,
                               const std::vector<std::string>& sets, const SimRequest& r) {
  const OutputGuardScope scope;  // the timeline may not replace the plan or its topology
  LoadedPlan lp = read_plan(path);
  auto topo = std::make_shared<const hw::Topology>(
      study::plan_topology(lp.plan, path, topology_file(hw), sets));
  return run_simulation(std::make_shared<const Plan>(std::move(lp.plan)),
                        std::make_shared<const Workload>(std::move(lp.workload)), std::move(topo),
                        path, r);
}

ReplayHandle replay(const PlanHandle& p, const TopologyHandle* topology, const ReplayRequest& r) {
  const OutputGuardScope scope;
  guard_file(p.topology.file, "the plan's topology");
  if (topology != nullptr) guard_file(topology->file, "the topology it runs on");
  const study::CheckedReplay checked = study::check_replay_settings(r.settings);
  if (!p.plan) throw InputError::at(SourcePos{"plan"}, "no plan was made: {}", p.outcome.reason);
  const LoadedPlan lp{*p.plan, *p.workload.workload};
  const hw::Topology& topo = topology != nullptr ? *topology->topology : *p.topology.topology;
  return run_replay(lp, topo, r, checked);
}

ReplayHandle replay_file(const std::string& path, const std::string& hw,
                         const std::vector<std::string>& sets, const ReplayRequest& r) {
  const OutputGuardScope scope;  // the timeline may not replace the plan or its topology
  const study::CheckedReplay checked = study::check_replay_settings(r.settings);
  const LoadedPlan lp = read_plan(path, /*verify=*/false);
  const hw::Topology topo = study::plan_topology(lp.plan, path, topology_file(hw), sets);
  return run_replay(lp, topo, r, checked);
}

ServeOutput serve(const Fields& fields) {
  const OutputGuardScope scope;  // the timeline may not replace the trace or the topology
  study::ServeSettings s;
  s.names = study::SettingNames::kFields;
  // Numbers come as text: read as the CLI reads its flags; what they may be is the study
  // layer's to check, for both.
  std::string find, target, report;
  for (const auto& [key, value] : fields) {
    if (key == "timeline") {
      s.timeline = value;
    } else if (key == "find") {
      find = value;
    } else if (key == "target") {
      target = value;
    } else if (key == "report") {
      report = value;
    } else {
      study::set_serve_field(s, key, value, key);
    }
  }
  const auto ask = study::parse_serve_ask(find, target, study::SettingNames::kFields);
  s.engine.record_series = !report.empty();
  study::ServeSetup setup = study::prepare_serve(s);
  // The inputs are read: an output over one, or over the other output, is refused before
  // any run (as the CLI's check_outputs).
  check_outputs({{"report", report}, {"timeline", s.timeline}});
  OutputSet files;  // the report and the run's timeline appear together
  setup.outputs = &files;
  std::vector<std::string> notes = study::serve_notes(setup);
  if (ask) {
    const study::ServeAnswer a = study::find_serve(s, std::move(setup), *ask);
    // The page is the answer's run; with no answer there is none (the answer says so).
    if (!report.empty() && a.at_answer)
      files.add(report, exporter::serve_report_html(*a.at_answer));
    files.publish();
    return ServeOutput{study::serve_answer_json(a),
                       a.at_answer && !a.at_answer->result.cache_only
                           ? study::requests_csv(*a.at_answer)
                           : std::string(),
                       std::move(notes)};
  }
  const study::ServeStudy x = study::run_serve(setup);
  if (!report.empty()) files.add(report, exporter::serve_report_html(x));
  files.publish();
  return ServeOutput{study::serve_json(x),
                     x.result.cache_only ? std::string() : study::requests_csv(x),
                     std::move(notes)};
}

namespace {

/// A Plan's plan and the topology it runs on (guarded: no output may replace them).
struct HeldPlan {
  const Plan& plan;
  const Workload& workload;
  const TopologyHandle& topology;
};
HeldPlan hold(const PlanSource& src) {
  const PlanHandle& p = *src.plan;
  if (!p.plan) throw InputError::at(SourcePos{"plan"}, "no plan was made: {}", p.outcome.reason);
  guard_file(p.topology.file, "the plan's topology");
  if (!p.workload.file.empty()) guard_file(p.workload.file, "the plan's workload");
  const TopologyHandle& t = src.topology != nullptr ? *src.topology : p.topology;
  if (src.topology != nullptr) guard_file(t.file, "the topology it runs on");
  return {*p.plan, *p.workload.workload, t};
}

std::string run_error(const std::string& name, const sim::SimError& e) {
  return fmt::format("{}: {}", name, e.message);
}

}  // namespace

ReportResult report(const std::vector<PlanSource>& plans, bool wait_when_full, size_t top,
                    const std::string& output) {
  const OutputGuardScope scope;  // the page may not replace a plan or a topology
  const sim::OnFull on_full = wait_when_full ? sim::OnFull::kWait : sim::OnFull::kFail;
  std::vector<exporter::ReportRun> runs;
  for (const PlanSource& src : plans) {
    if (src.plan == nullptr) {
      runs.push_back(exporter::run_for_report(src.path, topology_file(src.hw), src.sets, on_full));
      continue;
    }
    const HeldPlan h = hold(src);
    exporter::ReportRun r;
    r.file = h.plan.name;
    r.plan = LoadedPlan{h.plan, h.workload};
    r.topology = *h.topology.topology;
    r.sets = h.topology.sets;
    exporter::simulate_for_report(r, on_full);
    runs.push_back(std::move(r));
  }
  if (!output.empty()) check_outputs({{"output", output}});  // every plan read
  exporter::ReportOptions ro;
  ro.top_waits = top;
  ReportResult out{exporter::html_report(runs, ro), {}};
  if (!output.empty()) write_file_atomic(output, out.html);
  for (const exporter::ReportRun& r : runs) {
    if (r.result.error) out.errors.push_back(run_error(r.file, *r.result.error));
  }
  return out;
}

ExportResult export_plan(const PlanSource& src, const std::string& format_name,
                         const std::string& output, bool wait_when_full, bool inline_workload,
                         const std::string& stem) {
  const OutputGuardScope scope;  // the output may not replace the plan or its topology
  const exporter::Format& format = exporter::find_format(format_name, "format");
  exporter::ExportOptions eo;
  eo.on_full = wait_when_full ? sim::OnFull::kWait : sim::OnFull::kFail;
  eo.inline_workload = inline_workload;
  eo.stem = stem;
  eo.stem_flag = "stem";
  // A file format's output over an input is refused before the simulation (once every
  // input is read, so guarded); a folder is the format's to check.
  const auto check_output = [&] {
    if (format.output == exporter::OutputKind::kFile && !std::filesystem::is_directory(output)) {
      check_output_path(output);
    }
  };
  exporter::ExportOutcome outcome;
  std::string name;
  if (src.plan == nullptr) {
    // A simulated format leaves the rules to the simulator; plan-json verifies as it reads.
    const LoadedPlan lp = read_plan(src.path, /*verify=*/format.sim == exporter::SimNeed::kNone);
    eo.hw = topology_file(src.hw);
    eo.sets = src.sets;
    const hw::Topology topo = study::plan_topology(lp.plan, src.path, eo.hw, src.sets);
    check_output();
    name = src.path;
    outcome = exporter::run_export(format, lp.plan, lp.workload, topo, src.path, output, eo);
  } else {
    if (format.sim == exporter::SimNeed::kNone) {
      throw InputError::at(SourcePos{"format"},
                           "'{}' of a Plan is what Plan.save(path) writes: save it, or export "
                           "a plan file",
                           format.name);
    }
    const HeldPlan h = hold(src);
    check_output();
    // A Plan has no file: its name stands for one (chakra's default stem).
    name = h.plan.name;
    if (eo.stem.empty()) eo.stem = name;
    outcome =
        exporter::run_export(format, h.plan, h.workload, *h.topology.topology, name, output, eo);
  }
  if (outcome.error) return {run_error(name, *outcome.error), {}};
  return {std::nullopt, std::move(outcome.notes)};
}

nlohmann::ordered_json report_json(const SimulationHandle& s, bool with_transfers) {
  const sim::ReportContext ctx{*s.plan, *s.workload, *s.topology, s.plan_name};
  return nlohmann::ordered_json::parse(sim::report_json(*s.phase.sim, ctx, with_transfers));
}

std::string report_text(const SimulationHandle& s) {
  const sim::ReportContext ctx{*s.plan, *s.workload, *s.topology, s.plan_name};
  return sim::report_table(*s.phase.sim, ctx);
}

WhatIfResult whatif(const Fields& fields, const WhatIfRequest& r) {
  const OutputGuardScope scope;  // the plan may not replace what the scenario reads
  const study::Scenario base = scenario_of(fields, "tierflow.whatif", study::Command::kWhatIf);
  study::WhatIfOptions w;
  w.question = r.question;
  w.max_overhead = study::parse_overhead(r.max_overhead, "max_overhead");  // as --max-overhead
  w.min_throughput = r.min_throughput;
  w.max_tpot_ms = r.max_tpot_ms;
  study::check_whatif_grid(base, w, r.vary, "vary");
  study::check_axes(base, r.vary, "vary");
  const auto grid = study::expand_grid(base, r.vary);
  study::Study study;
  const auto topo = study.topology(base);
  if (!r.plan_out.empty()) check_output_path(r.plan_out);
  std::vector<study::Answer> answers;
  std::vector<std::vector<std::string>> values;
  for (const auto& [s, v] : grid) {
    answers.push_back(study::whatif(study, s, w));
    values.push_back(v);
  }
  if (!r.plan_out.empty()) {
    write_file_atomic(r.plan_out, study::answer_plan_json(answers.front(), r.plan_out, "plan_out"));
  }
  WhatIfResult out{study::whatif_json(w, base, *topo, r.vary, values, answers), {}};
  add_import_warnings(base, out.warnings);
  return out;
}

CompareResult compare(const Fields& fields, const std::vector<std::string>& policies) {
  const study::Scenario base = scenario_of(fields, "tierflow.compare", study::Command::kCompare);
  study::Study study;
  const study::Comparison c = study::compare(study, base, policies, "policies");
  CompareResult r;
  r.table = Table{row_column_names(), row_column_types(), {}};
  for (const study::Trial& t : c.trials) r.table.rows.push_back(study::row_of(t).cells);
  r.reference_s = static_cast<double>(c.reference_ps) * 1e-12;
  if (c.best) r.best = c.trials[*c.best].scenario.policy;
  add_import_warnings(base, r.warnings);
  for (std::string& w : study::model_warnings(base)) r.warnings.push_back(std::move(w));
  if (std::string n = study::context_note(base); !n.empty()) r.warnings.push_back(std::move(n));
  return r;
}

SweepResult sweep(const SweepRequest& r) {
  const OutputGuardScope scope;  // the database may not be the spec
  const study::SweepSpec spec = r.path.empty() ? study::parse_sweep_spec(r.text, r.name, r.dir)
                                               : study::load_sweep_spec(r.path);
  const study::Shard shard = study::parse_shard(r.shard, "shard");
  study::ResultDb db = study::ResultDb::for_sweep(r.db, spec, shard);
  study::SweepOptions so;
  so.jobs = r.jobs;
  so.shard = shard;
  so.retry_failed = r.retry_failed;
  SweepResult out;
  out.summary = study::run_sweep(spec, db, so);
  study::ResultDb::Table table = db.table();
  // The columns' types as the database declares them (a serving sweep has its own row).
  for (const study::CellType type : table.types) {
    out.table.types.emplace_back(study::kCellTypeNames[static_cast<size_t>(type)]);
  }
  out.table.columns = std::move(table.columns);
  out.table.rows = std::move(table.rows);
  out.name = spec.name;
  out.sweep_id = db.meta("sweep_id");
  out.db = r.db;
  return out;
}

}  // namespace tierflow::python
