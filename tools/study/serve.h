// Serving studies: what `tierflow serve` (and, later, the serving questions of whatif,
// sweep and Python) ask of the serving engine (sim/serve): the settings as given, checked
// and turned into a request trace, a model and an engine setup; the run; and what it
// prints: a summary (percentiles of TTFT, TPOT and end-to-end time, throughput, goodput
// under an SLO, hits per cache level, bytes per link), per-request rows as CSV, and JSON.
//
// Glossary
//   TTFT       time to first token: arrival to the end of the iteration that produced it
//              (queueing and the whole prefill included).
//   TPOT       time per output token after the first: (finish - first token) / (output - 1);
//              undefined for a request of one output token.
//   goodput    requests (and their rate over the run) that met every SLO bound.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/io.h"
#include "hw_models/topology.h"
#include "sim/serve/engine.h"
#include "tools/study/scenario.h"
#include "traces/arch.h"
#include "traces/requests.h"

namespace tierflow::study {

/// How errors name a serving setting: by serve's flag (`--kv-tiers`, `--find`), by its
/// field (`kv_tiers`: Python's argument, a sweep spec's key), or as whatif's service
/// questions take it (its own flags `--model`, `--question`, `--target`, ..., the other
/// fields as `--serve kv_tiers`).
enum class SettingNames { kServeFlags, kFields, kWhatif };

/// What a user asks of a serving run (the CLI's flags, as given).
struct ServeSettings {
  std::string hw;                 ///< topology path or shipped name; empty: the default
  std::vector<std::string> sets;  ///< topology overrides
  /// Copies of the topology serving together, each a node of its hosts (its hosts,
  /// supernodes and device counts multiplied: each copy a supernode of its own, sharing
  /// what is per cluster).
  int nodes = 1;
  /// model / hf_config / model_sets; gen: tp, where 0 (the default) is the least power of
  /// two that leaves the model room for KV on the class's devices (prepare_serve says which)
  WorkloadSource model = [] {
    WorkloadSource m;
    m.gen.tp = 0;
    return m;
  }();
  std::string trace;              ///< a request trace file (Mooncake JSONL, Azure CSV)
  WrittenFiles written;           ///< file fields as a sweep spec wrote them (Scenario::written)
  std::string arrivals;           ///< or a generator spec
  traces::TraceOptions trace_options;
  std::string warmup;                    ///< a duration; empty: none
  /// replicas (0, the default: as many as the class's devices hold beside any prefill
  /// replicas at the TP given or chosen; prepare_serve says how many), pp (0, the default:
  /// 1, or with `tp` not given either, the least stages at which the model fits where no TP
  /// alone does), budget, sequences (load, router: below)
  serve::ServeOptions engine = [] {
    serve::ServeOptions e;
    e.replicas = 0;
    e.pp = 0;
    return e;
  }();
  std::string kv_tiers;                  ///< "ddr:512GiB,ssd:25%:s3fifo"; empty: the device only
  std::string slo;                       ///< "ttft=2s,tpot=100ms"; empty: none
  std::string load = "layered";          ///< layered or before
  std::string router = "round-robin";    ///< round-robin, least-loaded or prefix
  std::string decode_router;  ///< disaggregated: the decode replica's pick; empty: least-loaded
  std::string device_policy = "lru";     ///< the device level's eviction: lru, lfu or s3fifo
  std::string preemption = "recompute";  ///< recompute or swap
  std::string swap_space;                ///< a size per device; empty: 4GiB
  std::string swap_tier;                 ///< empty: the first DDR tier the devices reach
  std::string
      spec_draft;  ///< speculative decoding's draft model (engine.spec: k, accept); empty: n-gram
  std::string weight_dtype = "bf16", kv_dtype = "bf16", act_dtype = "bf16";
  bool cache_only = false;
  std::string timeline;  ///< a Chrome trace of the run to write; empty: none
  SettingNames names = SettingNames::kServeFlags;  ///< how errors name the settings
};

/// The fields of a serving run, by the names the Python API's arguments and serving sweeps
/// use (docs/sweeps.md): `trace`, `arrivals`, `hw`, `model`, `hf_config`, `tp`, `replicas`,
/// `router`, `kv_tiers`, `rate_scale`, ... Besides these, set_serve_field() takes `set`
/// and `model_set` (one override each), topology paths (`tiers.ddr.capacity`) and
/// `model.KEY`.
const std::vector<std::string_view>& serve_field_names();
/// Sets a serving field to `value` as text. Counts and numbers are read here (InputError at
/// `source` for what is not one); words, sizes and lists are checked by prepare_serve().
/// An unknown field is an InputError with "did you mean".
void set_serve_field(ServeSettings& s, std::string_view field, const std::string& value,
                     std::string_view source);
/// A field's value as text, as set_serve_field() takes it ("" when unset; a default is
/// written out: `router` is "round-robin"). Topology paths and `model.KEY` read back the
/// last override of that path ("" when none).
std::string get_serve_field(const ServeSettings& s, std::string_view field);

/// How errors name the setting `field` ("kv_tiers") under `names`: "--kv-tiers",
/// "kv_tiers", or whatif's "--serve kv_tiers" ("--model" for one of its own flags).
std::string serve_flag(std::string field, SettingNames names);

/// Bounds a request must meet to count toward goodput (0: no bound).
struct Slo {
  serve::Time ttft = 0;
  serve::Time tpot = 0;
  serve::Time e2e = 0;
};

/// "TIER[:CAPACITY][:POLICY][:WRITE][:ADMISSION],..." (capacity a size or a percentage of
/// each instance; lru|lfu|s3fifo; back|through; all|second), nearest first. InputError at
/// `source`.
std::vector<serve::KvTier> parse_kv_tiers(const std::string& text, std::string_view source);
/// "ttft=2s,tpot=100ms,e2e=30s" (any of them). InputError at `source`.
Slo parse_slo(const std::string& text, std::string_view source);

/// The settings checked and the inputs read once, ready for any number of runs. A search
/// (serve_find.h) changes only the knobs at the end between its runs.
struct ServeSetup {
  /// As read or generated at rate scale 1; shared by every run and copy of the setup.
  std::shared_ptr<const traces::RequestTrace> trace;
  std::string trace_name;  ///< what arrival errors name: the file or the generator's flag
  traces::Arch arch;
  traces::GenOptions gen;  ///< dtypes, tp
  hw::Topology topology;   ///< with `nodes` copies' hosts and devices, named "N x NAME"
  std::string topology_name;  ///< its own name (NAME)
  int nodes = 1;
  Slo slo;
  bool cache_only = false;
  std::string timeline;  ///< written by each run; empty: none
  /// Where the timeline is opened, to appear with the command's other outputs (the caller
  /// publishes the set); null: the timeline is an output of its own.
  OutputSet* outputs = nullptr;
  /// About the settings, told once before the runs (serve_notes): requests past the model's
  /// max_context, weights wider than its checkpoint, KV tiers listed slower first.
  std::vector<std::string> notes;
  SettingNames names =
      SettingNames::kServeFlags;  ///< the settings': how the engine's errors name them
  // The knobs.
  double rate_scale = 1.0;     ///< the trace's arrivals compressed by this factor
  serve::ServeOptions engine;  ///< replicas, KV tiers and their capacities, ...
};

/// The topology of `s` (`hw`, or the default) loaded with `sets` (the settings' or more), as
/// `nodes` copies when more than one, each a node of its hosts (hosts and device counts
/// multiplied, each copy its own supernodes; named "N x NAME", as the engine's messages then
/// call it). InputError as loading does (at `nodes` for what the copies break).
/// `own_name`, when given, gets the topology's own name (NAME).
hw::Topology load_serve_topology(const ServeSettings& s, const std::vector<std::string>& sets,
                                 std::string* own_name = nullptr);
/// What a service runs on: NAME, or "N x NAME" on several nodes.
std::string nodes_name(int nodes, const std::string& name);

/// The devices of the setup's class (engine.device, else the first); 0 when no such class.
int class_devices(const ServeSetup& setup);

/// One latency of the counted requests that finished, in seconds.
struct ServeLatency {
  std::string name;            ///< queue, ttft, tpot or e2e
  std::vector<double> sorted;  ///< ascending
  double mean = 0;             ///< NaN when none finished
  /// The nearest-rank percentile `p` in (0, 100]; NaN when none finished.
  [[nodiscard]] double percentile(double p) const;
};

/// What the summaries say of a run, counted from its records once.
struct ServeSummary {
  /// counted: requests arriving after the warm-up, rejected ones among them (they finish
  /// nothing and meet no SLO); rejected: every rejected request, the warm-up's too.
  uint64_t counted = 0, finished = 0, rejected = 0, preemptions = 0;
  ServeLatency queue{"queue", {}, 0}, ttft{"ttft", {}, 0}, tpot{"tpot", {}, 0}, e2e{"e2e", {}, 0};
  /// Disaggregated: from the first token to the KV on the decode replica (handed over), and
  /// the part of it spent waiting for the decode replica to have room.
  ServeLatency handoff{"handoff", {}, 0}, handoff_wait{"handoff_wait", {}, 0};
  uint64_t input_tokens = 0, output_tokens = 0;
  serve::Time first_arrival = 0, last_finish = 0;
  uint64_t good = 0;  ///< counted requests that met the SLO
  /// From the first counted arrival to the last finish (at least 1 ps), in seconds.
  [[nodiscard]] double span_s() const;
};

struct ServeStudy {
  traces::RequestTrace trace;  ///< as served: arrivals at the run's rate scale
  serve::ServeResult result;
  Slo slo;
  ServeSummary summary;  ///< of `result` under `slo`
  std::string topology;  ///< its name
  int nodes = 1;         ///< copies of it
  std::string model;     ///< the model's name
  std::string device;    ///< device class id
  int class_devices = 0;  ///< devices of that class (of all the nodes)
};

/// Request traces read or generated once for many setups (the points of a serving sweep),
/// by what reading depends on: the file or the generator's spec, `first` and
/// `block_tokens` (not the rate scale: setups scale at run time). Thread-safe.
class ServeTraceCache {
 public:
  /// The trace of `s`, read (or generated) on first use; throws as reading does.
  std::shared_ptr<const traces::RequestTrace> get(const ServeSettings& s, const std::string& name);

 private:
  std::mutex m_;
  std::map<std::string, std::shared_ptr<const traces::RequestTrace>> traces_;
};

/// Checks the settings (counts, rate scale, words, the KV tiers, the SLO: each error naming
/// its flag, or its Python argument), reads or generates the trace (through `traces` when
/// given) and loads the model and the topology.
ServeSetup prepare_serve(const ServeSettings& s, ServeTraceCache* traces = nullptr);
/// Checks that the setup can serve without serving: the engine's own checks (the device
/// class, replicas x TP against the devices, the weights against the device memory, the KV
/// tiers and the swap space against the topology). InputError naming the setting.
void check_serve(const ServeSetup& setup);
/// What a setup's runs should tell the user once: the trace's notes (timestamps out of
/// order, ...), then the settings' (ServeSetup::notes). The CLI prints them as notes,
/// Python returns them (Serving.notes), a serving sweep records them in its rows.
std::vector<std::string> serve_notes(const ServeSetup& setup);

/// Serves the setup's trace at its knobs (or replays the cache only).
ServeStudy run_serve(const ServeSetup& setup);
/// Both: one run of the settings.
ServeStudy run_serve(const ServeSettings& s);

/// How the run preempted: by swap (the space, swaps, fallbacks) or by recompute, with the
/// tokens computed again; empty for a recompute run that never preempted.
std::string preemption_text(const serve::ServeResult& r);
/// "2 replicas", or disaggregated "1 prefill replica and 2 decode replicas".
std::string replicas_text(const serve::ServeResult& r);
/// ", routed NAME" where more than one replica takes requests; empty otherwise.
std::string router_text(const serve::ServeResult& r);
/// Disaggregated: the hand-overs, the blocks and bytes they copied, their P50 and P99.
std::string handoff_text(const ServeStudy& x);
/// Speculative decoding's setup (drafts a step, their source, the acceptance and the tokens
/// a step it gives) and what the run's steps yielded; empty when it is off.
std::string spec_setup_text(const serve::ServeResult& r);
std::string spec_run_text(const serve::ServeResult& r);
/// The summary `tierflow serve` prints, as text and as `tierflow.serve/1` JSON.
std::string serve_text(const ServeStudy& x);
std::string serve_json(const ServeStudy& x);
/// The nearest-rank percentile `p` (in (0, 100]; 0 gives the mean) of `which` (queue,
/// ttft, tpot or e2e) in seconds over the counted requests that finished; NaN when none.
double serve_latency(const ServeStudy& x, std::string_view which, double p);
/// The share of counted requests that met the SLO (0 when none was counted).
double serve_goodput_share(const ServeStudy& x);
/// The share of prompt tokens found in the cache (any level).
double serve_hit_ratio(const ServeStudy& x);

/// One row per request: id, replica, arrival_s, queue_s, ttft_s, tpot_s, e2e_s,
/// prompt_tokens, output_tokens, hit tokens per path level, preemptions, counted, rejected.
std::string requests_csv(const ServeStudy& x);
/// The same rows as JSON Lines: times in seconds (null where undefined), counts as
/// integers, counted and rejected as booleans.
std::string requests_jsonl(const ServeStudy& x);
/// What `-o PATH` writes: JSON Lines when PATH ends in ".jsonl", else CSV.
std::string requests_file(const ServeStudy& x, std::string_view path);

}  // namespace tierflow::study
