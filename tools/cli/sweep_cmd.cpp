#include "tools/cli/sweep_cmd.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <unistd.h>

#include "core/io.h"
#include "tools/cli/common.h"
#include "tools/study/result_db.h"
#include "tools/study/sweep.h"

namespace tierflow::cli {
namespace {

struct SweepCliOptions {
  std::string spec, output, csv, jsonl;
  unsigned jobs = 0;
  std::string shard = "0/1";
  bool retry_failed = false, dry_run = false, quiet = false;
};

struct MergeCliOptions {
  std::string output;
  std::vector<std::string> inputs;
};

struct ExportCliOptions {
  std::string db;
  std::string csv;
  std::string jsonl;
};

int run_sweep_cmd(const SweepCliOptions& o) {
  // No spec, or a mistyped subcommand taken for one (`sweep merg`).
  const std::vector<std::string> subcommands = {"merge", "export"};
  if (std::error_code ec; o.spec.empty() || (!std::filesystem::exists(o.spec, ec) &&
                                             !nearest(o.spec, subcommands).empty())) {
    throw InputError::at(SourcePos{o.spec.empty() ? "sweep" : o.spec},
                         "give a spec (tierflow sweep SPEC.yaml -o RESULTS.db), or a subcommand: "
                         "merge, export{}",
                         o.spec.empty() ? "" : did_you_mean(o.spec, subcommands));
  }
  const study::Shard shard = study::parse_shard(o.shard);
  const study::SweepSpec spec = study::load_sweep_spec(o.spec);
  const auto points = study::sweep_points(spec);
  if (o.dry_run) {
    fmt::print("{}", study::sweep_dry_run_text(spec, points, shard));
    return 0;
  }
  if (o.output.empty())
    throw InputError::at(SourcePos{"-o"}, "give the results database: -o RESULTS.db");
  // Refused before the database is made: an output over an input or another output.
  check_outputs({{"-o", o.output}, {"--csv", o.csv}, {"--jsonl", o.jsonl}});
  study::ResultDb db = study::ResultDb::for_sweep(o.output, spec, shard);
  study::SweepOptions so;
  so.jobs = o.jobs;
  so.shard = shard;
  so.retry_failed = o.retry_failed;
  const bool tty = !o.quiet && isatty(fileno(stderr)) != 0;
  if (tty) {
    so.progress = [](const study::SweepProgress& p) {
      fmt::print(stderr, "\r\033[K{}", study::sweep_progress_line(p));
    };
  }
  const unsigned jobs = o.jobs != 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  const study::SweepSummary s = study::run_sweep(spec, db, so);
  if (tty) fmt::print(stderr, "\r\033[K");

  // Rows on standard output (--csv - or --jsonl -) keep it theirs: the summary goes aside.
  std::FILE* summary = o.csv == "-" || o.jsonl == "-" ? stderr : stdout;
  fmt::print(summary, "{}",
             study::sweep_summary_text(spec, db, s, shard, points.size(), jobs, o.output));
  std::fflush(summary);
  study::export_results(db, o.csv, o.jsonl);
  if (s.failed == 0) return static_cast<int>(ExitCode::kOk);
  int worst = 0;
  for (const auto& [point, exit_class] : db.recorded()) {
    if (shard.holds(point)) worst = std::max(worst, exit_class);
  }
  std::fflush(stdout);
  fmt::print(stderr,
             "error: {} point{} failed (status 'failed', reason in the results: tierflow sweep "
             "export {}); "
             "after a fix, rerun with --retry-failed\n",
             s.failed, s.failed == 1 ? "" : "s", o.output);
  return worst;
}

int run_merge(const MergeCliOptions& o) {
  const study::MergeSummary m = study::merge_results(o.output, o.inputs);
  fmt::print("{}", study::merge_summary_text(m, o.output));
  std::fflush(stdout);
  fmt::print(stderr, "{}", study::merge_missing_text(m));
  return static_cast<int>(ExitCode::kOk);
}

int run_export(const ExportCliOptions& o) {
  const study::ResultDb db = study::ResultDb::open(o.db);
  check_outputs({{"--csv", o.csv}, {"--jsonl", o.jsonl}});
  study::export_results(db, o.csv.empty() && o.jsonl.empty() ? "-" : o.csv, o.jsonl);
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "a spec's grid planned and simulated on all cores into SQLite: resumable, shardable");
  cmd->add_option("spec", o->spec, "sweep spec YAML (docs/sweeps.md; examples in configs/sweeps/)");
  cmd->add_option("-o,--output", o->output, "results database (SQLite); rerunning resumes it");
  cmd->add_option("--jobs,-j", o->jobs, "points run at once (default: one per hardware thread)")
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--shard", o->shard,
                  "I/N: run the points whose number is I modulo N (0 <= I < N)")
      ->capture_default_str();
  cmd->add_flag("--retry-failed", o->retry_failed, "rerun points recorded as failed");
  cmd->add_flag("--dry-run", o->dry_run, "check the spec, print its points per shard, run nothing");
  cmd->add_flag("--quiet", o->quiet, "no progress on the terminal");
  cmd->add_option("--csv", o->csv, "also write every row as CSV here when done ('-': stdout)");
  cmd->add_option("--jsonl", o->jsonl, "also write every row as JSON Lines here when done");
  cmd->require_subcommand(0, 1);
  cmd->callback([o, cmd] {
    if (cmd->get_subcommands().empty()) throw CommandResult(run_sweep_cmd(*o));
  });

  auto m = std::make_shared<MergeCliOptions>();
  CLI::App* merge = cmd->add_subcommand("merge", "join shard databases of one sweep into one");
  merge->add_option("-o,--output", m->output, "merged database")->required();
  merge->add_option("shards", m->inputs, "shard databases")->required();
  merge->callback([m] { throw CommandResult(run_merge(*m)); });

  auto e = std::make_shared<ExportCliOptions>();
  CLI::App* exp = cmd->add_subcommand("export", "print a results database's rows (CSV by default)");
  exp->add_option("db", e->db, "results database")->required();
  exp->add_option("--csv", e->csv, "write CSV here ('-': stdout)");
  exp->add_option("--jsonl", e->jsonl, "write JSON Lines here ('-': stdout)");
  exp->callback([e] { throw CommandResult(run_export(*e)); });
}

}  // namespace tierflow::cli
