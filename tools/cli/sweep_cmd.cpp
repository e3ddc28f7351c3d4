#include "tools/cli/sweep_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include "core/io.h"
#include "tools/cli/common.h"
#include "tools/study/result_db.h"
#include "tools/study/sweep.h"

namespace tierflow::cli {
namespace {

struct SweepCliOptions {
  std::string spec;
  std::string output;
  unsigned jobs = 0;
  std::string shard = "0/1";
  bool retry_failed = false;
  bool dry_run = false;
  bool quiet = false;
  std::string csv;
  std::string jsonl;
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

std::string clock_text(double s) {
  const auto t = static_cast<int64_t>(std::lround(s));
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

/// "[#########.........]  35/72  ok 30  infeasible 5  failed 0  5.2 points/s  ETA 0:07"
std::string progress_line(const study::SweepProgress& p) {
  constexpr int kWidth = 24;
  const double frac = p.total > 0 ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1;
  const int full = static_cast<int>(frac * kWidth);
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.ran) / p.elapsed_s : 0;
  const int64_t left = p.total - p.done;
  return fmt::format("[{}{}] {}/{}  ok {}  infeasible {}  failed {}  {:.1f} points/s  ETA {}",
                     std::string(static_cast<size_t>(full), '#'),
                     std::string(static_cast<size_t>(kWidth - full), '.'), p.done, p.total, p.ok,
                     p.infeasible, p.failed, rate,
                     rate > 0 ? clock_text(static_cast<double>(left) / rate) : "?");
}

void write_exports(const study::ResultDb& db, const std::string& csv, const std::string& jsonl) {
  if (csv.empty() && jsonl.empty()) return;
  const study::ResultDb::Table t = db.table();
  if (!csv.empty()) write_file_atomic(csv, study::table_csv(t));
  if (!jsonl.empty()) write_file_atomic(jsonl, study::table_jsonl(t));
}

int run_sweep_cmd(const SweepCliOptions& o) {
  if (o.spec.empty()) {
    throw InputError::at(SourcePos{"sweep"}, "give a spec (tierflow sweep SPEC.yaml -o RESULTS.db), "
                                             "or a subcommand: merge, export");
  }
  const study::Shard shard = study::parse_shard(o.shard);
  const study::SweepSpec spec = study::load_sweep_spec(o.spec);
  const auto points = study::sweep_points(spec);
  int64_t in_shard = 0;
  for (const auto& p : points) in_shard += shard.holds(p.index) ? 1 : 0;
  if (o.dry_run) {
    fmt::print("sweep '{}' (id {}): {} points, shard {} holds {}\n", spec.name,
               study::sweep_id(spec).substr(0, 12), points.size(), shard.text(), in_shard);
    for (const study::AxisGroup& g : spec.groups) {
      for (const study::Axis& a : g.axes) {
        fmt::print("  {}{}: {}\n", a.path, g.axes.size() > 1 ? " (zipped)" : "", fmt::join(a.values, ", "));
      }
    }
    return 0;
  }
  if (o.output.empty()) throw InputError::at(SourcePos{"-o"}, "give the results database: -o RESULTS.db");

  study::ResultDb db = study::ResultDb::for_sweep(o.output, spec, shard);
  // Refused now, not after the sweep: an export over the database or the spec.
  if (!o.csv.empty()) check_output_path(o.csv);
  if (!o.jsonl.empty()) check_output_path(o.jsonl);
  study::SweepOptions so;
  so.jobs = o.jobs;
  so.shard = shard;
  so.retry_failed = o.retry_failed;
  const bool tty = !o.quiet && isatty(fileno(stderr)) != 0;
  if (tty) {
    so.progress = [](const study::SweepProgress& p) { fmt::print(stderr, "\r\033[K{}", progress_line(p)); };
  }
  const unsigned jobs = o.jobs != 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  const study::SweepSummary s = study::run_sweep(spec, db, so);
  if (tty) fmt::print(stderr, "\r\033[K");

  fmt::print("sweep '{}' (id {}): {} points{}\n", spec.name, db.meta("sweep_id").substr(0, 12),
             s.points, shard.count > 1 ? fmt::format(" in shard {} of {}", shard.text(), points.size()) : "");
  fmt::print("  ran {} ({} already recorded) in {:.1f} s", s.ran, s.skipped, s.seconds);
  if (s.ran > 0 && s.seconds > 0) {
    fmt::print(", {:.0f} points/min on {} job{}", 60.0 * static_cast<double>(s.ran) / s.seconds, jobs,
               jobs == 1 ? "" : "s");
  }
  fmt::print("\n  {} ok, {} infeasible, {} failed\n  results: {}\n", s.ok, s.infeasible, s.failed, o.output);
  write_exports(db, o.csv, o.jsonl);
  if (s.failed == 0) return static_cast<int>(ExitCode::kOk);
  int worst = 0;
  for (const auto& [point, exit_class] : db.recorded()) {
    if (shard.holds(point)) worst = std::max(worst, exit_class);
  }
  std::fflush(stdout);
  fmt::print(stderr,
             "error: {} point{} failed (status 'failed', reason in the results: tierflow sweep export {}); "
             "after a fix, rerun with --retry-failed\n",
             s.failed, s.failed == 1 ? "" : "s", o.output);
  return worst;
}

int run_merge(const MergeCliOptions& o) {
  const study::MergeSummary m = study::merge_results(o.output, o.inputs);
  fmt::print("merged {} database{} (shards {}): {} of {} points -> {}\n", o.inputs.size(),
             o.inputs.size() == 1 ? "" : "s", fmt::join(m.shards, " "), m.rows, m.points, o.output);
  if (m.rows < m.points) {
    std::fflush(stdout);
    fmt::print(stderr, "warning: {} points are missing: rerun the shards (each resumes), then merge again\n",
               m.points - m.rows);
  }
  return static_cast<int>(ExitCode::kOk);
}

int run_export(const ExportCliOptions& o) {
  const study::ResultDb db = study::ResultDb::open(o.db);
  if (o.csv.empty() && o.jsonl.empty()) {
    write_exports(db, "-", "");
  } else {
    write_exports(db, o.csv, o.jsonl);
  }
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "a spec's grid planned and simulated on all cores into SQLite: resumable, shardable");
  cmd->add_option("spec", o->spec, "sweep spec YAML (docs/sweeps.md; examples in configs/sweeps/)");
  cmd->add_option("-o,--output", o->output, "results database (SQLite); rerunning resumes it");
  cmd->add_option("--jobs,-j", o->jobs, "points run at once (default: one per hardware thread)");
  cmd->add_option("--shard", o->shard, "I/N: run the points whose number is I modulo N (0 <= I < N)")
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
