#include "tools/cli/serve_cmd.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <unistd.h>

#include "core/io.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/export/serve_report.h"
#include "tools/study/serve.h"
#include "tools/study/serve_find.h"

namespace tierflow::cli {
namespace {

struct ServeCliOptions {
  study::ServeSettings s;
  std::string output, find, target, report;
  std::string summary;  ///< empty: standard output, or standard error where -o - takes it
  bool json = false, quiet = false;
  OutputSet files;  ///< what the command writes, the run's timeline included
};

/// The summary, `run`'s rows and report: with the timeline, all or none (OutputSet).
void write_outputs(ServeCliOptions& o, const std::string& summary, const study::ServeStudy* run) {
  o.files.add(o.summary, summary);
  if (run && !o.output.empty()) o.files.add(o.output, study::requests_file(*run, o.output));
  if (run && !o.report.empty()) o.files.add(o.report, exporter::serve_report_html(*run));
  o.files.publish();
}

int run_serve(ServeCliOptions& o) {
  study::ServeSettings& s = o.s;
  if (s.cache_only && !o.output.empty())
    throw InputError::at(SourcePos{"-o"}, "--cache-only times no request: it has no rows to write");
  const auto ask = study::parse_serve_ask(o.find, o.target, study::SettingNames::kServeFlags);
  const bool tty = !o.quiet && isatty(fileno(stderr)) != 0;
  if (tty && !ask) {
    s.engine.progress = [](uint64_t n, uint64_t all) {
      fmt::print(stderr, "\rserve: {}/{} requests finished{}", n, all, n == all ? "\n" : "");
    };
  }
  s.engine.record_series = !o.report.empty();
  study::ServeSetup setup = study::prepare_serve(s);
  if (o.summary.empty()) o.summary = o.output == "-" ? "/dev/stderr" : "-";  // rows keep stdout
  // The inputs are read: an output over one, or over another output, is refused before any run.
  check_outputs({{"--summary", o.summary},
                 {"-o", o.output},
                 {"--report", o.report},
                 {"--timeline", s.timeline}});
  // A run's setup errors come alone, not after notes about a run that will not happen (a
  // search's knobs vary the setup: its notes come with its first probe).
  NotesOnce notes(study::serve_notes(setup));
  if (!ask) {
    study::check_serve(setup);
    notes();
  }
  setup.outputs = &o.files;
  if (ask) {
    std::function<void(const study::ServeProbe&)> progress = [&](const study::ServeProbe& p) {
      notes();
      if (tty) fmt::print(stderr, "serve: probe {:.6g}: {}\n", p.knob, p.pass ? "pass" : "fail");
    };
    const study::ServeAnswer a = study::find_serve(s, std::move(setup), *ask, progress);
    notes();
    // The rows, the report and the timeline are the answer's run; with no answer, none.
    write_outputs(o, o.json ? study::serve_answer_json(a) : study::serve_answer_text(a),
                  a.at_answer ? &*a.at_answer : nullptr);
    if (!a.found && (!o.report.empty() || !s.timeline.empty()))
      fmt::print(stderr, "note: no answer, so no run at it: --report and --timeline not written\n");
    return static_cast<int>(a.found ? ExitCode::kOk : ExitCode::kInfeasible);
  }
  const study::ServeStudy x = study::run_serve(setup);
  write_outputs(o, o.json ? study::serve_json(x) : study::serve_text(x), &x);
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "serve the requests of a trace with replicas of a model and a tiered KV cache");
  study::ServeSettings& s = o->s;
  add_serve_setting_flags(cmd, s);
  cmd->add_option("--find", o->find,
                  "max-rate, min-replicas, min-devices, min-capacity:TIER, split meeting "
                  "--target; or upgrade");
  cmd->add_option("--target", o->target,
                  "what --find must meet: p99-ttft=2s, p90-tpot=50ms, goodput=95% (of --slo), "
                  "hit=30%");
  cmd->add_option("--report", o->report,
                  "write an HTML page: latency CDFs, hits per level, levels, sequences over time");
  cmd->add_flag("--json", o->json, "print the summary as JSON (tierflow.serve/1)");
  cmd->add_option("-o,--output", o->output, "one row per request: CSV, or JSON Lines (.jsonl)");
  cmd->add_option("--summary", o->summary,
                  "write the summary to FILE instead of stdout (stderr with -o -)");
  cmd->add_flag("--quiet", o->quiet, "no progress on the terminal");
  cmd->callback([o] { throw CommandResult(run_serve(*o)); });
}

}  // namespace tierflow::cli
