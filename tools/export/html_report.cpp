#include "tools/export/html_report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "core/diagnostics.h"
#include "core/units.h"
#include "sim/report.h"
#include "tools/export/report_sections.h"
#include "tools/study/study.h"

namespace tierflow::exporter {
namespace {

}  // namespace

// The page's whole style: system fonts only, nothing fetched.
const std::string_view kReportCss = R"(
:root{--ink:#1d2733;--muted:#5b6775;--line:#d9dee5;--soft:#f4f6f9;--accent:#2f6f9f;--bad:#b3261e}
*{box-sizing:border-box}
body{margin:0;background:#fff;color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header.top{background:#1f2d3d;color:#fff;padding:18px 32px}
header.top h1{margin:0;font-size:22px;font-weight:600}
header.top p{margin:4px 0 0;color:#c9d3de}
header.top nav a{color:#fff;margin-right:14px}
main{padding:8px 32px 32px;max-width:1180px}
h2{font-size:20px;margin:28px 0 6px;border-bottom:2px solid var(--line);padding-bottom:4px}
h2 .file{font-size:13px;color:var(--muted);font-weight:400;margin-left:8px}
h3{font-size:16px;margin:22px 0 8px}
h4{font-size:14px;margin:14px 0 2px}
h4 span{font-weight:400;color:var(--muted);margin-left:6px}
h4 small{font-weight:400;color:var(--muted)}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:150px}
.card b{display:block;font-size:20px;font-weight:600}
.card span{color:var(--muted);font-size:12px}
table{border-collapse:collapse;margin:6px 0}
table.facts th{text-align:left;color:var(--muted);font-weight:500;padding:3px 16px 3px 0;vertical-align:top}
table.facts td{padding:3px 0}
table.grid,table.waits{width:100%;font-size:13px}
table.grid th,table.waits th{background:var(--soft);text-align:left;font-weight:600;border-bottom:1px solid var(--line);padding:5px 8px}
table.grid td,table.waits td{border-bottom:1px solid var(--line);padding:4px 8px;vertical-align:top}
.num{text-align:right;font-variant-numeric:tabular-nums}
td.cause-transfer{color:#d62728;font-weight:600}
td.cause-memory{color:#c77700;font-weight:600}
.error{background:#fdecea;border:1px solid #f1b0ab;border-left:6px solid var(--bad);border-radius:4px;padding:10px 14px;margin:12px 0;color:#5f1410}
.error strong{color:var(--bad)}
.note{color:var(--muted);font-size:13px}
.legend{display:flex;flex-wrap:wrap;gap:14px;margin:4px 0 2px 70px;font-size:12px;color:var(--muted)}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;vertical-align:-2px}
.legend .tri{color:#b3261e;margin-right:5px;font-size:11px}
svg{display:block;max-width:100%;height:auto;font-size:11px}
svg .grid line{stroke:#e6e9ee;stroke-width:1}
svg .tick text{fill:#5b6775}
svg .tick .mark{stroke:#8a95a3}
svg .axis{fill:none;stroke:#8a95a3;stroke-width:1}
svg .title{fill:#3b4652;font-size:12px}
svg .limit{stroke:#1d2733;stroke-width:1.2;stroke-dasharray:6 4}
svg .limit-label{fill:#1d2733;font-size:11px}
svg .mark-wait{fill:#b3261e}
svg .bar-title{font-size:13px;font-weight:600;fill:#1d2733}
.bars-grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:8px 24px}
.plot-box{margin-bottom:6px}
footer{color:var(--muted);font-size:12px;padding:16px 32px;border-top:1px solid var(--line)}
)";

namespace {

// A meta value as text: strings without their quotes, anything else as written.
std::optional<std::string> meta_text(const Meta& meta, const std::string& key) {
  const auto it = meta.find(key);
  if (it == meta.end()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (j.is_string()) return j.get<std::string>();
  return it->second;
}

std::optional<double> meta_number(const Meta& meta, const std::string& key) {
  const auto it = meta.find(key);
  if (it == meta.end()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_number()) return std::nullopt;
  return j.get<double>();
}

// Figures of one run, for its summary and the comparison.
struct Figures {
  uint64_t device_peak = 0;
  uint64_t moved = 0;
  Time stall_transfer = 0, stall_memory = 0;
  Time compute = 0;
};

Figures figures(const ReportRun& r) {
  Figures f;
  for (const sim::TierResult& t : r.result.tiers) {
    if (t.tier == r.device_tier) f.device_peak = std::max(f.device_peak, t.peak);
  }
  for (const sim::DeviceResult& d : r.result.devices) {
    f.moved += d.bytes_in + d.bytes_out;
    f.stall_transfer += d.stall_transfer_ps;
    f.stall_memory += d.stall_memory_ps;
    f.compute += d.compute_ps;
  }
  return f;
}

std::string card(std::string_view value, std::string_view label) {
  return fmt::format(R"(<div class="card"><b>{}</b><span>{}</span></div>)", escape_html(value),
                     escape_html(label));
}

std::string error_box(const ReportRun& r) {
  if (!r.result.error) return "";
  const sim::SimError& e = *r.result.error;
  std::string where;
  if (e.program >= 0) where += fmt::format("program {}", e.program);
  if (e.step >= 0) where += fmt::format(" step {}", e.step);
  const std::string when =
      e.time >= 0 ? fmt::format(" at {}", time_text(e.time)) : " before it began";
  return fmt::format(
      R"(<div class="error" role="alert"><strong>The simulation stopped{}: {}</strong>{}{}{}. )"
      R"(The plots show the run up to that point.</div>)",
      escape_html(when), escape_html(std::string(sim::error_kind_name(e.kind))),
      where.empty() ? "" : "<br>", escape_html(where), escape_html(": " + e.message));
}

std::string summary(const ReportRun& r, const Figures& f) {
  const Plan& p = r.plan.plan;
  const Workload& w = r.plan.workload;
  std::string out = R"(<div class="cards">)";
  out += card(r.result.error ? "stopped" : time_text(r.result.makespan), "makespan");
  out += card(bytes_text(f.device_peak), fmt::format("device peak ({})", p.tiers[p.device_tier]));
  out += card(time_text(f.stall_transfer), "waiting for transfers (all devices)");
  out += card(time_text(f.stall_memory), "waiting for memory (all devices)");
  out += card(bytes_text(f.moved), "moved by prefetches and stores");
  out += "</div>\n<table class=\"facts\">\n";
  const auto row = [&](std::string_view k, const std::string& v) {
    out += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", k, v);
  };
  std::string wl =
      fmt::format("{} ({} ops, {} tensors)", escape_html(w.name), w.ops.size(), w.tensors.size());
  std::string params;
  for (const auto& [k, v] : w.meta) {
    params +=
        fmt::format("{}{}={}", params.empty() ? "" : ", ", k, meta_text(w.meta, k).value_or(v));
  }
  if (!params.empty()) wl += "<br><span class=\"note\">" + escape_html(params) + "</span>";
  row("workload", wl);
  std::string topo = escape_html(r.topology.name);
  if (!r.topology.file.empty())
    topo += " <span class=\"note\">" + escape_html(r.topology.file) + "</span>";
  if (!r.sets.empty()) {
    std::string sets;
    for (const std::string& s : r.sets) sets += (sets.empty() ? "--set " : " --set ") + s;
    topo += "<br>overrides: <code>" + escape_html(sets) + "</code>";
  }
  row("topology", topo);
  std::string policy = escape_html(meta_text(p.meta, "policy").value_or("not recorded"));
  if (!p.pipeline.empty()) policy += " <code>" + escape_html(p.pipeline) + "</code>";
  if (r.budget > 0) policy += fmt::format("; budget {} per device", bytes_text(r.budget));
  row("policy", policy);
  row("devices",
      fmt::format("{} program{} computing from {}", p.programs.size(),
                  p.programs.size() == 1 ? "" : "s", escape_html(p.tiers[p.device_tier])));
  std::string bounds;
  if (auto b = meta_number(p.meta, "bounds_makespan_ps")) {
    bounds += fmt::format("makespan &ge; {}", time_text(static_cast<Time>(*b)));
    if (*b > 0 && !r.result.error) {
      bounds += fmt::format(" (gap {:.3f}&times;)", static_cast<double>(r.result.makespan) / *b);
    }
  }
  if (auto b = meta_number(p.meta, "bounds_compute_ps")) {
    bounds +=
        fmt::format("{}compute {}", bounds.empty() ? "" : ", ", time_text(static_cast<Time>(*b)));
  }
  if (auto b = meta_number(p.meta, "bounds_residency")) {
    bounds += fmt::format("{}residency &ge; {}", bounds.empty() ? "" : ", ",
                          bytes_text(static_cast<uint64_t>(*b)));
    if (*b > 0) {
      bounds += fmt::format(" (peak {:.3f}&times;)", static_cast<double>(f.device_peak) / *b);
    }
  }
  if (auto b = meta_number(p.meta, "bounds_traffic_bytes")) {
    bounds += fmt::format("{}traffic &ge; {}", bounds.empty() ? "" : ", ",
                          bytes_text(static_cast<uint64_t>(*b)));
  }
  row("bounds", bounds.empty() ? "<span class=\"note\">not recorded in the plan</span>" : bounds);
  const double span = static_cast<double>(std::max<Time>(r.result.makespan, 1)) *
                      static_cast<double>(std::max<size_t>(r.result.devices.size(), 1));
  row("stalls",
      fmt::format("{} waiting for transfers ({:.1f}% of device time), {} waiting for "
                  "memory ({:.1f}%); compute busy {:.1f}%",
                  time_text(f.stall_transfer), 100 * static_cast<double>(f.stall_transfer) / span,
                  time_text(f.stall_memory), 100 * static_cast<double>(f.stall_memory) / span,
                  100 * static_cast<double>(f.compute) / span));
  // Several programs: each device's own waits against the makespan, not their sum.
  if (r.result.devices.size() > 1) {
    const double makespan = static_cast<double>(std::max<Time>(r.result.makespan, 1));
    std::string per;
    for (const sim::DeviceResult& d : r.result.devices) {
      per += fmt::format(
          "<tr><td>{}</td><td>{} ({:.1f}%)</td><td>{} ({:.1f}%)</td><td>{:.1f}%</td></tr>", d.device,
          time_text(d.stall_transfer_ps), 100 * static_cast<double>(d.stall_transfer_ps) / makespan,
          time_text(d.stall_memory_ps), 100 * static_cast<double>(d.stall_memory_ps) / makespan,
          100 * static_cast<double>(d.compute_ps) / makespan);
    }
    row("per device",
        "<table class=\"per-device\"><tr><th>device</th><th>waiting for transfers</th>"
        "<th>waiting for memory</th><th>compute busy</th></tr>" +
            per + "</table>");
  }
  out += "</table>\n";
  return out;
}

std::string run_section(const ReportRun& r, size_t index, const ReportOptions& o) {
  RunView v = make_view(r, o, fmt::format("run{}", index + 1));
  v.device_tier = r.device_tier;
  v.budget = r.budget;
  const std::vector<Wait> waits = exposed_waits(r);
  std::string out =
      fmt::format("<section class=\"run\" id=\"{}\">\n<h2>{}<span class=\"file\">{}</span></h2>\n",
                  v.id, escape_html(r.plan.plan.name), escape_html(r.file));
  out += error_box(r);
  out += summary(r, figures(r));
  out += activity_section(r, v, waits, o);
  out += memory_section(r, v, o);
  out += links_section(r, v, o);
  out += waits_section(r, v, waits, o);
  return out + "</section>\n";
}

std::string comparison(const std::vector<ReportRun>& runs) {
  std::vector<Figures> fig;
  fig.reserve(runs.size());
  for (const ReportRun& r : runs) fig.push_back(figures(r));
  std::optional<Time> best;
  for (const ReportRun& r : runs) {
    if (!r.result.error && (!best || r.result.makespan < *best)) best = r.result.makespan;
  }
  std::string out =
      "<section class=\"compare\" id=\"compare\"><h2>Policy comparison</h2>\n"
      "<table class=\"grid\"><thead><tr><th>plan</th><th>policy</th><th class=\"num\">makespan</th>"
      "<th class=\"num\">vs best</th><th class=\"num\">device peak</th><th class=\"num\">moved</th>"
      "<th class=\"num\">waiting for transfers</th><th class=\"num\">waiting for memory</th></tr>"
      "</thead><tbody>\n";
  std::vector<std::string> labels, make_t, peak_t, moved_t, stall_t;
  std::vector<double> make_v, peak_v, moved_v, stall_v;
  for (size_t i = 0; i < runs.size(); ++i) {
    const ReportRun& r = runs[i];
    const Figures& f = fig[i];
    const std::string policy = meta_text(r.plan.plan.meta, "policy").value_or("-");
    const bool ok = !r.result.error;
    const std::string make =
        ok ? time_text(r.result.makespan)
           : fmt::format("stopped ({})", sim::error_kind_name(r.result.error->kind));
    const std::string vs =
        ok && best && *best > 0
            ? fmt::format("{:.3f}&times;",
                          static_cast<double>(r.result.makespan) / static_cast<double>(*best))
            : "-";
    out += fmt::format(
        "<tr><td><a href=\"#run{}\">{}</a></td><td>{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        i + 1, escape_html(r.plan.plan.name), escape_html(policy), escape_html(make), vs,
        bytes_text(f.device_peak), bytes_text(f.moved), time_text(f.stall_transfer),
        time_text(f.stall_memory));
    labels.push_back(policy == "-" ? r.plan.plan.name : policy);
    make_v.push_back(ok ? static_cast<double>(r.result.makespan) : 0);
    make_t.push_back(make);
    peak_v.push_back(static_cast<double>(f.device_peak));
    peak_t.push_back(bytes_text(f.device_peak));
    moved_v.push_back(static_cast<double>(f.moved));
    moved_t.push_back(bytes_text(f.moved));
    stall_v.push_back(static_cast<double>(f.stall_transfer + f.stall_memory));
    stall_t.push_back(time_text(f.stall_transfer + f.stall_memory));
  }
  // Bars are named by policy, or by plan where two plans share one.
  std::vector<std::string> sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    for (size_t i = 0; i < runs.size(); ++i) labels[i] = runs[i].plan.plan.name;
  }
  out += "</tbody></table>\n<div class=\"bars-grid\">";
  const std::vector<std::string> colors = {"#4c6a92"};
  out += bar_chart("makespan", labels, make_v, make_t, colors);
  out += bar_chart("device peak", labels, peak_v, peak_t, colors);
  out += bar_chart("bytes moved", labels, moved_v, moved_t, colors);
  out += bar_chart("stall (transfers + memory, all devices)", labels, stall_v, stall_t, colors);
  return out + "</div></section>\n";
}

}  // namespace

ReportRun run_for_report(const std::string& path, const std::string& hw,
                         const std::vector<std::string>& sets, sim::OnFull on_full) {
  ReportRun r;
  r.file = path;
  r.plan = read_plan(path, /*verify=*/false);
  r.topology = study::plan_topology(r.plan.plan, path, hw, sets);
  r.sets = r.plan.plan.topology_ref.sets;
  r.sets.insert(r.sets.end(), sets.begin(), sets.end());
  simulate_for_report(r, on_full);
  return r;
}

void simulate_for_report(ReportRun& r, sim::OnFull on_full) {
  sim::SimOptions so;
  so.on_full = on_full;
  so.series = &r.series;
  const hw::Binding b = hw::bind(r.plan.plan, r.plan.workload, r.topology);
  if (!b.bound) {
    r.result = sim::unbound_result(r.plan.plan, r.plan.workload, *b.error);
    return;
  }
  r.device_tier = b.bound->device_tier;
  r.budget = r.plan.plan.budget > 0 ? b.bound->budget : 0;
  r.result = sim::simulate(*b.bound, so);
}

int report_exit_code(const std::vector<ReportRun>& runs) {
  int code = static_cast<int>(ExitCode::kOk);
  for (const ReportRun& r : runs) {
    if (!r.result.error) continue;
    const ExitCode c = r.result.error->kind == sim::SimError::Kind::kCapacity
                           ? ExitCode::kInfeasible
                           : ExitCode::kBadInput;
    code = std::max(code, static_cast<int>(c));
  }
  return code;
}

std::string html_report(const std::vector<ReportRun>& runs, const ReportOptions& o) {
  TF_ASSERT(!runs.empty(), "a report needs a run");
  const std::string title =
      runs.size() == 1 ? runs.front().plan.plan.name : fmt::format("{} plans", runs.size());
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>tierflow report: {}</title>\n<style>{}</style>\n</head>\n<body>\n",
      escape_html(title), kReportCss);
  out += fmt::format("<header class=\"top\"><h1>tierflow report: {}</h1>\n<p>", escape_html(title));
  out += runs.size() == 1 ? "One plan, simulated."
                          : fmt::format("{} plans, each simulated.", runs.size());
  out += " Every time series is drawn at its peak per pixel column.</p>\n<nav>";
  if (runs.size() > 1) out += "<a href=\"#compare\">comparison</a>";
  for (size_t i = 0; i < runs.size(); ++i) {
    out += fmt::format("<a href=\"#run{}\">{}</a>", i + 1, escape_html(runs[i].plan.plan.name));
  }
  out += "</nav></header>\n<main>\n";
  if (runs.size() > 1) out += comparison(runs);
  for (size_t i = 0; i < runs.size(); ++i) out += run_section(runs[i], i, o);
  out +=
      "</main>\n<footer>Written by <code>tierflow report</code> from the discrete-event "
      "simulator's results: the same plans give the same page.</footer>\n</body>\n</html>\n";
  return out;
}

}  // namespace tierflow::exporter
