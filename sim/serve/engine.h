// The serving engine: requests of a trace arrive at replicas of a model; each replica runs
// iterations as vLLM and SGLang do (continuous batching under a token budget and a
// sequence cap, decode first, chunked prefill, preemption by recompute or by swapping to a
// host tier when KV blocks run out); KV blocks live in the tiered cache (kv_cache.h) whose
// device level is what the replica's memory holds beside the weights and the workspace; a
// prefix found below the device is loaded by transfers on the fabric's routes, sharing
// bandwidth with every other copy through the flow solver (hw_models/flows.h); an
// iteration costs what the simulator says its ops cost (iteration_cost.h).
// docs/serving.md, "The engine", states the rules.
//
// Glossary
//   replica     `tp` devices of one class running one copy of the model (tensor parallel);
//               replicas take consecutive devices of the class. With pipeline parallelism,
//               `pp` stages of `tp` devices each, one after the other: each stage holds its
//               layers' weights and KV, and up to `pp` iterations are in flight at once, a
//               sequence in one at most (vLLM's batch queue); a stage takes an iteration
//               when done with those before it, then sends its activations to the next
//               over the peer route.
//   device pool the device level's capacity in blocks: usable device memory less the
//               weights and the workspace of a full iteration, over the KV bytes of one
//               block on one device (each device holds its TP shard of every block).
//   iteration   one scheduling decision and the forward pass it runs; it ends when its
//               compute and, for the sequences whose prefix was loaded from below the
//               device, those loads are done: loads first (`before`) or layer by layer
//               with the compute (`layered`: the last layer waits for the last load).
//   load, demotion, store
//               moves of the cache as transfers: a load brings a block up to the device
//               (on each of the replica's devices, its shard), a demotion or a store takes
//               one down. Demotions and stores do not hold up an iteration.
//   disaggregated prefill
//               (DistServe, Mooncake) `prefill_replicas` replicas compute prompts only;
//               a request whose prompt is done there (its first token produced) hands
//               its KV over to the least loaded of the `replicas` decode replicas, device
//               by device over the device tier's peer route, once that replica has room;
//               it decodes there. The prefill replica keeps the blocks pinned until the
//               copy lands, then keeps them cached for later prefixes.
//   swap space  `swap_bytes` per device in a tier below it (vLLM's --swap-space): with
//               swap preemption a victim's blocks are copied there (swap out) and back
//               (swap in) when it resumes, instead of being computed again; the iteration
//               that swaps waits for its swaps before it computes.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.h"
#include "hw_models/fabric.h"
#include "hw_models/topology.h"
#include "sim/serve/iteration_cost.h"
#include "sim/serve/kv_cache.h"
#include "sim/timeline.h"
#include "traces/arch.h"
#include "traces/generate.h"
#include "traces/requests.h"

namespace tierflow::serve {

enum class LoadMode : uint8_t { kLayered, kBefore };
inline constexpr std::array<std::string_view, 2> kLoadModeNames = {"layered", "before"};

enum class PreemptionKind : uint8_t { kRecompute, kSwap };
inline constexpr std::array<std::string_view, 2> kPreemptionNames = {"recompute", "swap"};

/// Which replica takes a request. kKvAware: the least prefill work, the prompt tokens queued
/// or in prefill there not yet computed plus this prompt's tokens its levels do not hold
/// (a prefill replica's queue and cache both count, as KV-aware routers weigh them).
enum class RouterKind : uint8_t { kRoundRobin, kLeastLoaded, kPrefix, kKvAware };
inline constexpr std::array<std::string_view, 4> kRouterNames = {"round-robin", "least-loaded",
                                                                 "prefix", "kv-aware"};

/// A tier of the topology below the device that holds KV blocks.
struct KvTier {
  std::string tier;       ///< topology tier id
  double fraction = 1.0;  ///< of each instance's capacity (when `bytes` is 0)
  uint64_t bytes = 0;     ///< per instance; 0: the fraction
  EvictionKind eviction = EvictionKind::kLru;
  AdmissionKind admission = AdmissionKind::kAll;
  WriteKind write = WriteKind::kBack;
};

/// A setup that cannot serve at all because the model does not fit: the weights and the
/// iteration's workspace leave no room for one KV block on the device. A bad input to a
/// command (exit 2), and a point that does not fit (infeasible) in a serving sweep.
class DoesNotFit : public InputError {
 public:
  using InputError::InputError;
};

/// Speculative decoding: each decode step proposes up to `tokens` draft tokens that the
/// model verifies in one pass; each is accepted with probability `accept`, independently,
/// until the first rejection (the model of Leviathan et al., 2023), and the pass yields the
/// accepted ones and one token more. The draft comes of a draft model (`draft`: its weights
/// and KV cache beside the model's on every device, its passes timed before the model's)
/// or, without one, of n-gram lookup in the prompt and output so far (no model, no time).
/// The most draft tokens a speculative decoding step proposes.
inline constexpr int kMaxSpecTokens = 64;

struct SpecDecode {
  int tokens = 0;     ///< draft tokens per step; 0: off
  double accept = 0;  ///< each draft token's acceptance probability, in [0, 1]
  std::shared_ptr<const traces::Arch> draft;  ///< the draft model; null: n-gram lookup
  uint64_t seed = 1;                          ///< of the acceptance draws
};

struct ServeOptions {
  std::string device;  ///< device class id; empty: the first
  int replicas = 1;    ///< replicas that serve requests (with prefill_replicas: that decode)
  /// Pipeline parallelism: the stages a replica's layers are split into, each on `gen.tp`
  /// (a prefill replica's: `prefill_tp`) devices of its own; as many batches in flight as
  /// stages (vLLM's). A hand-over goes stage to stage. 1: none.
  int pp = 1;
  /// Disaggregated prefill and decode: replicas more that only compute prompts, taking the
  /// class's first devices; the `replicas` after them decode. 0: every replica does both.
  int prefill_replicas = 0;
  /// Disaggregated: the prefill replicas' tensor parallelism (0: the decode replicas', as
  /// `gen.tp` says). Each decode device's shard of a hand-over comes from the prefill
  /// devices holding its part of the KV heads.
  int prefill_tp = 0;
  /// A TP group over several scale-up domains (hosts, each with its own NVSwitch) that a
  /// scale-out network joins: its all-reduces timed as rings across them
  /// (hw::CollectiveFabric). false: refused, a group must stay within one domain (the
  /// front end's own choice of TP, which takes pipeline stages across hosts instead).
  bool tp_across_domains = true;
  int64_t token_budget = 8192;  ///< new tokens per iteration (max_num_batched_tokens)
  int64_t max_seqs = 256;       ///< running sequences per replica (max_num_seqs)
  EvictionKind device_eviction = EvictionKind::kLru;
  std::vector<KvTier> kv_tiers;  ///< below the device, nearest first
  LoadMode load = LoadMode::kLayered;
  RouterKind router = RouterKind::kRoundRobin;
  /// Disaggregated: which decode replica a prompt's KV goes to. least-loaded (the fewest
  /// tokens queued and running), round-robin, or prefix (the one whose device level holds
  /// the longest prefix of the blocks, so that fewer are copied; ties to the least loaded).
  RouterKind decode_router = RouterKind::kLeastLoaded;
  PreemptionKind preemption = PreemptionKind::kRecompute;
  SpecDecode spec;  ///< speculative decoding (off by default)
  /// Swap preemption: the tier of the swap space (empty: the first DDR tier with routes to
  /// and from the device) and its size per device (vLLM's default, 4 GiB).
  std::string swap_tier;
  uint64_t swap_bytes = uint64_t{4} << 30;
  Time warmup = 0;  ///< requests arriving before this are served but left out of the metrics
  /// Called now and then with requests finished and in all.
  std::function<void(uint64_t done, uint64_t total)> progress;
  /// Where to draw the run (optional): a process per replica with its iterations and the
  /// counts of running and waiting sequences, one per cache level with its occupancy, and
  /// one with the KV transfers (loads, demotions, stores) on lanes.
  sim::Timeline* timeline = nullptr;
  /// Record the series of ServeResult::series (for plots).
  bool record_series = false;
};

/// A quantity over the run, as steps: `value[i]` holds from `time[i]` to the next time.
struct Series {
  std::string name;  ///< "hbm[r0] blocks", "replica 0 running", "replica 0 waiting"
  std::vector<Time> time;
  std::vector<double> value;
};

/// One request as served.
struct RequestRecord {
  uint64_t id = 0;
  uint32_t replica = 0;  ///< where it was sent (disaggregated: its prefill replica)
  /// Disaggregated: the replica it decoded on (-1: none, its one token came of the prefill).
  int32_t decode_replica = -1;
  /// Disaggregated: when the decode replica admitted it (room for its blocks; its copy
  /// starts) and when its KV had reached it; -1 when it was not handed over.
  Time handoff_admitted = -1;
  Time handed_over = -1;
  Time arrival = 0;
  Time scheduled = -1;    ///< first admitted to a batch
  Time first_token = -1;  ///< end of the iteration that produced its first token
  Time finish = -1;       ///< end of the iteration that produced its last token
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;
  /// Prompt tokens found in the cache at its (first) admission, by path position (0: the
  /// device level); the rest were computed.
  std::vector<uint64_t> hit_tokens;
  uint32_t preemptions = 0;
  bool counted = true;    ///< arrived after the warm-up
  bool rejected = false;  ///< its KV (prompt and output) is larger than the device pool
};

/// One replica's work over a run.
struct ReplicaRecord {
  bool prefill_only = false;  ///< disaggregated: a prefill replica
  uint64_t requests = 0;      ///< routed to it (a decode replica: handed over to it)
  uint64_t iterations = 0;
  Time busy = 0;               ///< an iteration in flight, its loads and swaps included
  Time compute = 0;            ///< its iterations' compute (busy less the waits on loads)
  uint64_t prompt_tokens = 0;  ///< prompt tokens it computed (recomputed ones included)
  uint64_t output_tokens = 0;  ///< tokens it generated (a prompt's first token included)
  uint64_t preemptions = 0;
};

/// One cache level as it ended.
struct LevelRecord {
  std::string name;     ///< "hbm[r0]", "ddr[0]", "pool"
  std::string tier;     ///< topology tier id
  size_t position = 0;  ///< on its paths (0: a device level)
  uint64_t capacity_blocks = 0;
  uint64_t hit_tokens = 0;
  LevelStats stats;
};

/// Bytes one resource of the fabric carried.
struct ResourceRecord {
  std::string name;
  bool link = false;
  double bytes = 0;
  Time busy = 0;
  /// What it is in the topology: a link direction (`forward`: a -> b) or a tier's port.
  hw::ResourceKind kind = hw::ResourceKind::kLink;
  size_t index = 0;  ///< the link's or the tier's index
  bool forward = true;
};

struct ServeResult {
  std::vector<RequestRecord> requests;
  std::vector<LevelRecord> levels;
  std::vector<ReplicaRecord> replica_records;  ///< by replica number (prefill replicas first)
  std::vector<ResourceRecord> resources;       ///< those some transfer crossed
  /// With record_series: each cache level's blocks held, sampled at every iteration's end,
  /// and each replica's running and waiting sequences, sampled at every arrival, schedule
  /// and iteration's end, so that they are exact step functions (a value equal to the last
  /// one is not kept; of several at one instant, the last).
  std::vector<Series> series;
  uint32_t block_tokens = 0;
  uint64_t weight_bytes = 0;  ///< per device (pipeline stages: the most of any stage's device)
  uint64_t workspace_bytes = 0;     ///< per device
  uint64_t kv_bytes_per_token = 0;  ///< per device (pipeline stages: the most)
  uint64_t device_pool_blocks = 0;  ///< per replica
  uint64_t iterations = 0;
  uint64_t preemptions = 0;  ///< by recompute and by swap
  uint64_t swap_outs = 0;    ///< preemptions by swap
  /// Swap preemptions that found the swap space too full for the victim's blocks and
  /// recomputed instead (counted in `preemptions`, not in `swap_outs`).
  uint64_t swap_fallbacks = 0;
  uint64_t swapped_blocks = 0;  ///< blocks swapped out
  /// Blocks swapped back in: those of `swapped_blocks` that neither the cache's device
  /// level nor a level below still held when their sequence resumed.
  uint64_t swapped_in_blocks = 0;
  uint64_t swap_blocks = 0;        ///< the swap space per replica, in blocks; 0: none
  std::string swap_tier;           ///< its tier; empty: none
  uint64_t recomputed_tokens = 0;  ///< tokens preempted sequences computed again
  uint64_t transfers = 0;
  Time makespan = 0;  ///< last finish
  int tp = 1;
  int pp = 1;  ///< pipeline stages per replica
  /// Scale-up domains (sets of devices the peer route joins) each TP group spans: above 1,
  /// its all-reduces cross the scale-out network (ServeOptions::tp_across_domains), at
  /// `collective_bandwidth` bytes/s out of each domain, all its ranks together.
  int tp_domains = 1;
  double collective_bandwidth = 0;
  int replicas = 1;
  RouterKind router = RouterKind::kRoundRobin;  ///< which replica (prefill replica) a request takes
  int prefill_replicas = 0;  ///< disaggregated: prefill-only replicas (first), 0: none
  /// Disaggregated: the prefill replicas' TP and per device their weights, workspace and
  /// KV pool in blocks (the fields above are the decode replicas'); 0 when none.
  int prefill_tp = 0;
  int prefill_tp_domains = 1;
  double prefill_collective_bandwidth = 0;
  uint64_t prefill_weight_bytes = 0, prefill_workspace_bytes = 0, prefill_pool_blocks = 0;
  uint64_t prefill_kv_bytes_per_token = 0;
  RouterKind decode_router = RouterKind::kLeastLoaded;  ///< disaggregated: the decode pick
  /// Speculative decoding: the draft tokens per step and acceptance probability (0: off),
  /// the draft model's name (empty: n-gram lookup) and per device its weights and KV bytes
  /// per token (also in weight_bytes and kv_bytes_per_token); decode steps that drafted,
  /// the draft tokens they verified and those accepted.
  int spec_tokens = 0;
  double spec_accept = 0;
  std::string spec_draft;
  uint64_t draft_weight_bytes = 0, draft_kv_bytes_per_token = 0;
  uint64_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
  /// Tokens a drafting decode step yielded, its accepted drafts and one more; NaN when no
  /// step drafted.
  [[nodiscard]] double spec_tokens_per_step() const {
    return spec_steps == 0
               ? std::nan("")
               : static_cast<double>(spec_steps + spec_accepted) / static_cast<double>(spec_steps);
  }
  /// The devices the replicas take, prefill replicas' included.
  [[nodiscard]] int devices() const {
    return (replicas * tp + prefill_replicas * (prefill_tp > 0 ? prefill_tp : tp)) * pp;
  }
  uint64_t handoffs = 0;     ///< requests handed from a prefill to a decode replica
  /// Blocks those hand-overs copied: each device's shard of each block the decode
  /// replica's device level did not hold already.
  uint64_t handoff_blocks = 0;
  /// Cache-only replay (cache_only()): no requests' times, the cache's counts.
  bool cache_only = false;
  uint64_t prompt_tokens = 0;    ///< of every request served (not rejected)
  uint64_t computed_tokens = 0;  ///< of those, the prompt tokens no level held
};

/// Serves `trace` with `arch` (generated as `gen` says: dtypes, tp) on `t`. Throws
/// InputError for a setup that cannot serve (the weights do not fit, a KV tier the topology
/// lacks or cannot reach, more devices than the class has).
ServeResult serve(const traces::RequestTrace& trace, const traces::Arch& arch,
                  const traces::GenOptions& gen, const hw::Topology& t, const ServeOptions& o);

/// The checks serve() makes before it serves (the device class, replicas x TP against the
/// devices, the weights and workspace against the device memory, the KV tiers and the swap
/// space against the topology), without serving: InputError as serve() throws it. Returns
/// the setup's figures (weights, workspace, pool blocks, ...), no request served.
ServeResult check_setup(const traces::RequestTrace& trace, const traces::Arch& arch,
                        const traces::GenOptions& gen, const hw::Topology& t,
                        const ServeOptions& o);

/// The trace against the cache alone (replay_cache_only: no compute, no time), on the
/// levels serve() would build; requests go to the replicas' paths in turn.
ServeResult cache_only(const traces::RequestTrace& trace, const traces::Arch& arch,
                       const traces::GenOptions& gen, const hw::Topology& t, const ServeOptions& o);

}  // namespace tierflow::serve
