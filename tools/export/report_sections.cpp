#include "tools/export/report_sections.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

#include "core/units.h"
#include "hw_models/routes.h"

namespace tierflow::exporter {
namespace {

// One colour per kind slot (sim/series.h order), distinct on screen and in print.
constexpr std::array<std::string_view, sim::kKindSlots> kKindColors = {
    "#4e79a7",  // weight
    "#f28e2b",  // activation
    "#59a14f",  // kv
    "#e15759",  // grad
    "#b07aa1",  // optimizer_state
    "#76b7b2",  // input
    "#edc948",  // output
    "#9c755f",  // workspace
};
constexpr std::string_view kComputeColor = "#4c6a92";
constexpr std::string_view kCopyColor = "#7fa7d4";
constexpr std::string_view kWaitTransferColor = "#d62728";
constexpr std::string_view kWaitMemoryColor = "#ff9f1c";
constexpr std::string_view kRateColor = "#2f6f9f";
constexpr std::string_view kRateFill = "#2f6f9f33";

// "12.5 GB/s" in the unit that suits `bytes_per_s`.
std::string rate(double bytes_per_s) {
  const Unit u = rate_unit(bytes_per_s);
  return fmt::format("{} {}", sig(bytes_per_s / u.div, 3), u.name);
}

// The x coordinate of every bucket boundary of the view, the last at the window's end.
std::vector<double> bucket_xs(const Frame& f, const RunView& v) {
  std::vector<double> xs;
  for (size_t i = 0; i <= v.buckets.count; ++i) {
    xs.push_back(f.x(static_cast<double>(std::min(v.buckets.start(i), v.end))));
  }
  return xs;
}

Frame plot_frame(const ReportOptions& o, const RunView& v, double height) {
  Frame f;
  f.width = o.width + f.left + f.right;
  f.height = height;
  f.x_lo = 0;
  f.x_hi = static_cast<double>(v.end);
  return f;
}

// The time of each bucket the spans cover (see coverage()), per bucket width.
std::vector<double> fractions(const std::vector<Span>& spans, const RunView& v) {
  const std::vector<Time> covered = coverage(spans, v.buckets);
  std::vector<double> out(covered.size());
  for (size_t b = 0; b < covered.size(); ++b) {
    const Time width = std::min(v.buckets.start(b + 1), v.end) - v.buckets.start(b);
    out[b] = width > 0 ? static_cast<double>(covered[b]) / static_cast<double>(width) : 0;
  }
  return out;
}

std::string section(const RunView& v, std::string_view id, std::string_view title,
                    std::string_view body) {
  return fmt::format("<section class=\"part\" id=\"{}-{}\"><h3>{}</h3>\n{}</section>\n", v.id, id,
                     title, body);
}

// Series that are the same over time (the devices of a symmetric plan) are drawn once.
struct Group {
  size_t first = 0;          ///< the series drawn
  std::vector<size_t> same;  ///< later series equal to it
};

template <class T, class Eq>
std::vector<Group> group_same(const std::vector<T>& series, Eq eq) {
  std::vector<Group> groups;
  for (size_t i = 0; i < series.size(); ++i) {
    bool found = false;
    for (Group& g : groups) {
      if (eq(series[g.first], series[i])) {
        g.same.push_back(i);
        found = true;
        break;
      }
    }
    if (!found) groups.push_back({i, {}});
  }
  return groups;
}

bool same_changes(const std::vector<sim::LevelChange>& a, const std::vector<sim::LevelChange>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].time != b[i].time || a[i].bytes != b[i].bytes || a[i].kind != b[i].kind) return false;
  }
  return true;
}

// "hbm[1], hbm[2] and 5 more": the names of a group's other series.
template <class T>
std::string same_as(const std::vector<T>& series, const Group& g) {
  std::string out;
  for (size_t i = 0; i < g.same.size() && i < 4; ++i) {
    out += fmt::format("{}{}", i == 0 ? "" : ", ", series[g.same[i]].name);
  }
  if (g.same.size() > 4) out += fmt::format(" and {} more", g.same.size() - 4);
  return out;
}

std::string plot_box(std::string_view name, std::string_view head, std::string_view same,
                     const std::string& svg) {
  std::string title = escape_html(name);
  if (!same.empty()) title += fmt::format(" <small>= {}</small>", escape_html(same));
  return fmt::format("<div class=\"plot-box\"><h4>{} <span>{}</span></h4>{}</div>\n", title,
                     escape_html(head), svg);
}

// "0-3, 6": device numbers, runs of consecutive ones joined.
std::string device_list(std::vector<uint32_t> d) {
  std::sort(d.begin(), d.end());
  std::string out;
  for (size_t i = 0; i < d.size();) {
    size_t j = i;
    while (j + 1 < d.size() && d[j + 1] == d[j] + 1) ++j;
    out += i == 0 ? "" : ", ";
    out += j == i ? fmt::format("{}", d[i]) : fmt::format("{}&ndash;{}", d[i], d[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string bytes_text(uint64_t b) {
  return to_string_approx(Bytes{b});
}
std::string time_text(Time ps) {
  return to_string_approx(Duration{ps});
}

RunView make_view(const ReportRun& r, const ReportOptions& o, std::string id) {
  RunView v;
  v.id = std::move(id);
  Time end = r.result.makespan;
  if (r.result.error && r.result.error->time > end) end = r.result.error->time;
  for (const sim::ComputeSpan& c : r.series.compute) end = std::max(end, c.end);
  for (const sim::TierSeries& t : r.series.tiers) {
    if (!t.changes.empty()) end = std::max(end, t.changes.back().time);
  }
  for (const sim::LinkSeries& l : r.series.links) {
    if (!l.changes.empty()) end = std::max(end, l.changes.back().time);
  }
  v.end = std::max<Time>(end, 1);
  v.buckets = make_buckets(0, v.end, static_cast<size_t>(std::max(1.0, o.width)));
  v.time = time_unit(static_cast<double>(v.end));
  v.time_title = fmt::format("time ({})", v.time.name);
  return v;
}

std::vector<Wait> exposed_waits(const ReportRun& r) {
  std::vector<Wait> out;
  for (const sim::WaitSpan& w : r.series.waits) {
    out.push_back({w.program, w.step, w.start, w.end, w.transfer});
  }
  for (const sim::StallSpan& s : r.series.stalls) {
    if (s.memory) out.push_back({s.program, s.step, s.start, s.end, kNoTransfer});
  }
  std::sort(out.begin(), out.end(), [](const Wait& a, const Wait& b) {
    return std::make_tuple(b.end - b.start, a.start, a.program, a.step, a.transfer) <
           std::make_tuple(a.end - a.start, b.start, b.program, b.step, b.transfer);
  });
  return out;
}

std::string_view kind_color(size_t kind) {
  return kKindColors[kind % kKindColors.size()];
}

std::string kind_legend(uint32_t kinds) {
  std::string out = R"(<div class="legend">)";
  for (size_t k = 0; k < sim::kKindSlots; ++k) {
    if ((kinds >> k & 1) == 0) continue;
    out += fmt::format(R"(<span><i style="background:{}"></i>{}</span>)", kind_color(k),
                       sim::kKindSlotNames[k]);
  }
  return out + "</div>\n";
}

std::string activity_section(const ReportRun& r, const RunView& v, const std::vector<Wait>& waits,
                             const ReportOptions& o) {
  const auto& programs = r.plan.plan.programs;
  const size_t shown = std::min(programs.size(), o.max_devices);
  if (shown == 0) return "";
  // Per program: compute, transfer stalls, memory stalls, transfers in flight.
  std::vector<std::array<std::vector<Span>, 4>> spans(shown);
  for (const sim::ComputeSpan& c : r.series.compute) {
    if (c.program < shown) spans[c.program][0].push_back({c.start, c.end});
  }
  for (const sim::StallSpan& s : r.series.stalls) {
    if (s.program < shown) spans[s.program][s.memory ? 2 : 1].push_back({s.start, s.end});
  }
  for (const sim::TransferRecord& x : r.result.transfers) {
    if (x.program < shown) spans[x.program][3].push_back({x.start, x.end});
  }
  constexpr double kRow = 34, kMark = 7, kBar = 14, kCopy = 6;
  Frame f = plot_frame(o, v, 14 + kRow * static_cast<double>(shown) + 34);
  f.top = 14;
  Svg svg(f, "plot activity", "activity per device");
  svg.x_axis(v.time, v.time_title);
  const std::vector<double> xs = bucket_xs(f, v);
  const size_t n = v.buckets.count;
  constexpr std::array<std::string_view, 4> kStateColor = {"", kComputeColor, kWaitTransferColor,
                                                           kWaitMemoryColor};
  constexpr std::array<std::string_view, 4> kStateName = {"", "compute", "waiting for a transfer",
                                                          "waiting for memory"};
  for (size_t p = 0; p < shown; ++p) {
    const double y = f.top + kRow * static_cast<double>(p) + kMark;
    svg.text(f.x0() - 8, y + 11, fmt::format("dev {}", programs[p].device), "end");
    std::array<std::vector<double>, 4> frac;
    for (size_t k = 0; k < 4; ++k) frac[k] = fractions(spans[p][k], v);
    // Compute row: per bucket the state that took most of it (a wait wins a tie).
    std::vector<int> state(n);
    for (size_t b = 0; b < n; ++b) {
      double best = 0;
      for (int k = 0; k < 3; ++k) {
        if (frac[size_t(k)][b] > 0 && frac[size_t(k)][b] >= best) {
          best = frac[size_t(k)][b];
          state[b] = k + 1;
        }
      }
    }
    for (size_t b = 0; b < n;) {
      size_t e = b + 1;
      while (e < n && state[e] == state[b]) ++e;
      if (state[b] != 0) {
        const auto s = size_t(state[b]);
        svg.rect(xs[b], y, xs[e] - xs[b], kBar, kStateColor[s],
                 fmt::format("dev {}: {} from {} to {}", programs[p].device, kStateName[s],
                             time_text(v.buckets.start(b)),
                             time_text(std::min(v.buckets.start(e), v.end))));
      }
      b = e;
    }
    // Copies row: the share of each bucket with a transfer of this program in flight.
    std::vector<double> level(n);
    for (size_t b = 0; b < n; ++b) level[b] = std::ceil(frac[3][b] * 4 - 1e-9) / 4;
    for (size_t b = 0; b < n;) {
      size_t e = b + 1;
      while (e < n && level[e] == level[b]) ++e;
      if (level[b] > 0)
        svg.rect(xs[b], y + kBar + 2, xs[e] - xs[b], kCopy, kCopyColor, "", level[b]);
      b = e;
    }
  }
  // The longest waits, marked above their device's row.
  size_t marked = 0;
  for (size_t i = 0; i < waits.size() && marked < 10; ++i) {
    const Wait& w = waits[i];
    if (w.program >= shown) continue;
    ++marked;
    const double x = f.x(static_cast<double>(w.start));
    const double y = f.top + kRow * static_cast<double>(w.program) + kMark - 1;
    svg.raw(fmt::format(R"(<path class="mark-wait" d="M{:.1f} {:.1f}l-4 -6h8z"><title>)", x, y));
    svg.raw(escape_html(
        fmt::format("wait #{}: {} at {}", i + 1, time_text(w.end - w.start), time_text(w.start))));
    svg.raw("</title></path>");
  }
  std::string body = svg.finish();
  body += fmt::format(
      R"(<div class="legend"><span><i style="background:{}"></i>compute</span>)"
      R"(<span><i style="background:{}"></i>waiting for a transfer</span>)"
      R"(<span><i style="background:{}"></i>waiting for memory</span>)"
      R"(<span><i style="background:{}"></i>copies in flight (shade: share of the time)</span>)"
      R"(<span><b class="tri">&#9660;</b>the longest waits (table below)</span></div>)",
      kComputeColor, kWaitTransferColor, kWaitMemoryColor, kCopyColor);
  if (programs.size() > shown) {
    body +=
        fmt::format(R"(<p class="note">The first {} of {} devices.</p>)", shown, programs.size());
  }
  return section(v, "activity", "Activity per device", body);
}

std::string memory_section(const ReportRun& r, const RunView& v, const ReportOptions& o) {
  const std::vector<Group> groups =
      group_same(r.series.tiers, [](const sim::TierSeries& a, const sim::TierSeries& b) {
        return a.capacity == b.capacity && a.kinds == b.kinds && same_changes(a.changes, b.changes);
      });
  if (groups.empty()) {
    return section(v, "memory", "Memory over time",
                   R"(<p class="note">No tier instance holds bytes.</p>)");
  }
  uint32_t kinds = 0;
  std::string plots;
  const size_t shown = std::min(groups.size(), o.max_plots);
  for (size_t g = 0; g < shown; ++g) {
    const sim::TierSeries& ts = r.series.tiers[groups[g].first];
    const KindStack ks = stack_kinds(ts, v.buckets);
    kinds |= ks.kinds;
    const sim::TierResult* tr = nullptr;
    for (const sim::TierResult& t : r.result.tiers) {
      if (t.name == ts.name) tr = &t;
    }
    const uint64_t peak = tr != nullptr ? tr->peak : ks.peak;
    const double top = static_cast<double>(std::max<uint64_t>(peak, 1));
    const double cap = static_cast<double>(ts.capacity);
    // A limit far above the peak would flatten the plot: it is then only named.
    const bool cap_on_scale = cap <= 1.5 * top;
    const bool budget_line = ts.tier == v.device_tier && v.budget > 0 &&
                             static_cast<double>(v.budget) <= 1.5 * top && v.budget < ts.capacity;
    Frame f = plot_frame(o, v, 200);
    f.y_hi = top * 1.1;
    if (cap_on_scale) f.y_hi = std::max(f.y_hi, cap * 1.06);
    if (budget_line) f.y_hi = std::max(f.y_hi, static_cast<double>(v.budget) * 1.08);
    const Unit unit = bytes_unit(f.y_hi);
    Svg svg(f, "plot", ts.name + " bytes by tensor kind");
    svg.axes(v.time, v.time_title, unit, unit.name);
    const std::vector<double> xs = bucket_xs(f, v);
    std::vector<double> below(v.buckets.count, f.y(0));
    std::vector<double> level(v.buckets.count, 0);
    for (size_t k = 0; k < sim::kKindSlots; ++k) {
      if ((ks.kinds >> k & 1) == 0) continue;
      std::vector<double> above(v.buckets.count);
      uint64_t most = 0;
      for (size_t b = 0; b < v.buckets.count; ++b) {
        level[b] += static_cast<double>(ks.bytes[b][k]);
        above[b] = f.y(level[b]);
        most = std::max(most, ks.bytes[b][k]);
      }
      svg.area(band_path(xs, above, below), kind_color(k),
               fmt::format("{}: up to {}", sim::kKindSlotNames[k], bytes_text(most)));
      below = std::move(above);
    }
    if (cap_on_scale) svg.limit(cap, "capacity " + bytes_text(ts.capacity));
    if (budget_line) svg.limit(static_cast<double>(v.budget), "budget " + bytes_text(v.budget));
    std::string head = fmt::format("peak {}", bytes_text(peak));
    if (tr != nullptr) head += fmt::format(" at {}", time_text(tr->peak_time));
    head += fmt::format(", {:.1f}% of its {}{}", 100 * static_cast<double>(peak) / cap,
                        bytes_text(ts.capacity), cap_on_scale ? "" : " (off scale)");
    if (ts.tier == v.device_tier && v.budget > 0) {
      head += fmt::format("; budget {}", bytes_text(v.budget));
    }
    plots += plot_box(ts.name, head, same_as(r.series.tiers, groups[g]), svg.finish());
  }
  std::string body = kind_legend(kinds) + plots;
  if (groups.size() > shown) {
    body += fmt::format(R"(<p class="note">The first {} of {} different tier series.</p>)", shown,
                        groups.size());
  }
  return section(v, "memory", "Memory over time, by tensor kind", body);
}

std::string links_section(const ReportRun& r, const RunView& v, const ReportOptions& o) {
  std::vector<sim::LinkSeries> links = r.series.links;
  std::sort(links.begin(), links.end(), [](const sim::LinkSeries& a, const sim::LinkSeries& b) {
    return a.resource < b.resource;
  });
  const std::vector<Group> groups =
      group_same(links, [](const sim::LinkSeries& a, const sim::LinkSeries& b) {
        if (a.capacity != b.capacity || a.changes.size() != b.changes.size()) return false;
        for (size_t i = 0; i < a.changes.size(); ++i) {
          if (a.changes[i].time != b.changes[i].time ||
              a.changes[i].bytes_per_s != b.changes[i].bytes_per_s) {
            return false;
          }
        }
        return true;
      });
  if (groups.empty()) {
    return section(v, "links", "Link bandwidth over time",
                   R"(<p class="note">No transfer crossed a link.</p>)");
  }
  std::string body;
  const size_t shown = std::min(groups.size(), o.max_plots);
  for (size_t g = 0; g < shown; ++g) {
    const sim::LinkSeries& ls = links[groups[g].first];
    const std::vector<double> peaks = bucket_peaks(ls.changes, v.buckets);
    double peak = 0;
    for (const double p : peaks) peak = std::max(peak, p);
    Frame f = plot_frame(o, v, 170);
    f.y_hi = std::max({peak, ls.capacity, 1.0}) * 1.08;
    const Unit unit = rate_unit(f.y_hi);
    Svg svg(f, "plot", ls.name + " rate");
    svg.axes(v.time, v.time_title, unit, unit.name);
    const std::vector<double> xs = bucket_xs(f, v);
    std::vector<double> ys(peaks.size());
    for (size_t b = 0; b < peaks.size(); ++b) ys[b] = f.y(peaks[b]);
    const std::vector<double> floor(peaks.size(), f.y(0));
    svg.area(band_path(xs, ys, floor), kRateFill, "");
    svg.line(step_path(xs, ys), kRateColor, 1.5, fmt::format("{}: peak {}", ls.name, rate(peak)));
    if (ls.capacity > 0) svg.limit(ls.capacity, "capacity " + rate(ls.capacity));
    std::string head = fmt::format("peak {}", rate(peak));
    for (const sim::LinkResult& lr : r.result.links) {
      if (lr.name != ls.name) continue;
      head = fmt::format("{} moved, busy {:.1f}% of the time, peak {}",
                         bytes_text(static_cast<uint64_t>(lr.bytes)),
                         100 * static_cast<double>(lr.busy_ps) / static_cast<double>(v.end),
                         rate(peak));
    }
    body += plot_box(ls.name, head, same_as(links, groups[g]), svg.finish());
  }
  if (groups.size() > shown) {
    body += fmt::format(R"(<p class="note">The first {} of {} different link series.</p>)", shown,
                        groups.size());
  }
  return section(v, "links", "Link bandwidth over time (peak per pixel)", body);
}

std::string waits_section(const ReportRun& r, const RunView& v, const std::vector<Wait>& waits,
                          const ReportOptions& o) {
  if (waits.empty()) {
    return section(v, "waits", "Exposed waits",
                   R"(<p class="note">No compute step waited for a transfer or for memory.</p>)");
  }
  Time transfer_total = 0, memory_total = 0;
  for (const Wait& w : waits) {
    (w.transfer == kNoTransfer ? memory_total : transfer_total) += w.end - w.start;
  }
  std::string body = fmt::format(
      R"(<p>{} wait{}: {} waiting for transfers, {} waiting for memory, summed over devices. )"
      R"(The longest first; equal waits on several devices share a row.</p>)",
      waits.size(), waits.size() == 1 ? "" : "s", time_text(transfer_total),
      time_text(memory_total));
  body +=
      "<table class=\"waits\"><thead><tr><th>#</th><th>devices</th><th>step (op)</th>"
      "<th>waited for</th><th>at</th><th class=\"num\">waited</th><th>tensor</th>"
      "<th class=\"num\">bytes</th><th>route</th><th class=\"num\">transfer</th>"
      "<th class=\"num\">queued</th></tr></thead><tbody>\n";
  const Workload& w = r.plan.workload;
  const hw::Topology& t = r.topology;
  // One row per wait, or per set of equal waits on several devices (a symmetric plan): the
  // same step, times and transfer of the same tensor. Equal waits are adjacent in `waits`.
  const auto equal = [&](const Wait& a, const Wait& b) {
    if (a.step != b.step || a.start != b.start || a.end != b.end) return false;
    if ((a.transfer == kNoTransfer) != (b.transfer == kNoTransfer)) return false;
    if (a.transfer == kNoTransfer) return true;
    const sim::TransferRecord& x = r.result.transfers[a.transfer];
    const sim::TransferRecord& y = r.result.transfers[b.transfer];
    return x.tensor == y.tensor && x.kind == y.kind && x.from == y.from && x.to == y.to &&
           x.issue == y.issue && x.start == y.start && x.end == y.end;
  };
  size_t rows = 0;
  for (size_t i = 0; i < waits.size() && rows < o.top_waits; ++rows) {
    const Wait& x = waits[i];
    std::vector<uint32_t> devices;
    size_t next = i;
    while (next < waits.size() && equal(waits[next], x)) {
      devices.push_back(r.plan.plan.programs[waits[next].program].device);
      ++next;
    }
    i = next;
    const Program& prog = r.plan.plan.programs[x.program];
    std::string op = fmt::format("step {}", x.step);
    uint64_t need = 0;
    if (x.step < prog.steps.size() && prog.steps[x.step].kind == StepKind::kCompute &&
        prog.steps[x.step].target < w.ops.size()) {
      const Op& o2 = w.ops[prog.steps[x.step].target];
      op += fmt::format(" ({})", o2.name);
      need = o2.workspace;
      for (uint32_t out : o2.outputs) need += w.tensors[out].bytes;
    }
    std::string cause, tensor, size, route, transfer, queued;
    if (x.transfer == kNoTransfer) {
      const std::string& dev_tier = r.plan.plan.tiers[r.plan.plan.device_tier];
      cause = "memory";
      tensor = "outputs and workspace";
      size = bytes_text(need);
      route = fmt::format("room on {}", dev_tier);
    } else {
      const sim::TransferRecord& tr = r.result.transfers[x.transfer];
      cause = std::string(kStepKindNames[size_t(tr.kind)]);
      tensor = tr.tensor < w.tensors.size() ? w.tensors[tr.tensor].name : "?";
      size = bytes_text(tr.bytes);
      const hw::Route* rt = t.route(tr.from, tr.to);
      route = rt != nullptr ? hw::describe_route(t, *rt)
                            : fmt::format("{} -> {}", t.tiers[tr.from].id, t.tiers[tr.to].id);
      transfer = time_text(tr.end - tr.issue);
      queued = time_text(tr.start - tr.issue);
    }
    body += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"cause-{}\">{}</td><td>{}</td>"
        "<td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        rows + 1, device_list(devices), escape_html(op),
        x.transfer == kNoTransfer ? "memory" : "transfer", escape_html(cause), time_text(x.start),
        time_text(x.end - x.start), escape_html(tensor), size, escape_html(route), transfer,
        queued);
  }
  body += "</tbody></table>\n";
  return section(v, "waits", "Exposed waits, longest first", body);
}

}  // namespace tierflow::exporter
