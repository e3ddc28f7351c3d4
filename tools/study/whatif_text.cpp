#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/table.h"
#include "core/units.h"
#include "tools/study/target.h"
#include "tools/study/whatif_json.h"

namespace tierflow::study {
namespace {

std::string trial_line(const Trial& t) {
  const PhaseResult& p = t.main();
  const auto& b = p.outcome.bounds;
  std::string s =
      fmt::format("{}: latency {}", t.scenario.policy, to_string_approx(Duration{t.latency_ps()}));
  if (t.request) {
    s += fmt::format(" (TTFT {:.1f} ms, TPOT {:.2f} ms, {:.1f} tokens/s)",
                     1e-9 * static_cast<double>(t.request->ttft_ps), t.request->tpot_ms,
                     t.request->throughput_tokens_per_s);
  }
  s += fmt::format(
      ", makespan {:.3f} x bound, device peak {} ({:.3f} x residency bound)",
      b.makespan_ps > 0 ? static_cast<double>(p.makespan_ps) / static_cast<double>(b.makespan_ps)
                        : 0.0,
      to_string_approx(Bytes{p.device_peak}),
      b.residency > 0 ? static_cast<double>(p.device_peak) / static_cast<double>(b.residency)
                      : 0.0);
  return s;
}

std::string answer_text(const Answer& a, const WhatIfOptions& w) {
  std::string out;
  if (a.question == Question::kUpgrade) {
    if (!a.found) return fmt::format("answer     none: {}\n", a.binding);
    out += fmt::format("baseline   {}\nbinding    {}\n", trial_line(*a.trial), a.binding);
    Table t({"upgrade", "+25%", "2x", "2x as --vary writes it"},
            {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight, Table::Align::kLeft});
    for (const auto& u : a.upgrades) {
      t.add_row({u.what, fmt::format("{:+.1f}%", -100 * u.gain[0]),
                 fmt::format("{:+.1f}%", -100 * u.gain[1]), u.set});
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
  if (a.question == Question::kMinMemory) {
    out += fmt::format("fastest    {} (resident on unlimited memory); limit {} (+{:g}%)\n",
                       to_string_approx(Duration{a.fastest_ps}),
                       to_string_approx(Duration{a.limit_ps}), 100 * w.max_overhead);
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
std::string probes_text(const Answer& a, const WhatIfOptions& w) {
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

}  // namespace

std::string whatif_text(const WhatIfOptions& o, const Scenario& base, const hw::Topology& topo,
                        const std::vector<Axis>& axes,
                        const std::vector<std::vector<std::string>>& values,
                        const std::vector<Answer>& answers) {
  std::string text;
  text += fmt::format(
      "question   {}\nworkload   {}\ntopology   {} ({} program{} on '{}')\n", question_text(o),
      describe_workload(base, searched_field(o.question, base)), topo.name, base.devices,
      base.devices == 1 ? "" : "s",
      topo.tiers[make_target(topo, base.device, base.devices, base.name("device")).device_tier].id);
  if (!base.sets.empty()) text += fmt::format("overrides  {}\n", fmt::join(base.sets, " "));
  text += fmt::format("policy     {}\n", base.policy);
  const bool realized = std::ranges::any_of(answers, [](const Answer& a) {
    return a.trial && !a.trial->phases.empty() && a.trial->main().realized;
  });
  if (realized) {
    text +=
        "routing    realistic: planned on the expected routing, run on the seeded router "
        "(--seed), missed experts fetched on demand (--routing oracle: the bound)\n";
  }
  if (axes.empty()) {
    text += answer_text(answers.front(), o);
    text += probes_text(answers.front(), o);
  } else {
    std::vector<std::string> heads;
    std::vector<Table::Align> align;
    for (const auto& ax : axes) {
      heads.push_back(ax.path);
      align.push_back(Table::Align::kRight);
    }
    for (const char* h : {"answer", "latency", "device peak", "binding"}) {
      heads.emplace_back(h);
      align.push_back(std::string_view(h) == "binding" ? Table::Align::kLeft
                                                       : Table::Align::kRight);
    }
    Table t(heads, align);
    for (size_t i = 0; i < answers.size(); ++i) {
      const auto& a = answers[i];
      std::vector<std::string> cells = values[i];
      cells.push_back(a.found ? a.value : "none");
      cells.push_back(a.trial && a.trial->ok ? to_string_approx(Duration{a.trial->latency_ps()})
                                             : "-");
      cells.push_back(a.trial && a.trial->ok ? to_string_approx(Bytes{a.trial->main().device_peak})
                                             : "-");
      cells.push_back(a.binding);
      t.add_row(std::move(cells));
    }
    text += '\n';
    text += t.render();
    // Each answer's note (a default context cut, ...): once when every point says the same.
    std::vector<std::string> notes;
    for (size_t i = 0; i < answers.size(); ++i) {
      if (answers[i].note.empty()) continue;
      std::vector<std::string> point;
      for (size_t k = 0; k < axes.size(); ++k) point.push_back(axes[k].path + "=" + values[i][k]);
      notes.push_back(fmt::format("{}: {}", fmt::join(point, " "), answers[i].note));
    }
    const bool same = !notes.empty() && notes.size() == answers.size() &&
                      std::ranges::all_of(
                          answers, [&](const Answer& a) { return a.note == answers.front().note; });
    if (same) {
      text += fmt::format("\nnote       {} (every point)\n", answers.front().note);
    } else {
      for (const std::string& n : notes) text += fmt::format("note       {}\n", n);
    }
  }
  return text;
}

}  // namespace tierflow::study
