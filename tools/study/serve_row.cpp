#include "tools/study/serve_row.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <functional>

#include "hw_models/topology.h"

namespace tierflow::study {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Def {
  std::string name;
  std::string_view description;
  CellType type = CellType::kReal;
  std::function<Cell(const ServeOutcome&)> get;
};

/// A measure of the run's counted requests; null when it did not run, ran the cache only,
/// or the measure is undefined (NaN: nothing finished).
template <class F>
std::function<Cell(const ServeOutcome&)> measure(F f) {
  return [f](const ServeOutcome& o) -> Cell {
    if (o.run == nullptr || o.run->result.cache_only) return Cell{};
    const double v = f(*o.run);
    return std::isfinite(v) ? Cell{v} : Cell{};
  };
}

/// A count of the run (the cache's counts hold for a cache-only run too).
template <class F>
std::function<Cell(const ServeOutcome&)> count(F f) {
  return [f](const ServeOutcome& o) -> Cell {
    return o.run == nullptr ? Cell{} : Cell{static_cast<int64_t>(f(*o.run))};
  };
}

/// A setting as the point set it: text, or a number read back.
std::function<Cell(const ServeOutcome&)> setting(std::string field, CellType type) {
  return [field, type](const ServeOutcome& o) -> Cell {
    const std::string v = get_serve_field(o.settings, field);
    if (v.empty()) return Cell{};
    if (type == CellType::kInteger) return Cell{static_cast<int64_t>(std::stoll(v))};
    if (type == CellType::kReal) return Cell{std::stod(v)};
    if (type == CellType::kBool) return Cell{v == "true"};
    return Cell{v};
  };
}

/// The share of all prompt tokens found at the levels whose tier is of `kind`.
double hit_share(const ServeOutcome& o, hw::TierKind kind) {
  const serve::ServeResult& r = o.run->result;
  uint64_t hit = 0;
  for (const serve::LevelRecord& l : r.levels) {
    const auto t = o.setup->topology.tier_index(l.tier);
    if (t && o.setup->topology.tiers[*t].kind == kind) hit += l.hit_tokens;
  }
  return r.prompt_tokens == 0 ? 0.0 : static_cast<double>(hit) / static_cast<double>(r.prompt_tokens);
}

std::vector<Def> make_defs() {
  std::vector<Def> d;
  const auto text = CellType::kText, integer = CellType::kInteger, real = CellType::kReal;
  d.push_back({"topology", "topology name", text, [](const ServeOutcome& o) -> Cell {
                 return o.setup != nullptr ? Cell{o.setup->topology_name} : Cell{};
               }});
  d.push_back({"hw", "topology file (a shipped one by its name)", text, [](const ServeOutcome& o) {
                 const std::string label =
                     topology_label(o.settings.hw.empty() ? default_topology() : o.settings.hw);
                 return Cell{shown_file(o.settings.written, "hw", label)};
               }});
  d.push_back({"sets", "topology overrides, ';'-separated", text, [](const ServeOutcome& o) {
                 return Cell{fmt::format("{}", fmt::join(o.settings.sets, ";"))};
               }});
  d.push_back(
      {"model", "model name, model YAML or HF config.json", text, [](const ServeOutcome& o) {
         const WorkloadSource& m = o.settings.model;
         return Cell{m.hf_config.empty()
                         ? shown_file(o.settings.written, "model", m.model)
                         : shown_file(o.settings.written, "hf_config", m.hf_config)};
       }});
  d.push_back({"model_sets", "model overrides, ';'-separated", text, [](const ServeOutcome& o) {
                 return Cell{fmt::format("{}", fmt::join(o.settings.model.model_sets, ";"))};
               }});
  d.push_back(
      {"trace", "the request trace file, or the generator's spec", text, [](const ServeOutcome& o) {
         return Cell{o.settings.trace.empty()
                         ? o.settings.arrivals
                         : shown_file(o.settings.written, "trace", o.settings.trace)};
       }});
  struct In {
    std::string_view name, what;
    CellType type;
  };
  for (const In& f :
       {In{"rate_scale", "arrivals compressed by this factor", real},
        In{"first", "only the first N requests (empty: all)", integer},
        In{"block_tokens", "tokens per KV block of traces without hashes", integer},
        In{"warmup", "requests arriving before this left out of the measures", text},
        In{"device", "device class (empty: the first)", text},
        In{"nodes", "copies of the topology serving together", integer},
        In{"tp", "devices per replica, tensor parallel (the least that fits when not given)",
           integer},
        In{"pp",
           "pipeline stages per replica, each of tp devices (when neither is given: 1, or "
           "the least that fits where no TP does)",
           integer},
        In{"replicas",
           "data-parallel replicas (with prefill replicas: decoding; as many as the devices "
           "hold when not given)",
           integer},
        In{"prefill_replicas", "disaggregated: prefill-only replicas (0: none)", integer},
        In{"prefill_tp", "disaggregated: the prefill replicas' TP (empty: tp)", integer},
        In{"router", "round-robin, least-loaded, prefix or kv-aware", text},
        In{"decode_router", "disaggregated: the decode replica's pick (empty: least-loaded)", text},
        In{"token_budget", "new tokens per iteration (chunked prefill)", integer},
        In{"max_seqs", "running sequences per replica", integer},
        In{"device_policy", "eviction of the device level's blocks", text},
        In{"preemption", "recompute or swap", text},
        In{"swap_space", "swap preemption: space per device", text},
        In{"swap_tier", "swap preemption: its tier", text},
        In{"spec_tokens", "speculative decoding: draft tokens per step (0: off)", integer},
        In{"spec_accept", "speculative decoding: each draft token's acceptance probability", real},
        In{"spec_draft", "speculative decoding: the draft model (empty: n-gram lookup)", text},
        In{"kv_tiers", "KV tiers below the device, as --kv-tiers", text},
        In{"load", "hits below the device loaded layered or before", text},
        In{"slo", "goodput bounds, as --slo", text},
        In{"weight_dtype", "weight element type", text},
        In{"kv_dtype", "KV-cache element type", text},
        In{"cache_only", "replayed against the cache alone (no time)", CellType::kBool}}) {
    auto get = setting(std::string(f.name), f.type);
    if (f.name == "tp" || f.name == "pp" || f.name == "replicas") {
      // Not given, what the setup took: the least TP (and stages) with room, as many
      // replicas as the devices hold (when it could choose them).
      const std::string_view which = f.name;
      get = [get, which](const ServeOutcome& o) {
        if (o.setup == nullptr) return get(o);
        return Cell{static_cast<int64_t>(which == "tp"   ? o.setup->gen.tp
                                         : which == "pp" ? o.setup->engine.pp
                                                         : o.setup->engine.replicas)};
      };
    }
    d.push_back({std::string(f.name), f.what, f.type, std::move(get)});
  }
  d.push_back({"status", "ok, infeasible (the model does not fit) or failed", text,
               [](const ServeOutcome& o) { return Cell{o.status}; }});
  d.push_back({"reason", "why not ok", text, [](const ServeOutcome& o) { return Cell{o.reason}; }});
  d.push_back(
      {"notes",
       "what to read the result with (serve_notes: the trace's, the settings'), ' | '-separated",
       text, [](const ServeOutcome& o) {
         if (o.setup == nullptr) return Cell{std::string()};
         return Cell{fmt::format("{}", fmt::join(serve_notes(*o.setup), " | "))};
       }});
  d.push_back({"requests", "requests counted: arrived after the warm-up and not rejected",
               integer, count([](const ServeStudy& x) {
                 return x.result.cache_only ? x.trace.requests.size() : x.summary.counted;
               })});
  d.push_back({"finished", "counted requests that finished", integer, [](const ServeOutcome& o) -> Cell {
                 if (o.run == nullptr || o.run->result.cache_only) return Cell{};
                 return Cell{static_cast<int64_t>(o.run->summary.finished)};
               }});
  d.push_back({"rejected", "requests whose KV exceeds an empty device pool (never served)",
               integer, count([](const ServeStudy& x) { return x.summary.rejected; })});
  d.push_back({"preemptions", "preemptions of the counted requests", integer,
               count([](const ServeStudy& x) { return x.summary.preemptions; })});
  d.push_back({"recomputed_tokens", "tokens preempted sequences computed again", integer,
               count([](const ServeStudy& x) { return x.result.recomputed_tokens; })});
  d.push_back({"swap_outs", "preemptions by swap", integer,
               count([](const ServeStudy& x) { return x.result.swap_outs; })});
  d.push_back({"iterations", "engine iterations, all replicas", integer,
               count([](const ServeStudy& x) { return x.result.iterations; })});
  for (const bool most : {false, true}) {
    d.push_back({most ? "busy_max_share" : "busy_mean_share",
                 most ? "the busiest replica's share of the run (to the last finish) with an "
                        "iteration in flight"
                      : "the replicas' mean share of the run (to the last finish) with an "
                        "iteration in flight",
                 real, measure([most](const ServeStudy& x) {
                   const serve::ServeResult& r = x.result;
                   double v = 0;
                   for (const serve::ReplicaRecord& rep : r.replica_records) {
                     const double b = static_cast<double>(rep.busy);
                     v = most ? std::max(v, b) : v + b;
                   }
                   if (!most)
                     v /= static_cast<double>(std::max<size_t>(1, r.replica_records.size()));
                   return v / static_cast<double>(std::max<serve::Time>(1, r.makespan));
                 })});
  }
  d.push_back({"spec_tokens_per_step",
               "speculative decoding: tokens a drafting decode step yields, accepted drafts and "
               "one more (empty: off)",
               real, measure([](const ServeStudy& x) { return x.result.spec_tokens_per_step(); })});
  struct Latency {
    std::string_view name;
    double percentile;  // 0: the mean
    bool in_ms;
  };
  for (const Latency& l :
       {Latency{"queue", 50, false}, Latency{"queue", 99, false}, Latency{"ttft", 50, false},
        Latency{"ttft", 90, false}, Latency{"ttft", 99, false}, Latency{"ttft", 0, false},
        Latency{"tpot", 50, true}, Latency{"tpot", 90, true}, Latency{"tpot", 99, true},
        Latency{"e2e", 50, false}, Latency{"e2e", 90, false}, Latency{"e2e", 99, false},
        Latency{"handoff", 50, true}, Latency{"handoff", 99, true},
        Latency{"handoff_wait", 99, true}}) {
    const std::string stat =
        l.percentile == 0 ? "mean" : fmt::format("p{}", static_cast<int>(l.percentile));
    const std::string name = fmt::format("{}_{}_{}", l.name, stat, l.in_ms ? "ms" : "s");
    d.push_back({name, "nearest-rank percentile (or mean) over the counted requests that finished",
                 real, measure([l](const ServeStudy& x) {
                   return serve_latency(x, l.name, l.percentile) * (l.in_ms ? 1e3 : 1.0);
                 })});
  }
  d.push_back({"span_s", "first counted arrival to the last finish", real,
               measure([](const ServeStudy& x) { return x.summary.span_s(); })});
  d.push_back({"requests_per_s", "finished requests over the span", real,
               measure([](const ServeStudy& x) {
                 return static_cast<double>(x.summary.finished) / x.summary.span_s();
               })});
  d.push_back({"input_tokens_per_s", "prompt tokens of finished requests over the span", real,
               measure([](const ServeStudy& x) {
                 return static_cast<double>(x.summary.input_tokens) / x.summary.span_s();
               })});
  d.push_back({"output_tokens_per_s", "generated tokens over the span", real,
               measure([](const ServeStudy& x) {
                 return static_cast<double>(x.summary.output_tokens) / x.summary.span_s();
               })});
  d.push_back({"output_tokens_per_s_per_device",
               "generated tokens over the span, per device of the replicas (prefill's too)", real,
               measure([](const ServeStudy& x) {
                 return static_cast<double>(x.summary.output_tokens) / x.summary.span_s() /
                        static_cast<double>(x.result.devices());
               })});
  const auto has_slo = [](const ServeStudy& x) {
    return x.slo.ttft > 0 || x.slo.tpot > 0 || x.slo.e2e > 0;
  };
  d.push_back({"goodput_share", "counted requests meeting every slo bound (empty: no slo)", real,
               measure([has_slo](const ServeStudy& x) {
                 return has_slo(x) ? serve_goodput_share(x) : std::nan("");
               })});
  d.push_back({"goodput_per_s", "requests meeting the slo over the span", real,
               measure([has_slo](const ServeStudy& x) {
                 return has_slo(x) ? static_cast<double>(x.summary.good) / x.summary.span_s()
                                   : std::nan("");
               })});
  d.push_back({"hit_share", "prompt tokens found in the cache, any level", real,
               [](const ServeOutcome& o) -> Cell {
                 return o.run == nullptr ? Cell{} : Cell{serve_hit_ratio(*o.run)};
               }});
  for (size_t k = 0; k < hw::kTierKindNames.size(); ++k) {
    d.push_back({fmt::format("hit_{}_share", hw::kTierKindNames[k]),
                 "prompt tokens found at the levels of this tier kind", real,
                 [k](const ServeOutcome& o) -> Cell {
                   if (o.run == nullptr || o.setup == nullptr) return Cell{};
                   return Cell{hit_share(o, static_cast<hw::TierKind>(k))};
                 }});
  }
  d.push_back({"weights_gib", "weights per device", real, [](const ServeOutcome& o) -> Cell {
                 if (o.run == nullptr) return Cell{};
                 return Cell{static_cast<double>(o.run->result.weight_bytes) / kGiB};
               }});
  d.push_back({"kv_pool_gib", "the device's KV pool per device (blocks x block bytes)", real,
               [](const ServeOutcome& o) -> Cell {
                 if (o.run == nullptr) return Cell{};
                 const serve::ServeResult& r = o.run->result;
                 return Cell{static_cast<double>(r.device_pool_blocks * r.kv_bytes_per_token *
                                                 r.block_tokens) /
                             kGiB};
               }});
  return d;
}

const std::vector<Def>& defs() {
  static const std::vector<Def> d = make_defs();
  return d;
}

}  // namespace

const std::vector<Column>& serve_columns() {
  static const std::vector<Column> c = [] {
    std::vector<Column> out;
    for (const Def& d : defs()) out.push_back({d.name, d.description, d.type});
    return out;
  }();
  return c;
}

Row serve_row_of(const ServeOutcome& o) {
  Row r;
  for (const Def& d : defs()) r.cells.push_back(d.get(o));
  return r;
}

}  // namespace tierflow::study
