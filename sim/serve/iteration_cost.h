// The time of one serving iteration on one replica: the ops of the model's tensor-parallel
// shard at the iteration's shape, each timed by the roofline model the simulator uses
// (hw::op_time), so that an iteration costs what `tierflow sim` says the same batch costs.
//
// Glossary
//   iteration  one forward pass of a replica over its scheduled work: some sequences decode
//              one token, some prefill a chunk of their prompt.
//   T          new tokens in the iteration (decode tokens plus prefill chunk tokens). Every
//              op outside attention depends on T alone (GEMMs, norms, MoE routing, TP
//              collectives, the embedding), so their time is found once per T and cached.
//   attention  one op per layer over every sequence of the iteration: its FLOPs are a sum
//              over sequences of pairs x per-pair FLOPs (+ per-token FLOPs), its bytes of new
//              tokens x per-token bytes and cached tokens x KV bytes per token (+ a constant);
//              the roofline is taken on the sums, as the generator's batched op is.
//   head       final norm, LM head and sampling over the sequences that produce a token:
//              found once per count and cached.
//   probe      a workload the trace generator builds at a small shape. The coefficients and
//              per-T times are read off its ops, so the generator stays the one source of
//              the model's formulas; a layer class (dense or MoE, sliding or full attention)
//              is probed at its first layer and counted for all of its layers.
//   stage      pipeline parallelism: the layers split into `pp` consecutive stages, each on
//              a TP group of its own, as vLLM splits them (evenly; the remainder one layer
//              each to the stages before the last, from the last back). The embedding runs
//              on the first stage, the head on the last (a tied embedding is held by both).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "hw_models/cost.h"
#include "hw_models/topology.h"
#include "traces/arch.h"
#include "traces/generate.h"

namespace tierflow::serve {

/// Time in picoseconds.
using Time = int64_t;

/// One sequence's share of an iteration.
struct SeqWork {
  int64_t past = 0;     ///< tokens already in its KV cache
  int64_t tokens = 1;   ///< new tokens this iteration (1 for a decode step)
  bool samples = true;  ///< produces a token: a decode step, or the last chunk of a prefill
  /// Speculative decoding: draft tokens the step verifies (among `tokens`), each with its
  /// logits through the head besides the sampled one.
  int64_t verify = 0;
};

class IterationCost {
 public:
  /// The model `arch` as `gen` generates it (dtypes, tp, kv_block; phase and batch are the
  /// cost model's) on device class `device` computing from topology tier `device_tier`.
  /// Throws InputError when the device cannot run an op of the model (a dtype it has no
  /// peak rate for), naming the op, or when `pp` stages leave one without a layer (at `pp`).
  IterationCost(const traces::Arch& arch, const traces::GenOptions& gen, const hw::Topology& t,
                size_t device, size_t device_tier, int pp = 1);

  /// Time of an iteration over `work` (at least one sequence with tokens): every stage's.
  Time time(std::span<const SeqWork> work);
  /// Each stage's time of an iteration over `work`, into `out` (pp entries).
  void stage_times(std::span<const SeqWork> work, std::vector<Time>& out);

  [[nodiscard]] int stages() const { return static_cast<int>(stages_.size()); }
  /// Layers of stage `s`.
  [[nodiscard]] int stage_layers(int s) const { return stages_[size_t(s)].layers; }
  /// Weight bytes each device of stage `s` holds (its TP shard of the stage's layers).
  [[nodiscard]] uint64_t stage_weight_bytes(int s) const { return stages_[size_t(s)].weights; }
  /// KV-cache bytes one token adds on each device of stage `s`.
  [[nodiscard]] uint64_t stage_kv_bytes_per_token(int s) const { return stages_[size_t(s)].kv; }
  /// The most weight bytes a device of the replica holds (its TP shard of every layer when
  /// there is one stage).
  [[nodiscard]] uint64_t weight_bytes() const { return weight_bytes_; }
  /// The most KV-cache bytes one token adds on a device of the replica (its TP shard of
  /// every layer when there is one stage).
  [[nodiscard]] uint64_t kv_bytes_per_token() const { return kv_token_bytes_; }
  /// The activation workspace an iteration of `tokens` new tokens needs on each device: the
  /// most activation bytes live at once while one layer runs (the layers run one after
  /// another), plus the logits of `seqs` sequences.
  uint64_t workspace_bytes(int64_t tokens, int64_t seqs);

  /// How the replica's TP groups all-reduce: over the device tier's peer route (the
  /// default), or across the scale-up domains a group spans. Set before any time is asked.
  void set_collective_fabric(const hw::CollectiveFabric& c) {
    collective_ = c;
    by_tokens_.clear();
    by_seqs_.clear();
  }
  [[nodiscard]] const hw::CollectiveFabric& collective_fabric() const { return collective_; }

  /// Times looked up in the caches and computed (for the benchmark's report).
  [[nodiscard]] uint64_t cached_lookups() const { return hits_; }
  [[nodiscard]] uint64_t probes() const { return probes_; }

 private:
  /// The attention op of one layer class, as affine functions of its sequences' pairs,
  /// new tokens and cached tokens (decode and prefill may differ: MLA absorbs in decode).
  struct Attention {
    double flops_per_pair = 0, flops_per_token = 0;
    double bytes_per_token = 0, bytes_per_cached = 0, bytes_fixed = 0;
  };
  struct LayerClass {
    int first = 0;      ///< the first layer of the class, probed for all of them
    int count = 0;      ///< layers of the class
    double window = 0;  ///< sliding window in tokens; 0 for full attention
    Attention decode, prefill;
    Dtype dtype = Dtype::kBf16;    ///< the attention op's arithmetic
    std::optional<Dtype> dequant;  ///< weights it dequantizes (MLA's wkv_b), if any
  };

  traces::GenOptions probe_options(traces::Phase phase, int64_t batch, int64_t tokens) const;
  Workload probe(traces::Phase phase, int64_t batch, int64_t tokens) const;
  /// Times the ops of `w` outside attention: the embedding (before the first layer), one
  /// layer of each class (its first), and the head (after the last layer).
  struct OpTimes {
    Time embed = 0, head = 0;
    std::vector<Time> layer;  ///< by class
  };
  struct Stage {
    int layers = 0;
    std::vector<int> count;  ///< its layers of each class
    uint64_t weights = 0, kv = 0;
  };
  OpTimes op_times(const Workload& w);
  Time op_time(const Workload& w, uint32_t op) const;
  void probe_attention(LayerClass& c);
  /// The embedding's time and one layer's of each class, outside attention, at T tokens.
  const std::vector<Time>& tokens_times(int64_t tokens);
  Time head_time(int64_t seqs);
  /// The attention op's time of one layer of each class over `work`, into attention_.
  void attention_times(std::span<const SeqWork> work);

  const traces::Arch& arch_;
  traces::GenOptions gen_;
  const hw::Topology& topo_;
  size_t device_ = 0;
  size_t device_tier_ = 0;
  hw::CollectiveFabric collective_;
  int probe_layers_ = 1;  ///< layers a probe generates: up to the last class's first layer
  std::vector<LayerClass> classes_;
  std::vector<Stage> stages_;
  uint64_t weight_bytes_ = 0;
  uint64_t kv_token_bytes_ = 0;
  std::unordered_map<int64_t, std::vector<Time>> by_tokens_;  ///< embed, then by class
  std::vector<Time> attention_;                               ///< by class
  std::vector<Time> stage_scratch_;
  std::unordered_map<int64_t, Time> by_seqs_;
  std::unordered_map<int64_t, uint64_t> workspace_;
  uint64_t hits_ = 0;
  uint64_t probes_ = 0;
};

}  // namespace tierflow::serve
