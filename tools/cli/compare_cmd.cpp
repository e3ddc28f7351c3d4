#include "tools/cli/compare_cmd.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "core/io.h"
#include "core/json_tree.h"
#include "core/plan_json.h"
#include "core/table.h"
#include "core/units.h"
#include "planner/planner.h"
#include "sim/timeline.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/compare.h"
#include "tools/study/row.h"
#include "tools/study/study.h"
#include "tools/study/target.h"

namespace tierflow::cli {
namespace {

struct CompareOptions {
  ScenarioFlags f;
  std::string timeline, output, plans_dir;
  std::vector<std::string> policies;
  bool json = false, csv = false, quiet = false;
};

std::string ratio(double a, double b) { return b > 0 ? fmt::format("{:.3f}", a / b) : "-"; }

int run_compare(const CompareOptions& o) {
  const study::Scenario base = to_scenario(o.f);
  if (const std::string w = study::context_warning(base); !w.empty()) {
    fmt::print(stderr, "warning: {}\n", w);
  }
  study::Study study;
  const auto topo_ptr = study.topology(base);
  const hw::Topology& topo = *topo_ptr;
  const planner::Target target = study::make_target(topo, base.device, base.devices, "--device");
  const std::string scenario = study::describe_workload(base);

  // Policies, then output paths, are checked before anything is made or planned.
  for (const std::string& name : o.policies) study::check_policy(name, "--policies");
  if (!o.plans_dir.empty()) make_output_dir(o.plans_dir, "--plans");
  check_output_path(o.output.empty() ? "-" : o.output);
  if (!o.timeline.empty()) check_output_path(o.timeline);

  // Progress on a terminal only, on one line that the table replaces.
  const bool tty = !o.quiet && isatty(fileno(stderr)) != 0;
  const study::Comparison cmp =
      study::compare(study, base, o.policies, "--policies", [&](size_t i, size_t n, const std::string& name) {
        if (tty) fmt::print(stderr, "\r\033[Kplanning {} ({} of {}) ...", name, i + 1, n);
      });
  if (tty) fmt::print(stderr, "\r\033[K");
  const std::vector<study::Trial>& trials = cmp.trials;
  const std::vector<std::string>& labels = cmp.labels;
  const sim::Time reference = cmp.reference_ps;
  const bool any_realized = cmp.any_realized();
  const study::Trial* best = cmp.best ? &trials[*cmp.best] : nullptr;
  if (!o.plans_dir.empty()) {
    for (size_t i = 0; i < trials.size(); ++i) {
      const study::Trial& t = trials[i];
      if (!t.main().outcome.ok) continue;
      const std::string path = o.plans_dir + "/" + cmp.stems[i] + ".json";
      write_file_atomic(path, write_plan(study::plan_for_file(t, t.main(), path), t.main().workload.get()));
    }
  }

  // One line of the tables per policy: its trial and the phase it reports.
  struct Line {
    const std::string& policy;
    const study::Trial& t;
    const study::PhaseResult& p;
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
  const planner::Bounds b = rows.empty() ? planner::Bounds{} : rows.front().p.outcome.bounds;
  if (o.json) {
    nlohmann::ordered_json j;
    j["format"] = "tierflow.compare/1";
    j["scenario"] = scenario;
    j["topology"] = topo.name;
    j["sets"] = base.sets;
    j["budget"] = rows.empty() ? 0 : rows.front().p.outcome.budget;
    j["resident_reference_ps"] = reference;
    j["bounds"] = {{"residency", b.residency},         {"makespan_ps", b.makespan_ps},
                   {"compute_ps", b.compute_ps},       {"traffic_bytes", b.traffic_bytes},
                   {"ingress_bytes_per_s", b.ingress}, {"pinned_bytes", b.pinned_bytes},
                   {"pinned_ps", b.pinned_ps}};
    for (const Line& r : rows) {
      nlohmann::ordered_json x;
      x["policy"] = r.t.scenario.policy;
      if (any_realized) x["routing"] = study::get_field(r.t.scenario, "routing");
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
          x["routing_misses"] = r.p.routing.misses;
          x["miss_bytes"] = r.p.routing.miss_bytes;
          x["miss_stall_ps"] = r.p.miss_exposed_ps;
          x["wasted_prefetch_bytes"] = r.p.routing.wasted_bytes;
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
  } else if (o.csv) {
    std::vector<study::Row> out;
    for (const study::Trial& t : trials) out.push_back(study::row_of(t));
    text = study::rows_csv(out);
  } else {
    text += fmt::format("scenario   {}\ntopology   {} ({} program{} on '{}')\n", scenario, topo.name,
                        target.devices, target.devices == 1 ? "" : "s",
                        topo.tiers[target.device_tier].id);
    if (!base.sets.empty()) text += fmt::format("overrides  {}\n", fmt::join(base.sets, " "));
    if (!rows.empty()) {
      text += fmt::format("budget     {} per device; resident needs {}\n",
                          to_string_approx(Bytes{rows.front().p.outcome.budget}),
                          to_string_approx(Bytes{rows.front().p.outcome.resident_peak}));
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
      for (const char* h : {"misses", "miss bytes", "miss stall", "wasted"}) {
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
    if (any_realized) {
      text +=
          "\nrealistic: planned on the expected routing, run on the seeded one (--seed); misses "
          "fetched on demand on the critical path. oracle: the plan sees the routing that runs.\n";
    }
    if (best != nullptr) text += fmt::format("\nbest: {}\n", best->scenario.policy);
  }
  write_file_atomic(o.output.empty() ? "-" : o.output, text);

  if (!o.timeline.empty() && best != nullptr) {
    sim::Timeline tl(o.timeline);
    sim::SimOptions so;
    so.timeline = &tl;
    so.live_top = 0;
    (void)sim::simulate(*best->main().outcome.plan, *best->main().workload, topo, so);
    tl.finish();
    if (!o.json && !o.csv) fmt::print(stderr, "timeline of the best plan ({}): {}\n", best->scenario.policy, o.timeline);
  }
  return static_cast<int>(best == nullptr ? ExitCode::kInfeasible : ExitCode::kOk);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  o->f.gen.gen.context = 4096;
  o->f.gen.gen.tokens = 8;
  CLI::App* cmd = app.add_subcommand(
      "compare", "every policy side by side: makespan, memory, traffic, gap to the bounds");
  add_target_flags(cmd, o->f);
  add_workload_flags(cmd, o->f);
  cmd->add_option("--policies", o->policies, "policies to compare (default: all)")->delimiter(',');
  cmd->add_option("--timeline", o->timeline, "write the best plan's Chrome trace here");
  cmd->add_option("--plans", o->plans_dir, "write each policy's plan (workload inline) here");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->add_flag("--csv", o->csv, "print one row per policy with the study's stable columns");
  cmd->add_flag("--quiet", o->quiet, "no progress on the terminal");
  cmd->add_option("-o,--output", o->output, "write the table here instead of stdout");
  cmd->callback([o] {
    if (o->json && o->csv) throw CLI::ValidationError("--json and --csv exclude each other");
    throw CommandResult(run_compare(*o));
  });
}

}  // namespace tierflow::cli
