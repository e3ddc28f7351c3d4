#include "tools/study/row.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>

#include "core/diagnostics.h"
#include "core/json_writer.h"
#include "core/table.h"
#include "core/units.h"

namespace tierflow::study {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(double bytes) { return bytes / kGiB; }
Cell ratio_cell(double a, double b) { return b > 0 ? Cell{a / b} : Cell{}; }

struct Def {
  std::string name;
  std::string_view description;
  std::function<Cell(const Trial&)> get;
};

/// A metric of the main phase, null when its simulation did not run.
template <class F>
std::function<Cell(const Trial&)> metric(F f) {
  return [f](const Trial& t) -> Cell { return t.main().ok() ? Cell{f(t.main())} : Cell{}; };
}

/// A metric of the whole trial (Trial::device_peak() and the like), null unless it ran.
template <class F>
std::function<Cell(const Trial&)> whole(F f) {
  return [f](const Trial& t) -> Cell { return t.ok ? Cell{f(t)} : Cell{}; };
}

/// A value as a cell: an integer when it is one, else text; null when empty.
Cell value_cell(const std::string& v) {
  if (v.empty()) return Cell{};
  int64_t i = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i);
  if (ec == std::errc() && end == v.data() + v.size()) return Cell{i};
  return Cell{v};
}

/// What a workload file's meta records under `key` (its JSON text, a string unquoted);
/// null when it records none or the workload was not read.
Cell meta_cell(const Trial& t, const std::string& key) {
  if (t.phases.empty() || t.phases.front().workload == nullptr) return Cell{};
  const auto& meta = t.phases.front().workload->meta;
  const auto it = meta.find(key);
  if (it == meta.end()) return Cell{};
  std::string v = it->second;
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return value_cell(v);
}

std::vector<Def> make_defs() {
  std::vector<Def> d;
  auto in = [&](std::string name, std::string_view what) {
    d.push_back({name, what, [name](const Trial& t) -> Cell {
                   return value_cell(get_field(t.scenario, name));
                 }});
  };
  // A generator input: of a workload file, what its meta records (null where it records
  // none), not the generator's defaults, which did not make it.
  auto gen_in = [&](std::string name, std::string_view what) {
    d.push_back({name, what, [name](const Trial& t) -> Cell {
                   if (!t.scenario.workload.file.empty()) return meta_cell(t, name);
                   return value_cell(get_field(t.scenario, name));
                 }});
  };
  d.push_back({"topology", "topology name", [](const Trial& t) { return Cell{t.topology}; }});
  d.push_back({"hw", "topology file (a shipped one by its name)", [](const Trial& t) {
                 const std::string label =
                     topology_label(t.scenario.hw.empty() ? default_topology() : t.scenario.hw);
                 return Cell{shown_file(t.scenario.written, "hw", label)};
               }});
  d.push_back({"sets", "topology overrides, ';'-separated", [](const Trial& t) {
                 return Cell{fmt::format("{}", fmt::join(t.scenario.sets, ";"))};
               }});
  d.push_back({"workload", "what was planned", [](const Trial& t) {
                 const std::string what = describe_workload(t.scenario);
                 if (t.scenario.workload.file.empty()) return Cell{what};
                 return Cell{shown_file(t.scenario.written, "workload", what)};
               }});
  d.push_back({"model", "model name, model YAML or HF config.json (empty for a workload file)",
               [](const Trial& t) -> Cell {
                 const WorkloadSource& w = t.scenario.workload;
                 if (!w.file.empty()) return Cell{};
                 return Cell{shown_file(t.scenario.written,
                                        w.hf_config.empty() ? "model" : "hf_config",
                                        model_label(w))};
               }});
  d.push_back({"model_sets", "model overrides, ';'-separated", [](const Trial& t) {
                 return Cell{fmt::format("{}", fmt::join(t.scenario.workload.model_sets, ";"))};
               }});
  d.push_back({"phase", "prefill, decode, train, or request", [](const Trial& t) {
                 if (t.scenario.request) return Cell{std::string("request")};
                 if (!t.scenario.workload.file.empty()) return meta_cell(t, "phase");
                 return Cell{get_field(t.scenario, "phase")};
               }});
  gen_in("batch", "sequences");
  gen_in("seq", "prefill or training tokens per sequence (step phases)");
  gen_in("context", "decode: tokens cached before the first step");
  gen_in("tokens", "decode: steps planned");
  in("prompt", "request: prompt tokens");
  in("generate", "request: generated tokens");
  gen_in("tp", "tensor-parallel degree");
  gen_in("weight_dtype", "weight element type");
  gen_in("kv_dtype", "KV-cache element type");
  in("routing", "MoE routing: expected, oracle (the plan sees the routing that runs) or realistic");
  in("expert_cache", "realistic routing: the runtime's expert cache (none, lru:SIZE, lfu:SIZE[,predict])");
  in("device", "device class (empty: the first)");
  d.push_back({"devices",
               "programs, one per device (0, every device of the class, as many as "
               "it planned)",
               [](const Trial& t) -> Cell {
                 const auto& plan = t.main().outcome.plan;
                 if (t.scenario.devices == 0 && plan) {
                   return Cell{static_cast<int64_t>(plan->programs.size())};
                 }
                 return value_cell(get_field(t.scenario, "devices"));
               }});
  in("policy", "planning policy");
  d.push_back({"pins", "KIND=TIER pins, ';'-separated", [](const Trial& t) {
                 return Cell{fmt::format("{}", fmt::join(t.scenario.pins, ";"))};
               }});
  d.push_back({"device_tier", "tier the devices compute from",
               [](const Trial& t) { return Cell{t.device_tier}; }});
  d.push_back({"budget_gib", "device bytes per program the plan was made for",
               [](const Trial& t) { return Cell{gib(static_cast<double>(t.budget))}; }});
  d.push_back({"status", "ok, infeasible (does not fit) or failed", [](const Trial& t) {
                 return Cell{std::string(t.ok ? "ok" : t.infeasible ? "infeasible" : "failed")};
               }});
  d.push_back({"reason", "why not ok", [](const Trial& t) { return Cell{t.reason}; }});
  d.push_back({"notes",
               "what to read the result with (a context past the model's max_context, ...), ' | "
               "'-separated",
               [](const Trial& t) { return Cell{fmt::format("{}", fmt::join(t.notes, " | "))}; }});
  d.push_back({"pipeline", "the main phase's pipeline as run",
               [](const Trial& t) { return Cell{t.main().outcome.pipeline}; }});
  d.push_back({"makespan_s", "simulated makespan of the main phase (the step, or the first decode)",
               metric([](const PhaseResult& p) { return to_seconds(p.makespan_ps); })});
  d.push_back({"latency_s", "the step's makespan, or a request's TTFT + decode time",
               [](const Trial& t) -> Cell { return t.ok ? Cell{to_seconds(t.latency_ps())} : Cell{}; }});
  d.push_back({"ttft_ms", "request: time to first token (the prefill)", [](const Trial& t) -> Cell {
                 return t.request ? Cell{1e3 * to_seconds(t.request->ttft_ps)} : Cell{};
               }});
  d.push_back({"tpot_ms", "request: decode time per output token; decode step: makespan / tokens",
               [](const Trial& t) -> Cell {
                 if (t.request) return t.request->tpot_ms > 0 ? Cell{t.request->tpot_ms} : Cell{};
                 const PhaseResult& p = t.main();
                 if (!p.ok() || p.tokens == 0) return Cell{};
                 return Cell{1e3 * to_seconds(p.makespan_ps) / static_cast<double>(p.tokens)};
               }});
  d.push_back({"decode_tokens_per_s", "batch x decode tokens / decode time",
               [](const Trial& t) -> Cell {
                 if (t.request) {
                   return t.request->decode_tokens_per_s > 0 ? Cell{t.request->decode_tokens_per_s} : Cell{};
                 }
                 const PhaseResult& p = t.main();
                 if (!p.ok() || p.tokens == 0) return Cell{};
                 // A workload file's batch is its own (meta), not the generator's default.
                 int64_t batch = t.scenario.workload.gen.batch;
                 if (!t.scenario.workload.file.empty()) {
                   const Cell b = meta_cell(t, "batch");
                   if (!std::holds_alternative<int64_t>(b)) return Cell{};
                   batch = std::get<int64_t>(b);
                 }
                 return Cell{static_cast<double>(batch * p.tokens) / to_seconds(p.makespan_ps)};
               }});
  d.push_back({"throughput_tokens_per_s",
               "request: batch x generated tokens / (TTFT + decode time), as FlexGen defines it",
               [](const Trial& t) -> Cell {
                 return t.request ? Cell{t.request->throughput_tokens_per_s} : Cell{};
               }});
  d.push_back({"decode_extrapolated", "request: decode extrapolated from two steady windows",
               [](const Trial& t) -> Cell { return t.request ? Cell{t.request->extrapolated} : Cell{}; }});
  d.push_back({"device_peak_gib",
               "simulated device-tier peak, largest over the programs (and a request's phases)",
               whole([](const Trial& t) { return gib(static_cast<double>(t.device_peak())); })});
  d.push_back({"residency_bound_gib", "lower bound on the device peak",
               [](const Trial& t) { return Cell{gib(static_cast<double>(t.residency_bound()))}; }});
  d.push_back({"makespan_bound_s", "lower bound on the makespan",
               [](const Trial& t) { return Cell{to_seconds(t.main().outcome.bounds.makespan_ps)}; }});
  d.push_back({"compute_s", "compute time of the main phase (its makespan with unlimited memory)",
               [](const Trial& t) { return Cell{to_seconds(t.main().outcome.bounds.compute_ps)}; }});
  d.push_back({"makespan_over_bound", "makespan / makespan bound", [](const Trial& t) -> Cell {
                 const PhaseResult& p = t.main();
                 if (!p.ok()) return Cell{};
                 return ratio_cell(static_cast<double>(p.makespan_ps), static_cast<double>(p.outcome.bounds.makespan_ps));
               }});
  d.push_back(
      {"peak_over_residency_bound", "device peak / residency bound", [](const Trial& t) -> Cell {
         if (!t.ok) return Cell{};
         return ratio_cell(static_cast<double>(t.device_peak()),
                           static_cast<double>(t.residency_bound()));
       }});
  d.push_back({"exposed_s", "time compute waited on transfers (a request: prefill and decode)",
               whole([](const Trial& t) { return to_seconds(t.exposed_ps()); })});
  d.push_back({"moved_gib", "bytes prefetched and stored (a request: prefill and decode)",
               whole([](const Trial& t) { return gib(t.moved_bytes()); })});
  // Realistic routing only (null otherwise): the realized plan's on-demand expert fetches.
  auto realized = [](auto f) {
    return [f](const Trial& t) -> Cell {
      const PhaseResult& p = t.main();
      return p.ok() && p.realized ? Cell{f(p)} : Cell{};
    };
  };
  d.push_back(
      {"routing_hits", "realistic routing: routed experts found on the device (all programs)",
       realized([](const PhaseResult& p) { return static_cast<int64_t>(p.routing.hits); })});
  d.push_back(
      {"routing_misses", "realistic routing: experts fetched on demand (all programs)",
       realized([](const PhaseResult& p) { return static_cast<int64_t>(p.routing.misses); })});
  d.push_back(
      {"miss_gib", "realistic routing: bytes fetched on demand", realized([](const PhaseResult& p) {
         return gib(static_cast<double>(p.routing.miss_bytes));
       })});
  d.push_back({"miss_stall_s", "realistic routing: time compute waited on demand fetches",
               realized([](const PhaseResult& p) { return to_seconds(p.miss_exposed_ps); })});
  d.push_back({"wasted_prefetch_gib", "realistic routing: prefetched bytes no op read",
               realized([](const PhaseResult& p) {
                 return gib(static_cast<double>(p.routing.wasted_bytes));
               })});
  d.push_back({"memory_stall_s", "realistic routing: time copies waited for room on the device",
               realized([](const PhaseResult& p) { return to_seconds(p.memory_stall_ps); })});
  d.push_back({"cache_evictions", "realistic routing: experts the expert cache detached for room",
               realized([](const PhaseResult& p) { return static_cast<int64_t>(p.routing.evictions); })});
  d.push_back({"predicted_gib", "realistic routing: bytes the expert cache's predictor prefetched",
               realized([](const PhaseResult& p) {
                 return gib(static_cast<double>(p.routing.predicted_bytes));
               })});
  d.push_back({"busiest_link", "link direction with the most bytes",
               metric([](const PhaseResult& p) { return p.busiest_link; })});
  d.push_back({"busiest_link_busy", "its busy fraction of the makespan",
               metric([](const PhaseResult& p) { return p.busiest_link_busy; })});
  d.push_back({"binding", "what limits the plan: a tier's capacity, a link, or compute",
               [](const Trial& t) { return Cell{t.main().binding}; }});
  for (size_t k = 0; k < hw::kTierKindNames.size(); ++k) {
    d.push_back({fmt::format("peak_{}_gib", hw::kTierKindNames[k]),
                 "simulated peak of the tiers of this kind (largest instance)",
                 metric([k](const PhaseResult& p) {
                   return gib(static_cast<double>(p.peak_by_tier_kind[k]));
                 })});
  }
  for (size_t k = 0; k < hw::kLinkKindNames.size(); ++k) {
    d.push_back({fmt::format("{}_gib", hw::kLinkKindNames[k]),
                 "bytes over the links of this kind, both directions, all instances",
                 metric([k](const PhaseResult& p) { return gib(p.bytes_by_link_kind[k]); })});
  }
  return d;
}

const std::vector<Def>& defs() {
  static const std::vector<Def> d = make_defs();
  return d;
}

}  // namespace

/// A column's type, by name: the inputs and words are text, counts integer, flags boolean,
/// every measure real.
CellType type_of(std::string_view name) {
  static constexpr std::string_view kText[] = {
      "topology",     "hw",       "sets",    "workload",     "model",    "model_sets",   "phase",
      "weight_dtype", "kv_dtype", "routing", "expert_cache", "device",   "policy",       "pins",
      "device_tier",  "status",   "reason",  "notes",        "pipeline", "busiest_link", "binding"};
  static constexpr std::string_view kInteger[] = {
      "batch", "seq", "context", "tokens", "prompt", "generate", "tp", "devices", "routing_hits", "routing_misses", "cache_evictions"};
  static constexpr std::string_view kBool[] = {"decode_extrapolated"};
  if (std::ranges::find(kText, name) != std::end(kText)) return CellType::kText;
  if (std::ranges::find(kInteger, name) != std::end(kInteger)) return CellType::kInteger;
  if (std::ranges::find(kBool, name) != std::end(kBool)) return CellType::kBool;
  return CellType::kReal;
}

const std::vector<Column>& columns() {
  static const std::vector<Column> c = [] {
    std::vector<Column> out;
    for (const Def& d : defs()) out.push_back({d.name, d.description, type_of(d.name)});
    return out;
  }();
  return c;
}

const Cell& Row::at(std::string_view column) const {
  const auto& defs_ = defs();
  for (size_t i = 0; i < defs_.size(); ++i) {
    if (defs_[i].name == column) return cells[i];
  }
  assert_fail("column", __FILE__, __LINE__, fmt::format("no column '{}'", column));
}

Row row_of(const Trial& t) {
  Row r;
  for (const Def& d : defs()) r.cells.push_back(d.get(t));
  return r;
}

std::string cell_text(const Cell& c) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) return "";
        else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>) return v;
        else return fmt::format("{}", v);
      },
      c);
}

std::string csv_of(const std::vector<std::string>& names, const std::vector<std::vector<Cell>>& rows) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += csv_field(names[i]);
  }
  out += '\n';
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (i > 0) out += ',';
      out += csv_field(cell_text(r[i]));
    }
    out += '\n';
  }
  return out;
}

std::string jsonl_of(const std::vector<std::string>& names, const std::vector<std::vector<Cell>>& rows) {
  std::string out;
  JsonWriter w(out);
  for (const auto& r : rows) {
    w.begin_object();
    for (size_t i = 0; i < r.size(); ++i) {
      w.key(names[i]);
      std::visit(
          [&w](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::monostate>) {
              w.null();
            } else if constexpr (std::is_same_v<T, std::string>) {
              w.string(v);
            } else if constexpr (std::is_same_v<T, bool>) {
              w.boolean(v);
            } else if constexpr (std::is_same_v<T, double>) {
              // JSON has no infinity or NaN.
              if (std::isfinite(v)) {
                w.number(v);
              } else {
                w.null();
              }
            } else {
              w.integer(v);
            }
          },
          r[i]);
    }
    w.end_object();
    out += '\n';
  }
  return out;
}

namespace {

std::vector<std::string> column_names() {
  std::vector<std::string> names;
  for (const Column& c : columns()) names.push_back(c.name);
  return names;
}

std::vector<std::vector<Cell>> cells_of(const std::vector<Row>& rows) {
  std::vector<std::vector<Cell>> out;
  out.reserve(rows.size());
  for (const Row& r : rows) out.push_back(r.cells);
  return out;
}

}  // namespace

std::string rows_csv(const std::vector<Row>& rows) { return csv_of(column_names(), cells_of(rows)); }

std::string rows_jsonl(const std::vector<Row>& rows) { return jsonl_of(column_names(), cells_of(rows)); }

}  // namespace tierflow::study
