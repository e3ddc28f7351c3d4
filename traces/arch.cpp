#include "traces/arch.h"

#include <algorithm>
#include <cmath>

#include "core/diagnostics.h"

namespace tierflow::traces {

// Parameter accounting, matching what Hugging Face transformers instantiates for each
// family's `*ForCausalLM` (every nn.Parameter, norms and biases included). One general
// formula covers every family; the Arch flags select its terms.
//
// Notation: h hidden, L layers, n_h heads, n_kv kv_heads, d head_dim, V vocab, I dense
// intermediate, I_e moe_intermediate, I_s shared width, E experts, k experts_per_token,
// S shared_experts; norm(n) = n for RMSNorm (weight), 2n for LayerNorm (weight + bias).
//
//   total  = embedding + projections + lm_head + final_norm + sum over layers of
//            (attention + (post_norms ? 4 : 2)·norm(h) + (is_moe_layer ? moe : dense_mlp))
//   embedding   = V·e + learned_positions·h          e = project_in_out or h
//   projections = 2·e·h if project_in_out else 0    (project_in e->h, project_out h->e)
//   lm_head     = 0 if tied_embeddings else V·e
//   final_norm  = norm(h)
//   attention (GQA) = h·n_h·d (q) + 2·h·n_kv·d (k, v) + n_h·d·h (o)
//                     + qkv_bias·(n_h·d + 2·n_kv·d) + o_bias·h + qk_norm·2·norm(d)
//                     + attention_sinks·n_h
//   attention (MLA) = q + h·(kv_r + d_rope) + norm(kv_r)   (kv_a_proj_with_mqa, kv_a_layernorm)
//                     + kv_r·n_h·(d_nope + d_v)             (kv_b_proj)
//                     + n_h·d_v·h                           (o_proj)
//     q = h·q_r + norm(q_r) + q_r·n_h·(d_nope + d_rope)     (q_a_proj, q_a_layernorm, q_b_proj)
//       = h·n_h·(d_nope + d_rope) when q_r = 0              (q_proj)
//   mlp(w)  gated = 3·h·w + mlp_bias·(2·w + h)      (gate, up, down)
//           plain = 2·h·w + mlp_bias·(w + h)        (fc1, fc2)
//   dense_mlp = mlp(I)
//   moe = E·mlp(I_e) + h·E (router) + router_bias·E + S·mlp(I_s) + shared_expert_gate·h
//         (mlp_bias puts biases on the experts too: gpt-oss)
//   active = total - (E - k)·mlp(I_e) per MoE layer (router, bias, shared experts count)
//
// Per family, with the flags each one sets (as the importer sets them):
//   llama/mistral  GQA, gated, rmsnorm; llama: qkv_bias = o_bias = attention_bias,
//                  mlp_bias = mlp_bias. Total = V·h·(tied ? 1 : 2) + h
//                  + L·(2·h·n_h·d + 2·h·n_kv·d + 3·h·I + 2h) (+ biases).
//   mixtral        as mistral, every layer MoE: E experts of 3·h·I_e, router h·E, S = 0.
//   qwen2          as llama with q, k, v biases (n_h·d + 2·n_kv·d), no o bias.
//   qwen2_moe      qwen2 attention; MoE layers (i+1) % step == 0: E·3·h·I_e + h·E +
//                  one shared expert 3·h·I_s + its sigmoid gate h; other layers 3·h·I.
//   qwen3_moe      attention with attention_bias on q, k, v, o and per-head q/k RMSNorms
//                  (2·d); MoE layers E·3·h·I_e + h·E, no shared expert.
//   deepseek_v2/3  MLA; first_k_dense_replace layers 3·h·I, the rest MoE with
//                  E·3·h·I_e + h·E + S·3·h·I_e (one MLP of width S·I_e); V3 adds the
//                  router's e_score_correction_bias (E). The MTP module is not built.
//   qwen3          qwen3_moe attention, every layer a dense MLP 3·h·I.
//   phi3           llama with fused qkv_proj and gate_up_proj (same counts), no biases.
//   gemma2/gemma3  llama attention (gemma3 adds q/k RMSNorms 2·d), four norms per block
//                  (input, post-attention, pre- and post-feedforward: 4h), tied head. The
//                  embedding is scaled by sqrt(h) (no parameter).
//   gpt_oss        attention with biases on q, k, v, o plus one sink logit per head (n_h);
//                  every layer MoE: E experts 3·h·I_e + 2·I_e + h (biases), router h·E + E.
//   llama4         llama attention (its q/k norm is an L2 norm without weights); MoE layers
//                  (interleave_moe_layer_step) E·3·h·I_e + h·E + one shared expert 3·h·I_e,
//                  the other layers a dense MLP 3·h·intermediate_size_mlp.
//   opt            GQA with kv = heads, plain, layernorm, biases everywhere (4h on
//                  q,k,v,o; I + h on fc1, fc2), tied head, learned positions
//                  max_position_embeddings + 2, final LayerNorm 2h.
//                  Total = V·h + P·h + 2h + L·(4h² + 4h + 2·h·I + I + h + 4h).
//
// Note: DeepSeek-V3's e_score_correction_bias is a registered buffer in some
// transformers versions and a parameter in DeepSeek's own code; it is in the checkpoint
// either way, so it is counted (256 values per MoE layer).

namespace {

int64_t norm_params(const Arch& a, int64_t n) {
  return a.norm == NormKind::kLayerNorm ? 2 * n : n;
}

int64_t mlp_params(const Arch& a, int64_t width) {
  const int64_t h = a.hidden;
  if (a.mlp == MlpKind::kGated) return 3 * h * width + (a.mlp_bias ? 2 * width + h : 0);
  return 2 * h * width + (a.mlp_bias ? width + h : 0);
}

int64_t attention_params(const Arch& a) {
  const int64_t h = a.hidden;
  const int64_t nh = a.heads;
  if (a.attention == AttentionKind::kMla) {
    const int64_t qk = int64_t{a.qk_nope_head_dim} + a.qk_rope_head_dim;
    const int64_t qr = a.q_lora_rank;
    const int64_t kvr = a.kv_lora_rank;
    const int64_t q = qr > 0 ? h * qr + norm_params(a, qr) + qr * nh * qk : h * nh * qk;
    const int64_t kv_a = h * (kvr + a.qk_rope_head_dim) + norm_params(a, kvr);
    const int64_t kv_b = kvr * nh * (int64_t{a.qk_nope_head_dim} + a.v_head_dim);
    const int64_t o = nh * a.v_head_dim * h;
    return q + kv_a + kv_b + o;
  }
  const int64_t d = a.head_dim;
  const int64_t nkv = a.kv_heads;
  int64_t p = 2 * h * nh * d + 2 * h * nkv * d;
  if (a.qkv_bias) p += nh * d + 2 * nkv * d;
  if (a.o_bias) p += h;
  if (a.qk_norm) p += 2 * norm_params(a, d);
  if (a.attention_sinks) p += nh;
  return p;
}

int64_t embed_width(const Arch& a) {
  return a.project_in_out > 0 ? a.project_in_out : a.hidden;
}

}  // namespace

bool Arch::is_moe_layer(int layer) const {
  return experts > 0 && layer >= first_dense_layers && moe_layer_freq > 0 &&
         layer % moe_layer_freq == moe_layer_offset;
}

bool Arch::is_sliding_layer(int layer) const {
  return sliding_window > 0 &&
         (full_attention_every == 0 || (layer + 1) % full_attention_every != 0);
}

int64_t Arch::attended(int layer, int64_t context) const {
  return is_sliding_layer(layer) ? std::min<int64_t>(context, sliding_window) : context;
}

ParamCount count_params(const Arch& a) {
  const int64_t h = a.hidden;
  const int64_t e = embed_width(a);
  const int64_t attention = attention_params(a);
  const int64_t norms = (a.post_norms ? 4 : 2) * norm_params(a, h);
  const int64_t dense = a.intermediate > 0 ? mlp_params(a, a.intermediate) : 0;
  const int64_t expert = a.experts > 0 ? mlp_params(a, a.moe_intermediate) : 0;
  int64_t moe = 0;
  int64_t moe_idle = 0;  // routed experts one token does not touch
  if (a.experts > 0) {
    const int64_t shared_width =
        a.shared_intermediate > 0 ? a.shared_intermediate : a.moe_intermediate;
    moe = a.experts * expert + h * a.experts + (a.router_bias ? a.experts : 0) +
          a.shared_experts * mlp_params(a, shared_width) + (a.shared_expert_gate ? h : 0);
    moe_idle = int64_t{a.experts - a.experts_per_token} * expert;
  }

  int64_t layers_total = 0;
  int64_t layers_active = 0;
  bool any_dense = false;
  bool any_moe = false;
  for (int i = 0; i < a.layers; ++i) {
    const bool is_moe = a.is_moe_layer(i);
    any_moe = any_moe || is_moe;
    any_dense = any_dense || !is_moe;
    const int64_t layer = attention + norms + (is_moe ? moe : dense);
    layers_total += layer;
    layers_active += layer - (is_moe ? moe_idle : 0);
  }

  const int64_t embedding = int64_t{a.vocab} * e + int64_t{a.learned_positions} * h;
  const int64_t projections = a.project_in_out > 0 ? 2 * e * h : 0;
  const int64_t lm_head = a.tied_embeddings ? 0 : int64_t{a.vocab} * e;
  const int64_t final_norm = norm_params(a, h);
  const int64_t outside = embedding + projections + lm_head + final_norm;

  ParamCount c;
  c.total = static_cast<double>(outside + layers_total);
  c.active = static_cast<double>(outside + layers_active);
  c.embedding = static_cast<double>(embedding);
  c.lm_head = static_cast<double>(lm_head);
  c.attention_per_layer = static_cast<double>(attention);
  c.dense_mlp_per_layer = any_dense ? static_cast<double>(dense) : 0.0;
  c.moe_per_layer = any_moe ? static_cast<double>(moe) : 0.0;
  c.expert = any_moe ? static_cast<double>(expert) : 0.0;
  c.norms_per_layer = static_cast<double>(norms);
  c.final_norm = static_cast<double>(final_norm);
  c.projections = static_cast<double>(projections);
  return c;
}

namespace {

/// Elements one token adds to one layer's cache.
uint64_t kv_elements_per_layer(const Arch& a) {
  return a.attention == AttentionKind::kMla
             ? static_cast<uint64_t>(a.kv_lora_rank) + static_cast<uint64_t>(a.qk_rope_head_dim)
             : 2 * static_cast<uint64_t>(a.kv_heads) * static_cast<uint64_t>(a.head_dim);
}

/// Bytes of `elements` of `kv`: sub-byte types pack two elements per byte; a final half byte
/// rounds up.
uint64_t kv_bytes(uint64_t elements, Dtype kv) {
  const auto bits = static_cast<uint64_t>(kDtypeBits[static_cast<size_t>(kv)]);
  return (elements * bits + 7) / 8;
}

}  // namespace

uint64_t kv_bytes_per_token(const Arch& a, Dtype kv) {
  return kv_bytes(kv_elements_per_layer(a) * static_cast<uint64_t>(a.layers), kv);
}

uint64_t kv_bytes_at(const Arch& a, Dtype kv, int64_t context) {
  TF_ASSERT(context >= 0, "negative context {}", context);
  uint64_t tokens = 0;  // tokens kept, summed over layers
  for (int l = 0; l < a.layers; ++l) tokens += static_cast<uint64_t>(a.attended(l, context));
  return kv_bytes(kv_elements_per_layer(a) * tokens, kv);
}

double decode_flops_per_token(const Arch& a, int64_t context) {
  TF_ASSERT(context >= 0, "negative context {}", context);
  const ParamCount p = count_params(a);
  // Lookup tables cost no FLOPs; the LM head is charged explicitly below, tied or not.
  const double nonembed = p.active - p.embedding - p.lm_head;
  const double head = 2.0 * static_cast<double>(embed_width(a)) * a.vocab +
                      (a.final_softcap ? kSoftcapFlops * a.vocab : 0.0);
  const double nh = a.heads;
  double attn = 0;
  for (int l = 0; l < a.layers; ++l) {
    // A sliding window caps how many past tokens a layer attends to.
    const double cd = static_cast<double>(a.attended(l, context));
    if (a.attention == AttentionKind::kMla) {
      // Absorbed MLA: scores over the latent plus rope key, then values from the latent.
      attn +=
          2.0 * nh * cd * (a.kv_lora_rank + a.qk_rope_head_dim) + 2.0 * nh * cd * a.kv_lora_rank;
    } else {
      attn += 4.0 * cd * nh * a.head_dim;  // QK^T and AV
    }
    if (a.attn_softcap) attn += kSoftcapFlops * nh * cd;
  }
  return 2.0 * nonembed + head + attn;
}

double expected_distinct_experts(int experts, int k, int64_t tokens) {
  if (experts <= 0 || k <= 0 || tokens <= 0) return 0.0;
  if (k >= experts) return experts;
  const double e = experts;
  return e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(tokens)));
}

}  // namespace tierflow::traces
