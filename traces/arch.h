// Architectures of decoder-only transformers: the facts a workload generator needs,
// loaded from configs/models/*.yaml or imported from a Hugging Face config.json, and
// the closed-form accounting (parameters, KV bytes, FLOPs) that the generated
// workloads must agree with.
//
// Glossary
//   GQA/MHA   grouped-query attention; MHA is GQA with kv_heads == heads.
//   MLA       multi-head latent attention (DeepSeek-V2/V3): K and V are rebuilt from a
//             cached latent of kv_lora_rank values plus a shared rope key.
//   gated MLP SwiGLU-style gate, up and down projections (3 matrices); plain MLP is
//             fc1 and fc2 (OPT/GPT style, 2 matrices, usually with biases).
//   MoE       routed experts (top-k per token) plus always-on shared experts.
//   active    parameters one token touches: dense parts plus k routed and the shared
//             experts of each MoE layer.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "core/kinds.h"
#include "core/schema.h"

namespace tierflow::traces {

enum class AttentionKind { kGqa, kMla };
inline constexpr std::array<std::string_view, 2> kAttentionKindNames = {"gqa", "mla"};

enum class MlpKind { kGated, kPlain };
inline constexpr std::array<std::string_view, 2> kMlpKindNames = {"gated", "plain"};

enum class NormKind { kRmsNorm, kLayerNorm };
inline constexpr std::array<std::string_view, 2> kNormKindNames = {"rmsnorm", "layernorm"};

struct Arch {
  std::string name;  ///< e.g. llama-3-70b
  std::string description;
  std::string family;  ///< a Hugging Face model_type (kFamilyNames in arch_params.h)
  std::string source;  ///< citation key for this architecture's numbers
  std::map<std::string, std::string> sources;  ///< citation key -> text (from the file)

  int hidden = 0;        ///< h
  int layers = 0;        ///< L (decoder blocks; MTP modules are not counted)
  int heads = 0;         ///< n_h query heads
  int kv_heads = 0;      ///< n_kv (GQA); equal to heads for MHA
  int head_dim = 0;      ///< d_h (GQA)
  int vocab = 0;         ///< V
  int intermediate = 0;  ///< I: dense FFN width (0 if every layer is MoE)
  AttentionKind attention = AttentionKind::kGqa;
  MlpKind mlp = MlpKind::kGated;
  NormKind norm = NormKind::kRmsNorm;
  bool qkv_bias = false;         ///< Q, K, V projections carry biases (OPT, Qwen2)
  bool o_bias = false;           ///< output projection carries a bias (OPT)
  bool mlp_bias = false;         ///< MLP matrices carry biases (OPT; gpt-oss routed experts)
  bool qk_norm = false;          ///< per-head RMSNorm on q and k (Qwen3)
  bool tied_embeddings = false;  ///< LM head shares the input embedding (OPT)
  int learned_positions = 0;     ///< rows of a learned position embedding (OPT: 2050), 0 = rotary
  int project_in_out = 0;        ///< OPT-350m style word_embed_proj_dim; 0 = none
  /// The longest context the model declares (tokens; Hugging Face max_position_embeddings);
  /// 0 = not declared. Nothing is sized from it: a context beyond it is warned about.
  int max_context = 0;
  int sliding_window = 0;  ///< a sliding layer attends to at most this many past tokens; 0 = full
                           ///< (Mistral-7B-v0.1: 4096). Weights and KV bytes per token are
                           ///< unchanged; the KV a sequence keeps is capped at the window.
  int full_attention_every = 0;  ///< with sliding_window: layer i is full-attention (global) when
                                 ///< (i + 1) % n == 0, the others slide; 0 = every layer slides
                                 ///< (Mistral). Gemma-2, gpt-oss 2; Gemma-3 6; Llama-4 4.
  bool post_norms = false;       ///< extra RMSNorms after attention and after the MLP (Gemma-2/3:
                                 ///< four norms per block)
  bool attention_sinks = false;  ///< one learned sink logit per query head and layer (gpt-oss)
  bool attn_softcap = false;     ///< tanh softcapping of attention logits (Gemma-2)
  bool final_softcap = false;    ///< tanh softcapping of the final logits (Gemma-2)

  // Mixture of experts (experts == 0: dense model).
  int experts = 0;              ///< E routed experts per MoE layer
  int experts_per_token = 0;    ///< k
  int shared_experts = 0;       ///< S always-on experts per MoE layer
  int moe_intermediate = 0;     ///< I_e: width of one routed expert
  int shared_intermediate = 0;  ///< width of one shared expert (0 = moe_intermediate)
  int first_dense_layers = 0;  ///< leading layers with a dense FFN (DeepSeek first_k_dense_replace)
  int moe_layer_freq = 1;      ///< every n-th layer after the dense ones is MoE
  int moe_layer_offset =
      0;  ///< ... namely those with layer % moe_layer_freq == this (see is_moe_layer)
  bool router_bias = false;         ///< per-expert score-correction bias (DeepSeek-V3)
  bool shared_expert_gate = false;  ///< a sigmoid gate (h -> 1) on the shared expert (Qwen2-MoE)

  // Multi-head latent attention.
  int q_lora_rank = 0;  ///< 0 = queries are not compressed (DeepSeek-V2-Lite)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;

  Dtype checkpoint_dtype = Dtype::kBf16;
  schema::Origins origins;

  /// experts > 0, layer >= first_dense_layers and layer % moe_layer_freq == moe_layer_offset.
  /// DeepSeek: offset 0 (freq 1 in every released model); Qwen-MoE decoder_sparse_step s:
  /// freq s, offset s-1 (layer i is sparse when (i+1) % s == 0).
  [[nodiscard]] bool is_moe_layer(int layer) const;
  /// sliding_window > 0 and the layer is not a full-attention one (see full_attention_every).
  [[nodiscard]] bool is_sliding_layer(int layer) const;
  /// Past tokens `layer` keeps and attends to at `context` tokens: min(context, window) on a
  /// sliding layer, else context.
  [[nodiscard]] int64_t attended(int layer, int64_t context) const;
};

/// Parameter counts, in parameters (not bytes).
struct ParamCount {
  double total = 0;      ///< every parameter
  double active = 0;     ///< parameters one token touches
  double embedding = 0;  ///< input embedding (+ learned positions)
  double lm_head = 0;    ///< 0 when tied to the embedding
  double attention_per_layer = 0;
  double dense_mlp_per_layer = 0;  ///< 0 if no dense layer
  double moe_per_layer = 0;        ///< all experts, router, shared experts; 0 if dense
  double expert = 0;               ///< one routed expert
  double norms_per_layer = 0;      ///< the per-block norms (two; four with post_norms)
  double final_norm = 0;           ///< the norm after the last block
  double projections = 0;          ///< project_in + project_out (project_in_out > 0 only)
};

/// The parameters Hugging Face's `*ForCausalLM` instantiates for this architecture,
/// exactly (formulas per family in arch.cpp). MTP modules are not counted.
ParamCount count_params(const Arch& a);

/// KV-cache bytes one token adds across all layers for `kv` elements:
/// GQA 2·n_kv·d_h·b·L; MLA (kv_lora_rank + qk_rope_head_dim)·b·L.
uint64_t kv_bytes_per_token(const Arch& a, Dtype kv);

/// KV-cache bytes one sequence holds at `context` tokens: each layer's per-token bytes times
/// the tokens it keeps (Arch::attended: a sliding layer keeps at most its window).
uint64_t kv_bytes_at(const Arch& a, Dtype kv, int64_t context);

/// FLOPs of one tanh softcap, cap·tanh(x / cap), per element: a division, the tanh (counted
/// as one) and a multiplication.
inline constexpr double kSoftcapFlops = 3.0;

/// The explicit decode formula of the model reference: FLOPs for one token at context c:
/// 2·N_active_nonembed + 2·h·V + attention (GQA 4·L·c·n_h·d_h; MLA absorbed
/// L·(2·n_h·c·(kv_r + d_rope) + 2·n_h·c·kv_r)), where a sliding layer's c is capped at the
/// window; softcapping adds kSoftcapFlops per attention logit (n_h·c per layer) and per final
/// logit (V).
double decode_flops_per_token(const Arch& a, int64_t context);

/// E·(1 − (1 − k/E)^B): expected distinct routed experts a batch of B tokens touches.
double expected_distinct_experts(int experts, int k, int64_t tokens);

}  // namespace tierflow::traces
