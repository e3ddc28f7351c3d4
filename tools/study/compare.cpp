#include "tools/study/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

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
  for (const std::string& name : policies) check_policy(name, source);
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
  for (const Line& r : rows) {
    for (const auto& [k, v] : r.p.tier_peak) tier_cols.insert(k);
    for (const auto& [k, v] : r.p.link_bytes) link_cols.insert(k);
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
    for (const Line& r : rows) {
      nlohmann::ordered_json x;
      x["policy"] = r.t.scenario.policy;
      if (any_realized) x["routing"] = get_field(r.t.scenario, "routing");
      x["ok"] = r.t.ok;
      if (!r.t.ok) x["reason"] = r.t.reason;
      if (r.t.ok) {
        x["makespan_ps"] = r.t.latency_ps();
        x["device_peak"] = r.p.device_peak;
        x["exposed_ps"] = r.p.exposed_ps;
        x["bytes_moved"] = r.p.moved_bytes;
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
        for (const auto& t : r.p.sim->tiers) tiers.push_back({{"tier", t.name}, {"peak", t.peak}});
        x["tiers"] = tiers;
        nlohmann::ordered_json links = nlohmann::ordered_json::array();
        for (const auto& [name, bytes] : r.p.link_bytes) {
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
      text += fmt::format("budget     {} per device; resident needs {}\n",
                          to_string_approx(Bytes{head->p.outcome.budget}),
                          to_string_approx(Bytes{head->p.outcome.resident_peak}));
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
      cells = {r.policy,
               to_string_approx(Duration{r.t.latency_ps()}),
               ratio(static_cast<double>(r.t.latency_ps()), static_cast<double>(reference)),
               ratio(static_cast<double>(r.p.makespan_ps), static_cast<double>(b.makespan_ps)),
               to_string_approx(Bytes{r.p.device_peak}),
               ratio(static_cast<double>(r.p.device_peak), static_cast<double>(b.residency)),
               to_string_approx(Duration{r.p.exposed_ps}),
               to_string_approx(Bytes{static_cast<uint64_t>(r.p.moved_bytes)}),
               r.p.busiest_link,
               fmt::format("{:.0f}%", 100 * r.p.busiest_link_busy)};
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
    for (const Line& r : rows) {
      if (!r.t.ok) continue;
      std::vector<std::string> cells = {r.policy};
      for (const auto& c : tier_cols) {
        cells.push_back(r.p.tier_peak.count(c) != 0 ? to_string_approx(Bytes{r.p.tier_peak.at(c)}) : "-");
      }
      for (const auto& c : link_cols) {
        cells.push_back(r.p.link_bytes.count(c) != 0
                            ? to_string_approx(Bytes{static_cast<uint64_t>(r.p.link_bytes.at(c))})
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
    if (best != nullptr) text += fmt::format("\nbest: {}\n", best->scenario.policy);
  }
  return text;
}

}  // namespace tierflow::study
