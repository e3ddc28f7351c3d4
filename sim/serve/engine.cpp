#include "sim/serve/engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <utility>

#include "core/checked.h"
#include "core/diagnostics.h"
#include "core/units.h"
#include "hw_models/bind.h"
#include "hw_models/cost.h"
#include "hw_models/fabric.h"
#include "hw_models/flows.h"
#include "sim/kernel/event_queue.h"

namespace tierflow::serve {
namespace {

enum Tag : uint32_t { kArrival, kIterationEnd, kFlowStart, kFlowDone };

/// Tokens of KV one transfer carries at most: blocks of one move kind between the same two
/// levels in one iteration go together, as offloading connectors copy chunks
/// of blocks, so that small blocks (pages of a trace's blocks) do not multiply the copies.
constexpr uint64_t kTransferTokens = 512;

/// Hashes of a request's output blocks: never equal to another block's (bit 63 set, the
/// request and the block index mixed in), so they never hit.
uint64_t output_hash(uint64_t request, uint64_t block) {
  uint64_t z = (request << 24) ^ block ^ 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (z ^ (z >> 31)) | (uint64_t{1} << 63);
}

/// The hash a prompt block goes by while not whole: the request's own (as an output
/// block's, with bit 62 flipped so as not to be that block's output hash), so that no
/// lookup finds it.
uint64_t partial_hash(uint64_t request, uint64_t block) {
  return output_hash(request, block) ^ (uint64_t{1} << 62);
}

/// A free slot of `pool` (one its free list holds, else a new one); the caller fills it.
template <class T>
uint32_t take_slot(std::vector<T>& pool, std::vector<uint32_t>& free) {
  if (free.empty()) {
    pool.emplace_back();
    return static_cast<uint32_t>(pool.size() - 1);
  }
  const uint32_t i = free.back();
  free.pop_back();
  return i;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/// A request while a replica serves it.
struct Seq {
  uint32_t req = 0;
  int64_t prompt = 0;     ///< tokens to have in the KV cache before decoding
  int64_t computed = 0;   ///< of those, in the cache (hit or computed)
  int64_t generated = 0;  ///< output tokens produced
  int64_t output = 0;
  /// Its KV in blocks of B tokens: the prompt's as the trace hashes them, then blocks of
  /// the tokens it generates (the prompt's partial last block filled first).
  std::vector<uint64_t> hashes;
  size_t held = 0;     ///< leading blocks pinned in the device level
  size_t swapped = 0;  ///< leading blocks in the swap space (preempted by swap)
  bool admitted_once = false;
  /// Preempted by recompute: the positions whose KV it had computed or hit (what it would
  /// compute again past the prefix it finds cached when admitted again).
  int64_t had_kv = 0;
  /// While its prefill has stopped inside a block (a chunk ended there), that block, the
  /// last it holds, goes by `partial_hash` so that no request finds it as a hit before it
  /// is whole: its index (SIZE_MAX: none) and the hash it then takes.
  size_t partial = SIZE_MAX;
  uint64_t whole_hash = 0;
  // Disaggregated: the prefill replica that computed its prompt, the blocks it keeps
  // pinned there until the hand-over lands, and the hand-over's transfers in flight.
  uint32_t prefill_replica = 0;
  size_t handoff_held = 0;
  uint32_t handoff_left = 0;
  /// The next turn of its session, if the trace has one: a block that fills up takes the
  /// hash that turn's prompt gives it, so that the turn finds this one's KV cached.
  const std::vector<uint64_t>* next_turn = nullptr;
  bool in_flight = false;  ///< in an iteration in flight (pipeline parallelism: one at most)
};

/// What a transfer does, as the timeline names it: a MoveKind, or a swap.
enum class TransferKind : uint8_t { kLoad, kDemotion, kStore, kSwapOut, kSwapIn, kHandoff };
constexpr std::string_view kTransferNames[] = {"load",     "demotion", "store",
                                               "swap out", "swap in",  "handoff"};
static_assert(static_cast<int>(TransferKind::kLoad) == static_cast<int>(MoveKind::kLoad) &&
              static_cast<int>(TransferKind::kDemotion) == static_cast<int>(MoveKind::kDemotion) &&
              static_cast<int>(TransferKind::kStore) == static_cast<int>(MoveKind::kStore));

/// One transfer: flows on each device it concerns; done when all are.
struct Transfer {
  uint32_t replica = 0;
  uint32_t flows_left = 0;
  bool load = false;  ///< an iteration waits for it
  TransferKind kind = TransferKind::kLoad;
  Time start = 0;
  uint32_t lane = 0;  ///< on the timeline
  uint32_t seq = 0;   ///< a hand-over's sequence
  uint32_t slot = 0;  ///< a load's iteration: its slot in the replica's
};

struct FlowRef {
  uint32_t transfer = 0;
  const hw::FabricPath* path = nullptr;
  double bytes = 0;
  uint32_t flow = hw::kNoFlow;
  uint64_t done_event = 0;  ///< id + 1 of its scheduled completion; 0 none
};

/// An iteration in flight on a replica.
struct Iteration {
  std::vector<uint32_t> batch;  ///< seqs in it
  std::vector<int64_t> tokens;  ///< their new tokens
  Time start = 0;
  Time compute = 0;
  uint32_t loads_left = 0;
  Time loads_done = 0;
  uint64_t reserved = 0;  ///< device blocks it will insert at its end
  /// Blocks it swaps out and in: it waits for them before it computes (a swap frees or
  /// fills device blocks the compute uses).
  uint64_t swap_outs = 0, swap_ins = 0;
  std::vector<Time> stages;  ///< pipeline parallelism: each stage's compute
  Time stages_done = 0;      ///< and, under layered loads, when the last stage was done
  bool active = false;
};

struct Replica {
  std::vector<int> devices;  ///< global device numbers, stage after stage
  PathId path = 0;
  LevelId device_level = 0;
  std::deque<uint32_t> waiting;   ///< seq indices
  std::vector<uint32_t> running;  ///< in admission order
  bool start_pending = false;     ///< an iteration starts once the instant's events are in
  /// Iterations in flight: one slot per pipeline stage (one without pipeline parallelism),
  /// as vLLM keeps as many batches in flight as there are stages.
  std::vector<Iteration> iters;
  uint32_t in_flight = 0;
  uint32_t slot = 0;  ///< the slot of the iteration being scheduled
  /// The iteration being scheduled: its sequences and their new tokens.
  std::vector<uint32_t> batch;
  std::vector<int64_t> tokens;
  /// Device blocks the iterations in flight and the one being scheduled will insert.
  uint64_t reserved = 0;
  uint64_t swap_free = 0;                ///< blocks of its swap space not holding a victim's
  uint64_t swap_outs = 0, swap_ins = 0;  ///< of the iteration being scheduled
  /// Pipeline parallelism: when each stage is free of the iterations given to it, and
  /// since when one has been in flight (for `busy`).
  std::vector<Time> stage_free;
  Time busy_since = 0;
  /// Between stage s and s + 1: each rank's route to the same rank of the next stage.
  std::vector<std::vector<const hw::Route*>> hops;
  uint64_t load = 0;  ///< tokens queued and running (least-loaded router)
  /// Prompt tokens its waiting and running sequences have not computed (kv-aware router):
  /// kept as their `computed` and `prompt` change, each change through Engine::progress.
  int64_t backlog = 0;
  ReplicaRecord stats;            ///< its work so far
  bool prefill_only = false;      ///< disaggregated: computes prompts, hands them over
  std::deque<uint32_t> incoming;  ///< disaggregated decode: hand-overs waiting for room
  uint32_t receiving = 0;         ///< hand-overs admitted, their copies in flight
  // Timeline.
  std::vector<sim::TrackId> tracks;  ///< iterations, by slot
  sim::SeriesId seqs = 0;
};

class Engine {
 public:
  Engine(const traces::RequestTrace& trace, const traces::Arch& arch, const traces::GenOptions& gen,
         const hw::Topology& t, const ServeOptions& o)
      : trace_(trace), topo_(t), o_(o), fabric_(t), gen_(gen) {
    setup_devices(arch);
    setup_levels();
    setup_swap();
    setup_handoffs();
    for (const hw::ResourceInfo& r : fabric_.resources()) net_.add_resource(r.capacity);
    if (o_.timeline != nullptr) setup_timeline();
    if (o_.record_series) {
      for (LevelId l = 0; l < cache_.level_count(); ++l) {
        series_.push_back(Series{cache_.spec(l).name + " blocks", {}, {}});
      }
      for (size_t r = 0; r < replicas_.size(); ++r) {
        series_.push_back(Series{fmt::format("replica {} running", r), {}, {}});
        series_.push_back(Series{fmt::format("replica {} waiting", r), {}, {}});
      }
    }
  }

  ServeResult run();
  ServeResult cache_only();
  /// The setup and the cache's levels, as both runs report them.
  [[nodiscard]] ServeResult result() const;

 private:
  void setup_devices(const traces::Arch& arch);
  void setup_levels();
  /// The kv-aware router's hit_cost_.
  void setup_hit_costs();
  /// The swap space of swap preemption: its tier, its blocks per replica, checked.
  void setup_swap();
  /// Tier `id` as a tier below the device (a KV tier or the swap space); InputError at
  /// `field` when the topology lacks it or it is the device tier.
  size_t lower_tier(const std::string& id, const char* field, std::string_view role) const;
  /// Whether device d reaches `tier` and back.
  [[nodiscard]] bool reaches(size_t tier, int d) const;
  /// The bytes KV tier k takes of each instance of its tier.
  [[nodiscard]] uint64_t kv_bytes(const KvTier& k, size_t tier) const;
  void arrive(uint32_t req);
  uint32_t route(const Seq& s);
  /// The least tensor parallelism wider than `gen`'s (up to the class's devices) that
  /// leaves room for KV blocks, and how many; none when no such one does.
  std::optional<std::pair<int, uint64_t>> wider_tp(const traces::Arch& arch,
                                                   const traces::GenOptions& gen) const;
  /// The cost model of `gen` at the options' pipeline stages (InputError at `pp` when the
  /// model has fewer layers).
  [[nodiscard]] std::unique_ptr<IterationCost> make_cost(const traces::Arch& arch,
                                                         const traces::GenOptions& gen,
                                                         int pp) const {
    return std::make_unique<IterationCost>(arch, gen, topo_, device_class_, device_tier_, pp);
  }
  /// Disaggregated: the decode replica that takes `s` from its prefill replica.
  uint32_t pick_decode(const Seq& s);
  /// Of replicas [first, end), the one whose device level holds the longest prefix of
  /// `hashes`; ties (and no hit) to the least `load(r)`, then the lowest number.
  /// Of replicas [0, n), the one with the least prefill work if `s` joined it (RouterKind::
  /// kKvAware); ties to the least loaded, then the lowest number.
  uint32_t kv_aware_pick(size_t n, const Seq& s);
  /// Runs `change` on `s`, a sequence of `rep`, keeping rep.backlog.
  template <class F>
  static void progress(Replica& rep, Seq& s, F change) {
    rep.backlog -= prompt_left(s);
    change();
    rep.backlog += prompt_left(s);
  }
  static int64_t prompt_left(const Seq& s) { return std::max<int64_t>(0, s.prompt - s.computed); }
  template <class Load>
  uint32_t prefix_pick(uint32_t first, size_t end, std::span<const uint64_t> hashes, Load load);
  /// Disaggregated: checks that every prefill replica's devices reach the decode
  /// replicas' over the device tier's peer route.
  void setup_handoffs() const;
  /// One device-to-device copy of a hand-over: `part` of the destination's shard.
  struct ShardCopy {
    int from = 0, to = 0;
    double part = 1;
    size_t to_index = 0;  ///< the destination's place in its replica (its stage's shard)
  };
  /// The copies that bring a block's KV from replica `from`'s devices to `to`'s.
  [[nodiscard]] std::vector<ShardCopy> handoff_copies(const Replica& from, const Replica& to) const;
  /// Disaggregated: `q`'s prompt is done on prefill replica `r`: it leaves r (its blocks
  /// pinned there) for the least loaded decode replica's incoming queue.
  void hand_off(uint32_t r, uint32_t q);
  /// Admits decode replica `d`'s incoming hand-overs, first come first served, while it
  /// has no preempted sequence waiting, room for their blocks and fewer than max_seqs
  /// sequences: pins their blocks in its device level and copies those it lacked.
  void admit_handoffs(uint32_t d);
  /// `q`'s KV has landed: the prefill replica unpins it, the decode replica runs it.
  void handoff_done(uint32_t q);
  /// A new transfer (of replica `r`) with no flows yet; its index.
  uint32_t new_transfer(uint32_t r, TransferKind kind, bool waited);
  /// A flow of transfer `t`: `bytes` over `p`, starting after the route's setup.
  void add_flow(uint32_t t, const hw::FabricPath* p, double bytes);
  void start_iteration(uint32_t r);
  bool schedule(uint32_t r);
  bool room(const Replica& rep, uint64_t blocks) const;
  void preempt(uint32_t r, uint32_t seq);
  /// Makes room for `need` more blocks for r's running[i]: preempts the latest admitted
  /// sequence after it that is not in this iteration's batch, until there is room or none
  /// is left; then, without room, preempts running[i] itself (vLLM's scheduler treats every
  /// running request so). True when running[i] keeps its place and has the room.
  bool room_for(uint32_t r, size_t i, uint64_t need);
  /// Resumes the swapped sequence at the head of r's waiting queue (its blocks pinned in
  /// the device level, from the cache where it still holds them, else swapped in) and adds
  /// its next tokens to the batch. False, and nothing changed, when there is no room.
  bool swap_in(uint32_t r, int64_t& budget);
  void end_iteration(uint32_t r, uint32_t slot);
  /// Pipeline parallelism: `it` passes the replica's stages from `enter`, each stage taking
  /// it once done with those before it and sending its activations on to the next; when it
  /// leaves the last.
  Time pipeline(Replica& rep, Iteration& it, Time enter);
  /// The event data of replica r's iteration in `slot`, and back.
  [[nodiscard]] uint32_t iteration_key(uint32_t r, uint32_t slot) const {
    return r * static_cast<uint32_t>(o_.pp) + slot;
  }
  /// Starts an iteration of replica `r` once every event of this instant is handled
  /// (start_pending): requests arriving together, or as an iteration ends, join one batch.
  void want_start(uint32_t r);
  void start_pending();
  void finish_seq(uint32_t r, uint32_t seq);
  void carry(uint32_t r, const std::vector<Move>& moves, bool loads);
  /// One transfer of `blocks` blocks between tiers `from` and `to`: each device's shard
  /// when one of them is the device tier, else the whole blocks via `devices`' first.
  void transfer(uint32_t r, size_t from, size_t to, std::span<const int> devices, bool waited,
                TransferKind kind, uint64_t blocks = 1);
  /// Moves that go as one transfer (carry).
  struct MoveGroup {
    LevelId from = kNoLevel;
    LevelId to = kNoLevel;
    MoveKind kind = MoveKind::kLoad;
    uint64_t blocks = 0;
  };
  std::vector<MoveGroup> groups_;
  /// The most blocks one transfer carries: those of kTransferTokens tokens (at least one).
  [[nodiscard]] uint64_t blocks_per_transfer() const {
    return std::max<uint64_t>(1, kTransferTokens / static_cast<uint64_t>(block_tokens_));
  }
  void flow_done(uint32_t f);
  void setup_timeline();
  /// Samples series `series` at now (record_series).
  void record(size_t series, double value);
  /// Samples replica r's running and waiting counts (record_series): at every arrival and
  /// every schedule, so the series are exact step functions of the queues.
  void record_queues(uint32_t r);
  void draw_iteration(uint32_t r, const Iteration& it);
  void draw_transfer(const Transfer& tr);
  void resolve();
  /// Blocks that hold `tokens` tokens of a sequence's KV.
  [[nodiscard]] int64_t blocks_for(int64_t tokens) const;
  /// Prompt tokens the first `blocks` blocks of `s` hold.
  [[nodiscard]] int64_t tokens_in(const Seq& s, int64_t blocks) const;
  /// The blocks of `s` that its KV growing from `before` to `after` tokens filled.
  void fill_blocks(uint32_t r, Seq& s, int64_t before, int64_t after);
  uint64_t& hash_of(Seq& s, size_t block);
  /// Whether block `b` of `s` holds the KV its hash names: all of it but where its prefill
  /// has stopped inside the block.
  [[nodiscard]] bool whole(const Seq& s, size_t b) const {
    return s.computed >= s.prompt || static_cast<int64_t>(b + 1) * block_tokens_ <= s.computed;
  }
  /// Stores and pins the block of `s` after those it holds (computed, or back from the swap
  /// space): under its hash, or under a hash of its own where its prefill stopped inside
  /// it. Whether the device level held it already.
  bool store_block(const Replica& rep, Seq& s, std::vector<Move>& moves);
  /// The partial block of `s`, whole now, takes its hash.
  void publish(const Replica& rep, Seq& s);
  /// Unpins the blocks `s` holds in `rep`'s device level; its partial block, whose data
  /// goes, leaves the cache.
  void let_go(const Replica& rep, Seq& s);

  const traces::RequestTrace& trace_;
  const hw::Topology& topo_;
  const ServeOptions& o_;
  hw::Fabric fabric_;
  traces::GenOptions gen_;
  /// What the replicas of one tensor parallelism share: the cost model, one block's KV
  /// bytes on one device, the workspace and the device pool. shapes_[0] is the colocated
  /// (or decode) replicas', shapes_[1] the prefill replicas' (disaggregated).
  struct Shape {
    int tp = 1;
    std::unique_ptr<IterationCost> cost;
    std::unique_ptr<IterationCost> draft;  ///< speculative decoding's draft model, if any
    /// One block on one device (the draft's KV with the model's): the most of any stage's
    /// device, and by the device's place in the replica (stage after stage).
    uint64_t shard = 0;
    std::vector<uint64_t> device_shard;
    uint64_t block_bytes = 0;  ///< a whole block: every device's shard
    uint64_t workspace = 0;
    uint64_t pool = 0;  ///< the device level's blocks
    uint64_t swap_blocks = 0;
  };
  std::array<Shape, 2> shapes_;
  [[nodiscard]] const Shape& shape(const Replica& rep) const {
    return shapes_[rep.prefill_only ? 1 : 0];
  }
  /// What a replica's devices hold besides KV blocks, and a block's bytes on one device:
  /// the model's, and its draft's when speculative decoding has one. The most of any
  /// stage's device, and `pool` the blocks that every stage's devices have room for (0:
  /// none).
  struct Footprint {
    uint64_t weights = 0, workspace = 0, shard = 0;
    uint64_t pool = 0;
    std::vector<uint64_t> stage_shards;  ///< a block on a device of each stage
  };
  Footprint footprint(IterationCost& cost, IterationCost* draft) const;
  /// Pipeline parallelism: the least stages more than `pp` that leave room for KV blocks at
  /// `gen`'s tensor parallelism, else at the widest the peer route joins: TP, stages and
  /// blocks; none when no such one does.
  struct Wider {
    int tp = 0, pp = 0;
    uint64_t blocks = 0;
  };
  std::optional<Wider> wider_pp(const traces::Arch& arch, const traces::GenOptions& gen) const;
  /// What a refusal of a copy between hosts adds where the topology models no network
  /// between them; empty where it has wider routes (that do not join these two).
  [[nodiscard]] std::string no_network_note() const {
    return topo_.wider_peer_routes(device_tier_).empty()
               ? "; it models no scale-out network to join them: a switch `per: cluster` "
                 "that each device reaches over a link of its own (docs/hardware.md)"
               : "";
  }
  /// Whether `tp` devices of the class, its first, are a group the peer route joins.
  [[nodiscard]] bool joined(int tp) const;
  /// The draft model's cost at `gen` (its tensor parallelism and dtypes); null without one.
  /// InputError at spec_draft when the devices cannot run it or it does not match `arch`.
  std::unique_ptr<IterationCost> draft_cost(const traces::Arch& arch,
                                            const traces::GenOptions& gen) const;
  /// The draft tokens of decode steps `s` verifies, from its acceptance draws: the leading
  /// accepted ones of `k`.
  [[nodiscard]] int64_t accepted(const Seq& s, int64_t k) const;
  /// The draft model's passes of the iteration being started on `r` (0 without one).
  Time draft_time(const Replica& rep);
  /// Builds shapes_[i] for tensor parallelism `gen.tp`: DoesNotFit (at `tp_field` or the
  /// token budget) when the weights and workspace leave no room for a block.
  void setup_shape(size_t i, const traces::Arch& arch, const traces::GenOptions& gen,
                   const char* tp_field, std::span<const int> first_group);
  size_t device_class_ = 0;
  size_t device_tier_ = 0;
  int layers_ = 1;
  int hidden_ = 0;  ///< the model's hidden size (pipeline stages send activations of it)
  int64_t block_tokens_ = 512;
  uint64_t spec_steps_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
  std::vector<SeqWork> draft_work_;
  TieredCache cache_;
  std::vector<size_t> level_tier_;  ///< topology tier of each level
  std::vector<int> level_device_;   ///< a device whose instance the level is
  std::vector<LevelRecord> level_info_;
  std::vector<Replica> replicas_;
  std::vector<uint32_t> pending_starts_;  ///< replicas to start at the end of the instant
  std::vector<Seq> seqs_;
  std::vector<uint32_t> next_turn_;  ///< per request: the next turn of its session, or none
  std::vector<RequestRecord> records_;
  sim::EventQueue q_;
  hw::FlowNetwork net_;
  // Transfers and their flows, recycled once done (an hour of traffic moves millions).
  std::vector<Transfer> transfers_;
  std::vector<uint32_t> free_transfers_;
  uint64_t transfer_count_ = 0;
  std::vector<FlowRef> flows_;  ///< by flow reference
  std::vector<uint32_t> free_flow_refs_;
  std::vector<uint32_t> flow_owner_;  ///< by flow id in net_: index into flows_
  std::vector<uint64_t> level_hits_;
  /// kv-aware router: by replica, then level, the prompt tokens a held block there is
  /// worth computing: 0 on the replica's device, its load's time in prefill tokens below
  /// (at most a block's tokens).
  std::vector<std::vector<int64_t>> hit_cost_;
  uint32_t next_rr_ = 0;
  uint32_t next_decode_rr_ = 0;  ///< disaggregated, round-robin: the next decode replica
  uint64_t iterations_ = 0, preemptions_ = 0, done_ = 0;
  size_t swap_tier_ = SIZE_MAX;  ///< the swap space's tier; SIZE_MAX: recompute only
  uint64_t swap_outs_ = 0, swap_fallbacks_ = 0, swapped_blocks_ = 0, swapped_in_blocks_ = 0;
  uint64_t recomputed_tokens_ = 0;
  std::vector<SeqWork> work_;
  std::vector<LevelId> where_;
  std::vector<Move> moves_;
  std::vector<Move> handoff_moves_;  ///< a hand-over's evictions on the decode replica
  uint64_t handoffs_ = 0, handoff_blocks_ = 0;
  std::vector<uint64_t> scratch_;
  std::vector<Series> series_;  ///< levels', then each replica's running and waiting
  // Timeline (when drawn).
  sim::Timeline* tl_ = nullptr;
  std::vector<sim::SeriesId> level_series_;
  sim::ProcessId transfer_pid_ = 0;
  sim::Lanes lanes_;
  std::vector<sim::TrackId> lane_tracks_;
};

void Engine::setup_devices(const traces::Arch& arch) {
  const auto cls =
      std::find_if(topo_.devices.begin(), topo_.devices.end(),
                   [&](const hw::Device& d) { return o_.device.empty() || d.id == o_.device; });
  if (cls == topo_.devices.end()) {
    std::vector<std::string> ids;
    for (const hw::Device& d : topo_.devices) ids.push_back(d.id);
    throw InputError(SourcePos{"device"}, fmt::format("no device class '{}' in '{}'{}", o_.device,
                                                      topo_.name, did_you_mean(o_.device, ids)));
  }
  device_class_ = static_cast<size_t>(cls - topo_.devices.begin());
  device_tier_ = *topo_.tier_index(cls->local_tier);
  if (o_.replicas < 1 || o_.prefill_replicas < 0) {
    throw InputError(SourcePos{o_.replicas < 1 ? "replicas" : "prefill_replicas"},
                     fmt::format("expected at least {} replicas, got {}", o_.replicas < 1 ? 1 : 0,
                                 o_.replicas < 1 ? o_.replicas : o_.prefill_replicas));
  }
  // What only disaggregated serving reads: a library caller's setting that would be
  // ignored is refused, as the command line's is.
  if (o_.prefill_replicas == 0 &&
      (o_.prefill_tp != 0 || o_.decode_router != RouterKind::kLeastLoaded)) {
    throw InputError(SourcePos{o_.prefill_tp != 0 ? "prefill_tp" : "decode_router"},
                     "only disaggregated serving reads it: give prefill_replicas too");
  }
  if (o_.prefill_tp < 0) {
    throw InputError(SourcePos{"prefill_tp"},
                     fmt::format("expected at least 1 device, got {}", o_.prefill_tp));
  }
  if (o_.spec.tokens < 0 || o_.spec.tokens > kMaxSpecTokens) {
    throw InputError(
        SourcePos{"spec_tokens"},
        fmt::format("expected 0 (off) to {} draft tokens, got {}", kMaxSpecTokens, o_.spec.tokens));
  }
  if (!(o_.spec.accept >= 0 && o_.spec.accept <= 1)) {
    throw InputError(SourcePos{"spec_accept"},
                     fmt::format("expected a probability from 0 to 1, got {}", o_.spec.accept));
  }
  if (o_.spec.tokens == 0 && (o_.spec.accept != 0 || o_.spec.draft)) {
    throw InputError(SourcePos{o_.spec.draft ? "spec_draft" : "spec_accept"},
                     "speculative decoding is off (0 draft tokens per step), so it would be "
                     "ignored");
  }
  if (o_.decode_router == RouterKind::kKvAware) {
    throw InputError(SourcePos{"decode_router"},
                     "kv-aware weighs the prompt tokens a replica would compute, and a decode "
                     "replica computes none: least-loaded, round-robin or prefix");
  }
  if (o_.pp < 1) {
    throw InputError(SourcePos{"pp"},
                     fmt::format("expected at least 1 pipeline stage, got {}", o_.pp));
  }
  // What pipeline parallelism does not model yet: refused rather than timed wrong.
  if (o_.pp > 1 && o_.spec.tokens > 0) {
    throw InputError(SourcePos{"pp"},
                     "pipeline parallelism is modelled without speculative decoding (the draft's "
                     "passes and stages are not)");
  }
  const int tp = gen_.tp;
  const int ptp = o_.prefill_replicas > 0 && o_.prefill_tp > 0 ? o_.prefill_tp : tp;
  const int all = o_.replicas + o_.prefill_replicas;
  // Up to 2^16 x 2^21 x 2^16: past int.
  const int64_t need =
      (int64_t{tp} * o_.replicas + int64_t{ptp} * o_.prefill_replicas) * int64_t{o_.pp};
  if (need > cls->count) {
    // One replica too wide is the tensor parallelism's doing; more, the replicas'.
    const std::string pp = o_.pp > 1 ? fmt::format(" x PP {}", o_.pp) : "";
    const auto n = [&](int k, std::string_view kind, int of) {
      return fmt::format("{} {}replica{} of TP {}{}", k, kind, k == 1 ? "" : "s", of, pp);
    };
    const std::string what = o_.prefill_replicas == 0 ? n(o_.replicas, "", tp)
                             : ptp == tp
                                 ? fmt::format("{} prefill and {} decode replicas of TP {}{}",
                                               o_.prefill_replicas, o_.replicas, tp, pp)
                                 : fmt::format("{} and {}", n(o_.prefill_replicas, "prefill ", ptp),
                                               n(o_.replicas, "decode ", tp));
    throw InputError(
        SourcePos{o_.prefill_replicas > 0 ? "prefill_replicas"
                  : o_.replicas > 1       ? "replicas"
                  : o_.pp > 1             ? "pp"
                                          : "tp"},
        fmt::format("{} {} {} devices; '{}' has {} of class '{}'", what,
                    all == 1 ? "needs" : "need", need, topo_.name, cls->count, cls->id));
  }
  std::vector<int> devices;
  for (int d = 0; d < fabric_.devices(); ++d) {
    if (fabric_.device_class(d) == device_class_) devices.push_back(d);
  }
  layers_ = std::max(1, arch.layers);
  hidden_ = arch.hidden;
  block_tokens_ = trace_.block_tokens;
  // Prefill replicas take the first devices, the others the rest: each shape's first TP
  // group (every other is checked to lie as it does below).
  const auto first_group = [&](size_t at, int width) {
    return std::span<const int>(devices).subspan(at, size_t(width));
  };
  setup_shape(0, arch, gen_, "tp",
              first_group(size_t(o_.prefill_replicas) * size_t(ptp) * size_t(o_.pp), tp));
  if (o_.prefill_replicas > 0) {
    traces::GenOptions g = gen_;
    g.tp = ptp;
    try {
      setup_shape(1, arch, g, "prefill_tp", first_group(0, ptp));
    } catch (const DoesNotFit&) {
      throw;
    } catch (const InputError& e) {
      // The generator's refusal of a tensor parallelism names `tp` (or `--tp`): here it is
      // prefill_tp's.
      if (e.pos().file != "tp" && e.pos().file != "--tp") throw;
      throw InputError(SourcePos{"prefill_tp"}, e.message());
    }
  }
  // Prefill replicas take the first devices, the others the rest.
  replicas_.resize(static_cast<size_t>(all));
  size_t next = 0;
  for (int r = 0; r < all; ++r) {
    Replica& rep = replicas_[size_t(r)];
    rep.prefill_only = r < o_.prefill_replicas;
    const Shape& sh = shape(rep);
    for (int k = 0; k < sh.tp * o_.pp; ++k) rep.devices.push_back(devices[next++]);
    rep.iters.resize(static_cast<size_t>(o_.pp));
    if (o_.pp > 1) rep.stage_free.assign(static_cast<size_t>(o_.pp), 0);
  }
  // A replica's tensor-parallel collectives run over the device tier's peer route: the
  // devices of each of its stages must reach one another by it (one wider than the devices
  // a switch joins, a host's NVSwitch, cannot). A stage sends its activations to the next,
  // rank to rank, over the peer route or a wider one (a scale-out network).
  for (Replica& rep : replicas_) {
    const Shape& sh = shape(rep);
    const auto group = [&](int st) {
      return std::span<const int>(rep.devices).subspan(size_t(st * sh.tp), size_t(sh.tp));
    };
    for (int st = 0; st < o_.pp; ++st) {
      hw::GroupFabric gf = hw::group_fabric(fabric_, device_tier_, group(st), o_.tp_across_domains);
      if (!gf.problem && gf.fabric != sh.cost->collective_fabric()) {
        // Replicas of one shape are timed alike: their groups must lie alike.
        gf.problem = fmt::format(
            "on devices {} to {}, its group spans {} scale-up domain{} ({} device{} each) where "
            "the first's spans {}: every group of a kind must lie alike",
            group(st).front(), group(st).back(), gf.fabric.domains,
            gf.fabric.domains == 1 ? "" : "s", gf.fabric.ranks_per_domain,
            gf.fabric.ranks_per_domain == 1 ? "" : "s", sh.cost->collective_fabric().domains);
      }
      if (auto why = gf.problem) {
        // The same devices in pipeline stages of the widest group that is joined.
        std::string stages;
        if (!rep.prefill_only && o_.spec.tokens == 0) {
          const auto g = group(st);
          // Stages of w devices, each group of them within one domain.
          const auto within = [&](int w) {
            for (size_t k = 0; k < g.size(); k += size_t(w)) {
              if (hw::peer_group_problem(fabric_, device_tier_, g.subspan(k, size_t(w)))) {
                return false;
              }
            }
            return true;
          };
          int w = sh.tp / 2;
          while (w > 1 && (sh.tp % w != 0 || !within(w))) --w;
          // The stages send their activations over the peer route or a wider one.
          if (w >= 1 && fabric_.peer_path(device_tier_, g[0], g[size_t(w)]) != nullptr) {
            stages = fmt::format(
                "; or pipeline stages take the same devices, a group each (pp: "
                "{} stages of TP {})",
                o_.pp * (sh.tp / w), w);
          }
        }
        throw InputError(
            SourcePos{rep.prefill_only && o_.prefill_tp > 0 ? "prefill_tp" : "tp"},
            fmt::format("a {} of TP {}: {}{}", o_.pp > 1 ? "pipeline stage" : "replica", sh.tp,
                        *why, stages));
      }
    }
    for (int st = 0; st + 1 < o_.pp; ++st) {
      std::vector<const hw::Route*>& routes = rep.hops.emplace_back();
      for (int k = 0; k < sh.tp; ++k) {
        const int a = group(st)[size_t(k)], b = group(st + 1)[size_t(k)];
        const hw::FabricPath* p = fabric_.peer_path(device_tier_, a, b);
        if (p == nullptr) {
          throw InputError(
              SourcePos{"pp"},
              fmt::format("pipeline stage {} sends its activations to stage {} over the peer "
                          "route of '{}' (or a wider one: a scale-out network), and '{}' has "
                          "none from device {} to device {} ({}){}",
                          st, st + 1, topo_.tiers[device_tier_].id, topo_.name, a, b,
                          hw::peer_apart_reason(topo_, device_tier_), no_network_note()));
        }
        routes.push_back(p->route);
      }
    }
  }
}

void Engine::setup_shape(size_t i, const traces::Arch& arch, const traces::GenOptions& gen,
                         const char* tp_field, std::span<const int> first_group) {
  Shape& sh = shapes_[i];
  sh.tp = gen.tp;
  // Prefill and decode replicas take the same stages (a hand-over goes stage to stage).
  sh.cost = make_cost(arch, gen, o_.pp);
  sh.draft = draft_cost(arch, gen);
  // A group that cannot all-reduce is refused once the replicas are laid out.
  if (const hw::GroupFabric gf =
          hw::group_fabric(fabric_, device_tier_, first_group, o_.tp_across_domains);
      !gf.problem) {
    sh.cost->set_collective_fabric(gf.fabric);
    if (sh.draft) sh.draft->set_collective_fabric(gf.fabric);
  }
  const Footprint f = footprint(*sh.cost, sh.draft.get());
  sh.shard = f.shard;
  sh.workspace = f.workspace;
  for (const uint64_t shard : f.stage_shards) {
    sh.device_shard.insert(sh.device_shard.end(), static_cast<size_t>(sh.tp), shard);
    sh.block_bytes += shard * static_cast<uint64_t>(sh.tp);
  }
  const uint64_t usable = topo_.usable(device_tier_);
  if (f.pool == 0) {
    // What would make room: the least wider tensor parallelism that does (else narrower
    // weights), a smaller iteration where the weights alone leave room; what takes the
    // most first.
    const int count = topo_.devices[device_class_].count;
    const bool weights_fit = f.weights + sh.shard <= usable;
    std::vector<std::string> remedies;
    if (const auto wider = wider_tp(arch, gen)) {
      remedies.push_back(
          fmt::format("raise the tensor parallelism ({}: {} is the least that "
                      "leaves room, for {} blocks of {} tokens)",
                      tp_field, wider->first, wider->second, block_tokens_));
    } else if (const auto pp = i == 0 ? wider_pp(arch, gen) : std::nullopt) {
      remedies.push_back(fmt::format(
          "split the layers into pipeline stages (pp: {} stages of TP {} are the least that "
          "leave room, for {} blocks of {} tokens)",
          pp->pp, pp->tp, pp->blocks, block_tokens_));
    } else if (!weights_fit) {
      remedies.push_back(fmt::format(
          "no tensor parallelism up to the {} device{} of class '{}' leaves room: narrower "
          "weights (weight_dtype) or larger devices might",
          count, count == 1 ? "" : "s", topo_.devices[device_class_].id));
    }
    if (weights_fit) remedies.emplace_back("lower the token budget");
    if (sh.workspace > f.weights) std::reverse(remedies.begin(), remedies.end());
    const std::string remedy = fmt::format("{}", fmt::join(remedies, ", or "));
    // Named by what takes the most: the weights (tp splits them) or the iteration's workspace.
    throw DoesNotFit(
        SourcePos{sh.workspace > f.weights ? "token_budget" : tp_field},
        fmt::format("the weights of {}{} ({}) and the workspace of an iteration of {} tokens ({}) "
                    "leave no room for a KV block ({}) in the {} usable of '{}' per "
                    "device{}: {}",
                    arch.name,
                    o_.spec.draft ? fmt::format(" and its draft {}", o_.spec.draft->name) : "",
                    to_string_approx(Bytes{f.weights}), o_.token_budget,
                    to_string_approx(Bytes{sh.workspace}), to_string_approx(Bytes{sh.shard}),
                    to_string_approx(Bytes{usable}), topo_.tiers[device_tier_].id,
                    i == 1 ? " of a prefill replica" : "", remedy));
  }
  sh.pool = f.pool;
}

Engine::Footprint Engine::footprint(IterationCost& cost, IterationCost* draft) const {
  Footprint f;
  f.weights = cost.weight_bytes();
  f.workspace = cost.workspace_bytes(o_.token_budget, o_.max_seqs);
  uint64_t per_token = cost.kv_bytes_per_token();
  if (draft != nullptr) {
    // The draft runs before the model, not beside it: the larger workspace serves both.
    f.weights += draft->weight_bytes();
    f.workspace = std::max(f.workspace, draft->workspace_bytes(o_.token_budget, o_.max_seqs));
    per_token += draft->kv_bytes_per_token();
  }
  f.shard = per_token * static_cast<uint64_t>(block_tokens_);
  // Each stage's devices hold its weights and KV (one stage: the model's and its draft's).
  const uint64_t usable = topo_.usable(device_tier_);
  f.pool = UINT64_MAX;
  for (int st = 0; st < cost.stages(); ++st) {
    const bool one = cost.stages() == 1;
    const uint64_t fixed = (one ? f.weights : cost.stage_weight_bytes(st)) + f.workspace;
    const uint64_t shard =
        one ? f.shard : cost.stage_kv_bytes_per_token(st) * static_cast<uint64_t>(block_tokens_);
    f.stage_shards.push_back(shard);
    f.pool = std::min(f.pool, fixed >= usable ? 0 : (usable - fixed) / shard);
  }
  return f;
}

std::unique_ptr<IterationCost> Engine::draft_cost(const traces::Arch& arch,
                                                  const traces::GenOptions& gen) const {
  if (!o_.spec.draft) return nullptr;
  const traces::Arch& d = *o_.spec.draft;
  if (d.vocab != arch.vocab) {
    throw InputError(SourcePos{"spec_draft"},
                     fmt::format("the draft {} has a vocabulary of {} tokens and {} of {}: a draft "
                                 "proposes the model's own tokens",
                                 d.name, d.vocab, arch.name, arch.vocab));
  }
  try {
    return std::make_unique<IterationCost>(d, gen, topo_, device_class_, device_tier_);
  } catch (const InputError& e) {
    throw InputError(SourcePos{"spec_draft"}, fmt::format("the draft {}: {}", d.name, e.message()));
  }
}

int64_t Engine::accepted(const Seq& s, int64_t k) const {
  // One draw per draft token, from the seed, the request and the step (its output so far).
  uint64_t z = o_.spec.seed ^ (uint64_t{s.req} << 32) ^ static_cast<uint64_t>(s.generated);
  int64_t n = 0;
  for (; n < k; ++n) {
    z += 0x9e3779b97f4a7c15ULL;
    uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    if (static_cast<double>(x >> 11) * 0x1.0p-53 >= o_.spec.accept) break;
  }
  return n;
}

Time Engine::draft_time(const Replica& rep) {
  IterationCost* draft = shape(rep).draft.get();
  if (draft == nullptr) return 0;
  // The draft prefills the prompt chunks with the model (it needs their KV too), then
  // proposes one token a pass for each decoding sequence, as many passes as the most
  // draft tokens any of them takes.
  Time total = 0;
  int64_t passes = 1;
  for (int64_t j = 0; j < passes; ++j) {
    draft_work_.clear();
    for (size_t i = 0; i < rep.batch.size(); ++i) {
      const Seq& s = seqs_[rep.batch[i]];
      const int64_t n = rep.tokens[i];
      if (s.computed < s.prompt) {
        if (j == 0) draft_work_.push_back(SeqWork{s.computed, n, s.computed + n == s.prompt});
        continue;
      }
      passes = std::max(passes, n - 1);
      if (n - 1 > j) draft_work_.push_back(SeqWork{s.prompt + s.generated - 1 + j, 1, true});
    }
    if (!draft_work_.empty()) total += draft->time(draft_work_);
  }
  return total;
}

std::optional<std::pair<int, uint64_t>> Engine::wider_tp(const traces::Arch& arch,
                                                         const traces::GenOptions& gen) const {
  const int count = topo_.devices[device_class_].count;
  for (int tp = gen.tp + 1; int64_t{tp} * o_.pp <= count; ++tp) {
    // A group the peer route does not join (wider than a host) would be refused.
    if (!joined(tp)) break;
    traces::GenOptions g = gen;
    g.tp = tp;
    std::optional<IterationCost> cost;
    std::unique_ptr<IterationCost> draft;
    try {
      cost.emplace(arch, g, topo_, device_class_, device_tier_, o_.pp);
      draft = draft_cost(arch, g);
    } catch (const InputError&) {
      continue;  // it does not divide the heads (of the model or its draft)
    }
    const Footprint f = footprint(*cost, draft.get());
    if (f.pool > 0) return std::pair{tp, f.pool};
  }
  return std::nullopt;
}

bool Engine::joined(int tp) const {
  std::vector<int> first;
  for (int d = 0; d < fabric_.devices() && static_cast<int>(first.size()) < tp; ++d) {
    if (fabric_.device_class(d) == device_class_) first.push_back(d);
  }
  return static_cast<int>(first.size()) == tp &&
         !hw::peer_group_problem(fabric_, device_tier_, first).has_value();
}

std::optional<Engine::Wider> Engine::wider_pp(const traces::Arch& arch,
                                              const traces::GenOptions& gen) const {
  if (o_.spec.tokens > 0) return std::nullopt;
  const int count = topo_.devices[device_class_].count;
  // The widest TP the peer route joins that the model's heads take.
  traces::GenOptions g = gen;
  int widest = 0;
  for (int tp = gen.tp; tp <= count; ++tp) {
    if (!joined(tp)) break;
    g.tp = tp;
    try {
      (void)make_cost(arch, g, 1);
    } catch (const InputError&) {
      continue;
    }
    widest = tp;
  }
  if (widest == 0) return std::nullopt;
  // The TP given first (its stages take the fewest devices), then the widest.
  for (const int tp : {gen.tp, widest}) {
    if (tp != widest && tp > widest) continue;
    g.tp = tp;
    try {
      for (int pp = o_.pp + 1; int64_t{pp} * tp <= count && pp <= arch.layers; ++pp) {
        const std::unique_ptr<IterationCost> cost = make_cost(arch, g, pp);
        const Footprint f = footprint(*cost, nullptr);
        if (f.pool > 0) return Wider{tp, pp, f.pool};
      }
    } catch (const InputError&) {
      continue;  // the heads do not divide
    }
  }
  return std::nullopt;
}

std::vector<Engine::ShardCopy> Engine::handoff_copies(const Replica& from,
                                                      const Replica& to) const {
  // Stage by stage (both replicas split the layers alike): in a stage, device i of p
  // holds the KV heads' share [i/p, (i+1)/p), device j of d [j/d, (j+1)/d): in units of
  // 1/(p d), [i d, (i+1) d) and [j p, (j+1) p). Device j's shard comes from the sources
  // it overlaps, each the overlap's part of it (the whole shard when p == d).
  const auto p = static_cast<int64_t>(shape(from).tp);
  const auto d = static_cast<int64_t>(shape(to).tp);
  const auto stages = static_cast<int64_t>(o_.pp);
  std::vector<ShardCopy> out;
  for (int64_t st = 0; st < stages; ++st) {
    for (int64_t j = 0; j < d; ++j) {
      for (int64_t i = 0; i < p; ++i) {
        const int64_t overlap = std::min((i + 1) * d, (j + 1) * p) - std::max(i * d, j * p);
        if (overlap <= 0) continue;
        const auto to_index = static_cast<size_t>(st * d + j);
        out.push_back(ShardCopy{from.devices[static_cast<size_t>(st * p + i)], to.devices[to_index],
                                static_cast<double>(overlap) / static_cast<double>(p), to_index});
      }
    }
  }
  return out;
}

void Engine::setup_handoffs() const {
  if (o_.prefill_replicas == 0) return;
  for (const Replica& p : replicas_) {
    if (!p.prefill_only) continue;
    for (const Replica& d : replicas_) {
      if (d.prefill_only) continue;
      for (const ShardCopy& c : handoff_copies(p, d)) {
        const int a = c.from, b = c.to;
        if (fabric_.peer_path(device_tier_, a, b) != nullptr) continue;
        const std::string& tier = topo_.tiers[device_tier_].id;
        throw InputError(
            SourcePos{"prefill_replicas"},
            fmt::format(
                "disaggregated prefill hands each request's KV cache from a prefill "
                "replica's devices to a decode replica's over the peer route of '{}' "
                "(or a wider one: a scale-out network), and '{}' has {}",
                tier, topo_.name,
                topo_.route(device_tier_, device_tier_) == nullptr
                    ? "none"
                    : fmt::format("none from device {} to device {} ({}){}", a, b,
                                  hw::peer_apart_reason(topo_, device_tier_), no_network_note())));
      }
    }
  }
}

void Engine::setup_levels() {
  // Device levels, one per replica; then each KV tier's instances, as the replicas' first
  // devices use them.
  std::vector<std::vector<LevelId>> paths(replicas_.size());
  for (size_t r = 0; r < replicas_.size(); ++r) {
    const LevelId l = cache_.add_level(
        LevelSpec{fmt::format("{}[r{}]", topo_.tiers[device_tier_].id, r), shape(replicas_[r]).pool,
                  o_.device_eviction, AdmissionKind::kAll, WriteKind::kBack});
    replicas_[r].device_level = l;
    level_tier_.push_back(device_tier_);
    level_device_.push_back(replicas_[r].devices[0]);
    level_info_.push_back(LevelRecord{
        cache_.spec(l).name, topo_.tiers[device_tier_].id, 0, shape(replicas_[r]).pool, 0, {}});
    paths[r].push_back(l);
  }
  for (size_t i = 0; i < o_.kv_tiers.size(); ++i) {
    const KvTier& k = o_.kv_tiers[i];
    const size_t tier = lower_tier(k.tier, "kv_tiers", "the KV tiers are");
    const uint64_t bytes = kv_bytes(k, tier);
    if (bytes > topo_.usable(tier)) {
      throw InputError(SourcePos{"kv_tiers"},
                       fmt::format("tier '{}' is given {} for KV per instance, more than the {} "
                                   "usable there",
                                   k.tier, to_string_approx(Bytes{bytes}),
                                   to_string_approx(Bytes{topo_.usable(tier)})));
    }
    // A replica's devices may use several instances of the tier (a TP group over two
    // sockets): each instance holds the shards of the replica's devices on it, so a block
    // takes that many shards there and the least roomy instance bounds the level. Replicas
    // whose devices use the same instances share a level; an instance that several levels
    // use (TP groups straddling sockets unevenly) is divided among them by the devices of
    // each on it, so that every device has an equal part and no byte is counted twice.
    struct Group {
      std::vector<int> instances;       // sorted, distinct
      std::map<int, uint64_t> bytes;    // per instance: the most a block takes there
      std::map<int, uint64_t> devices;  // per instance: the group's devices on it
      std::vector<size_t> replicas;
    };
    std::vector<Group> groups;
    std::map<int, uint64_t> devices_on;  // per instance: every replica's devices on it
    for (size_t r = 0; r < replicas_.size(); ++r) {
      std::map<int, uint64_t> shards;     // per instance: the replica's devices on it
      std::map<int, uint64_t> per_block;  // and the bytes of their shards of a block
      const Shape& sh = shape(replicas_[r]);
      for (size_t j = 0; j < replicas_[r].devices.size(); ++j) {
        const int d = replicas_[r].devices[j];
        if (!reaches(tier, d)) {
          throw InputError(SourcePos{"kv_tiers"},
                           fmt::format("tier '{}' has no route to and from '{}' in '{}'", k.tier,
                                       topo_.tiers[device_tier_].id, topo_.name));
        }
        ++shards[fabric_.tier_instance(tier, d)];
        per_block[fabric_.tier_instance(tier, d)] += sh.device_shard[j];
      }
      std::vector<int> instances;
      for (const auto& [inst, n] : shards) {
        instances.push_back(inst);
        devices_on[inst] += n;
      }
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const Group& x) { return x.instances == instances; });
      if (g == groups.end()) {
        groups.push_back(Group{instances, {}, {}, {}});
        g = groups.end() - 1;
      }
      for (const auto& [inst, n] : shards) {
        g->bytes[inst] = std::max(g->bytes[inst], per_block.at(inst));
        g->devices[inst] += n;
      }
      g->replicas.push_back(r);
    }
    for (const Group& g : groups) {
      uint64_t blocks = UINT64_MAX;
      for (const auto& [inst, per_block] : g.bytes) {
        // This group's part of the instance: its devices' share of those using it.
        const auto part = static_cast<uint64_t>(static_cast<double>(bytes) *
                                                static_cast<double>(g.devices.at(inst)) /
                                                static_cast<double>(devices_on.at(inst)));
        blocks = std::min(blocks, part / per_block);
      }
      if (blocks == 0) {
        throw InputError(SourcePos{"kv_tiers"},
                         fmt::format("tier '{}' holds {} for KV per instance, less than one "
                                     "block's shards there ({} each) for each replica using it",
                                     k.tier, to_string_approx(Bytes{bytes}),
                                     to_string_approx(Bytes{shapes_[0].shard})));
      }
      const int count = topo_.instances(topo_.tiers[tier].per);
      std::string name = k.tier;
      if (count > 1) name = fmt::format("{}[{}]", k.tier, fmt::join(g.instances, ","));
      const LevelId l = cache_.add_level(LevelSpec{name, blocks, k.eviction, k.admission, k.write});
      level_tier_.push_back(tier);
      level_device_.push_back(replicas_[g.replicas.front()].devices[0]);
      level_info_.push_back(LevelRecord{name, k.tier, i + 1, blocks, 0, {}});
      for (const size_t r : g.replicas) paths[r].push_back(l);
    }
  }
  for (size_t r = 0; r < replicas_.size(); ++r) {
    // Demotions go level to level: each pair of neighbours needs routes both ways.
    for (size_t i = 1; i + 1 < paths[r].size(); ++i) {
      const size_t a = level_tier_[paths[r][i]];
      const size_t b = level_tier_[paths[r][i + 1]];
      if (fabric_.path(a, b, replicas_[r].devices[0]) == nullptr ||
          fabric_.path(b, a, replicas_[r].devices[0]) == nullptr) {
        throw InputError(SourcePos{"kv_tiers"},
                         fmt::format("tiers '{}' and '{}' have no route between them in '{}'",
                                     topo_.tiers[a].id, topo_.tiers[b].id, topo_.name));
      }
    }
    replicas_[r].path = cache_.add_path(paths[r]);
  }
  level_hits_.assign(cache_.level_count(), 0);
  if (o_.router == RouterKind::kKvAware) setup_hit_costs();
}

void Engine::setup_hit_costs() {
  // A prefill token's time, per shape: a chunk of the token budget's tokens, a prompt's first.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(o_.token_budget, 1 << 20));
  const SeqWork work{0, chunk, true, 0};
  std::array<double, 2> per_token_of{};
  for (size_t i = 0; i < shapes_.size(); ++i) {
    if (!shapes_[i].cost) continue;
    per_token_of[i] = static_cast<double>(shapes_[i].cost->time(std::span<const SeqWork>(&work, 1))) /
                      static_cast<double>(chunk);
  }
  hit_cost_.resize(replicas_.size());
  for (size_t r = 0; r < replicas_.size(); ++r) {
    const Replica& rep = replicas_[r];
    const Shape& sh = shape(rep);
    const double per_token = per_token_of[rep.prefill_only ? 1 : 0];
    std::vector<int64_t>& cost = hit_cost_[r];
    cost.assign(cache_.level_count(), block_tokens_);
    cost[rep.device_level] = 0;
    for (LevelId l = 0; l < cache_.level_count(); ++l) {
      if (level_tier_[l] == device_tier_) continue;
      // Each device loads its shard over its own route; the slowest decides.
      Time load = 0;
      for (size_t k = 0; k < rep.devices.size(); ++k) {
        const hw::FabricPath* p = fabric_.path(level_tier_[l], device_tier_, rep.devices[k]);
        if (p == nullptr) continue;
        load = std::max(load, hw::transfer_time_alone(*p->route, Bytes{sh.device_shard[k]}).ps);
      }
      if (per_token > 0) {
        cost[l] = std::min<int64_t>(
            block_tokens_, static_cast<int64_t>(std::ceil(static_cast<double>(load) / per_token)));
      }
    }
  }
}

size_t Engine::lower_tier(const std::string& id, const char* field, std::string_view role) const {
  const auto ti = topo_.tier_index(id);
  if (!ti) {
    std::vector<std::string> ids;
    for (const hw::Tier& x : topo_.tiers) ids.push_back(x.id);
    // With no close name, the tiers it has (a user guessing `cpu` learns `ddr`).
    const std::string hint = did_you_mean(id, ids);
    throw InputError(
        SourcePos{field},
        fmt::format("no tier '{}' in '{}'{}", id, topo_.name,
                    hint.empty() ? fmt::format(" (its tiers: {})", fmt::join(ids, ", ")) : hint));
  }
  if (*ti == device_tier_) {
    throw InputError(SourcePos{field},
                     fmt::format("'{}' is the device tier: {} below it", id, role));
  }
  return *ti;
}

bool Engine::reaches(size_t tier, int d) const {
  return fabric_.path(device_tier_, tier, d) != nullptr &&
         fabric_.path(tier, device_tier_, d) != nullptr;
}

uint64_t Engine::kv_bytes(const KvTier& k, size_t tier) const {
  return k.bytes > 0 ? k.bytes
                     : static_cast<uint64_t>(static_cast<double>(topo_.usable(tier)) * k.fraction);
}

void Engine::setup_swap() {
  if (o_.preemption != PreemptionKind::kSwap) return;
  const auto reached = [&](size_t tier) {
    return std::ranges::all_of(replicas_, [&](const Replica& rep) {
      return std::ranges::all_of(rep.devices, [&](int d) { return reaches(tier, d); });
    });
  };
  const std::string& device_id = topo_.tiers[device_tier_].id;
  if (o_.swap_tier.empty()) {
    for (size_t t = 0; t < topo_.tiers.size() && swap_tier_ == SIZE_MAX; ++t) {
      if (t != device_tier_ && topo_.tiers[t].kind == hw::TierKind::kDdr && reached(t))
        swap_tier_ = t;
    }
    if (swap_tier_ == SIZE_MAX) {
      throw InputError(SourcePos{"swap_tier"},
                       fmt::format("'{}' has no DDR tier with routes to and from '{}' for the swap "
                                   "space: name its tier",
                                   topo_.name, device_id));
    }
  } else {
    const size_t ti = lower_tier(o_.swap_tier, "swap_tier", "the swap space is");
    if (!reached(ti)) {
      throw InputError(SourcePos{"swap_tier"},
                       fmt::format("tier '{}' has no route to and from '{}' in '{}'", o_.swap_tier,
                                   device_id, topo_.name));
    }
    swap_tier_ = ti;
  }
  const hw::Tier& tier = topo_.tiers[swap_tier_];
  for (Shape& sh : shapes_) {
    if (!sh.cost) continue;
    sh.swap_blocks = o_.swap_bytes / sh.shard;
    if (sh.swap_blocks == 0) {
      throw InputError(
          SourcePos{"swap_space"},
          fmt::format("{} of swap space per device holds no block's shard ({})",
                      to_string_approx(Bytes{o_.swap_bytes}), to_string_approx(Bytes{sh.shard})));
    }
  }
  // Each instance of the tier holds the swap space of the devices on it, beside what a KV
  // tier there takes.
  const uint64_t usable = topo_.usable(swap_tier_);
  uint64_t kv = 0;
  for (const KvTier& k : o_.kv_tiers) {
    if (k.tier == tier.id) kv = saturating_add(kv, kv_bytes(k, swap_tier_));
  }
  std::map<int, uint64_t> devices_on;
  for (const Replica& rep : replicas_) {
    for (const int d : rep.devices) ++devices_on[fabric_.tier_instance(swap_tier_, d)];
  }
  for (const auto& [inst, n] : devices_on) {
    const uint64_t need = saturating_add(saturating_mul(n, o_.swap_bytes), kv);
    if (need > usable) {
      throw InputError(
          SourcePos{"swap_space"},
          fmt::format(
              "the swap space ({} per device, {} device{} on '{}' instance {}){} does not "
              "fit the {} usable there",
              to_string_approx(Bytes{o_.swap_bytes}), n, n == 1 ? "" : "s", tier.id, inst,
              kv > 0 ? fmt::format(" and the KV tier's {}", to_string_approx(Bytes{kv})) : "",
              to_string_approx(Bytes{usable})));
    }
  }
  for (Replica& rep : replicas_) rep.swap_free = shape(rep).swap_blocks;
}

uint64_t& Engine::hash_of(Seq& s, size_t block) {
  while (s.hashes.size() <= block) {
    s.hashes.push_back(output_hash(s.req, s.hashes.size()));
  }
  return s.hashes[block];
}

int64_t Engine::blocks_for(int64_t tokens) const {
  return ceil_div(tokens, block_tokens_);
}

int64_t Engine::tokens_in(const Seq& s, int64_t blocks) const {
  return std::min(blocks * block_tokens_, s.prompt);
}

void Engine::fill_blocks(uint32_t r, Seq& s, int64_t before, int64_t after) {
  // Blocks that became full take the next turn's hash for them (the same tokens); one
  // already stored under its partial hash is stored again under the full one.
  if (s.next_turn == nullptr) return;
  const auto first = static_cast<size_t>(before / block_tokens_);
  const auto last = std::min(static_cast<size_t>(after / block_tokens_), s.next_turn->size());
  for (size_t j = first; j < last; ++j) {
    uint64_t& h = hash_of(s, j);
    const uint64_t full = (*s.next_turn)[j];
    if (h == full) continue;
    if (j < s.held) {
      const bool ok = cache_.rehash(replicas_[r].path, h, full, moves_);
      TF_ASSERT(ok, "a full block found no room for its new hash");
    }
    h = full;
  }
}

bool Engine::store_block(const Replica& rep, Seq& s, std::vector<Move>& moves) {
  const size_t b = s.held;
  uint64_t& h = hash_of(s, b);
  const bool full = whole(s, b);
  if (!full) {
    s.partial = b;
    s.whole_hash = h;
    h = partial_hash(s.req, b);
  }
  const bool held = cache_.holds(rep.device_level, h);
  const bool ok = cache_.insert(rep.path, h, moves, full);
  TF_ASSERT(ok, "block {} of request {} found no room", b, s.req);
  ++s.held;
  return held;
}

void Engine::publish(const Replica& rep, Seq& s) {
  uint64_t& h = s.hashes[s.partial];
  const bool ok = cache_.rehash(rep.path, h, s.whole_hash, moves_);
  TF_ASSERT(ok, "a partial block found no room for its hash");
  h = s.whole_hash;
  s.partial = SIZE_MAX;
}

void Engine::let_go(const Replica& rep, Seq& s) {
  size_t n = s.held;
  if (s.partial != SIZE_MAX) {
    TF_ASSERT(s.partial + 1 == s.held, "request {}'s partial block {} is not its last ({})", s.req,
              s.partial, s.held);
    cache_.discard(rep.path, s.hashes[s.partial]);
    s.hashes[s.partial] = s.whole_hash;
    s.partial = SIZE_MAX;
    --n;
  }
  cache_.release(rep.path, std::span<const uint64_t>(s.hashes.data(), n));
}

bool Engine::room(const Replica& rep, uint64_t blocks) const {
  return cache_.pinned_blocks(rep.device_level) + rep.reserved + blocks <= shape(rep).pool;
}

uint32_t Engine::route(const Seq& s) {
  // Disaggregated: requests go to the prefill replicas, which come first.
  const size_t n = o_.prefill_replicas > 0 ? size_t(o_.prefill_replicas) : replicas_.size();
  if (n == 1) return 0;
  switch (o_.router) {
    case RouterKind::kRoundRobin:
      return next_rr_++ % static_cast<uint32_t>(n);
    case RouterKind::kLeastLoaded: {
      uint32_t best = 0;
      for (uint32_t r = 1; r < n; ++r) {
        if (replicas_[r].load < replicas_[best].load) best = r;
      }
      return best;
    }
    case RouterKind::kPrefix:
      return prefix_pick(0, n, s.hashes, [&](uint32_t r) { return replicas_[r].load; });
    case RouterKind::kKvAware:
      return kv_aware_pick(n, s);
  }
  return 0;
}

uint32_t Engine::kv_aware_pick(size_t n, const Seq& s) {
  uint32_t best = 0;
  int64_t best_work = INT64_MAX;
  for (uint32_t r = 0; r < n; ++r) {
    const Replica& rep = replicas_[r];
    // Its prefill backlog: what its queued and running sequences have left of their prompts.
    int64_t work = rep.backlog;
#ifndef NDEBUG
    int64_t walked = 0;
    for (const uint32_t q : rep.waiting) walked += prompt_left(seqs_[q]);
    for (const uint32_t q : rep.running) walked += prompt_left(seqs_[q]);
    TF_ASSERT(walked == work, "replica {} keeps a backlog of {} tokens, its queues hold {}", r,
              work, walked);
#endif
    // This prompt's tokens it would compute: those past the prefix its levels hold, and
    // for each held block below the device the tokens its load takes the time of.
    const size_t held = cache_.lookup(rep.path, s.hashes, where_);
    work += std::max<int64_t>(0, s.prompt - static_cast<int64_t>(held) * block_tokens_);
    for (size_t i = 0; i < held; ++i) work += hit_cost_[r][where_[i]];
    if (work < best_work || (work == best_work && rep.load < replicas_[best].load)) {
      best = r;
      best_work = work;
    }
  }
  return best;
}

uint32_t Engine::pick_decode(const Seq& s) {
  const auto first = static_cast<uint32_t>(o_.prefill_replicas);
  const auto load = [&](uint32_t i) { return replicas_[i].load; };
  switch (o_.decode_router) {
    case RouterKind::kRoundRobin:
      return first + next_decode_rr_++ % static_cast<uint32_t>(o_.replicas);
    case RouterKind::kKvAware:  // refused by setup_devices
    case RouterKind::kLeastLoaded: {
      uint32_t d = first;
      for (auto i = first + 1; i < replicas_.size(); ++i) {
        if (load(i) < load(d)) d = i;
      }
      return d;
    }
    case RouterKind::kPrefix:
      // The blocks it would be sent: the fewer it lacks, the less to copy.
      return prefix_pick(first, replicas_.size(),
                         std::span<const uint64_t>(s.hashes.data(), s.handoff_held), load);
  }
  return first;
}

template <class Load>
uint32_t Engine::prefix_pick(uint32_t first, size_t end, std::span<const uint64_t> hashes,
                             Load load) {
  uint32_t best = first;
  size_t best_len = 0;
  for (uint32_t r = first; r < end; ++r) {
    const size_t len = cache_.lookup(replicas_[r].path, hashes, where_);
    size_t on_device = 0;
    while (on_device < len && where_[on_device] == replicas_[r].device_level) ++on_device;
    if (on_device > best_len || (on_device == best_len && load(r) < load(best))) {
      best = r;
      best_len = on_device;
    }
  }
  return best;
}

void Engine::arrive(uint32_t req) {
  const traces::Request& rq = trace_.requests[req];
  Seq& s = seqs_[req];
  s.req = req;
  s.prompt = rq.prompt_tokens;
  s.output = rq.output_tokens;
  s.hashes = rq.blocks;
  s.next_turn = next_turn_[req] == UINT32_MAX ? nullptr : &trace_.requests[next_turn_[req]].blocks;
  RequestRecord& rec = records_[req];
  // A request whose whole KV does not fit an empty device level can never be served.
  // (Disaggregated, its prompt must also fit a prefill replica's.)
  if (static_cast<uint64_t>(blocks_for(s.prompt + s.output)) > shapes_[0].pool ||
      (o_.prefill_replicas > 0 && static_cast<uint64_t>(blocks_for(s.prompt)) > shapes_[1].pool)) {
    rec.rejected = true;
    ++done_;
    return;
  }
  const uint32_t r = route(s);
  rec.replica = r;
  Replica& rep = replicas_[r];
  rep.waiting.push_back(req);
  ++rep.stats.requests;
  rep.load += rq.prompt_tokens + rq.output_tokens;
  rep.backlog += prompt_left(s);
  if (rep.in_flight < rep.iters.size()) {
    want_start(r);
  } else {
    record_queues(r);
  }
}

void Engine::want_start(uint32_t r) {
  Replica& rep = replicas_[r];
  if (rep.start_pending) return;
  rep.start_pending = true;
  pending_starts_.push_back(r);
}

void Engine::start_pending() {
  // A replica with stages free may start another iteration at once (pipeline parallelism).
  std::vector<uint32_t> starts;
  while (!pending_starts_.empty()) {
    starts.clear();
    starts.swap(pending_starts_);
    for (const uint32_t r : starts) {
      replicas_[r].start_pending = false;
      start_iteration(r);
    }
  }
}

bool Engine::room_for(uint32_t r, size_t i, uint64_t need) {
  Replica& rep = replicas_[r];
  while (!room(rep, need)) {
    // In the prefill pass, decodes after i are already in the batch; in the decode pass,
    // nothing after i is.
    // (Nor is one in an iteration in flight.)
    size_t v = rep.running.size() - 1;
    while (v > i &&
           (seqs_[rep.running[v]].in_flight ||
            std::find(rep.batch.begin(), rep.batch.end(), rep.running[v]) != rep.batch.end())) {
      --v;
    }
    if (v == i) break;
    preempt(r, rep.running[v]);
  }
  if (room(rep, need)) return true;
  preempt(r, rep.running[i]);
  return false;
}

void Engine::preempt(uint32_t r, uint32_t seq) {
  Replica& rep = replicas_[r];
  Seq& s = seqs_[seq];
  let_go(rep, s);
  if (swap_tier_ != SIZE_MAX && s.held > 0 && s.held <= rep.swap_free) {
    // Swap: its blocks are copied to the swap space (they also stay cached on the device,
    // unpinned, but for a partial block); it keeps what it computed and generated.
    rep.swap_free -= s.held;
    rep.swap_outs += s.held;
    swapped_blocks_ += s.held;
    ++swap_outs_;
    s.swapped = s.held;
  } else {
    if (swap_tier_ != SIZE_MAX && s.held > 0) ++swap_fallbacks_;
    // Recompute: what it generated is prompt now; it starts over from the cache.
    s.had_kv = s.computed + std::max<int64_t>(s.generated - 1, 0);
    progress(rep, s, [&s] {
      s.prompt += s.generated;
      s.output -= s.generated;
      s.generated = 0;
      s.computed = 0;
    });
  }
  s.held = 0;
  rep.running.erase(std::find(rep.running.begin(), rep.running.end(), seq));
  rep.waiting.push_front(seq);
  ++records_[seq].preemptions;
  ++rep.stats.preemptions;
  ++preemptions_;
}

bool Engine::schedule(uint32_t r) {
  Replica& rep = replicas_[r];
  rep.batch.clear();
  rep.tokens.clear();
  work_.clear();
  int64_t budget = o_.token_budget;
  moves_.clear();
  // Decodes first, in admission order; a decode that needs a block it cannot get preempts
  // (room_for) the latest admitted sequence (itself, when it is the latest).
  for (size_t i = 0; i < rep.running.size() && budget > 0;) {
    const uint32_t q = rep.running[i];
    Seq& s = seqs_[q];
    if (s.computed < s.prompt || s.in_flight) {
      ++i;
      continue;
    }
    // The step writes the KV of the last token generated and produces the next; with
    // speculative decoding it verifies k draft tokens too (room for all of their KV), as
    // many as the output and the budget leave.
    const int64_t k = std::min<int64_t>({o_.spec.tokens, s.output - s.generated - 1, budget - 1});
    const uint64_t need =
        static_cast<uint64_t>(blocks_for(s.prompt + s.generated + std::max<int64_t>(k, 0))) -
        s.held;
    if (!room_for(r, i, need)) continue;
    rep.reserved += need;
    rep.batch.push_back(q);
    rep.tokens.push_back(1 + std::max<int64_t>(k, 0));
    work_.push_back(SeqWork{s.prompt + s.generated - 1, 1 + std::max<int64_t>(k, 0), true,
                            std::max<int64_t>(k, 0)});
    budget -= 1 + std::max<int64_t>(k, 0);
    ++i;
  }
  // Prefills under way, then new requests, first come first served. A prefill whose chunk
  // finds no room preempts as a decode does (without it, running prefills holding the
  // whole pool would wait forever).
  for (size_t i = 0; i < rep.running.size() && budget > 0;) {
    const uint32_t q = rep.running[i];
    Seq& s = seqs_[q];
    if (s.computed >= s.prompt || s.in_flight) {
      ++i;
      continue;
    }
    const int64_t chunk = std::min(s.prompt - s.computed, budget);
    const uint64_t need = static_cast<uint64_t>(blocks_for(s.computed + chunk)) - s.held;
    if (!room_for(r, i, need)) continue;
    rep.reserved += need;
    rep.batch.push_back(q);
    rep.tokens.push_back(chunk);
    work_.push_back(SeqWork{s.computed, chunk, s.computed + chunk == s.prompt});
    budget -= chunk;
    ++i;
  }
  // (A decode replica's hand-overs in flight count among its sequences.)
  while (budget > 0 && !rep.waiting.empty() &&
         static_cast<int64_t>(rep.running.size() + rep.receiving) < o_.max_seqs) {
    const uint32_t q = rep.waiting.front();
    Seq& s = seqs_[q];
    if (s.swapped > 0) {
      if (!swap_in(r, budget)) break;
      continue;
    }
    const size_t prompt_blocks = static_cast<size_t>(blocks_for(s.prompt));
    for (size_t b = 0; b < prompt_blocks; ++b) (void)hash_of(s, b);
    size_t matched =
        cache_.lookup(rep.path, std::span<const uint64_t>(s.hashes.data(), prompt_blocks), where_);
    // At least the last block is computed: its last token's logits give the first token.
    if (matched == prompt_blocks) --matched;
    const int64_t hit = tokens_in(s, static_cast<int64_t>(matched));
    // The chunk the budget allows, cut to the blocks the device level can still give.
    const uint64_t pinned = cache_.pinned_blocks(rep.device_level) + rep.reserved;
    const uint64_t pool = shape(rep).pool;
    const int64_t free_blocks = static_cast<int64_t>(pool - std::min(pool, pinned));
    const int64_t fits = tokens_in(s, free_blocks) - hit;
    const int64_t chunk = std::min({s.prompt - hit, budget, fits});
    if (chunk <= 0) break;
    const uint64_t need = static_cast<uint64_t>(blocks_for(hit + chunk)) - matched;
    const size_t before = moves_.size();
    if (!cache_.acquire(rep.path, s.hashes, matched, moves_)) {
      moves_.resize(before);
      break;
    }
    rep.waiting.pop_front();
    rep.running.push_back(q);
    s.held = matched;
    // Preempted by recompute: the KV it had past the prefix hit now is computed again (the
    // rest of the prompt is computed for the first time).
    if (s.admitted_once)
      recomputed_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, s.had_kv - hit));
    progress(rep, s, [&] { s.computed = hit; });
    RequestRecord& rec = records_[q];
    if (!s.admitted_once) {
      s.admitted_once = true;
      rec.scheduled = q_.now();
      rec.hit_tokens.assign(cache_.path(rep.path).size(), 0);
      for (size_t b = 0; b < matched; ++b) {
        const auto& path = cache_.path(rep.path);
        const size_t pos =
            static_cast<size_t>(std::find(path.begin(), path.end(), where_[b]) - path.begin());
        rec.hit_tokens[pos] += static_cast<uint64_t>(block_tokens_);
        level_hits_[where_[b]] += static_cast<uint64_t>(block_tokens_);
      }
    }
    rep.reserved += need;
    rep.batch.push_back(q);
    rep.tokens.push_back(chunk);
    work_.push_back(SeqWork{hit, chunk, hit + chunk == s.prompt});
    budget -= chunk;
  }
  return !rep.batch.empty();
}

bool Engine::swap_in(uint32_t r, int64_t& budget) {
  Replica& rep = replicas_[r];
  const uint32_t q = rep.waiting.front();
  Seq& s = seqs_[q];
  const size_t blocks = s.swapped;
  // Its blocks and those its next step writes: a decode's next token, or the prefill
  // chunk the budget allows.
  const bool decode = s.computed >= s.prompt;
  const uint64_t pinned = cache_.pinned_blocks(rep.device_level) + rep.reserved;
  const uint64_t pool = shape(rep).pool;
  const int64_t free_blocks = static_cast<int64_t>(pool - std::min(pool, pinned));
  const int64_t chunk =
      decode ? 1
             : std::min({s.prompt - s.computed, budget, free_blocks * block_tokens_ - s.computed});
  if (chunk <= 0) return false;
  const int64_t kv_after = decode ? s.prompt + s.generated : s.computed + chunk;
  const uint64_t need = std::max(static_cast<uint64_t>(blocks_for(kv_after)), uint64_t{blocks});
  if (!room(rep, need)) return false;
  const std::span<const uint64_t> hashes(s.hashes.data(), blocks);
  const size_t matched = cache_.lookup(rep.path, hashes, where_);
  const size_t before = moves_.size();
  if (!cache_.acquire(rep.path, s.hashes, matched, moves_)) {
    moves_.resize(before);
    return false;
  }
  // The rest come back from the swap space, unless the device level still holds them.
  s.held = matched;
  while (s.held < blocks) {
    if (!store_block(rep, s, moves_)) {
      ++rep.swap_ins;
      ++swapped_in_blocks_;
    }
  }
  rep.swap_free += blocks;
  s.swapped = 0;
  rep.waiting.pop_front();
  rep.running.push_back(q);
  rep.reserved += need - blocks;
  rep.batch.push_back(q);
  rep.tokens.push_back(chunk);
  work_.push_back(decode ? SeqWork{s.prompt + s.generated - 1, 1, true}
                         : SeqWork{s.computed, chunk, s.computed + chunk == s.prompt});
  budget -= chunk;
  return true;
}

void Engine::start_iteration(uint32_t r) {
  Replica& rep = replicas_[r];
  if (rep.in_flight == rep.iters.size()) return;
  rep.slot = 0;
  while (rep.iters[rep.slot].active) ++rep.slot;
  Iteration& it = rep.iters[rep.slot];
  rep.swap_outs = 0;
  rep.swap_ins = 0;
  const uint64_t reserved = rep.reserved;
  const bool any = schedule(r);
  record_queues(r);
  it.loads_left = 0;
  it.loads_done = q_.now();
  // Swaps go device to swap tier and back, each device its shard; an iteration that
  // computes waits for its swaps.
  const std::span<const int> devices(rep.devices);
  const uint64_t most = blocks_per_transfer();
  for (uint64_t b = 0; b < rep.swap_outs; b += most) {
    transfer(r, device_tier_, swap_tier_, devices, any, TransferKind::kSwapOut,
             std::min(most, rep.swap_outs - b));
  }
  for (uint64_t b = 0; b < rep.swap_ins; b += most) {
    transfer(r, swap_tier_, device_tier_, devices, any, TransferKind::kSwapIn,
             std::min(most, rep.swap_ins - b));
  }
  if (!any) return;
  it.active = true;
  if (rep.in_flight++ == 0) rep.busy_since = q_.now();
  ++iterations_;
  it.start = q_.now();
  it.reserved = rep.reserved - reserved;
  it.swap_outs = rep.swap_outs;
  it.swap_ins = rep.swap_ins;
  const Shape& sh = shape(rep);
  if (o_.pp == 1) {
    it.compute = draft_time(rep) + sh.cost->time(work_);
  } else {
    // The mean stage's: what each stage computes, over the stages.
    sh.cost->stage_times(work_, it.stages);
    Time sum = 0;
    for (const Time t : it.stages) sum += t;
    it.compute = sum / o_.pp;
  }
  it.batch.swap(rep.batch);
  it.tokens.swap(rep.tokens);
  // With one slot nothing is scheduled while it is in flight: the marks are for stages.
  if (rep.iters.size() > 1) {
    for (const uint32_t q : it.batch) seqs_[q].in_flight = true;
  }
  ++rep.stats.iterations;
  rep.stats.compute += it.compute;
  carry(r, moves_, /*loads=*/true);
  const uint32_t key = iteration_key(r, rep.slot);
  if (o_.pp == 1) {
    if (it.loads_left == 0) q_.schedule(q_.now() + it.compute, kIterationEnd, key);
    return;
  }
  // Through the stages now, unless it waits for loads before it computes (flow_done):
  // under layered loads its stages run now and the last layer waits for the last load.
  if (it.loads_left == 0) {
    q_.schedule(pipeline(rep, it, q_.now()), kIterationEnd, key);
  } else if (o_.load == LoadMode::kLayered && it.swap_outs + it.swap_ins == 0) {
    it.stages_done = pipeline(rep, it, q_.now());
  }
  // Another batch may enter the first stage behind this one.
  if (rep.in_flight < rep.iters.size()) want_start(r);
}

Time Engine::pipeline(Replica& rep, Iteration& it, Time enter) {
  int64_t tokens = 0;
  for (const int64_t n : it.tokens) tokens += n;
  // Each rank sends its part of the hidden states and the residual (vLLM's intermediate
  // tensors, split over the TP group and gathered on the next stage).
  const Shape& sh = shape(rep);
  const Bytes sent{traces::bytes_of(
      2.0 * static_cast<double>(tokens) * static_cast<double>(hidden_) / sh.tp, gen_.act_dtype)};
  Time t = enter;
  for (size_t st = 0; st < it.stages.size(); ++st) {
    if (st > 0) {
      // The ranks send at once, each alone on its route: the slowest decides.
      Time hop = 0;
      for (const hw::Route* route : rep.hops[st - 1]) {
        hop = std::max(hop, hw::transfer_time_alone(*route, sent).ps);
      }
      t += hop;
    }
    t = rep.stage_free[st] = std::max(t, rep.stage_free[st]) + it.stages[st];
  }
  return t;
}

void Engine::carry(uint32_t r, const std::vector<Move>& moves, bool loads) {
  Replica& rep = replicas_[r];
  const uint64_t most = blocks_per_transfer();
  // Moves of one kind between the same two levels go together, up to `most` blocks a
  // transfer, in the order each group first appears.
  groups_.clear();
  for (const Move& m : moves) {
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const MoveGroup& g) {
      return g.from == m.from && g.to == m.to && g.kind == m.kind && g.blocks < most;
    });
    if (it == groups_.end()) {
      groups_.push_back(MoveGroup{m.from, m.to, m.kind, 0});
      it = groups_.end() - 1;
    }
    ++it->blocks;
  }
  for (const MoveGroup& g : groups_) {
    const size_t from = level_tier_[g.from];
    const size_t to = level_tier_[g.to];
    const bool device_side = from == device_tier_ || to == device_tier_;
    // A move touching the device moves each device's shard over its own route; one between
    // lower levels moves the whole block.
    const std::span<const int> devices = device_side
                                             ? std::span<const int>(rep.devices)
                                             : std::span<const int>(&level_device_[g.from], 1);
    transfer(r, from, to, devices, loads && g.kind == MoveKind::kLoad,
             static_cast<TransferKind>(g.kind), g.blocks);
  }
}

uint32_t Engine::new_transfer(uint32_t r, TransferKind kind, bool waited) {
  const uint32_t t = take_slot(transfers_, free_transfers_);
  transfers_[t] = Transfer{};
  ++transfer_count_;
  Transfer& tr = transfers_[t];
  tr.replica = r;
  tr.load = waited;
  tr.kind = kind;
  tr.start = q_.now();
  if (tl_ != nullptr) {
    tr.lane = lanes_.acquire();
    while (lane_tracks_.size() <= tr.lane) {
      lane_tracks_.push_back(tl_->track(transfer_pid_, fmt::format("lane {}", lane_tracks_.size()),
                                        static_cast<int>(lane_tracks_.size())));
    }
  }
  if (waited) ++replicas_[r].iters[replicas_[r].slot].loads_left;
  tr.slot = replicas_[r].slot;
  return t;
}

void Engine::add_flow(uint32_t t, const hw::FabricPath* p, double bytes) {
  const uint32_t f = take_slot(flows_, free_flow_refs_);
  flows_[f] = FlowRef{t, p, bytes, hw::kNoFlow, 0};
  ++transfers_[t].flows_left;
  q_.schedule(q_.now() + p->route->setup.ps, kFlowStart, f);
}

void Engine::transfer(uint32_t r, size_t from, size_t to, std::span<const int> devices, bool waited,
                      TransferKind kind, uint64_t blocks) {
  const bool device_side = from == device_tier_ || to == device_tier_;
  const uint32_t t = new_transfer(r, kind, waited);
  const Shape& sh = shape(replicas_[r]);
  // Each device its stage's shard; between lower levels, the whole block.
  for (size_t k = 0; k < devices.size(); ++k) {
    const int d = devices[k];
    const hw::FabricPath* p = fabric_.path(from, to, d);
    TF_ASSERT(p != nullptr, "no route from tier {} to {} for device {}", from, to, d);
    add_flow(t, p,
             static_cast<double>((device_side ? sh.device_shard[k] : sh.block_bytes) * blocks));
  }
}

void Engine::hand_off(uint32_t r, uint32_t q) {
  Replica& rep = replicas_[r];
  Seq& s = seqs_[q];
  rep.running.erase(std::find(rep.running.begin(), rep.running.end(), q));
  const traces::Request& rq = trace_.requests[q];
  const uint64_t tokens = rq.prompt_tokens + rq.output_tokens;
  rep.load -= tokens;
  rep.backlog -= prompt_left(s);
  s.prefill_replica = r;
  s.handoff_held = s.held;
  s.held = 0;
  const uint32_t d = pick_decode(s);
  records_[q].decode_replica = static_cast<int32_t>(d);
  replicas_[d].load += tokens;
  replicas_[d].incoming.push_back(q);
  admit_handoffs(d);
}

void Engine::admit_handoffs(uint32_t d) {
  Replica& rep = replicas_[d];
  const uint64_t most = blocks_per_transfer();
  while (!rep.incoming.empty() && rep.waiting.empty() &&
         static_cast<int64_t>(rep.running.size() + rep.receiving) < o_.max_seqs) {
    const uint32_t q = rep.incoming.front();
    Seq& s = seqs_[q];
    const size_t blocks = s.handoff_held;
    if (!room(rep, blocks)) break;
    rep.incoming.pop_front();
    // Each block is pinned in the device level: stored there (as a computed block is) or,
    // when the level holds it already (a prefix another request brought), pinned in place
    // and not copied.
    handoff_moves_.clear();
    uint64_t copy = 0;
    for (size_t b = 0; b < blocks; ++b) {
      if (!cache_.holds(rep.device_level, s.hashes[b])) ++copy;
      const bool ok = cache_.insert(rep.path, s.hashes[b], handoff_moves_);
      TF_ASSERT(ok, "a handed-over block found no room");
    }
    s.held = blocks;
    records_[q].handoff_admitted = q_.now();
    ++rep.receiving;
    ++handoffs_;
    handoff_blocks_ += copy;
    carry(d, handoff_moves_, /*loads=*/false);
    // Each device's shard from the prefill devices holding its part (device k to device k
    // when both have the same tensor parallelism).
    const std::vector<ShardCopy> copies = handoff_copies(replicas_[s.prefill_replica], rep);
    s.handoff_left = 0;
    for (uint64_t b = 0; b < copy; b += most) {
      const uint32_t t = new_transfer(d, TransferKind::kHandoff, /*waited=*/false);
      transfers_[t].seq = q;
      const uint64_t carried = std::min(most, copy - b);
      for (const ShardCopy& c : copies) {
        const double bytes = static_cast<double>(shape(rep).device_shard[c.to_index] * carried);
        add_flow(t, fabric_.peer_path(device_tier_, c.from, c.to), bytes * c.part);
      }
      ++s.handoff_left;
    }
    if (s.handoff_left == 0) handoff_done(q);
  }
}

void Engine::handoff_done(uint32_t q) {
  Seq& s = seqs_[q];
  Replica& pre = replicas_[s.prefill_replica];
  cache_.release(pre.path, std::span<const uint64_t>(s.hashes.data(), s.handoff_held));
  s.handoff_held = 0;
  const auto d = static_cast<uint32_t>(records_[q].decode_replica);
  Replica& dec = replicas_[d];
  --dec.receiving;
  dec.running.push_back(q);
  ++dec.stats.requests;
  dec.backlog += prompt_left(s);
  records_[q].handed_over = q_.now();
  // Its blocks are free on the prefill replica, and it has work on the decode replica.
  if (dec.in_flight < dec.iters.size()) want_start(d);
  if (pre.in_flight < pre.iters.size()) want_start(s.prefill_replica);
}

void Engine::flow_done(uint32_t f) {
  FlowRef& fr = flows_[f];
  net_.finish(fr.flow, q_.now());
  flow_owner_[fr.flow] = UINT32_MAX;
  fr.flow = hw::kNoFlow;
  const uint32_t t = fr.transfer;
  free_flow_refs_.push_back(f);
  Transfer& tr = transfers_[t];
  if (--tr.flows_left > 0) return;
  if (tl_ != nullptr) draw_transfer(tr);
  free_transfers_.push_back(t);
  if (tr.kind == TransferKind::kHandoff) {
    if (--seqs_[tr.seq].handoff_left == 0) handoff_done(tr.seq);
    return;
  }
  if (!tr.load) return;
  const uint32_t r = tr.replica;
  Replica& rep = replicas_[r];
  Iteration& it = rep.iters[tr.slot];
  it.loads_done = std::max(it.loads_done, q_.now());
  if (--it.loads_left > 0) return;
  // The iteration's last load landed: loads first, or layer by layer under the compute
  // (the last layer waits for its load). Swaps come before the compute.
  const bool first = o_.load == LoadMode::kBefore || it.swap_outs + it.swap_ins > 0;
  Time end = 0;
  if (o_.pp == 1) {
    const Time layer = it.compute / layers_;
    end =
        first ? it.loads_done + it.compute : std::max(it.start + it.compute, it.loads_done + layer);
  } else if (first) {
    end = pipeline(rep, it, it.loads_done);
  } else {
    const Time layer = it.stages.back() / shape(rep).cost->stage_layers(o_.pp - 1);
    end = std::max(it.stages_done, it.loads_done + layer);
  }
  q_.schedule(end, kIterationEnd, iteration_key(r, tr.slot));
}

void Engine::record(size_t series, double value) {
  Series& s = series_[series];
  if (!s.value.empty() && s.value.back() == value) return;
  if (!s.time.empty() && s.time.back() == q_.now()) {
    s.value.back() = value;
    return;
  }
  s.time.push_back(q_.now());
  s.value.push_back(value);
}

void Engine::record_queues(uint32_t r) {
  if (!o_.record_series) return;
  const Replica& rep = replicas_[r];
  const size_t base = cache_.level_count() + 2 * r;
  record(base, static_cast<double>(rep.running.size()));
  record(base + 1, static_cast<double>(rep.waiting.size()));
}

void Engine::end_iteration(uint32_t r, uint32_t slot) {
  Replica& rep = replicas_[r];
  Iteration& it = rep.iters[slot];
  it.active = false;
  if (--rep.in_flight == 0) rep.stats.busy += q_.now() - rep.busy_since;
  if (rep.iters.size() > 1) {
    for (const uint32_t q : it.batch) seqs_[q].in_flight = false;
  }
  if (tl_ != nullptr) draw_iteration(r, it);
  if (o_.record_series) {
    for (LevelId l = 0; l < cache_.level_count(); ++l) {
      record(l, static_cast<double>(cache_.stats(l).occupancy));
    }
    record_queues(r);
  }
  moves_.clear();
  for (size_t i = 0; i < it.batch.size(); ++i) {
    const uint32_t q = it.batch[i];
    Seq& s = seqs_[q];
    RequestRecord& rec = records_[q];
    const auto kv_tokens = [&s] { return s.computed + std::max<int64_t>(s.generated - 1, 0); };
    const int64_t before = kv_tokens();
    const int64_t generated = s.generated;
    if (s.computed < s.prompt) {
      rep.stats.prompt_tokens += static_cast<uint64_t>(it.tokens[i]);
      progress(rep, s, [&] { s.computed += it.tokens[i]; });
      if (s.computed == s.prompt) ++s.generated;
    } else {
      // The accepted draft tokens and one more (rejected drafts' KV is dropped).
      const int64_t k = it.tokens[i] - 1;
      const int64_t n = k > 0 ? accepted(s, k) : 0;
      if (k > 0) {
        ++spec_steps_;
        spec_drafted_ += static_cast<uint64_t>(k);
        spec_accepted_ += static_cast<uint64_t>(n);
      }
      s.generated += 1 + n;
    }
    rep.stats.output_tokens += static_cast<uint64_t>(s.generated - generated);
    if (s.partial != SIZE_MAX && whole(s, s.partial)) publish(rep, s);
    fill_blocks(r, s, before, kv_tokens());
    // The blocks its KV now fills, stored and pinned.
    const auto need = static_cast<size_t>(blocks_for(kv_tokens()));
    while (s.held < need) (void)store_block(rep, s, moves_);
    if (s.generated > 0 && rec.first_token < 0) rec.first_token = q_.now();
    if (s.generated >= s.output) {
      finish_seq(r, q);
    } else if (rep.prefill_only && s.computed == s.prompt) {
      hand_off(r, q);
    }
  }
  rep.reserved -= it.reserved;
  carry(r, moves_, /*loads=*/false);
  // Finishes made room for hand-overs waiting here.
  if (!rep.incoming.empty()) admit_handoffs(r);
  want_start(r);
}

void Engine::setup_timeline() {
  tl_ = o_.timeline;
  int sort = 0;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    Replica& rep = replicas_[r];
    const std::string_view role = o_.prefill_replicas == 0 ? ""
                                  : rep.prefill_only       ? "prefill "
                                                           : "decode ";
    const sim::ProcessId pid = tl_->process(fmt::format("{}replica {} (devices {}-{})", role, r,
                                                        rep.devices.front(), rep.devices.back()),
                                            sort++);
    for (size_t slot = 0; slot < rep.iters.size(); ++slot) {
      rep.tracks.push_back(tl_->track(
          pid, rep.iters.size() == 1 ? std::string("iterations") : fmt::format("batch {}", slot),
          static_cast<int>(slot)));
    }
    static constexpr std::string_view kKeys[] = {"running", "waiting"};
    rep.seqs = tl_->series(pid, "sequences", kKeys);
  }
  for (LevelId l = 0; l < cache_.level_count(); ++l) {
    const sim::ProcessId pid =
        tl_->process(fmt::format("KV level {}", cache_.spec(l).name), sort++);
    level_series_.push_back(tl_->series(pid, "blocks"));
  }
  transfer_pid_ = tl_->process("KV transfers", sort++);
}

void Engine::draw_iteration(uint32_t r, const Iteration& it) {
  Replica& rep = replicas_[r];
  int64_t decode = 0, prefill = 0;
  for (size_t i = 0; i < it.batch.size(); ++i) {
    const Seq& s = seqs_[it.batch[i]];
    (s.computed < s.prompt ? prefill : decode) += it.tokens[i];
  }
  const sim::Arg args[] = {{"sequences", static_cast<uint64_t>(it.batch.size())},
                           {"decode tokens", decode},
                           {"prefill tokens", prefill},
                           {"compute_ps", it.compute}};
  tl_->slice(rep.tracks[static_cast<size_t>(&it - rep.iters.data())], it.start, q_.now(),
             "iteration", "compute", args);
  const double counts[] = {static_cast<double>(rep.running.size()),
                           static_cast<double>(rep.waiting.size())};
  tl_->counter(rep.seqs, q_.now(), counts);
  for (LevelId l = 0; l < cache_.level_count(); ++l) {
    tl_->counter(level_series_[l], q_.now(), static_cast<double>(cache_.stats(l).occupancy));
  }
}

void Engine::draw_transfer(const Transfer& tr) {
  const sim::Arg args[] = {{"replica", static_cast<uint64_t>(tr.replica)},
                           {"request", static_cast<uint64_t>(tr.seq)}};
  const size_t n = tr.kind == TransferKind::kHandoff ? 2 : 1;
  tl_->slice(lane_tracks_[tr.lane], tr.start, q_.now(),
             kTransferNames[static_cast<size_t>(tr.kind)], "transfer",
             std::span<const sim::Arg>(args, n));
  lanes_.release(tr.lane);
}

void Engine::finish_seq(uint32_t r, uint32_t seq) {
  Replica& rep = replicas_[r];
  Seq& s = seqs_[seq];
  let_go(rep, s);
  s.held = 0;
  rep.running.erase(std::find(rep.running.begin(), rep.running.end(), seq));
  rep.backlog -= prompt_left(s);
  const traces::Request& rq = trace_.requests[seq];
  rep.load -= rq.prompt_tokens + rq.output_tokens;
  records_[seq].finish = q_.now();
  ++done_;
  if (o_.progress && (done_ % 256 == 0 || done_ == records_.size()))
    o_.progress(done_, records_.size());
}

void Engine::resolve() {
  if (!net_.dirty()) return;
  net_.solve(q_.now());
  for (const uint32_t flow : net_.changed_flows()) {
    FlowRef& fr = flows_[flow_owner_[flow]];
    if (fr.done_event != 0) q_.cancel(fr.done_event - 1);
    fr.done_event =
        q_.schedule(std::max(net_.completion(flow), q_.now()), kFlowDone, flow_owner_[flow]) + 1;
  }
}

ServeResult Engine::run() {
  const size_t n = trace_.requests.size();
  seqs_.resize(n);
  records_.resize(n);
  next_turn_.assign(n, UINT32_MAX);
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> turns;
  for (uint32_t i = 0; i < n; ++i) {
    const traces::Request& rq = trace_.requests[i];
    if (rq.session != 0) turns.emplace(std::pair{rq.session, rq.turn}, i);
  }
  for (const auto& [key, i] : turns) {
    const auto next = turns.find({key.first, key.second + 1});
    if (next != turns.end()) next_turn_[i] = next->second;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const traces::Request& rq = trace_.requests[i];
    RequestRecord& rec = records_[i];
    rec.id = rq.id;
    rec.arrival = rq.arrival_ps;
    rec.prompt_tokens = rq.prompt_tokens;
    rec.output_tokens = rq.output_tokens;
    rec.counted = rq.arrival_ps >= o_.warmup;
    q_.schedule(rq.arrival_ps, kArrival, i);
  }
  sim::Event ev;
  while (q_.pop(ev)) {
    switch (ev.tag) {
      case kArrival:
        arrive(ev.data);
        break;
      case kIterationEnd: {
        const auto pp = static_cast<uint32_t>(o_.pp);
        end_iteration(ev.data / pp, ev.data % pp);
        break;
      }
      case kFlowStart: {
        FlowRef& fr = flows_[ev.data];
        fr.flow = net_.start(fr.path->resources, fr.bytes, q_.now());
        if (flow_owner_.size() <= fr.flow) flow_owner_.resize(fr.flow + 1, UINT32_MAX);
        flow_owner_[fr.flow] = ev.data;
        break;
      }
      case kFlowDone: {
        FlowRef& fr = flows_[ev.data];
        fr.done_event = 0;
        flow_done(ev.data);
        break;
      }
      default:
        TF_ASSERT(false, "unknown serving event {}", ev.tag);
    }
    // Iterations start, and then rates change, once per instant, after every event of it.
    std::optional<Time> next = q_.next_time();
    if (!next || *next > q_.now()) {
      start_pending();
      next = q_.next_time();
    }
    if (!next || *next > q_.now()) resolve();
  }
  // Every request finishes or is rejected: an engine that stops with work left has lost it.
  for (const Replica& rep : replicas_) {
    TF_ASSERT(
        rep.waiting.empty() && rep.running.empty() && rep.incoming.empty() && rep.receiving == 0,
        "the serving engine stopped with {} sequences waiting, {} running and {} handed "
        "over",
        rep.waiting.size(), rep.running.size(), rep.incoming.size() + rep.receiving);
    TF_ASSERT(rep.backlog == 0, "the serving engine stopped with a backlog of {} prompt tokens",
              rep.backlog);
  }
  ServeResult out = result();
  out.requests = std::move(records_);
  out.series = std::move(series_);
  Time end = 0;
  for (const RequestRecord& r : out.requests) end = std::max(end, r.finish);
  for (uint32_t i = 0; i < fabric_.resources().size(); ++i) {
    const hw::ResourceStats st = net_.stats(i, q_.now());
    if (st.bytes <= 0) continue;
    const hw::ResourceInfo& info = fabric_.resources()[i];
    out.resources.push_back(ResourceRecord{info.name, info.kind == hw::ResourceKind::kLink,
                                           st.bytes, st.busy_ps, info.kind, info.index,
                                           info.forward});
  }
  out.iterations = iterations_;
  out.preemptions = preemptions_;
  out.swap_outs = swap_outs_;
  out.swap_fallbacks = swap_fallbacks_;
  out.swapped_blocks = swapped_blocks_;
  out.swapped_in_blocks = swapped_in_blocks_;
  out.recomputed_tokens = recomputed_tokens_;
  out.transfers = transfer_count_;
  out.handoffs = handoffs_;
  out.handoff_blocks = handoff_blocks_;
  out.spec_steps = spec_steps_;
  out.spec_drafted = spec_drafted_;
  out.spec_accepted = spec_accepted_;
  out.makespan = end;
  for (const RequestRecord& r : out.requests) {
    if (r.rejected) continue;  // its prompt met no cache and was never computed
    out.prompt_tokens += r.prompt_tokens;
    uint64_t hit = 0;
    for (const uint64_t h : r.hit_tokens) hit += h;
    out.computed_tokens += r.prompt_tokens - std::min<uint64_t>(hit, r.prompt_tokens);
  }
  return out;
}

ServeResult Engine::cache_only() {
  std::vector<CacheRequest> requests;
  requests.reserve(trace_.requests.size());
  // Disaggregated: the prompts meet the prefill replicas' caches.
  const size_t routed = o_.prefill_replicas > 0 ? size_t(o_.prefill_replicas) : replicas_.size();
  // Both other routers read the replicas' state as a request arrives (its load, what its
  // device level has stored by then), which a replay without time does not have.
  if (o_.router != RouterKind::kRoundRobin && routed > 1) {
    throw InputError(SourcePos{"router"},
                     fmt::format("{} routes by what each replica holds and runs when a request "
                                 "arrives, which a cache-only replay (no time) does not have: it "
                                 "sends requests to the replicas in turn",
                                 kRouterNames[static_cast<size_t>(o_.router)]));
  }
  if (o_.spec.tokens > 0) {
    throw InputError(SourcePos{"spec_tokens"},
                     "a cache-only replay decodes nothing, so speculative decoding would be "
                     "ignored");
  }
  for (size_t i = 0; i < trace_.requests.size(); ++i) {
    const traces::Request& rq = trace_.requests[i];
    requests.push_back(CacheRequest{rq.blocks, rq.prompt_tokens, replicas_[i % routed].path});
  }
  const CacheOnlyResult c =
      replay_cache_only(cache_, requests, static_cast<uint32_t>(block_tokens_));
  for (LevelId l = 0; l < cache_.level_count(); ++l) level_hits_[l] = c.levels[l].hit_tokens;
  ServeResult out = result();
  out.cache_only = true;
  out.prompt_tokens = c.prompt_tokens;
  out.computed_tokens = c.computed_tokens;
  return out;
}

ServeResult Engine::result() const {
  ServeResult out;
  for (LevelId l = 0; l < cache_.level_count(); ++l) {
    LevelRecord rec = level_info_[l];
    rec.stats = cache_.stats(l);
    rec.hit_tokens = level_hits_[l];
    out.levels.push_back(std::move(rec));
  }
  for (const Replica& rep : replicas_) {
    out.replica_records.push_back(rep.stats);
    out.replica_records.back().prefill_only = rep.prefill_only;
  }
  out.block_tokens = static_cast<uint32_t>(block_tokens_);
  const Shape& sh = shapes_[0];
  out.weight_bytes = sh.cost->weight_bytes();
  out.workspace_bytes = sh.workspace;
  out.kv_bytes_per_token = sh.cost->kv_bytes_per_token();
  if (sh.draft) {
    out.draft_weight_bytes = sh.draft->weight_bytes();
    out.draft_kv_bytes_per_token = sh.draft->kv_bytes_per_token();
    out.weight_bytes += out.draft_weight_bytes;
    out.kv_bytes_per_token += out.draft_kv_bytes_per_token;
    out.spec_draft = o_.spec.draft->name;
  }
  out.spec_tokens = o_.spec.tokens;
  out.spec_accept = o_.spec.accept;
  out.device_pool_blocks = sh.pool;
  out.tp = sh.tp;
  out.pp = o_.pp;
  out.tp_domains = sh.cost->collective_fabric().domains;
  if (out.tp_domains > 1) {
    out.collective_bandwidth = sh.cost->collective_fabric().out.bytes_per_s;
  }
  if (const Shape& p = shapes_[1]; p.cost) {
    out.prefill_tp = p.tp;
    out.prefill_tp_domains = p.cost->collective_fabric().domains;
    if (out.prefill_tp_domains > 1) {
      out.prefill_collective_bandwidth = p.cost->collective_fabric().out.bytes_per_s;
    }
    // With a draft model, its weights and KV too: the prefill replicas compute its KV of
    // the prompt, handed over with the model's.
    out.prefill_weight_bytes =
        p.cost->weight_bytes() + (p.draft ? p.draft->weight_bytes() : uint64_t{0});
    out.prefill_workspace_bytes = p.workspace;
    out.prefill_pool_blocks = p.pool;
    out.prefill_kv_bytes_per_token =
        p.cost->kv_bytes_per_token() + (p.draft ? p.draft->kv_bytes_per_token() : uint64_t{0});
    out.decode_router = o_.decode_router;
  }
  out.replicas = o_.replicas;
  out.router = o_.router;
  out.prefill_replicas = o_.prefill_replicas;
  if (swap_tier_ != SIZE_MAX) {
    out.swap_tier = topo_.tiers[swap_tier_].id;
    out.swap_blocks = sh.swap_blocks;
  }
  return out;
}

}  // namespace

ServeResult serve(const traces::RequestTrace& trace, const traces::Arch& arch,
                  const traces::GenOptions& gen, const hw::Topology& t, const ServeOptions& o) {
  Engine e(trace, arch, gen, t, o);
  return e.run();
}

ServeResult check_setup(const traces::RequestTrace& trace, const traces::Arch& arch,
                        const traces::GenOptions& gen, const hw::Topology& t,
                        const ServeOptions& o) {
  ServeOptions quiet = o;
  quiet.timeline = nullptr;
  quiet.record_series = false;
  const Engine e(trace, arch, gen, t, quiet);
  return e.result();
}

ServeResult cache_only(const traces::RequestTrace& trace, const traces::Arch& arch,
                       const traces::GenOptions& gen, const hw::Topology& t,
                       const ServeOptions& o) {
  Engine e(trace, arch, gen, t, o);
  return e.cache_only();
}

}  // namespace tierflow::serve
