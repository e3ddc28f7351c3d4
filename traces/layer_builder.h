// Builds the ops and tensors of one transformer pass, layer by layer, on one TP shard
// (used by traces/generate.cpp; not a public interface).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/workload.h"
#include "traces/arch.h"
#include "traces/generate.h"
#include "traces/quant.h"
#include "traces/routing_trace.h"

namespace tierflow::traces {

/// One pass through the layers.
struct Pass {
  int64_t seq = 1;   ///< new tokens per sequence
  int64_t past = 0;  ///< tokens already in the KV cache per sequence
  bool write_kv =
      true;            ///< append K/V to KV blocks (inference); training keeps them as activations
  std::string prefix;  ///< op and tensor name prefix ("t3." for decode step 3)
};

class LayerBuilder {
 public:
  LayerBuilder(const Arch& a, const GenOptions& o);

  Workload& workload() { return w_; }

  /// Every weight tensor of the first `layers` layers and the embedding, final norm and head.
  void declare_weights(int layers);
  /// KV blocks of `context` past tokens per sequence, as external tensors.
  void declare_past_kv(int layers, int64_t context);
  /// Decode micro-batches: what follows builds micro-batch m of `batch` sequences, with its
  /// own KV cache (tensors named `name` + "L5.kv0"). Micro-batch 0 of the whole batch, named
  /// "", is the default.
  void set_micro_batch(int64_t m, int64_t batch, std::string name);

  uint32_t input(const std::string& name, uint64_t bytes);
  uint32_t embed(const std::string& prefix, uint32_t token_ids, int64_t tokens);
  uint32_t layer(int l, uint32_t x, int64_t tokens, const Pass& pass);
  /// Final norm and LM head over the last `tokens` rows of `x`; returns the logits.
  uint32_t head(uint32_t x, int64_t tokens, const std::string& prefix);
  /// Greedy choice of the next tokens from the logits; returns their ids.
  uint32_t sample(uint32_t logits, const std::string& prefix);

  /// Training: forward ops from now on belong to layer `l` (for recomputation).
  void begin_record(int l);
  /// Loss, then backward ops in reverse order (recomputing each layer first when
  /// checkpointing); `layer_inputs` holds each layer's input and, last, the final output.
  void backward(uint32_t logits, const std::vector<uint32_t>& layer_inputs, int64_t tokens);
  void optimizer();

 private:
  struct LayerWeights {
    uint32_t attn_norm = 0, wq = 0, wkv_a = 0, wkv_b = 0, wqkv = 0, wo = 0, mlp_norm = 0;
    uint32_t post_attn_norm = 0, post_mlp_norm = 0;  // post_norms only
    uint32_t w_up = 0, w_down = 0;  // dense: gate/up (or fc1) and down (or fc2)
    uint32_t router = 0, shared = 0;
    std::vector<uint32_t> experts;
  };
  struct KvBlock {
    uint32_t tensor;
    int64_t filled;  ///< tokens per sequence written so far
  };

  /// `count` matrices of `inputs` x `outputs` elements of one linear layer.
  struct Matrix {
    double inputs = 0, outputs = 0, count = 1;
  };
  /// A weight of the transformer blocks' linear layers: its matrices quantized as quant_
  /// says, plus `extra` parameters (biases, norms between them) in the activation dtype;
  /// without quantization, all in the weight dtype.
  uint32_t linear_weight(const std::string& name, std::initializer_list<Matrix> matrices,
                         double extra, int layer);
  /// A weight that quantization leaves alone (embeddings, LM head, norms, router): in the
  /// weight dtype, or the activation dtype when the linear layers are quantized.
  uint32_t weight(const std::string& name, double params, int layer);
  uint32_t act(const std::string& name, double elements, int layer,
               TensorKind kind = TensorKind::kActivation);
  uint32_t op(const std::string& name, OpKind kind, double flops, std::vector<uint32_t> inputs,
              std::vector<uint32_t> outputs, std::vector<uint32_t> updates, int layer,
              int64_t bytes = -1, uint64_t collective = 0);
  uint32_t norm(const std::string& name, uint32_t x, uint32_t w, int64_t tokens, int layer);
  uint32_t allreduce(const std::string& name, uint32_t x, int64_t tokens, int layer);
  uint32_t attention_block(int l, uint32_t xn, int64_t tokens, const Pass& pass);
  uint32_t mlp_block(int l, uint32_t xn, int64_t tokens, const std::string& p);
  uint32_t moe_block(int l, uint32_t xn, int64_t tokens, const std::string& p);
  /// Tokens each routed expert receives this pass (length E; zero = untouched).
  std::vector<int64_t> route(int l, int64_t tokens);
  /// The seeded router with skew or repeats: the experts of token `tok` of layer l.
  void route_skewed(int l, int64_t tok, std::vector<int64_t>& load);
  /// A routing trace's picks for layer l's next pass.
  void route_traced(int l, int64_t tokens, std::vector<int64_t>& load);
  double norm_params() const;
  /// The arithmetic of a matmul-like op reading `inputs`: compute_dtype(o_) when one of them
  /// is a quantized weight, else the activation dtype.
  Dtype matmul_dtype(const std::vector<uint32_t>& inputs) const;
  void backward_op(uint32_t f);
  /// The gradient of tensor t: appended to `outputs` when new, to `updates` when it exists.
  void grad_target(uint32_t t, std::vector<uint32_t>& outputs, std::vector<uint32_t>& updates);
  uint32_t embed_op_ = kExternal;

  const Arch& a_;
  const GenOptions& o_;
  std::optional<QuantScheme> quant_;
  Workload w_;
  // Per-device sizes.
  int64_t nh_, nkv_, h_, inter_, moe_inter_, shared_inter_, vocab_;
  uint64_t kv_token_bytes_;  ///< one token of one sequence in one layer
  std::vector<LayerWeights> lw_;
  uint32_t embed_w_ = 0, final_norm_w_ = 0, lm_head_w_ = 0, project_in_w_ = 0, project_out_w_ = 0;
  std::vector<std::vector<KvBlock>> kv_;  ///< the current micro-batch's, per layer
  /// Per micro-batch: its KV blocks per layer (kv_ is the current one's, swapped in).
  std::vector<std::vector<std::vector<KvBlock>>> kv_by_mb_;
  int64_t mb_ = 0;        ///< the current micro-batch
  int64_t batch_ = 0;     ///< its sequences
  std::string mb_name_;   ///< its name prefix, "" for the whole batch
  std::mt19937_64 rng_;
  /// Skewed routing, per layer (made at its first pass): each expert's popularity weight,
  /// and the experts each stream's previous token took.
  std::vector<std::vector<double>> popularity_;
  std::vector<std::vector<std::vector<int>>> previous_;
  std::vector<int> picked_;
  /// A routing trace's picks (GenOptions::routing_trace), and per layer the passes routed.
  std::shared_ptr<const RoutingTrace> trace_;
  std::vector<uint32_t> passes_;
  // Training: forward ops per layer (index layers) and the head ops (index layers).
  std::vector<std::vector<uint32_t>> recorded_;
  int recording_ = -1;
  std::vector<uint32_t> grad_;  ///< tensor -> its gradient, kExternal if none
};

}  // namespace tierflow::traces
