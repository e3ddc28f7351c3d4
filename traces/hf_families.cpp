// The Hugging Face families: which config.json keys each one reads and which it may
// ignore, and how it builds an Arch (traces/hf_import.h describes the importer).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "traces/hf_config.h"

namespace tierflow::traces::hf {
namespace {

// ---- what each family reads and what it may ignore ----

/// Rotary models: position encoding parameters, norm epsilon and the activation function
/// (same op cost for silu/gelu). The context limit (max_position_embeddings) is read by
/// every family as the model's declared maximum (Arch::max_context).
constexpr std::string_view kRotaryInert[] = {"rope_theta", "rope_scaling", "rope_parameters",
                                             "rms_norm_eps", "hidden_act"};
constexpr std::string_view kGqaGraph[] = {"num_key_value_heads", "head_dim", "intermediate_size"};
constexpr std::string_view kQwenWindow[] = {"use_sliding_window", "layer_types"};
/// Only used with use_sliding_window: true, which is rejected.
constexpr std::string_view kQwenInert[] = {"sliding_window", "max_window_layers"};
constexpr std::string_view kRouterInert[] = {"norm_topk_prob", "router_aux_loss_coef",
                                             "output_router_logits", "router_jitter_noise"};
constexpr std::string_view kQwenMoeGraph[] = {"num_experts", "num_experts_per_tok",
                                              "moe_intermediate_size", "decoder_sparse_step",
                                              "mlp_only_layers"};
constexpr std::string_view kDeepseekGraph[] = {
    "intermediate_size",     "q_lora_rank",           "kv_lora_rank",
    "qk_nope_head_dim",      "qk_rope_head_dim",      "v_head_dim",
    "n_routed_experts",      "num_experts_per_tok",   "n_shared_experts",
    "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq",
    "attention_bias"};
/// Routing policy (which experts, how scores are scaled) and parallelism hints change
/// no weight; MLA has no separate KV heads (num_key_value_heads only sizes a repeat),
/// and head_dim is HF's name for the rope width. pretraining_tp splits matmuls in
/// training only.
// clang-format off
constexpr std::string_view kDeepseekInert[] = {
    "num_key_value_heads", "head_dim", "topk_method", "scoring_func", "n_group", "topk_group",
    "routed_scaling_factor", "norm_topk_prob", "aux_loss_alpha", "seq_aux", "ep_size",
    "pretraining_tp", "rope_interleave"};
// clang-format on

// clang-format off
constexpr std::string_view kQwen3Graph[] = {"attention_bias"};
/// Phi-3: qkv_proj and gate_up_proj are fused (same counts); partial rotary and the
/// dropouts change no weight. attention_bias is read to reject true.
constexpr std::string_view kPhi3Graph[] = {"sliding_window", "attention_bias"};
constexpr std::string_view kPhi3Inert[] = {"embd_pdrop", "resid_pdrop", "partial_rotary_factor",
                                           "original_max_position_embeddings"};
/// Gemma-2/3: softcapping changes FLOPs; the query scale, the activation's spelling, the
/// cache class and rotary bases change neither weights nor op counts. sliding_window_size
/// is an older duplicate of sliding_window that transformers does not read.
constexpr std::string_view kGemmaGraph[] = {"attention_bias", "sliding_window", "layer_types",
                                            "attn_logit_softcapping", "final_logit_softcapping"};
constexpr std::string_view kGemmaInert[] = {"query_pre_attn_scalar", "hidden_activation",
                                            "cache_implementation", "sliding_window_size",
                                            "rope_local_base_freq"};
constexpr std::string_view kGemma3Graph[] = {"sliding_window_pattern"};
/// gpt-oss: num_experts_per_tok and its alias experts_per_token; the SwiGLU clamp and the
/// rotary context change no count.
constexpr std::string_view kGptOssGraph[] = {"num_local_experts", "num_experts_per_tok",
                                             "experts_per_token", "attention_bias",
                                             "sliding_window", "layer_types"};
constexpr std::string_view kGptOssInert[] = {"swiglu_limit", "initial_context_length"};
/// Llama-4 text: intermediate_size is the expert (and shared expert) width,
/// intermediate_size_mlp the dense one; chunked attention (attention_chunk_size) on the
/// layers no_rope_layers marks.
constexpr std::string_view kLlama4Graph[] = {
    "intermediate_size_mlp", "num_local_experts", "num_experts_per_tok",
    "interleave_moe_layer_step", "moe_layers", "attention_bias", "attention_chunk_size",
    "no_rope_layers", "no_rope_layer_interval", "layer_types"};
/// Attention temperature tuning rescales q (no weight, a handful of FLOPs per token);
/// use_qk_norm is an L2 norm without weights; for_llm_compressor is a loading hint.
constexpr std::string_view kLlama4Inert[] = {"attn_scale", "attn_temperature_tuning",
                                             "floor_scale", "use_qk_norm", "for_llm_compressor"};
constexpr std::string_view kLlamaGraph[] = {"attention_bias", "mlp_bias"};
/// pretraining_tp splits matmuls in training only.
constexpr std::string_view kLlamaInert[] = {"pretraining_tp"};
constexpr std::string_view kWindowGraph[] = {"sliding_window"};
constexpr std::string_view kMixtralGraph[] = {"num_local_experts", "num_experts_per_tok"};
constexpr std::string_view kQwen2MoeGraph[] = {"qkv_bias", "shared_expert_intermediate_size"};
constexpr std::string_view kQwen3MoeGraph[] = {"attention_bias"};
constexpr std::string_view kDeepseekV2Graph[] = {"mlp_bias"};
/// The MTP module: Hugging Face does not build it and a decode step does not run it.
constexpr std::string_view kDeepseekV3Inert[] = {"num_nextn_predict_layers"};
constexpr std::string_view kOptGraph[] = {
    "ffn_dim", "word_embed_proj_dim", "enable_bias", "do_layer_norm_before",
    "_remove_final_layer_norm", "layer_norm_elementwise_affine"};
/// Activation, dropout and initialisation: no weight and no op count depends on them.
constexpr std::string_view kOptInert[] = {"activation_function", "dropout", "activation_dropout",
                                          "layerdrop", "init_std"};
// clang-format on

// ---- pieces shared by families ----

void read_gqa(const Config& c, Arch& a) {
  c.count_into(a, &Arch::kv_heads, "kv_heads", "num_key_value_heads", a.heads);
  if (c.get("head_dim") == nullptr && a.hidden % a.heads != 0) {
    c.fail("num_attention_heads",
           "head_dim is absent and hidden_size {} is not a multiple of num_attention_heads {}",
           a.hidden, a.heads);
  }
  c.count_into(a, &Arch::head_dim, "head_dim", "head_dim", a.hidden / a.heads);
}

void read_dense(const Config& c, Arch& a) {
  c.count_into(a, &Arch::intermediate, "intermediate", "intermediate_size");
}

/// Qwen: sliding-window attention on the layers from max_window_layers on is a per-layer
/// structure tierflow does not model.
void read_qwen_window(const Config& c) {
  if (c.flag("use_sliding_window", false)) {
    c.fail("use_sliding_window",
           "use_sliding_window: true (sliding-window attention on some layers) is not modelled");
  }
  if (const Json* t = c.get("layer_types")) {
    if (!t->is_array()) c.fail("layer_types", "'layer_types' must be a list");
    for (const auto& x : *t) {
      if (x != "full_attention") {
        c.fail("layer_types", "layer_types entry {} is not modelled (only full_attention)",
               x.dump());
      }
    }
  }
}

/// Qwen-MoE: layer i is sparse when i is not in mlp_only_layers and (i+1) % step == 0.
void read_qwen_moe(const Config& c, Arch& a) {
  read_dense(c, a);
  c.count_into(a, &Arch::experts, "experts", "num_experts", std::nullopt, /*min=*/0);
  if (const Json* m = c.get("mlp_only_layers"); m != nullptr && !m->empty()) {
    c.fail("mlp_only_layers", "a non-empty mlp_only_layers {} is not modelled", m->dump());
  }
  if (a.experts == 0) return;  // every layer is a dense MLP
  c.count_into(a, &Arch::experts_per_token, "experts_per_token", "num_experts_per_tok");
  c.count_into(a, &Arch::moe_intermediate, "moe_intermediate", "moe_intermediate_size");
  const int step = c.count("decoder_sparse_step", 1);
  a.moe_layer_freq = step;
  a.moe_layer_offset = step - 1;
  c.origin(a, "moe_layer_freq", "decoder_sparse_step");
}

// ---- families ----

void build_llama(const Config& c, Arch& a) {
  read_gqa(c, a);
  read_dense(c, a);
  // LlamaAttention puts attention_bias on q, k, v and o; LlamaMLP mlp_bias on all three.
  a.qkv_bias = a.o_bias = c.flag("attention_bias", false);
  a.mlp_bias = c.flag("mlp_bias", false);
  c.origin(a, "qkv_bias", "attention_bias");
  c.origin(a, "mlp_bias", "mlp_bias");
}

/// Mistral and Mixtral apply one window to every layer: the weights are unchanged, the
/// KV span is capped (Arch::sliding_window).
void build_mistral(const Config& c, Arch& a) {
  read_gqa(c, a);
  read_dense(c, a);
  c.count_into(a, &Arch::sliding_window, "sliding_window", "sliding_window", 0);
}

void build_mixtral(const Config& c, Arch& a) {
  read_gqa(c, a);
  c.count_into(a, &Arch::sliding_window, "sliding_window", "sliding_window", 0);
  // intermediate_size is the width of each expert; there is no dense FFN.
  c.count_into(a, &Arch::moe_intermediate, "moe_intermediate", "intermediate_size");
  c.count_into(a, &Arch::experts, "experts", "num_local_experts");
  c.count_into(a, &Arch::experts_per_token, "experts_per_token", "num_experts_per_tok");
}

void build_qwen2(const Config& c, Arch& a) {
  read_gqa(c, a);
  read_dense(c, a);
  read_qwen_window(c);
  a.qkv_bias = true;  // Qwen2Attention: q, k, v biased, o not
}

void build_qwen2_moe(const Config& c, Arch& a) {
  read_gqa(c, a);
  read_qwen_window(c);
  a.qkv_bias = c.flag("qkv_bias", true);
  c.origin(a, "qkv_bias", "qkv_bias");
  read_qwen_moe(c, a);
  if (a.experts == 0) return;
  // One shared expert of its own width, behind a sigmoid gate h -> 1.
  a.shared_experts = 1;
  c.count_into(a, &Arch::shared_intermediate, "shared_intermediate",
               "shared_expert_intermediate_size");
  a.shared_expert_gate = true;
}

void build_qwen3_moe(const Config& c, Arch& a) {
  read_gqa(c, a);
  read_qwen_window(c);
  a.qkv_bias = a.o_bias = c.flag("attention_bias", false);
  c.origin(a, "qkv_bias", "attention_bias");
  a.qk_norm = true;  // Qwen3Attention: RMSNorm over head_dim on q and on k
  read_qwen_moe(c, a);
}

/// Reads a per-layer attention pattern (true = the layer slides) into
/// Arch::full_attention_every: the pattern must be "every n-th layer is full", all full or
/// all sliding. `key` names the field it came from.
void set_layer_pattern(const Config& c, Arch& a, std::string_view key,
                       const std::vector<bool>& sliding) {
  if (static_cast<int>(sliding.size()) != a.layers) {
    c.fail(key, "'{}' has {} entries for num_hidden_layers {}", key, sliding.size(), a.layers);
  }
  const auto full = std::find(sliding.begin(), sliding.end(), false);
  if (full == sliding.end()) {
    a.full_attention_every = 0;  // every layer slides
  } else if (std::find(sliding.begin(), sliding.end(), true) == sliding.end()) {
    a.sliding_window = 0;  // no layer slides
    a.origins.fields.erase("sliding_window");
    return;
  } else {
    const int n = static_cast<int>(full - sliding.begin()) + 1;
    for (int i = 0; i < a.layers; ++i) {
      if (sliding[static_cast<size_t>(i)] != ((i + 1) % n != 0)) {
        c.fail(key,
               "'{}': layer {} breaks the pattern of a full-attention layer every {} (tierflow "
               "models periodic patterns only)",
               key, i, n);
      }
    }
    a.full_attention_every = n;
  }
  c.origin(a, "full_attention_every", key);
}

/// layer_types: "sliding_attention" / "chunked_attention" (Llama-4; see build_llama4) or
/// "full_attention" per layer. False when absent.
bool read_layer_types(const Config& c, Arch& a) {
  const Json* t = c.get("layer_types");
  if (t == nullptr) return false;
  if (!t->is_array()) c.fail("layer_types", "'layer_types' must be a list");
  static const std::vector<std::string> kTypes = {"full_attention", "sliding_attention",
                                                  "chunked_attention"};
  std::vector<bool> sliding;
  for (const auto& x : *t) {
    const std::string v = x.is_string() ? x.get<std::string>() : x.dump();
    const auto it = std::find(kTypes.begin(), kTypes.end(), v);
    if (it == kTypes.end()) {
      c.fail("layer_types", "layer_types entry '{}' is not one of: {}{}", v,
             fmt::join(kTypes, ", "), did_you_mean(v, kTypes));
    }
    sliding.push_back(it != kTypes.begin());
  }
  set_layer_pattern(c, a, "layer_types", sliding);
  return true;
}

void build_qwen3(const Config& c, Arch& a) {
  read_gqa(c, a);
  read_dense(c, a);
  read_qwen_window(c);
  a.qkv_bias = a.o_bias = c.flag("attention_bias", false);
  c.origin(a, "qkv_bias", "attention_bias");
  a.qk_norm = true;  // Qwen3Attention: RMSNorm over head_dim on q and on k
}

/// Phi-3: a window on every layer (like Mistral; Phi-3-mini-4k: 2047).
void build_phi3(const Config& c, Arch& a) {
  read_gqa(c, a);
  read_dense(c, a);
  c.count_into(a, &Arch::sliding_window, "sliding_window", "sliding_window", 0);
  if (c.flag("attention_bias", false)) {
    c.fail("attention_bias",
           "attention_bias: true is not modelled for phi3 (its projections "
           "have no bias)");
  }
}

/// Gemma-2 and Gemma-3 text: four norms per block, tied head by default, sliding layers.
void build_gemma(const Config& c, Arch& a, bool gemma3) {
  read_gqa(c, a);
  read_dense(c, a);
  a.qkv_bias = a.o_bias = c.flag("attention_bias", false);
  c.origin(a, "qkv_bias", "attention_bias");
  a.post_norms = true;
  a.qk_norm = gemma3;  // Gemma3Attention: q_norm and k_norm over head_dim
  c.count_into(a, &Arch::sliding_window, "sliding_window", "sliding_window");
  // Softcapping: a number, or null for none. The class defaults: Gemma-2 50 (attention)
  // and 30 (final), Gemma-3 none.
  auto cap = [&](std::string_view key, bool def) {
    if (!c.present(key)) return def;
    const Json* v = c.get(key);
    if (v == nullptr) return false;
    if (!v->is_number() || v->get<double>() <= 0) {
      c.fail(key, "'{}' must be a positive number or null, got {}", key, v->dump());
    }
    return true;
  };
  a.attn_softcap = cap("attn_logit_softcapping", !gemma3);
  c.origin(a, "attn_softcap", "attn_logit_softcapping");
  a.final_softcap = cap("final_logit_softcapping", !gemma3);
  c.origin(a, "final_softcap", "final_logit_softcapping");
  if (read_layer_types(c, a)) return;
  if (!gemma3) {
    // Gemma2DecoderLayer: even layers slide, odd ones attend globally.
    a.full_attention_every = 2;
    return;
  }
  // Gemma-3 without layer_types: sliding_window_pattern (class default 6), layer i global
  // when (i + 1) % pattern == 0.
  const int pattern = c.count("sliding_window_pattern", 6);
  std::vector<bool> sliding;
  for (int i = 0; i < a.layers; ++i) sliding.push_back((i + 1) % pattern != 0);
  set_layer_pattern(c, a, "sliding_window_pattern", sliding);
}

/// gpt-oss: every layer MoE with biased experts and router, attention with biases and
/// per-head sinks, sliding and full layers alternating (layer_types).
void build_gpt_oss(const Config& c, Arch& a) {
  read_gqa(c, a);
  a.qkv_bias = a.o_bias = c.flag("attention_bias", true);
  c.origin(a, "qkv_bias", "attention_bias");
  a.attention_sinks = true;
  c.count_into(a, &Arch::moe_intermediate, "moe_intermediate", "intermediate_size");
  c.count_into(a, &Arch::experts, "experts", "num_local_experts");
  const char* kkey =
      c.get("num_experts_per_tok") != nullptr ? "num_experts_per_tok" : "experts_per_token";
  c.count_into(a, &Arch::experts_per_token, "experts_per_token", kkey);
  if (c.get("num_experts_per_tok") != nullptr && c.get("experts_per_token") != nullptr &&
      c.count("experts_per_token") != a.experts_per_token) {
    c.fail("experts_per_token", "experts_per_token {} disagrees with num_experts_per_tok {}",
           c.count("experts_per_token"), a.experts_per_token);
  }
  a.mlp_bias = true;     // GptOssExperts: gate_up_proj_bias and down_proj_bias
  a.router_bias = true;  // GptOssTopKRouter: a biased linear layer
  c.count_into(a, &Arch::sliding_window, "sliding_window", "sliding_window");
  if (!read_layer_types(c, a)) {
    // The class default: sliding on even layers, full on odd ones.
    a.full_attention_every = 2;
  }
}

/// Llama-4 text: MoE layers every interleave_moe_layer_step (routed experts plus one
/// shared expert, both of width intermediate_size), dense layers of intermediate_size_mlp
/// between; chunked attention on the layers that use rotary embeddings, global attention
/// on the NoPE layers (every no_rope_layer_interval-th). A chunk is modelled as a sliding
/// window of attention_chunk_size: the KV a layer keeps never exceeds it (an upper bound:
/// the chunk restarts every attention_chunk_size tokens), and attention FLOPs are those of
/// the window (an upper bound too: a chunked query attends to 1..chunk tokens).
void build_llama4(const Config& c, Arch& a) {
  read_gqa(c, a);
  a.qkv_bias = a.o_bias = c.flag("attention_bias", false);
  c.origin(a, "qkv_bias", "attention_bias");
  c.count_into(a, &Arch::intermediate, "intermediate", "intermediate_size_mlp");
  c.count_into(a, &Arch::moe_intermediate, "moe_intermediate", "intermediate_size");
  c.count_into(a, &Arch::experts, "experts", "num_local_experts");
  c.count_into(a, &Arch::experts_per_token, "experts_per_token", "num_experts_per_tok");
  a.shared_experts = 1;
  const int step = c.count("interleave_moe_layer_step", 1);
  a.moe_layer_freq = step;
  a.moe_layer_offset = step - 1;
  c.origin(a, "moe_layer_freq", "interleave_moe_layer_step");
  if (const Json* m = c.get("moe_layers"); m != nullptr) {
    if (!m->is_array()) c.fail("moe_layers", "'moe_layers' must be a list of layer indices");
    std::vector<int> want;
    for (int i = 0; i < a.layers; ++i) {
      if (a.is_moe_layer(i)) want.push_back(i);
    }
    std::vector<int> got;
    for (const auto& x : *m) got.push_back(x.is_number_integer() ? x.get<int>() : -1);
    if (got != want) {
      c.fail("moe_layers",
             "moe_layers {} is not every {}-th layer (interleave_moe_layer_step); other "
             "placements are not modelled",
             m->dump(), step);
    }
  }
  c.count_into(a, &Arch::sliding_window, "sliding_window", "attention_chunk_size", 0);
  if (a.sliding_window == 0) return;
  if (read_layer_types(c, a)) return;
  // no_rope_layers[i] == 1: layer i uses rotary and chunked attention; empty: the class
  // builds it from no_rope_layer_interval (default 4).
  std::vector<bool> chunked;
  const Json* nr = c.get("no_rope_layers");
  if (nr != nullptr && !nr->is_array()) c.fail("no_rope_layers", "'no_rope_layers' must be a list");
  if (nr != nullptr && !nr->empty()) {
    for (size_t i = 0; i < nr->size(); ++i) {
      const Json& x = (*nr)[i];
      if (!x.is_number_integer() || (x != 0 && x != 1)) {
        c.fail("no_rope_layers", "'no_rope_layers' item {} is {}: each is 0 (no rotary) or 1", i,
               x.dump());
      }
      chunked.push_back(x == 1);
    }
    set_layer_pattern(c, a, "no_rope_layers", chunked);
  } else {
    const int interval = c.count("no_rope_layer_interval", 4);
    for (int i = 0; i < a.layers; ++i) chunked.push_back((i + 1) % interval != 0);
    set_layer_pattern(c, a, "no_rope_layer_interval", chunked);
  }
}

void build_deepseek(const Config& c, Arch& a, bool v3) {
  a.attention = AttentionKind::kMla;
  read_dense(c, a);
  // Absent would mean the class default (1536); null means uncompressed queries (V2-Lite).
  if (!c.present("q_lora_rank")) {
    c.fail("q_lora_rank",
           "config.json for model_type '{}' has no 'q_lora_rank' (write null for uncompressed "
           "queries)",
           c.model_type());
  }
  c.count_into(a, &Arch::q_lora_rank, "q_lora_rank", "q_lora_rank", 0);
  c.count_into(a, &Arch::kv_lora_rank, "kv_lora_rank", "kv_lora_rank");
  c.count_into(a, &Arch::qk_nope_head_dim, "qk_nope_head_dim", "qk_nope_head_dim");
  c.count_into(a, &Arch::qk_rope_head_dim, "qk_rope_head_dim", "qk_rope_head_dim");
  c.count_into(a, &Arch::v_head_dim, "v_head_dim", "v_head_dim");
  c.count_into(a, &Arch::experts, "experts", "n_routed_experts");
  c.count_into(a, &Arch::experts_per_token, "experts_per_token", "num_experts_per_tok");
  c.count_into(a, &Arch::moe_intermediate, "moe_intermediate", "moe_intermediate_size");
  // V2 allows null (no shared experts); V3 always builds them.
  c.count_into(a, &Arch::shared_experts, "shared_experts", "n_shared_experts",
               v3 ? std::nullopt : std::optional<int>(0), /*min=*/0);
  c.count_into(a, &Arch::first_dense_layers, "first_dense_layers", "first_k_dense_replace",
               std::nullopt, /*min=*/0);
  // Hugging Face's DeepseekV2/V3 decoder layers ignore moe_layer_freq (every layer from
  // first_k_dense_replace on is MoE) while DeepSeek's own code honours it; every released
  // model uses 1, where both agree.
  if (c.count("moe_layer_freq", 1) != 1) {
    c.fail("moe_layer_freq",
           "moe_layer_freq other than 1 is not modelled (Hugging Face and DeepSeek's code "
           "disagree on what it builds)");
  }
  if (c.flag("attention_bias", false)) {
    c.fail("attention_bias", "attention_bias: true is not modelled for MLA");
  }
  if (!v3 && c.flag("mlp_bias", false)) c.fail("mlp_bias", "mlp_bias: true is not modelled");
  // V3's router carries e_score_correction_bias (one value per routed expert).
  a.router_bias = v3;
  // num_nextn_predict_layers (V3's MTP module) is not built by Hugging Face and is not
  // part of a decode step; it stays on the inert list.
}

void build_opt(const Config& c, Arch& a) {
  a.mlp = MlpKind::kPlain;
  a.norm = NormKind::kLayerNorm;
  a.kv_heads = a.heads;
  if (a.hidden % a.heads != 0) {
    c.fail("num_attention_heads", "hidden_size {} is not a multiple of num_attention_heads {}",
           a.hidden, a.heads);
  }
  a.head_dim = a.hidden / a.heads;
  c.count_into(a, &Arch::intermediate, "intermediate", "ffn_dim");
  // q, k, v, out_proj, fc1 and fc2 all carry enable_bias.
  a.qkv_bias = a.o_bias = a.mlp_bias = c.flag("enable_bias", true);
  c.origin(a, "qkv_bias", "enable_bias");
  // OPTLearnedPositionalEmbedding keeps 2 extra rows (the offset of OPT's positions).
  a.learned_positions = c.count("max_position_embeddings") + 2;
  c.origin(a, "learned_positions", "max_position_embeddings");
  const int proj = c.count("word_embed_proj_dim", a.hidden);
  a.project_in_out = proj == a.hidden ? 0 : proj;
  c.origin(a, "project_in_out", "word_embed_proj_dim");
  if (!c.flag("do_layer_norm_before", true)) {
    c.fail("do_layer_norm_before",
           "do_layer_norm_before: false (post-norm blocks without a final norm, OPT-350m) is "
           "not modelled");
  }
  if (c.flag("_remove_final_layer_norm", false)) {
    c.fail("_remove_final_layer_norm", "_remove_final_layer_norm: true is not modelled");
  }
  if (!c.flag("layer_norm_elementwise_affine", true)) {
    c.fail("layer_norm_elementwise_affine",
           "layer_norm_elementwise_affine: false (norms without weights) is not modelled");
  }
}

}  // namespace

void read_common(const Config& c, Arch& a, bool tied_default, int vocab_default) {
  c.count_into(a, &Arch::hidden, "hidden", "hidden_size");
  c.count_into(a, &Arch::layers, "layers", "num_hidden_layers");
  c.count_into(a, &Arch::heads, "heads", "num_attention_heads");
  c.count_into(a, &Arch::vocab, "vocab", "vocab_size",
               vocab_default > 0 ? std::optional<int>(vocab_default) : std::nullopt);
  a.tied_embeddings = c.flag("tie_word_embeddings", tied_default);
  c.origin(a, "tied_embeddings", "tie_word_embeddings");
  c.count_into(a, &Arch::max_context, "max_context", "max_position_embeddings", 0, 0);
  // Encoder-decoder, cross-attention and pruned heads all change the module tree.
  for (const char* k : {"is_encoder_decoder", "add_cross_attention"}) {
    if (c.flag(k, false)) c.fail(k, "{}: true is not modelled (decoder-only)", k);
  }
  if (const Json* p = c.get("pruned_heads"); p != nullptr && !p->empty()) {
    c.fail("pruned_heads", "pruned_heads {} is not modelled (every layer keeps all heads)",
           p->dump());
  }
  // Weight dtype: `dtype` is the newer spelling of `torch_dtype`.
  const char* dkey = c.get("dtype") != nullptr ? "dtype" : "torch_dtype";
  if (auto d = c.text(dkey)) {
    static const std::vector<std::string> kNames = {"bfloat16", "float16", "float32"};
    const auto it = std::find(kNames.begin(), kNames.end(), *d);
    if (it == kNames.end()) {
      c.fail(dkey, "{} '{}' is not one of: bfloat16, float16, float32{}", dkey, *d,
             did_you_mean(*d, kNames));
    }
    const Dtype ds[] = {Dtype::kBf16, Dtype::kFp16, Dtype::kFp32};
    a.checkpoint_dtype = ds[it - kNames.begin()];
    c.origin(a, "checkpoint_dtype", dkey);
  }
  if (const Json* q = c.get("quantization_config")) {
    const auto m = q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()
                       ? (*q)["quant_method"].get<std::string>()
                       : std::string();
    // FP8 block-scaled weights (DeepSeek-V3): same graph, one byte per weight. MXFP4
    // (gpt-oss): the routed experts, nearly all the weights, in 4-bit blocks; attention,
    // router, embedding and head stay bf16.
    if (m != "fp8" && m != "mxfp4") {
      c.fail("quantization_config",
             "quantization_config with quant_method '{}' is not modelled (tierflow reads fp8 "
             "and mxfp4 checkpoints only)",
             m);
    }
    a.checkpoint_dtype = m == "fp8" ? Dtype::kFp8 : Dtype::kFp4;
    c.origin(a, "checkpoint_dtype", "quantization_config");
  }
}

const std::vector<Family>& families() {
  // clang-format off
  static const std::vector<Family> kFamilies = {
      {"llama", {kGqaGraph, kLlamaGraph}, {kRotaryInert, kLlamaInert}, build_llama},
      {"mistral", {kGqaGraph, kWindowGraph}, {kRotaryInert}, build_mistral},
      {"mixtral", {kGqaGraph, kWindowGraph, kMixtralGraph}, {kRotaryInert, kRouterInert},
       build_mixtral},
      {"qwen2", {kGqaGraph, kQwenWindow}, {kRotaryInert, kQwenInert}, build_qwen2},
      {"qwen2_moe", {kGqaGraph, kQwenWindow, kQwenMoeGraph, kQwen2MoeGraph},
       {kRotaryInert, kQwenInert, kRouterInert}, build_qwen2_moe},
      {"qwen3_moe", {kGqaGraph, kQwenWindow, kQwenMoeGraph, kQwen3MoeGraph},
       {kRotaryInert, kQwenInert, kRouterInert}, build_qwen3_moe},
      {"deepseek_v2", {kDeepseekGraph, kDeepseekV2Graph}, {kRotaryInert, kDeepseekInert},
       [](const Config& c, Arch& a) { build_deepseek(c, a, /*v3=*/false); }},
      {"deepseek_v3", {kDeepseekGraph}, {kRotaryInert, kDeepseekInert, kDeepseekV3Inert},
       [](const Config& c, Arch& a) { build_deepseek(c, a, /*v3=*/true); }},
      {"opt", {kOptGraph}, {kOptInert}, build_opt, /*tied_default=*/true},
      {"qwen3", {kGqaGraph, kQwenWindow, kQwen3Graph}, {kRotaryInert, kQwenInert}, build_qwen3},
      {"phi3", {kGqaGraph, kPhi3Graph}, {kRotaryInert, kPhi3Inert}, build_phi3},
      {"gemma2", {kGqaGraph, kGemmaGraph}, {kRotaryInert, kGemmaInert},
       [](const Config& c, Arch& a) { build_gemma(c, a, /*gemma3=*/false); }, true},
      {"gemma3_text", {kGqaGraph, kGemmaGraph, kGemma3Graph}, {kRotaryInert, kGemmaInert},
       [](const Config& c, Arch& a) { build_gemma(c, a, /*gemma3=*/true); }, true,
       /*vocab_default=*/262'208},
      {"gpt_oss", {kGqaGraph, kGptOssGraph}, {kRotaryInert, kRouterInert, kGptOssInert},
       build_gpt_oss},
      {"llama4_text", {kGqaGraph, kLlama4Graph}, {kRotaryInert, kRouterInert, kLlama4Inert},
       build_llama4},
  };
  // clang-format on
  return kFamilies;
}

}  // namespace tierflow::traces::hf
