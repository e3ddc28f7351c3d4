#include "traces/hf_import.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <span>

#include "core/json_reader.h"
#include "core/yaml_input.h"
#include "traces/arch_loader.h"
#include "traces/arch_params.h"

namespace tierflow::traces {
namespace {

using Json = nlohmann::json;
using Keys = std::span<const std::string_view>;

// ---- positions ----

using KeyList = std::vector<std::pair<std::string, SourcePos>>;

/// The keys of the top-level object and of its `text_config` object (multimodal
/// configs), with their positions, in order. nlohmann keeps no positions, so the strict
/// positioned reader of core parses the text first: it also reports malformed JSON
/// exactly where it is.
struct ConfigKeys {
  KeyList top;
  KeyList text;        ///< empty when there is no text_config object
  SourcePos text_pos;  ///< where text_config's object starts
};

ConfigKeys config_keys(JsonReader& r) {
  ConfigKeys out;
  r.begin_object("a config.json");
  std::string key;
  while (r.next_key(key)) {
    out.top.emplace_back(key, r.pos_at(r.key_offset()));
    if (key == "text_config" && r.peek() == JsonReader::Kind::kObject) {
      out.text_pos = r.pos();
      r.begin_object("text_config");
      std::string inner;
      while (r.next_key(inner)) {
        out.text.emplace_back(inner, r.pos_at(r.key_offset()));
        r.skip_value();
      }
    } else {
      r.skip_value();
    }
  }
  r.expect_end();
  return out;
}

// ---- what each family reads and what it may ignore ----

/// Read for every family.
constexpr std::string_view kCommonGraph[] = {
    "model_type",          "hidden_size",         "num_hidden_layers",   "num_attention_heads",
    "vocab_size",          "tie_word_embeddings", "torch_dtype",         "dtype",
    "quantization_config", "is_encoder_decoder",  "add_cross_attention", "pruned_heads"};

/// PretrainedConfig bookkeeping, token ids, training-only and generation settings:
/// none of them shapes a weight or an op of a forward step.
// clang-format off
constexpr std::string_view kCommonInert[] = {
    "_name_or_path", "_commit_hash", "_attn_implementation_autoset", "architectures",
    "auto_map", "transformers_version", "use_cache", "bos_token_id", "eos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range",
    "output_attentions", "output_hidden_states", "return_dict", "torchscript", "use_bfloat16",
    "tf_legacy_loss", "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
    "tokenizer_class", "prefix", "task_specific_params", "is_decoder", "tie_encoder_decoder",
    "cross_attention_hidden_size", "chunk_size_feed_forward", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "attention_dropout"};
// clang-format on

/// Rotary models: position encoding parameters, the context limit (no weights depend
/// on it), norm epsilon and the activation function (same op cost for silu/gelu).
constexpr std::string_view kRotaryInert[] = {
    "max_position_embeddings", "rope_theta",   "rope_scaling",
    "rope_parameters",         "rms_norm_eps", "hidden_act"};
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
/// The multimodal wrappers (gemma3, llama4): the text model is read from text_config; the
/// vision tower and projector are not counted (tierflow models the decoder).
constexpr std::string_view kWrapperKeys[] = {
    "text_config", "vision_config", "image_token_index", "image_token_id", "boi_token_index",
    "eoi_token_index", "boa_token_index", "eoa_token_index", "mm_tokens_per_image",
    "tie_word_embeddings", "torch_dtype", "dtype", "projector_hidden_act",
    "multi_modal_projector_bias", "vision_feature_layer", "vision_feature_select_strategy"};
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
    "_remove_final_layer_norm", "layer_norm_elementwise_affine", "max_position_embeddings"};
/// Activation, dropout and initialisation: no weight and no op count depends on them.
constexpr std::string_view kOptInert[] = {"activation_function", "dropout", "activation_dropout",
                                          "layerdrop", "init_std"};
// clang-format on

class Config;

struct Family {
  std::string_view model_type;
  std::vector<Keys> graph;  ///< keys the importer reads
  std::vector<Keys> inert;  ///< keys known not to change the graph
  void (*build)(const Config&, Arch&);
  bool tied_default = false;  ///< the class default of tie_word_embeddings
  int vocab_default = 0;      ///< the class default of vocab_size when a released config
                              ///< leaves it out (Gemma-3); 0 = required
};

// ---- reading values ----

bool listed(const Keys& ks, std::string_view key) {
  return std::find(ks.begin(), ks.end(), key) != ks.end();
}
bool listed(const std::vector<Keys>& lists, std::string_view key) {
  return std::any_of(lists.begin(), lists.end(), [&](const Keys& ks) { return listed(ks, key); });
}

class Config {
 public:
  /// `pos`: where each top-level key is written; `top`: the object itself.
  Config(const Json& j, std::map<std::string, SourcePos> pos, SourcePos top, const Family& family)
      : j_(j), family_(family), pos_(std::move(pos)), top_(std::move(top)) {}

  [[nodiscard]] std::string_view model_type() const { return family_.model_type; }

  SourcePos pos(std::string_view key) const {
    auto it = pos_.find(std::string(key));
    return it == pos_.end() ? top_ : it->second;
  }

  /// The value of `key`, or nullptr when absent or null.
  const Json* get(std::string_view key) const {
    TF_ASSERT(reads(key), "importer reads '{}' but it is not in the key lists of '{}'", key,
              family_.model_type);
    auto it = j_.find(std::string(key));
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  template <class... Args>
  [[noreturn]] void fail(std::string_view key, fmt::format_string<Args...> f,
                         Args&&... args) const {
    throw InputError(pos(key), fmt::format(f, std::forward<Args>(args)...));
  }

  /// A non-negative integer that fits an int; `def` when absent or null (nullopt:
  /// required).
  int count(std::string_view key, std::optional<int> def = std::nullopt, int min = 1) const {
    const Json* v = get(key);
    if (v == nullptr) {
      if (def) return *def;
      fail(key,
           "config.json for model_type '{}' has no '{}' (tierflow does not assume the "
           "Hugging Face class default)",
           family_.model_type, key);
    }
    if (!v->is_number_integer()) fail(key, "'{}' must be an integer, got {}", key, v->dump());
    // nlohmann stores non-negative integers as unsigned, negative ones as signed.
    const int64_t n64 =
        v->is_number_unsigned()
            ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX))
            : v->get<int64_t>();
    if (n64 > INT_MAX) fail(key, "'{}' is too large: {}", key, v->dump());
    if (n64 < min) fail(key, "'{}' must be at least {}, got {}", key, min, n64);
    return static_cast<int>(n64);
  }

  /// count() into an Arch member, recording where it came from.
  void count_into(Arch& a, int Arch::*member, std::string_view field, std::string_view key,
                  std::optional<int> def = std::nullopt, int min = 1) const {
    a.*member = count(key, def, min);
    origin(a, field, key);
  }

  /// True when `key` is written, even as null.
  bool present(std::string_view key) const {
    TF_ASSERT(reads(key), "importer reads '{}' but it is not in the key lists of '{}'", key,
              family_.model_type);
    return j_.contains(std::string(key));
  }

  bool flag(std::string_view key, bool def) const {
    const Json* v = get(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) fail(key, "'{}' must be true or false, got {}", key, v->dump());
    return v->get<bool>();
  }

  std::optional<std::string> text(std::string_view key) const {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(key, "'{}' must be a string, got {}", key, v->dump());
    return v->get<std::string>();
  }

  /// Records that Arch field `field` came from `key`.
  void origin(Arch& a, std::string_view field, std::string_view key) const {
    if (j_.contains(std::string(key))) a.origins.fields[std::string(field)].pos = pos(key);
  }

  /// True when `key` is one the family reads.
  [[nodiscard]] bool reads(std::string_view key) const {
    return listed(kCommonGraph, key) || listed(family_.graph, key);
  }
  /// True when `key` is known not to change the family's graph.
  [[nodiscard]] bool ignores(std::string_view key) const {
    return listed(kCommonInert, key) || listed(family_.inert, key);
  }
  [[nodiscard]] std::vector<std::string> known_keys() const {
    std::vector<std::string> out(std::begin(kCommonGraph), std::end(kCommonGraph));
    out.insert(out.end(), std::begin(kCommonInert), std::end(kCommonInert));
    for (const auto* lists : {&family_.graph, &family_.inert}) {
      for (const auto& ks : *lists) out.insert(out.end(), ks.begin(), ks.end());
    }
    return out;
  }

 private:
  const Json& j_;
  const Family& family_;
  std::map<std::string, SourcePos> pos_;
  SourcePos top_;
};

// ---- pieces shared by families ----

void read_common(const Config& c, Arch& a, bool tied_default, int vocab_default) {
  c.count_into(a, &Arch::hidden, "hidden", "hidden_size");
  c.count_into(a, &Arch::layers, "layers", "num_hidden_layers");
  c.count_into(a, &Arch::heads, "heads", "num_attention_heads");
  c.count_into(a, &Arch::vocab, "vocab", "vocab_size",
               vocab_default > 0 ? std::optional<int>(vocab_default) : std::nullopt);
  a.tied_embeddings = c.flag("tie_word_embeddings", tied_default);
  c.origin(a, "tied_embeddings", "tie_word_embeddings");
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
    for (const auto& x : *nr) chunked.push_back(x != 0);
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

/// A model id from the config's `_name_or_path`, else the file name (its folder for
/// config.json): lower case, other characters '-'.
std::string model_name(const Json& j, const std::string& file, std::string_view model_type) {
  std::string raw;
  if (auto it = j.find("_name_or_path"); it != j.end() && it->is_string()) {
    raw = std::filesystem::path(it->get<std::string>()).filename().string();
  }
  const std::filesystem::path path(file);
  if (raw.empty()) {
    raw = path.stem() == "config" ? path.parent_path().filename().string() : path.stem().string();
  }
  std::string out;
  for (char ch : raw) {
    const auto u = static_cast<unsigned char>(ch);
    out +=
        std::isalnum(u) ? static_cast<char>(std::tolower(u)) : (ch == '.' || ch == '_' ? ch : '-');
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(0, 1);
  return out.empty() ? std::string(model_type) : out;
}

/// Hugging Face config keys whose value changes parameter counts, KV bytes or FLOPs in
/// some family, with what they change. A key on this list that the family at hand does not
/// read stays an error under --lenient.
// clang-format off
constexpr std::pair<std::string_view, std::string_view> kFeatureKeys[] = {
    {"hidden_size", "model width"}, {"num_hidden_layers", "layer count"},
    {"num_attention_heads", "attention heads"}, {"vocab_size", "embedding and head"},
    {"num_key_value_heads", "KV heads (attention parameters, KV bytes)"},
    {"head_dim", "head width (attention parameters, KV bytes)"},
    {"intermediate_size", "MLP width"}, {"intermediate_size_mlp", "dense MLP width"},
    {"ffn_dim", "MLP width"}, {"tie_word_embeddings", "a separate LM head"},
    {"attention_bias", "attention biases (parameters)"}, {"qkv_bias", "q, k, v biases"},
    {"mlp_bias", "MLP biases"}, {"enable_bias", "biases"},
    {"use_qk_norm", "q/k norms"}, {"qk_layernorm", "q/k norms (parameters)"},
    {"num_experts", "routed experts (MoE parameters)"},
    {"num_local_experts", "routed experts (MoE parameters)"},
    {"n_routed_experts", "routed experts (MoE parameters)"},
    {"num_experts_per_tok", "experts per token (active parameters)"},
    {"experts_per_token", "experts per token (active parameters)"},
    {"moe_intermediate_size", "expert width"}, {"n_shared_experts", "shared experts"},
    {"shared_expert_intermediate_size", "shared expert width"},
    {"decoder_sparse_step", "which layers are MoE"}, {"moe_layer_freq", "which layers are MoE"},
    {"interleave_moe_layer_step", "which layers are MoE"}, {"moe_layers", "which layers are MoE"},
    {"first_k_dense_replace", "which layers are MoE"}, {"mlp_only_layers", "which layers are MoE"},
    {"sliding_window", "sliding-window attention (KV bytes, attention FLOPs)"},
    {"use_sliding_window", "sliding-window attention (KV bytes, attention FLOPs)"},
    {"max_window_layers", "which layers slide (KV bytes, attention FLOPs)"},
    {"layer_types", "which layers slide (KV bytes, attention FLOPs)"},
    {"sliding_window_pattern", "which layers slide (KV bytes, attention FLOPs)"},
    {"attention_chunk_size", "chunked attention (KV bytes, attention FLOPs)"},
    {"no_rope_layers", "which layers are chunked (KV bytes, attention FLOPs)"},
    {"attn_logit_softcapping", "attention logit softcapping (FLOPs)"},
    {"final_logit_softcapping", "final logit softcapping (FLOPs)"},
    {"q_lora_rank", "MLA query compression"}, {"kv_lora_rank", "MLA latent (KV bytes)"},
    {"qk_nope_head_dim", "MLA head widths"}, {"qk_rope_head_dim", "MLA rotary key (KV bytes)"},
    {"v_head_dim", "MLA value width"}, {"num_nextn_predict_layers", "MTP layers"},
    {"word_embed_proj_dim", "embedding projections"},
    {"quantization_config", "weight bytes"}, {"pruned_heads", "attention heads per layer"},
    {"is_encoder_decoder", "an encoder and cross-attention"},
    {"add_cross_attention", "cross-attention"}, {"text_config", "the text model"},
    {"vision_config", "a vision tower"}, {"audio_config", "an audio tower"},
};
// clang-format on

std::optional<std::string_view> feature_of(std::string_view key) {
  for (const auto& [k, what] : kFeatureKeys) {
    if (k == key) return what;
  }
  return std::nullopt;
}

/// Levenshtein distance, for telling a typo of a count-changing key from an unknown key.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// The count-changing key `key` plausibly misspells (edit distance at most a third of its
/// length, at least 1), or nullopt.
std::optional<std::string_view> misspelt_feature(std::string_view key) {
  for (const auto& [k, what] : kFeatureKeys) {
    if (edit_distance(key, k) <= std::max<size_t>(1, k.size() / 3)) return k;
  }
  return std::nullopt;
}

/// "LINE:COL" of a position, or "" when it has none.
std::string line_col(const SourcePos& p) {
  return p.line > 0 ? fmt::format("{}:{}", p.line, p.col) : std::string();
}

/// The wrappers around a text model: their text_config is imported.
constexpr std::pair<std::string_view, std::string_view> kWrappers[] = {{"gemma3", "gemma3_text"},
                                                                       {"llama4", "llama4_text"}};

}  // namespace

std::vector<std::string> hf_model_types() {
  std::vector<std::string> out(kFamilyNames.begin(), kFamilyNames.end());
  for (const auto& w : kWrappers) out.emplace_back(w.first);
  std::sort(out.begin(), out.end());
  return out;
}

Arch import_hf_config_text(const std::string& text, const std::string& name,
                           const HfImportOptions& opts) {
  JsonReader r(text, name);
  const SourcePos top = r.pos();
  const ConfigKeys ck = config_keys(r);
  // The text is valid JSON by now; nlohmann gives convenient access to the values.
  const Json whole = Json::parse(text);
  const std::vector<std::string> supported = hf_model_types();
  // Every key must be read or known to be inert; a duplicate would hide a value.
  auto positions = [](const KeyList& keys) {
    std::map<std::string, SourcePos> key_pos;
    for (const auto& [key, p] : keys) {
      if (!key_pos.emplace(key, p).second) throw InputError::at(p, "duplicate field '{}'", key);
    }
    return key_pos;
  };
  auto model_type = [&](const Json& j, const std::map<std::string, SourcePos>& key_pos,
                        const SourcePos& obj) {
    const auto mt = j.find("model_type");
    const SourcePos type_pos = key_pos.count("model_type") ? key_pos.at("model_type") : obj;
    if (mt == j.end() || !mt->is_string()) {
      throw InputError::at(type_pos, "config.json needs a string 'model_type' (one of: {})",
                           fmt::join(supported, ", "));
    }
    return std::pair{mt->get<std::string>(), type_pos};
  };
  const auto top_pos = positions(ck.top);
  auto [type, type_pos] = model_type(whole, top_pos, top);

  // A multimodal wrapper: its text_config is the model; the outer keys must be its own.
  const Json* j = &whole;
  std::map<std::string, SourcePos> key_pos = top_pos;
  const KeyList* keys = &ck.top;
  SourcePos obj = top;
  std::vector<std::pair<std::string, SourcePos>> unknown;
  const auto wrapper = std::find_if(std::begin(kWrappers), std::end(kWrappers),
                                    [&](const auto& w) { return w.first == type; });
  if (wrapper != std::end(kWrappers)) {
    const auto tc = whole.find("text_config");
    if (tc == whole.end() || !tc->is_object()) {
      throw InputError::at(top_pos.count("text_config") ? top_pos.at("text_config") : top,
                           "config.json for model_type '{}' needs a 'text_config' object (the "
                           "language model)",
                           type);
    }
    for (const auto& [key, p] : ck.top) {
      if (!listed(kCommonInert, key) && !listed(kWrapperKeys, key) && key != "model_type") {
        unknown.emplace_back(key, p);
      }
    }
    j = &*tc;
    key_pos = positions(ck.text);
    keys = &ck.text;
    obj = ck.text_pos;
    const auto inner = model_type(*j, key_pos, obj);
    if (inner.first != wrapper->second) {
      throw InputError::at(inner.second,
                           "text_config of a '{}' config must have model_type '{}', "
                           "got '{}'",
                           type, wrapper->second, inner.first);
    }
    type = inner.first;
    type_pos = inner.second;
  }

  const auto& fams = families();
  const auto fam =
      std::find_if(fams.begin(), fams.end(), [&](const Family& f) { return f.model_type == type; });
  if (fam == fams.end()) {
    throw InputError::at(type_pos, "unsupported model_type '{}': tierflow imports {}{}", type,
                         fmt::join(supported, ", "), did_you_mean(type, supported));
  }
  const Config c(*j, key_pos, obj, *fam);
  for (const auto& [key, p] : *keys) {
    if (!c.reads(key) && !c.ignores(key)) unknown.emplace_back(key, p);
  }
  // All unknown fields at once. Under --lenient those that no family reads as a
  // count-changing field are warnings; the others stay errors.
  const std::vector<std::string> known = c.known_keys();
  std::vector<std::pair<std::string, SourcePos>> fatal;
  for (const auto& u : unknown) {
    if (opts.lenient && !feature_of(u.first) && !misspelt_feature(u.first)) {
      if (opts.warnings != nullptr) {
        opts.warnings->push_back(fmt::format(
            "{}: warning: unknown field '{}' in config.json for model_type '{}' ignored "
            "(--lenient: it is not a field known to change counts){}",
            u.second.str(), u.first, type, did_you_mean(u.first, known)));
      }
      continue;
    }
    fatal.push_back(u);
  }
  // What a key would change, or the nearest known key.
  auto hint = [&](const std::string& key) {
    if (const auto feature = feature_of(key)) return fmt::format("would change: {}", *feature);
    if (const auto like = misspelt_feature(key)) {
      return fmt::format("did you mean '{}'? it would change: {}", *like, *feature_of(*like));
    }
    const std::string dym = did_you_mean(key, known);
    return dym.empty() ? std::string() : dym.substr(2);  // without the leading "; "
  };
  const std::string lenient_note =
      opts.lenient ? ""
                   : " (--lenient skips those that neither are nor look like a field that "
                     "changes counts)";
  if (fatal.size() == 1) {
    const auto& [key, p] = fatal.front();
    const std::string h = hint(key);
    throw InputError::at(p,
                         "unknown field '{}' in config.json for model_type '{}'; tierflow does "
                         "not know whether it changes the graph{}{}{}",
                         key, type, h.empty() ? "" : "; ", h, lenient_note);
  }
  if (!fatal.empty()) {
    std::vector<std::string> items;
    for (const auto& [key, p] : fatal) {
      const std::string where = line_col(p);
      const std::string h = hint(key);
      items.push_back(fmt::format("'{}'{}{}", key, where.empty() ? "" : " at " + where,
                                  h.empty() ? "" : " (" + h + ")"));
    }
    throw InputError::at(fatal.front().second,
                         "{} unknown fields in config.json for model_type '{}': {}; tierflow "
                         "does not know whether they change the graph{}",
                         fatal.size(), type, fmt::join(items, ", "), lenient_note);
  }

  Arch a;
  schema::apply_defaults(a, arch_schema());
  a.origins.pos = top;
  a.family = type;
  a.name = model_name(whole, name, type);
  a.description = fmt::format("imported from {}", name);
  a.source = "config";
  a.sources["config"] = fmt::format("Hugging Face config.json ({})", name);
  read_common(c, a, fam->tied_default, fam->vocab_default);
  fam->build(c, a);
  // MoE configs carry intermediate_size even when no layer is dense; it is then unused.
  bool any_dense = false;
  for (int i = 0; i < a.layers && !any_dense; ++i) any_dense = !a.is_moe_layer(i);
  if (!any_dense) {
    a.intermediate = 0;
    a.origins.fields.erase("intermediate");
  }
  resolve_arch(a);
  return a;
}

Arch import_hf_config(const std::string& path, const HfImportOptions& opts) {
  return import_hf_config_text(read_text_file(path), path, opts);
}

}  // namespace tierflow::traces
