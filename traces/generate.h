// Workload generators: whole steps of a decoder-only transformer as operator DAGs.
//
// Glossary
//   T          tokens processed by one pass: batch x seq (prefill, training) or batch
//              (one decode step).
//   KV block   a tensor holding `kv_block` tokens of one layer's KV cache for the whole
//              batch (paged allocation: a block is allocated whole when its first token
//              is written and appended to in place after that).
//   shard      with tensor parallelism tp, each device holds 1/tp of every projection
//              and of the attention heads; the workload describes one device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/workload.h"
#include "traces/arch.h"

namespace tierflow::traces {

enum class Phase { kPrefill, kDecode, kTrain };
inline constexpr std::array<std::string_view, 3> kPhaseNames = {"prefill", "decode", "train"};

enum class Routing { kExpected, kSeeded };
inline constexpr std::array<std::string_view, 2> kRoutingNames = {"expected", "seeded"};

/// The largest counts the generator takes (docs/cli.md, "Limits").
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;         ///< sequences
inline constexpr int64_t kMaxSeq = int64_t{1} << 24;           ///< tokens per sequence, KV block
inline constexpr int64_t kMaxContext = int64_t{1} << 30;       ///< cached tokens
inline constexpr int64_t kMaxDecodeTokens = int64_t{1} << 20;  ///< decode steps
inline constexpr int64_t kMaxStepTokens = int64_t{1} << 32;    ///< batch x seq of one step
inline constexpr int kMaxTp = 65536;
inline constexpr uint64_t kMaxGeneratedOps = uint64_t{1} << 24;
inline constexpr double kMaxRoutingSkew = 8;  ///< Zipf exponent of the seeded router

struct GenOptions {
  Phase phase = Phase::kDecode;
  int64_t batch = 1;       ///< sequences
  int64_t seq = 2048;      ///< prefill / training tokens per sequence
  int64_t context = 4096;  ///< decode: tokens already in the KV cache before the first step
  int64_t tokens = 1;      ///< decode: tokens generated (one step each)
  int tp = 1;              ///< tensor-parallel degree
  Dtype weight_dtype = Dtype::kBf16;
  Dtype kv_dtype = Dtype::kBf16;
  Dtype act_dtype = Dtype::kBf16;
  /// Arithmetic of matmuls on quantized weights (traces/quant.h): the activation dtype when
  /// unset, or the weight dtype (fp8 weights computed on fp8 tensor cores).
  std::optional<Dtype> compute_dtype;
  int64_t quant_group = -1;  ///< inputs per scale; 0 = per channel; -1 = the dtype's default
  bool quant_zeros = false;  ///< asymmetric quantization: a zero point per group (AWQ)
  int64_t kv_block = 256;   ///< tokens per KV block tensor
  bool checkpoint = false;  ///< training: keep only layer inputs, recompute in backward
  Routing routing = Routing::kExpected;
  uint64_t seed = 1;  ///< for Routing::kSeeded
  /// The seeded router's skew (docs/cli.md, `trace gen`): expert popularity falls
  /// as 1 / rank^routing_skew (0: uniform; the ranks a seeded permutation per layer), and a
  /// token takes the experts its predecessor took in that layer (the same sequence's
  /// previous step in decode, the previous token in prefill and training) with probability
  /// routing_repeat.
  double routing_skew = 0;
  double routing_repeat = 0;
  /// A routing trace (traces/routing_trace.h): with seeded routing, every routed pick is
  /// the trace's, not the seeded router's. Empty: none.
  std::string routing_trace;
  int layers = 0;     ///< generate only the first N layers (0 = all)
  /// Decode: the batch run as this many micro-batches of batch / N sequences in a zig-zag
  /// block schedule (FlexGen's): per step, each layer for every micro-batch in turn, so a
  /// layer's weights serve all of them while they are on the device; each micro-batch has
  /// its own activations and KV cache ("t3.mb2.L5.qkv", "mb2.L5.kv0"). 1: one batch, the
  /// workload as without it.
  int64_t micro_batches = 1;
  /// Errors name options as Python's tierflow.generate and study and sweep specs spell them
  /// (kv_block), not as the CLI's flags (--kv-block).
  bool field_names = false;
};

/// Generates the workload; throws InputError (position: the option, "--kv-block" or with
/// field_names "kv_block") for options the architecture cannot take (tp not dividing the
/// heads, a dtype the layout forbids).
Workload generate(const Arch& arch, const GenOptions& options);

/// Query-key pairs of `tokens` new tokens after `past` cached ones, causal: the token at
/// position i attends to min(i, window) positions (window 0: no window). What a sequence's
/// attention op does per head; the serving cost model (sim/serve) counts pairs with it too.
double attention_pairs(double window, double past, double tokens);

/// Bytes of `params` elements of `dtype` (int4/fp4: two per byte, rounded up).
uint64_t bytes_of(double params, Dtype dtype);

}  // namespace tierflow::traces
