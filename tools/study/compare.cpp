#include "tools/study/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "core/json_tree.h"
#include "core/table.h"
#include "core/units.h"
#include "tools/study/plan_report.h"
#include "tools/study/row.h"
#include "tools/study/target.h"

namespace tierflow::study {

Comparison compare(Study& study, const Scenario& base, std::vector<std::string> policies,
                   std::string_view source,
                   const std::function<void(size_t, size_t, const std::string&)>& progress) {
  if (policies.empty()) {
    for (const planner::Policy& p : planner::policies()) policies.emplace_back(p.name);
  }
  check_policies(policies, source);
  Comparison c;
  c.reference_ps = study.unlimited_latency(base);
  auto keep = [&](Trial t, std::string label, std::string stem, bool oracle) {
    c.trials.push_back(std::move(t));
    c.labels.push_back(std::move(label));
    c.stems.push_back(std::move(stem));
    c.oracle.push_back(oracle);
  };
  for (size_t i = 0; i < policies.size(); ++i) {
    const std::string& name = policies[i];
    if (progress) progress(i, policies.size(), name);
    Scenario s = base;
    s.policy = name;
    Trial t = study.run(s);
    if (!base.realistic() || !t.main().realized) {
      keep(std::move(t), name, name, false);
      continue;
    }
    keep(std::move(t), name + " realistic", name, false);
    s.realistic_routing = false;
    s.expert_cache = {};  // the oracle's plan decides what stays: a bound without a cache
    keep(study.run(s), name + " oracle", name + "-oracle", true);
  }
  for (size_t i = 0; i < c.trials.size(); ++i) {
    const Trial& t = c.trials[i];
    if (!t.ok || c.oracle[i]) continue;
    if (!c.best) {
      c.best = i;
      continue;
    }
    const Trial& b = c.trials[*c.best];
    if (t.latency_ps() < b.latency_ps() ||
        (t.latency_ps() == b.latency_ps() && t.main().device_peak < b.main().device_peak)) {
      c.best = i;
    }
  }
  return c;
}

namespace {

std::string ratio(double a, double b) { return b > 0 ? fmt::format("{:.3f}", a / b) : "-"; }

}  // namespace

std::string render_comparison(const Comparison& cmp, const Scenario& base, const hw::Topology& topo,
                              const planner::Target& target, CompareFormat format) {
  const std::vector<Trial>& trials = cmp.trials;
  const std::vector<std::string>& labels = cmp.labels;
  const int64_t reference = cmp.reference_ps;
  const bool any_realized = cmp.any_realized();
  const Trial* best = cmp.best ? &trials[*cmp.best] : nullptr;
  const std::string scenario = describe_workload(base);
  // One line of the tables per policy: its trial and the phase it reports.
  struct Line {
    const std::string& policy;
    const Trial& t;
    const PhaseResult& p;
  };
  std::vector<Line> rows;
  for (size_t i = 0; i < trials.size(); ++i)
    rows.push_back({labels[i], trials[i], trials[i].main()});
  std::set<std::string> tier_cols, link_cols;
  // Per tier the largest peak of the trial's phases, per link the bytes of all of them (as
  // Trial::moved_bytes() counts them: a request's prefill and whole decode).
  std::vector<std::map<std::string, uint64_t>> tier_peak(rows.size());
  std::vector<std::map<std::string, double>> link_bytes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Trial& t = rows[i].t;
    for (size_t k = 0; k < t.phases.size(); ++k) {
      const double w = t.phase_weight(k);
      for (const auto& [name, v] : t.phases[k].tier_peak) {
        tier_peak[i][name] = std::max(tier_peak[i][name], v);
        tier_cols.insert(name);
      }
      for (const auto& [name, v] : t.phases[k].link_bytes) {
        if (w > 0) link_bytes[i][name] += w * v;
        link_cols.insert(name);
      }
    }
  }
  std::string text;
  // The line whose plan gives the budget and the bounds: the first, or with an expert cache
  // the first oracle's (the whole model on the whole budget: its bounds hold for every row,
  // while a realistic plan covers the model without its routed experts).
  const Line* head = rows.empty() ? nullptr : &rows.front();
  if (base.expert_cache.on()) {
    for (size_t i = 0; i < rows.size(); ++i) {
      if (cmp.oracle[i]) {
        head = &rows[i];
        break;
      }
    }
  }
  const planner::Bounds b = head == nullptr ? planner::Bounds{} : head->p.outcome.bounds;
  if (format == CompareFormat::kJson) {
    nlohmann::ordered_json j;
    j["format"] = "tierflow.compare/1";
    j["scenario"] = scenario;
    j["topology"] = topo.name;
    j["sets"] = base.sets;
    j["budget"] = head == nullptr ? 0 : head->p.outcome.budget;
    if (base.expert_cache.on()) j["expert_cache"] = planner::to_string(base.expert_cache);
    if (!base.on_host.empty()) j["on_host"] = planner::host_ops_text(base.on_host);
    j["resident_reference_ps"] = reference;
    j["bounds"] = {{"residency", b.residency},         {"makespan_ps", b.makespan_ps},
                   {"compute_ps", b.compute_ps},       {"traffic_bytes", b.traffic_bytes},
                   {"ingress_bytes_per_s", b.ingress}, {"pinned_bytes", b.pinned_bytes},
                   {"pinned_ps", b.pinned_ps}};
    for (size_t i = 0; i < rows.size(); ++i) {
      const Line& r = rows[i];
      nlohmann::ordered_json x;
      x["policy"] = r.t.scenario.policy;
      if (any_realized) x["routing"] = get_field(r.t.scenario, "routing");
      x["ok"] = r.t.ok;
      if (!r.t.ok) x["reason"] = r.t.reason;
      if (r.t.ok) {
        x["makespan_ps"] = r.t.latency_ps();
        if (r.t.request) {
          const RequestMetrics& q = *r.t.request;
          x["ttft_ps"] = q.ttft_ps;
          x["decode_ps"] = q.decode_ps;
          x["tpot_ms"] = q.tpot_ms;
          x["decode_tokens_per_s"] = q.decode_tokens_per_s;
          x["throughput_tokens_per_s"] = q.throughput_tokens_per_s;
          x["decode_extrapolated"] = q.extrapolated;
        }
        // A request's: its prefill's and decode's (Trial::device_peak() and the like).
        x["device_peak"] = r.t.device_peak();
        x["exposed_ps"] = r.t.exposed_ps();
        x["bytes_moved"] = r.t.moved_bytes();
        x["busiest_link"] = r.p.busiest_link;
        x["busiest_link_bytes"] = r.p.busiest_link_bytes;
        if (r.p.realized) {
          x["routing_hits"] = r.p.routing.hits;
          x["routing_misses"] = r.p.routing.misses;
          x["miss_bytes"] = r.p.routing.miss_bytes;
          x["miss_stall_ps"] = r.p.miss_exposed_ps;
          x["wasted_prefetch_bytes"] = r.p.routing.wasted_bytes;
          x["memory_stall_ps"] = r.p.memory_stall_ps;
          x["cache_evictions"] = r.p.routing.evictions;
          x["predicted_bytes"] = r.p.routing.predicted_bytes;
        }
        nlohmann::ordered_json tiers = nlohmann::ordered_json::array();
        // Each tier instance's largest peak over the trial's phases.
        std::map<std::string, uint64_t> peaks;
        for (const PhaseResult& p : r.t.phases) {
          if (!p.sim) continue;
          for (const auto& t : p.sim->tiers) peaks[t.name] = std::max(peaks[t.name], t.peak);
        }
        for (const auto& [name, peak] : peaks) tiers.push_back({{"tier", name}, {"peak", peak}});
        x["tiers"] = tiers;
        nlohmann::ordered_json links = nlohmann::ordered_json::array();
        for (const auto& [name, bytes] : link_bytes[i]) {
          links.push_back({{"link", name}, {"bytes", bytes}});
        }
        x["links"] = links;
      }
      j["policies"].push_back(x);
    }
    j["best"] = best == nullptr ? "" : best->scenario.policy;
    text = json_text(j);
  } else if (format == CompareFormat::kCsv) {
    std::vector<Row> out;
    for (const Trial& t : trials) out.push_back(row_of(t));
    text = rows_csv(out);
  } else {
    text += fmt::format("scenario   {}\ntopology   {} ({} program{} on '{}')\n", scenario, topo.name,
                        target.devices, target.devices == 1 ? "" : "s",
                        topo.tiers[target.device_tier].id);
    if (!base.sets.empty()) text += fmt::format("overrides  {}\n", fmt::join(base.sets, " "));
    if (head != nullptr) {
      // A request's resident plan needs the most any of its phases does.
      uint64_t resident = 0;
      for (const PhaseResult& p : head->t.phases)
        resident = std::max(resident, p.outcome.resident_peak);
      text += fmt::format("budget     {} per device; resident needs {}\n",
                          to_string_approx(Bytes{head->p.outcome.budget}),
                          to_string_approx(Bytes{resident}));
    }
    if (base.expert_cache.on() && !rows.empty()) {
      text += fmt::format("cache      {} of routed experts; the realistic plans get {} for the rest\n",
                          planner::to_string(base.expert_cache),
                          to_string_approx(Bytes{rows.front().p.outcome.budget}));
    }
    if (!base.on_host.empty() && head != nullptr) {
      // The policies' plans home the same tensors where pins place them; the tierflow one's
      // (or the first's) move is told.
      const PhaseResult& p = head->p;
      text += fmt::format("on host    {}\n", on_host_summary(base.on_host, p.host, topo));
    }
    text += fmt::format("bounds     {}residency {}, makespan {} (compute {}, traffic {})\n",
                        base.request ? "of the decode: " : "",
                        to_string_approx(Bytes{b.residency}), to_string_approx(Duration{b.makespan_ps}),
                        to_string_approx(Duration{b.compute_ps}), to_string_approx(Bytes{b.traffic_bytes}));
    text += fmt::format("resident with unlimited memory: {}\n\n", to_string_approx(Duration{reference}));
    std::vector<std::string> cols = {"policy",       base.request ? "latency" : "makespan",
                                     "vs resident",  "x bound",
                                     "device peak",  "x residency",
                                     "exposed",      "moved",
                                     "busiest link", "busy"};
    std::vector<Table::Align> col_align = {
        Table::Align::kLeft,  Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
        Table::Align::kRight, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
        Table::Align::kLeft,  Table::Align::kRight};
    if (base.request) {
      // A request's own figures, after its latency.
      cols.insert(cols.begin() + 2, {"TTFT", "TPOT"});
      col_align.insert(col_align.begin() + 2, 2, Table::Align::kRight);
    }
    if (any_realized) {
      for (const char* h : {"hits", "misses", "miss bytes", "miss stall", "wasted"}) {
        cols.emplace_back(h);
        col_align.push_back(Table::Align::kRight);
      }
    }
    Table t(cols, col_align);
    for (const Line& r : rows) {
      std::vector<std::string> cells;
      if (!r.t.ok) {
        cells = {r.policy, std::string(r.t.infeasible ? "does not fit" : "failed")};
        cells.resize(cols.size());
        t.add_row(std::move(cells));
        continue;
      }
      cells = {
          r.policy,
          to_string_approx(Duration{r.t.latency_ps()}),
          ratio(static_cast<double>(r.t.latency_ps()), static_cast<double>(reference)),
          ratio(static_cast<double>(r.p.makespan_ps), static_cast<double>(b.makespan_ps)),
          to_string_approx(Bytes{r.t.device_peak()}),
          ratio(static_cast<double>(r.t.device_peak()), static_cast<double>(r.t.residency_bound())),
          to_string_approx(Duration{r.t.exposed_ps()}),
          to_string_approx(Bytes{static_cast<uint64_t>(r.t.moved_bytes())}),
          r.p.busiest_link,
          fmt::format("{:.0f}%", 100 * r.p.busiest_link_busy)};
      if (r.t.request) {
        const RequestMetrics& q = *r.t.request;
        cells.insert(cells.begin() + 2,
                     {to_string_approx(Duration{q.ttft_ps}),
                      q.tpot_ms > 0 ? fmt::format("{:.2f}ms", q.tpot_ms) : std::string("-")});
      }
      if (any_realized && r.p.realized) {
        cells.push_back(std::to_string(r.p.routing.hits));
        cells.push_back(std::to_string(r.p.routing.misses));
        cells.push_back(to_string_approx(Bytes{r.p.routing.miss_bytes}));
        cells.push_back(to_string_approx(Duration{r.p.miss_exposed_ps}));
        cells.push_back(to_string_approx(Bytes{r.p.routing.wasted_bytes}));
      } else if (any_realized) {
        cells.resize(cols.size(), "-");
      }
      t.add_row(std::move(cells));
    }
    text += t.render();
    text +=
        "  vs resident: latency over the resident plan's on unlimited memory; x bound: makespan "
        "over its lower bound\n  (the bounds line); x residency: device peak over the residency "
        "bound; exposed (compute waiting on copies)\n  and moved (bytes copied): summed over the "
        "programs; busy: the busiest link's share of the makespan\n";
    // Memory per tier and traffic per link direction.
    std::vector<std::string> heads = {"policy"};
    std::vector<Table::Align> align = {Table::Align::kLeft};
    for (const auto& c : tier_cols) {
      heads.push_back("peak " + c);
      align.push_back(Table::Align::kRight);
    }
    for (const auto& c : link_cols) {
      heads.push_back(c);
      align.push_back(Table::Align::kRight);
    }
    Table m(heads, align);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Line& r = rows[i];
      if (!r.t.ok) continue;
      std::vector<std::string> cells = {r.policy};
      for (const auto& c : tier_cols) {
        const auto it = tier_peak[i].find(c);
        cells.push_back(it != tier_peak[i].end() ? to_string_approx(Bytes{it->second}) : "-");
      }
      for (const auto& c : link_cols) {
        const auto it = link_bytes[i].find(c);
        cells.push_back(it != link_bytes[i].end()
                            ? to_string_approx(Bytes{static_cast<uint64_t>(it->second)})
                            : "-");
      }
      m.add_row(std::move(cells));
    }
    if (!m.empty()) text += "\nmemory per tier (largest instance) and bytes per link direction:\n" + m.render();
    for (const Line& r : rows) {
      if (!r.t.ok) text += fmt::format("\n{}: {}", r.policy, r.t.reason);
    }
    if (any_realized && base.expert_cache.on()) {
      text += fmt::format(
          "\nrealistic: the runtime's expert cache ({}) owns the routed experts: each plan is "
          "made for the budget less the cache, without the routed experts, and run on the "
          "seeded routing (--seed); a miss is fetched into the cache on demand, on the "
          "critical path. oracle: the plan sees the routing that runs, with the whole budget "
          "and no cache. The budget and bounds above are the oracle's (the whole model).\n",
          planner::to_string(base.expert_cache));
    } else if (any_realized) {
      text +=
          "\nrealistic: planned on the expected routing, run on the seeded one (--seed); misses "
          "fetched on demand on the critical path. oracle: the plan sees the routing that runs.\n";
    }
    if (best != nullptr && best->request) {
      text += fmt::format(
          "\ndecode     {}; device peak, exposed, moved and the tier and link "
          "table cover the prefill and the decode, the busiest link is the "
          "decode's\n",
          best->request->decode_note);
    }
    if (best != nullptr) text += fmt::format("\nbest: {}\n", best->scenario.policy);
  }
  return text;
}

}  // namespace tierflow::study
