#include "tools/compare_cmd.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <memory>

#include "core/io.h"
#include "core/plan_json.h"
#include "core/table.h"
#include "core/units.h"
#include "core/workload_json.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "sim/report.h"
#include "sim/timeline.h"
#include "tools/cli_common.h"
#include "tools/plan_cmd.h"
#include "tools/sim_evaluator.h"
#include "tools/trace_cmd.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

namespace tierflow::cli {
namespace {

// The default scenario: Llama-3-70B decode on one H100 of an 8-GPU server. Its bf16
// weights (about 141 GB) are beyond the 80 GB of HBM, so every policy has to offload.
constexpr std::string_view kDefaultHw = "hw/h100-sxm-8gpu.yaml";
constexpr std::string_view kDefaultModel = "llama-3-70b";

struct CompareOptions {
  std::string hw, workload, model, budget, device, timeline, output, plans_dir;
  std::vector<std::string> policies, pins, sets;
  int64_t context = 4096, tokens = 8;
  uint32_t devices = 1;
  unsigned threads = 0;  ///< the tierflow policy's threads; 0: one per hardware thread
  bool json = false, csv = false;
};

struct Row {
  std::string policy;
  planner::PlanOutcome out;
  sim::SimResult sim;
  uint64_t peak = 0;
  sim::Time exposed = 0;
  double moved = 0;
  std::string busiest;
  double busiest_bytes = 0;
  double busiest_busy = 0;
  std::map<std::string, uint64_t> tier_peak;   ///< per tier id, the largest instance
  std::map<std::string, double> link_bytes;    ///< per link direction, summed over instances
};

/// "gpu-pcie[3] rc->hbm" -> "gpu-pcie rc->hbm": instances summed.
std::string without_instance(const std::string& name) {
  const auto open = name.find('[');
  const auto close = name.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return name;
  return name.substr(0, open) + name.substr(close + 1);
}

std::string ratio(double a, double b) { return b > 0 ? fmt::format("{:.3f}", a / b) : "-"; }

int run_compare(const CompareOptions& o) {
  const std::string hw = o.hw.empty() ? config_dir() + "/" + std::string(kDefaultHw) : o.hw;
  const hw::Topology topo = hw::load_topology(hw, hw::LoadOptions{o.sets, false});
  Workload w;
  std::string scenario;
  if (!o.workload.empty()) {
    w = read_workload(o.workload);
    scenario = o.workload;
  } else {
    const std::string model = o.model.empty() ? std::string(kDefaultModel) : o.model;
    traces::GenOptions g;
    g.phase = traces::Phase::kDecode;
    g.context = o.context;
    g.tokens = o.tokens;
    w = traces::generate(traces::load_arch(traces::find_arch(model, config_dir())), g);
    scenario = fmt::format("{} decode, {} tokens from a {}-token context", model, o.tokens,
                           o.context);
  }
  planner::Target target = make_target(topo, o.device, o.devices, "--device");
  if (!o.budget.empty()) target.budget = parse_budget(o.budget, "--budget");
  const auto pins = parse_pins(o.pins, topo);

  // The resident reference: no offload, on a device with room for everything.
  hw::Topology roomy = topo;
  roomy.tiers[target.device_tier].capacity.value = uint64_t{1} << 60;
  sim::Time reference = 0;
  {
    planner::PlanRequest req;
    req.policy = "resident";
    req.target = target;
    req.target.budget = uint64_t{1} << 60;
    SimEvaluator eval(w, roomy);
    req.evaluator = &eval;
    const planner::PlanOutcome r = planner::make_plan(w, roomy, req);
    if (r.ok && r.evaluation && r.evaluation->ok) reference = r.evaluation->makespan_ps;
  }

  std::vector<std::string> names = o.policies;
  if (names.empty()) {
    for (const auto& p : planner::policies()) names.emplace_back(p.name);
  }
  std::vector<Row> rows;
  for (const std::string& name : names) {
    if (planner::find_policy(name) == nullptr) {
      std::vector<std::string_view> known;
      for (const auto& p : planner::policies()) known.push_back(p.name);
      throw InputError::at(SourcePos{"--policies"}, "unknown policy '{}'{}", name,
                           did_you_mean(name, known));
    }
    if (!o.json && !o.csv) fmt::print(stderr, "planning {} ...\n", name);
    planner::PlanRequest req;
    req.policy = name;
    req.target = target;
    req.pins = pins;
    req.threads = o.threads;
    SimEvaluator eval(w, topo);
    req.evaluator = &eval;
    Row row{name, planner::make_plan(w, topo, req), {}};
    if (row.out.ok) {
      sim::SimOptions so;
      so.live_top = 0;
      row.sim = sim::simulate(*row.out.plan, w, topo, so);
      row.peak = device_peak(row.sim, topo, *row.out.plan);
      for (const auto& t : row.sim.transfers) {
        row.exposed += t.exposed;
        row.moved += static_cast<double>(t.bytes);
      }
      for (const auto& t : row.sim.tiers) {
        uint64_t& p = row.tier_peak[topo.tiers[t.tier].id];
        p = std::max(p, t.peak);
      }
      for (const auto& l : row.sim.links) {
        if (l.kind == sim::ResourceKind::kLink) row.link_bytes[without_instance(l.name)] += l.bytes;
      }
      for (const auto& l : row.sim.links) {
        if (l.kind != sim::ResourceKind::kLink || l.bytes <= row.busiest_bytes) continue;
        row.busiest = l.name;
        row.busiest_bytes = l.bytes;
        row.busiest_busy =
            row.sim.makespan > 0 ? static_cast<double>(l.busy_ps) / static_cast<double>(row.sim.makespan) : 0;
      }
      if (!o.plans_dir.empty()) {
        std::filesystem::create_directories(o.plans_dir);
        write_file_atomic(o.plans_dir + "/" + name + ".json", write_plan(*row.out.plan, &w));
      }
    }
    rows.push_back(std::move(row));
  }

  const Row* best = nullptr;
  for (const Row& r : rows) {
    if (!r.out.ok || r.sim.error) continue;
    if (best == nullptr || r.sim.makespan < best->sim.makespan ||
        (r.sim.makespan == best->sim.makespan && r.peak < best->peak)) {
      best = &r;
    }
  }

  std::set<std::string> tier_cols, link_cols;
  for (const Row& r : rows) {
    for (const auto& [k, v] : r.tier_peak) tier_cols.insert(k);
    for (const auto& [k, v] : r.link_bytes) link_cols.insert(k);
  }
  std::string text;
  const auto& b = rows.empty() ? planner::Bounds{} : rows.front().out.bounds;
  if (o.json) {
    nlohmann::ordered_json j;
    j["format"] = "tierflow.compare/1";
    j["scenario"] = scenario;
    j["topology"] = topo.name;
    j["budget"] = rows.empty() ? 0 : rows.front().out.budget;
    j["resident_reference_ps"] = reference;
    j["bounds"] = {{"residency", b.residency}, {"makespan_ps", b.makespan_ps},
                   {"compute_ps", b.compute_ps}, {"traffic_bytes", b.traffic_bytes},
                   {"ingress_bytes_per_s", b.ingress}};
    for (const Row& r : rows) {
      nlohmann::ordered_json x;
      x["policy"] = r.policy;
      x["ok"] = r.out.ok && !r.sim.error;
      if (!r.out.ok) x["reason"] = r.out.reason;
      if (r.out.ok) {
        x["makespan_ps"] = r.sim.makespan;
        x["device_peak"] = r.peak;
        x["exposed_ps"] = r.exposed;
        x["bytes_moved"] = r.moved;
        x["busiest_link"] = r.busiest;
        x["busiest_link_bytes"] = r.busiest_bytes;
        nlohmann::ordered_json tiers = nlohmann::ordered_json::array();
        for (const auto& t : r.sim.tiers) tiers.push_back({{"tier", t.name}, {"peak", t.peak}});
        x["tiers"] = tiers;
        nlohmann::ordered_json links = nlohmann::ordered_json::array();
        for (const auto& [name, bytes] : r.link_bytes) {
          links.push_back({{"link", name}, {"bytes", bytes}});
        }
        x["links"] = links;
      }
      j["policies"].push_back(x);
    }
    j["best"] = best == nullptr ? "" : best->policy;
    text = j.dump(2) + "\n";
  } else if (o.csv) {
    text = "policy,status,makespan_ps,overhead_vs_resident,device_peak,peak_over_residency_bound,"
           "makespan_over_bound,exposed_ps,bytes_moved,busiest_link,busiest_link_bytes";
    for (const auto& c : tier_cols) text += "," + csv_field("peak " + c);
    for (const auto& c : link_cols) text += "," + csv_field("bytes " + c);
    text += "\n";
    for (const Row& r : rows) {
      if (!r.out.ok) {
        text += fmt::format("{},infeasible,,,,,,,,,{}\n", r.policy,
                            std::string(tier_cols.size() + link_cols.size(), ','));
        continue;
      }
      std::string extra;
      for (const auto& c : tier_cols) {
        extra += fmt::format(",{}", r.tier_peak.count(c) != 0 ? r.tier_peak.at(c) : 0);
      }
      for (const auto& c : link_cols) {
        extra += fmt::format(",{:.0f}", r.link_bytes.count(c) != 0 ? r.link_bytes.at(c) : 0.0);
      }
      text += fmt::format("{},ok,{},{},{},{},{},{},{:.0f},{},{:.0f}{}\n", r.policy, r.sim.makespan,
                          ratio(static_cast<double>(r.sim.makespan), static_cast<double>(reference)),
                          r.peak, ratio(static_cast<double>(r.peak), static_cast<double>(b.residency)),
                          ratio(static_cast<double>(r.sim.makespan), static_cast<double>(b.makespan_ps)),
                          r.exposed, r.moved, csv_field(r.busiest), r.busiest_bytes, extra);
    }
  } else {
    text += fmt::format("scenario   {}\ntopology   {} ({} program{} on '{}')\n", scenario, topo.name,
                        target.devices, target.devices == 1 ? "" : "s",
                        topo.tiers[target.device_tier].id);
    if (!rows.empty()) {
      text += fmt::format("budget     {} per device; resident needs {}\n",
                          to_string_approx(Bytes{rows.front().out.budget}),
                          to_string_approx(Bytes{rows.front().out.resident_peak}));
    }
    text += fmt::format("bounds     residency {}, makespan {} (compute {}, traffic {})\n",
                        to_string_approx(Bytes{b.residency}), to_string_approx(Duration{b.makespan_ps}),
                        to_string_approx(Duration{b.compute_ps}), to_string_approx(Bytes{b.traffic_bytes}));
    text += fmt::format("resident with unlimited memory: {}\n\n", to_string_approx(Duration{reference}));
    Table t({"policy", "makespan", "vs resident", "x bound", "device peak", "x residency",
             "exposed", "moved", "busiest link", "busy"},
            {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
             Table::Align::kRight, Table::Align::kRight, Table::Align::kRight, Table::Align::kRight,
             Table::Align::kLeft, Table::Align::kRight});
    for (const Row& r : rows) {
      if (!r.out.ok) {
        t.add_row({r.policy, std::string(r.out.infeasible ? "does not fit" : "failed"), "", "", "", "", "", "", "", ""});
        continue;
      }
      t.add_row({r.policy, to_string_approx(Duration{r.sim.makespan}),
                 ratio(static_cast<double>(r.sim.makespan), static_cast<double>(reference)),
                 ratio(static_cast<double>(r.sim.makespan), static_cast<double>(b.makespan_ps)),
                 to_string_approx(Bytes{r.peak}),
                 ratio(static_cast<double>(r.peak), static_cast<double>(b.residency)),
                 to_string_approx(Duration{r.exposed}),
                 to_string_approx(Bytes{static_cast<uint64_t>(r.moved)}), r.busiest,
                 fmt::format("{:.0f}%", 100 * r.busiest_busy)});
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
    for (const Row& r : rows) {
      if (!r.out.ok) continue;
      std::vector<std::string> cells = {r.policy};
      for (const auto& c : tier_cols) {
        cells.push_back(r.tier_peak.count(c) != 0 ? to_string_approx(Bytes{r.tier_peak.at(c)}) : "-");
      }
      for (const auto& c : link_cols) {
        cells.push_back(r.link_bytes.count(c) != 0
                            ? to_string_approx(Bytes{static_cast<uint64_t>(r.link_bytes.at(c))})
                            : "-");
      }
      m.add_row(std::move(cells));
    }
    if (!m.empty()) text += "\nmemory per tier (largest instance) and bytes per link direction:\n" + m.render();
    for (const Row& r : rows) {
      if (!r.out.ok) text += fmt::format("\n{}: {}", r.policy, r.out.reason);
    }
    if (best != nullptr) text += fmt::format("\nbest: {}\n", best->policy);
  }
  write_file_atomic(o.output.empty() ? "-" : o.output, text);

  if (!o.timeline.empty() && best != nullptr) {
    sim::Timeline tl(o.timeline);
    sim::SimOptions so;
    so.timeline = &tl;
    so.live_top = 0;
    (void)sim::simulate(*best->out.plan, w, topo, so);
    tl.finish();
    if (!o.json && !o.csv) fmt::print(stderr, "timeline of the best plan ({}): {}\n", best->policy, o.timeline);
  }
  return static_cast<int>(best == nullptr ? ExitCode::kInfeasible : ExitCode::kOk);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "every policy side by side: makespan, memory, traffic, gap to the bounds");
  cmd->add_option("--hw", o->hw, "topology YAML (default: configs/hw/h100-sxm-8gpu.yaml)");
  cmd->add_option("--workload", o->workload, "workload JSON (default: Llama-3-70B decode)");
  cmd->add_option("--model", o->model, "generate a decode workload of this shipped model instead");
  cmd->add_option("--context", o->context, "decode context for --model (default 4096)");
  cmd->add_option("--tokens", o->tokens, "decode tokens for --model (default 8)");
  cmd->add_option("--policies", o->policies, "policies to compare (default: all)")->delimiter(',');
  cmd->add_option("--budget", o->budget, "device bytes per device (default: its capacity)");
  cmd->add_option("--pin", o->pins, "KIND=TIER pins for every policy (repeatable)");
  cmd->add_option("--device", o->device, "device class (default: the first)");
  cmd->add_option("--devices", o->devices, "programs, one per device (default 1)");
  cmd->add_option("--set", o->sets, "override a topology field: PATH=VALUE (repeatable)");
  cmd->add_option("--threads", o->threads,
                  "threads for the tierflow policy's pipelines (default: one per hardware "
                  "thread; the results do not depend on it)");
  cmd->add_option("--timeline", o->timeline, "write the best plan's Chrome trace here");
  cmd->add_option("--plans", o->plans_dir, "write each policy's plan (workload inline) here");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->add_flag("--csv", o->csv, "print CSV");
  cmd->add_option("-o,--output", o->output, "write the table here instead of stdout");
  cmd->callback([o] {
    if (o->json && o->csv) throw CLI::ValidationError("--json and --csv exclude each other");
    if (!o->workload.empty() && !o->model.empty()) {
      throw CLI::ValidationError("--workload and --model exclude each other");
    }
    throw CommandResult(run_compare(*o));
  });
}

}  // namespace tierflow::cli
