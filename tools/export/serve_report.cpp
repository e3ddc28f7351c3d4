#include "tools/export/serve_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/units.h"
#include "tools/export/html_report.h"
#include "tools/export/plot_series.h"
#include "tools/export/report_sections.h"
#include "tools/export/svg_plot.h"

namespace tierflow::exporter {
namespace {

constexpr double kWidth = 960;
constexpr std::string_view kColors[] = {"#2f6f9f", "#d62728", "#2ca02c", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};

std::string card(const std::string& value, std::string_view label) {
  return fmt::format(R"(<div class="card"><b>{}</b><span>{}</span></div>)", escape_html(value),
                     escape_html(label));
}

std::string seconds_text(double s) {
  if (std::isnan(s)) return "-";
  return to_string_approx(Duration{static_cast<int64_t>(std::llround(s * 1e12))});
}

/// The empirical CDF of `values` (seconds, any order) as a step line; "" when empty.
std::string cdf_plot(std::vector<double> values, std::string_view title) {
  if (values.empty()) return "";
  std::sort(values.begin(), values.end());
  Frame f;
  f.width = kWidth / 2 - 12;
  f.height = 240;
  f.x_hi = std::max(values.back() * 1e12, 1.0);
  f.y_hi = 1;
  const Unit x = time_unit(f.x_hi);
  Svg svg(f, "plot", title);
  svg.axes(x, fmt::format("{} ({})", title, x.name), Unit{1, ""}, "fraction of requests");
  // At most one point per pixel column: the highest fraction reached in it.
  std::string d;
  double last_px = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    const double px = f.x(values[i] * 1e12);
    const double py = f.y(static_cast<double>(i + 1) / static_cast<double>(values.size()));
    if (i + 1 < values.size() && std::floor(px) == std::floor(last_px) &&
        std::floor(f.x(values[i + 1] * 1e12)) == std::floor(px)) {
      continue;
    }
    d += d.empty() ? fmt::format("M{:.1f} {:.1f}", f.x0(), f.y0()) : "";
    d += fmt::format("H{:.1f}V{:.1f}", px, py);
    last_px = px;
  }
  svg.line(d, std::string(kColors[0]), 1.6, title);
  return "<div class=\"plot-box\">" + svg.finish() + "</div>";
}

/// Step lines of `series` (same quantity) over [0, end) with an optional capacity line.
std::string series_plot(const std::vector<const serve::Series*>& series, Time end,
                        std::string_view title, std::string_view y_title, double limit,
                        std::string_view limit_label) {
  if (series.empty() || end <= 0) return "";
  const Buckets b = make_buckets(0, end, static_cast<size_t>(kWidth));
  std::vector<std::vector<double>> peaks;
  double top = limit;
  for (const serve::Series* s : series) {
    std::vector<sim::RateChange> changes;
    for (size_t i = 0; i < s->time.size(); ++i) changes.push_back({s->time[i], s->value[i]});
    peaks.push_back(bucket_peaks(changes, b));
    for (const double v : peaks.back()) top = std::max(top, v);
  }
  Frame f;
  f.width = kWidth;
  f.height = 220;
  f.x_hi = static_cast<double>(end);
  f.y_hi = std::max(top * 1.05, 1.0);
  const Unit x = time_unit(f.x_hi);
  Svg svg(f, "plot", title);
  svg.axes(x, fmt::format("time ({})", x.name), Unit{1, ""}, y_title);
  if (limit > 0) svg.limit(limit, limit_label);
  std::vector<double> xs;
  for (size_t i = 0; i <= b.count; ++i) xs.push_back(f.x(static_cast<double>(b.start(i))));
  xs.back() = f.x1();
  std::string legend = "<div class=\"legend\">";  // closed after the plot
  for (size_t k = 0; k < peaks.size(); ++k) {
    std::vector<double> ys;
    for (const double v : peaks[k]) ys.push_back(f.y(v));
    const std::string_view color = kColors[k % std::size(kColors)];
    svg.line(step_path(xs, ys), color, 1.4, series[k]->name);
    legend += fmt::format(R"(<span><i style="background:{}"></i>{}</span>)", color,
                          escape_html(series[k]->name));
  }
  return "<div class=\"plot-box\">" + svg.finish() + legend + "</div></div>";
}

}  // namespace

std::string serve_report_html(const study::ServeStudy& x) {
  const serve::ServeResult& r = x.result;
  const std::string title =
      fmt::format("{} on {}", x.model, study::nodes_name(x.nodes, x.topology));
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>tierflow serve: {}</title>\n<style>{}</style>\n</head>\n<body>\n",
      escape_html(title), kReportCss);
  out += fmt::format(
      "<header class=\"top\"><h1>tierflow serve: {}</h1>\n<p>{} ({}){}; {} "
      "({} requests). Series are drawn at their peak per pixel column.</p></header>\n<main>\n",
      escape_html(title), study::replicas_text(r), escape_html(x.device), study::router_text(r),
      escape_html(x.trace.source), x.trace.requests.size());

  // Cards and facts.
  const double hit = study::serve_hit_ratio(x);
  out += "<h2>Summary</h2><div class=\"cards\">";
  if (!r.cache_only) {
    uint64_t finished = 0, preemptions = 0;
    for (const serve::RequestRecord& q : r.requests) {
      if (!q.counted || q.finish < 0) continue;
      ++finished;
      preemptions += q.preemptions;
    }
    out += card(fmt::format("{}", finished), "requests finished");
    out += card(seconds_text(study::serve_latency(x, "ttft", 99)), "P99 TTFT");
    out += card(seconds_text(study::serve_latency(x, "tpot", 99)), "P99 TPOT");
    out += card(seconds_text(study::serve_latency(x, "e2e", 50)), "median end-to-end");
    out += card(fmt::format("{}", preemptions), "preemptions");
  }
  out += card(fmt::format("{:.1f}%", 100 * hit), "prompt tokens from the cache");
  out += "</div>";
  const uint64_t block_bytes = r.kv_bytes_per_token * r.block_tokens;
  out += "<table class=\"facts\">";
  out += fmt::format(
      "<tr><th>device memory</th><td>weights {}, workspace {}, KV pool {} blocks "
      "of {} tokens ({} per device)</td></tr>",
      bytes_text(r.weight_bytes), bytes_text(r.workspace_bytes), r.device_pool_blocks,
      r.block_tokens, bytes_text(r.device_pool_blocks * block_bytes));
  if (!r.cache_only) {
    out += fmt::format(
        "<tr><th>run</th><td>{} iterations, {} transfers, last request finished "
        "at {}</td></tr>",
        r.iterations, r.transfers, time_text(r.makespan));
    if (const std::string p = study::preemption_text(r); !p.empty()) {
      out += fmt::format("<tr><th>preemption</th><td>{}</td></tr>", escape_html(p));
    }
    if (r.prefill_replicas > 0) {
      out += fmt::format("<tr><th>hand-over</th><td>{}</td></tr>",
                         escape_html(study::handoff_text(x)));
    }
    if (r.spec_tokens > 0) {
      out +=
          fmt::format("<tr><th>speculative decoding</th><td>{}; {}</td></tr>",
                      escape_html(study::spec_setup_text(r)), escape_html(study::spec_run_text(r)));
    }
  }
  out += "</table>";

  if (!r.cache_only) {
    std::vector<double> ttft, tpot, handoff;
    for (const serve::RequestRecord& q : r.requests) {
      if (!q.counted || q.finish < 0) continue;
      ttft.push_back(static_cast<double>(q.first_token - q.arrival) * 1e-12);
      if (q.handed_over >= 0)
        handoff.push_back(static_cast<double>(q.handed_over - q.first_token) * 1e-12);
      if (q.output_tokens > 1) {
        tpot.push_back(static_cast<double>(q.finish - q.first_token) * 1e-12 /
                       static_cast<double>(q.output_tokens - 1));
      }
    }
    // Disaggregated: the hand-over, first token to the KV on the decode replica.
    out += "<h2>Latency</h2><div class=\"bars-grid\">" + cdf_plot(ttft, "TTFT") +
           cdf_plot(tpot, "TPOT") +
           (r.prefill_replicas > 0 ? cdf_plot(handoff, "hand-over") : std::string()) + "</div>";
  }

  // What each level served.
  std::vector<std::string> labels, texts, colors;
  std::vector<double> shares;
  const double prompt = static_cast<double>(std::max<uint64_t>(1, r.prompt_tokens));
  for (size_t i = 0; i < r.levels.size(); ++i) {
    const serve::LevelRecord& l = r.levels[i];
    labels.push_back(l.name);
    shares.push_back(static_cast<double>(l.hit_tokens) / prompt);
    texts.push_back(fmt::format("{:.1f}% ({} tokens)", 100 * shares.back(), l.hit_tokens));
    colors.emplace_back(kColors[i % std::size(kColors)]);
  }
  labels.emplace_back("computed");
  shares.push_back(static_cast<double>(r.computed_tokens) / prompt);
  texts.push_back(fmt::format("{:.1f}% ({} tokens)", 100 * shares.back(), r.computed_tokens));
  colors.emplace_back("#bbbbbb");
  out += "<h2>Prompt tokens by where they came from</h2>" +
         bar_chart("share of prompt tokens", labels, shares, texts, colors);

  // Over time.
  if (!r.series.empty()) {
    out += "<h2>Cache levels over time</h2>";
    for (const serve::LevelRecord& l : r.levels) {
      for (const serve::Series& s : r.series) {
        if (s.name != l.name + " blocks") continue;
        out += fmt::format("<h4>{} <span>{} blocks</span></h4>", escape_html(l.name),
                           l.capacity_blocks);
        out += series_plot({&s}, r.makespan, l.name, "blocks held",
                           static_cast<double>(l.capacity_blocks), "capacity");
      }
    }
    out += "<h2>Sequences per replica</h2>";
    for (int rep = 0; rep < r.replicas + r.prefill_replicas; ++rep) {
      std::vector<const serve::Series*> both;
      for (const serve::Series& s : r.series) {
        if (s.name == fmt::format("replica {} running", rep) ||
            s.name == fmt::format("replica {} waiting", rep)) {
          both.push_back(&s);
        }
      }
      out += fmt::format("<h4>{}replica {}</h4>",
                         r.prefill_replicas == 0    ? ""
                         : rep < r.prefill_replicas ? "prefill "
                                                    : "decode ",
                         rep);
      out += series_plot(both, r.makespan, fmt::format("replica {}", rep), "sequences", 0, "");
    }
  }

  if (!r.cache_only && !r.replica_records.empty()) {
    // Each replica's work: shares of the run (to the last finish) busy and computing.
    out +=
        "<h2>Replicas</h2><table class=\"grid\"><tr><th>replica</th><th class=\"num\">"
        "requests</th><th class=\"num\">iterations</th><th class=\"num\">busy</th><th "
        "class=\"num\">compute</th><th class=\"num\">prompt tokens</th><th class=\"num\">"
        "output tokens</th><th class=\"num\">preemptions</th></tr>";
    const double span = static_cast<double>(std::max<Time>(1, r.makespan));
    for (size_t i = 0; i < r.replica_records.size(); ++i) {
      const serve::ReplicaRecord& w = r.replica_records[i];
      out += fmt::format(
          "<tr><td>{}r{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td "
          "class=\"num\">{:.1f}%</td><td class=\"num\">{:.1f}%</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
          r.prefill_replicas == 0 ? ""
          : w.prefill_only        ? "prefill "
                                  : "decode ",
          i, w.requests, w.iterations, 100.0 * static_cast<double>(w.busy) / span,
          100.0 * static_cast<double>(w.compute) / span, w.prompt_tokens, w.output_tokens,
          w.preemptions);
    }
    out += "</table>";
  }

  if (!r.resources.empty()) {
    out +=
        "<h2>Fabric</h2><table class=\"grid\"><tr><th>resource</th><th class=\"num\">bytes"
        "</th><th class=\"num\">busy</th></tr>";
    for (const serve::ResourceRecord& res : r.resources) {
      out +=
          fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.1f}%</td></tr>",
                      escape_html(res.name), bytes_text(static_cast<uint64_t>(res.bytes)),
                      100.0 * static_cast<double>(res.busy) /
                          static_cast<double>(std::max<Time>(1, r.makespan)));
    }
    out += "</table>";
  }
  out +=
      "</main>\n<footer>Written by <code>tierflow serve --report</code> from the serving "
      "simulator's results: the same run gives the same page.</footer>\n</body>\n</html>\n";
  return out;
}

}  // namespace tierflow::exporter
