#include "tools/cli/whatif_cmd.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/io.h"
#include "core/json_tree.h"
#include "core/plan_json.h"
#include "core/table.h"
#include "core/units.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/target.h"
#include "tools/study/whatif.h"
#include "tools/study/whatif_json.h"

namespace tierflow::cli {
namespace {

struct WhatIfCliOptions {
  ScenarioFlags f;
  std::string question = "min-memory";
  std::string max_overhead = "1%";
  double min_throughput = 0, max_tpot = 0;
  std::vector<std::string> vary;
  std::string output, plan_out;
  bool json = false, quiet = false;
};

std::string trial_line(const study::Trial& t) {
  const study::PhaseResult& p = t.main();
  const auto& b = p.outcome.bounds;
  std::string s = fmt::format("{}: latency {}", t.scenario.policy, to_string_approx(Duration{t.latency_ps()}));
  if (t.request) {
    s += fmt::format(" (TTFT {:.1f} ms, TPOT {:.2f} ms, {:.1f} tokens/s)", 1e-9 * static_cast<double>(t.request->ttft_ps),
                     t.request->tpot_ms, t.request->throughput_tokens_per_s);
  }
  s += fmt::format(", makespan {:.3f} x bound, device peak {} ({:.3f} x residency bound)",
                   b.makespan_ps > 0 ? static_cast<double>(p.makespan_ps) / static_cast<double>(b.makespan_ps) : 0.0,
                   to_string_approx(Bytes{p.device_peak}),
                   b.residency > 0 ? static_cast<double>(p.device_peak) / static_cast<double>(b.residency) : 0.0);
  return s;
}

std::string answer_text(const study::Answer& a, const study::WhatIfOptions& w) {
  std::string out;
  if (a.question == study::Question::kUpgrade) {
    if (!a.found) return fmt::format("answer     none: {}\n", a.binding);
    out += fmt::format("baseline   {}\nbinding    {}\n", trial_line(*a.trial), a.binding);
    Table t({"upgrade", "+25%", "2x", "set (2x)"},
            {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight, Table::Align::kLeft});
    for (const auto& u : a.upgrades) {
      t.add_row({u.what, fmt::format("{:+.1f}%", -100 * u.gain[0]), fmt::format("{:+.1f}%", -100 * u.gain[1]), u.set});
    }
    out += "\nlatency change per upgrade, best first:\n" + t.render();
    out += fmt::format("\nanswer     {}\n", a.note);
    return out;
  }
  if (!a.found) {
    out += fmt::format("answer     none: {}\n", a.binding);
    if (!a.note.empty()) out += fmt::format("note       {}\n", a.note);
    return out;
  }
  if (a.question == study::Question::kMinMemory) {
    out += fmt::format("fastest    {} (resident on unlimited memory); limit {} (+{:g}%)\n",
                       to_string_approx(Duration{a.fastest_ps}), to_string_approx(Duration{a.limit_ps}),
                       100 * w.max_overhead);
  }
  out += fmt::format("answer     {} (resolution {})\n", a.value, a.resolution);
  if (!a.note.empty()) out += fmt::format("note       {}\n", a.note);
  out += fmt::format("plan       {}\n", trial_line(*a.trial));
  if (a.trial->request) out += fmt::format("decode     {}\n", a.trial->request->decode_note);
  out += fmt::format("binding    {}\n", a.binding);
  return out;
}

/// The probes, with the measure the question's target is about (TPOT, tokens/s) beside the
/// latency of the whole step.
std::string probes_text(const study::Answer& a, const study::WhatIfOptions& w) {
  if (a.probes.empty()) return "";
  std::vector<std::string> heads = {"probe", "value", "result", "latency"};
  if (w.max_tpot_ms > 0) heads.emplace_back("TPOT");
  if (w.min_throughput > 0) heads.emplace_back("tokens/s");
  heads.insert(heads.end(), {"device peak", "why not"});
  std::vector<Table::Align> align(heads.size(), Table::Align::kRight);
  align[2] = align.back() = Table::Align::kLeft;
  Table t(heads, align);
  for (size_t i = 0; i < a.probes.size(); ++i) {
    const auto& p = a.probes[i];
    std::vector<std::string> row = {
        std::to_string(i + 1), p.value, p.pass ? "pass" : "fail",
        p.latency_ps > 0 ? to_string_approx(Duration{p.latency_ps}) : "-"};
    if (w.max_tpot_ms > 0) row.push_back(p.tpot_ms > 0 ? fmt::format("{:.3f} ms", p.tpot_ms) : "-");
    if (w.min_throughput > 0)
      row.push_back(p.throughput > 0 ? fmt::format("{:.1f}", p.throughput) : "-");
    row.push_back(p.device_peak > 0 ? to_string_approx(Bytes{p.device_peak}) : "-");
    row.push_back(p.why);
    t.add_row(row);
  }
  return "\nprobes:\n" + t.render();
}

int run_whatif(const WhatIfCliOptions& o) {
  const study::Scenario base = to_scenario(o.f);
  study::WhatIfOptions w;
  w.question = static_cast<study::Question>(*index_of(study::kQuestionNames, o.question));
  w.max_overhead = study::parse_overhead(o.max_overhead, "--max-overhead");
  w.min_throughput = o.min_throughput;
  w.max_tpot_ms = o.max_tpot;
  const bool tty = !o.quiet && isatty(fileno(stderr)) != 0;
  if (tty) w.progress = [](const std::string& line) { fmt::print(stderr, "\r\033[K{}", line); };
  std::vector<study::Axis> axes;
  for (const std::string& v : o.vary) axes.push_back(study::parse_axis(v, "--vary"));
  const auto grid = study::expand_grid(base, axes);

  study::Study study;
  const auto topo = study.topology(base);
  std::vector<study::Answer> answers;
  for (const auto& [s, values] : grid) {
    answers.push_back(study::whatif(study, s, w));
  }
  if (tty) fmt::print(stderr, "\r\033[K");

  std::string text;
  if (o.json) {
    std::vector<std::vector<std::string>> values;
    for (const auto& point : grid) values.push_back(point.second);
    text = json_text(study::whatif_json(w, base, *topo, axes, values, answers));
  } else {
    text += fmt::format(
        "question   {}\nworkload   {}\ntopology   {} ({} program{} on '{}')\n",
        study::question_text(w),
        study::describe_workload(base, study::searched_field(w.question, base)), topo->name,
        base.devices, base.devices == 1 ? "" : "s",
        topo->tiers[study::make_target(*topo, base.device, base.devices, "--device").device_tier]
            .id);
    if (!base.sets.empty()) text += fmt::format("overrides  {}\n", fmt::join(base.sets, " "));
    text += fmt::format("policy     {}\n", base.policy);
    const bool realized = std::ranges::any_of(answers, [](const study::Answer& a) {
      return a.trial && !a.trial->phases.empty() && a.trial->main().realized;
    });
    if (realized) {
      text +=
          "routing    realistic: planned on the expected routing, run on the seeded router "
          "(--seed), missed experts fetched on demand (--routing oracle: the bound)\n";
    }
    if (axes.empty()) {
      text += answer_text(answers.front(), w);
      text += probes_text(answers.front(), w);
    } else {
      std::vector<std::string> heads;
      std::vector<Table::Align> align;
      for (const auto& ax : axes) {
        heads.push_back(ax.path);
        align.push_back(Table::Align::kRight);
      }
      for (const char* h : {"answer", "latency", "device peak", "binding"}) {
        heads.emplace_back(h);
        align.push_back(std::string_view(h) == "binding" ? Table::Align::kLeft : Table::Align::kRight);
      }
      Table t(heads, align);
      for (size_t i = 0; i < answers.size(); ++i) {
        const auto& a = answers[i];
        std::vector<std::string> cells = grid[i].second;
        cells.push_back(a.found ? a.value : "none");
        cells.push_back(a.trial && a.trial->ok ? to_string_approx(Duration{a.trial->latency_ps()}) : "-");
        cells.push_back(a.trial && a.trial->ok ? to_string_approx(Bytes{a.trial->main().device_peak}) : "-");
        cells.push_back(a.binding);
        t.add_row(std::move(cells));
      }
      text += "\n" + t.render();
    }
  }
  write_file_atomic(o.output.empty() ? "-" : o.output, text);
  if (!o.plan_out.empty()) {
    const study::Answer& a = answers.front();
    if (!a.trial || !a.trial->main().outcome.ok) {
      throw InputError::at(SourcePos{"--plan-out"}, "no plan to write: the question has no answer");
    }
    write_file_atomic(o.plan_out, write_plan(study::plan_for_file(*a.trial, a.trial->main(), o.plan_out),
                                             a.trial->main().workload.get()));
  }
  bool any = false;
  for (const auto& a : answers) any = any || a.found;
  return static_cast<int>(any ? ExitCode::kOk : ExitCode::kInfeasible);
}

}  // namespace

void add_whatif_command(CLI::App& app) {
  auto o = std::make_shared<WhatIfCliOptions>();
  // The default question: Llama-3-70B decode, batch 16, 32k context, on one H100.
  o->f.gen.gen.batch = 16;
  o->f.gen.gen.context = 32768;
  o->f.gen.gen.tokens = 8;
  CLI::App* cmd = app.add_subcommand(
      "whatif", "capacity questions answered by search: min-memory, max-batch, max-context, upgrade");
  cmd->add_option("--question", o->question, "min-memory, max-batch, max-context or upgrade")
      ->check(CLI::IsMember(std::vector<std::string>(study::kQuestionNames.begin(), study::kQuestionNames.end())))
      ->capture_default_str();
  auto* overhead =
      cmd->add_option("--max-overhead", o->max_overhead,
                      "min-memory: latency within this of the fastest possible, e.g. 1%")
          ->capture_default_str();
  auto* throughput =
      cmd->add_option("--min-throughput", o->min_throughput,
                      "max-batch/max-context: tokens/s at least (a request: generation throughput)")
          ->check(kPositiveFinite);
  auto* tpot =
      cmd->add_option("--max-tpot", o->max_tpot,
                      "max-batch/max-context: TPOT at most, e.g. 50ms (a bare number is ms)")
          ->transform(kMilliseconds)
          ->check(kPositiveFinite);
  cmd->add_option("--vary", o->vary,
                  "PATH=V1,V2,...: answer for each value of a topology or generator field "
                  "(repeatable: a grid)");
  cmd->add_option("--policy", o->f.policy, "planning policy (default tierflow)");
  add_target_flags(cmd, o->f);
  add_workload_flags(cmd, o->f);
  cmd->add_option("--plan-out", o->plan_out, "write the plan that achieves the answer here");
  cmd->add_flag("--json", o->json, "print JSON (tierflow.whatif/1)");
  cmd->add_flag("--quiet", o->quiet, "no progress on the terminal");
  cmd->add_option("-o,--output", o->output, "write the answer here instead of stdout");
  cmd->callback([o, overhead, throughput, tpot] {
    // A limit the question does not use is refused, not ignored.
    if (overhead->count() > 0 && o->question != "min-memory") {
      throw CLI::ValidationError("--max-overhead",
                                 "applies to --question min-memory only (not " + o->question + ")");
    }
    const bool search = o->question == "max-batch" || o->question == "max-context";
    for (const CLI::Option* opt : {throughput, tpot}) {
      if (opt->count() > 0 && !search) {
        throw CLI::ValidationError(opt->get_name(),
                                   "applies to --question max-batch and "
                                   "max-context only (not " +
                                       o->question + ")");
      }
    }
    throw CommandResult(run_whatif(*o));
  });
}

}  // namespace tierflow::cli
