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
  print_notes(study::serve_notes(setup));
  if (o.summary.empty()) o.summary = o.output == "-" ? "/dev/stderr" : "-";  // rows keep stdout
  // The inputs are read: an output over one, or over another output, is refused before any run.
  check_outputs({{"--summary", o.summary},
                 {"-o", o.output},
                 {"--report", o.report},
                 {"--timeline", s.timeline}});
  setup.outputs = &o.files;
  if (ask) {
    std::function<void(const study::ServeProbe&)> progress = [](const study::ServeProbe& p) {
      fmt::print(stderr, "serve: probe {:.6g}: {}\n", p.knob, p.pass ? "pass" : "fail");
    };
    if (!tty) progress = nullptr;
    const study::ServeAnswer a = study::find_serve(s, std::move(setup), *ask, progress);
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
  cmd->add_option("--hw", s.hw, "topology YAML or shipped name (default h100-sxm-8gpu)");
  cmd->add_option("--set", s.sets, "override a topology field: PATH=VALUE (repeatable)");
  cmd->add_option("--model", s.model.model, model_flag_help());
  cmd->add_option("--hf-config", s.model.hf_config, "a Hugging Face config.json instead");
  cmd->add_option("--model-set", s.model.model_sets, "override a model field: KEY=VALUE");
  auto* trace = cmd->add_option("--trace", s.trace, "request trace: Mooncake JSONL or Azure CSV");
  cmd->add_option("--arrivals", s.arrivals,
                  "generate requests instead: poisson|gamma,rate=R/s,n=N,prompt=...,output=... "
                  "(docs/serving.md)")
      ->excludes(trace);
  cmd->add_option("--rate-scale", s.trace_options.rate_scale,
                  "replay arrivals this many times faster (0.5: half the rate)");
  cmd->add_option("--first", s.trace_options.first, "serve only the first N requests")
      ->transform(kCount);
  cmd->add_option("--block-tokens", s.trace_options.block_tokens,
                  "tokens per KV block (default 512); of a Mooncake trace, a divisor of 512 "
                  "splits its 512-token blocks into pages")
      ->transform(kCount);
  cmd->add_option("--warmup", s.warmup, "leave requests arriving before this out of the metrics");
  cmd->add_option("--device", s.engine.device, "device class (default: the first)");
  cmd->add_option("--tp", s.model.gen.tp, "devices per replica, tensor parallel (default 1)")
      ->transform(kCount);
  cmd->add_option("--replicas", s.engine.replicas, "data-parallel replicas (default 1)")
      ->transform(kCount);
  cmd->add_option("--router", s.router, "round-robin (default), least-loaded or prefix");
  cmd->add_option("--token-budget", s.engine.token_budget, "iteration token budget (default 8192)")
      ->transform(kCount);
  cmd->add_option("--max-seqs", s.engine.max_seqs, "running sequences per replica (default 256)")
      ->transform(kCount);
  cmd->add_option("--device-policy", s.device_policy,
                  "eviction of the device level's cached blocks: lru (default), lfu, s3fifo");
  cmd->add_option("--preemption", s.preemption, "when KV blocks run out: recompute (default)|swap");
  cmd->add_option("--swap-space", s.swap_space, "swap preemption: space per device (default 4GiB)");
  cmd->add_option("--swap-tier", s.swap_tier, "swap preemption: its tier (default: the first DDR)");
  cmd->add_option("--kv-tiers", s.kv_tiers,
                  "KV tiers below the device, nearest first: TIER[:SIZE|PCT%][:lru|lfu|s3fifo]"
                  "[:back|through][:all|second],...  e.g. ddr:512GiB,ssd:25%");
  cmd->add_option("--load", s.load,
                  "prefix hits below the device load before the prefill or layered with it "
                  "(default layered)");
  for (auto [flag, value] :
       {std::pair{"--weight-dtype", &s.weight_dtype}, std::pair{"--kv-dtype", &s.kv_dtype},
        std::pair{"--act-dtype", &s.act_dtype}}) {
    cmd->add_option(flag, *value,
                    fmt::format("element type: {} (default bf16)", fmt::join(kDtypeNames, ", ")));
  }
  cmd->add_option("--slo", s.slo, "goodput bounds: ttft=2s,tpot=100ms,e2e=30s (any of them)");
  cmd->add_flag("--cache-only", s.cache_only,
                "replay the trace against the cache alone: hits per level, no time");
  cmd->add_option("--timeline", s.timeline,
                  "write a Chrome trace (ui.perfetto.dev): iterations, sequences, level "
                  "occupancy, KV transfers");
  cmd->add_option("--find", o->find,
                  "max-rate, min-replicas, min-capacity:TIER meeting --target; or upgrade");
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
