#include "traces/hf_import.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <tuple>
#include <optional>

#include "core/diagnostics.h"
#include "core/json_reader.h"
#include "core/yaml_input.h"
#include "traces/arch_loader.h"
#include "traces/arch_params.h"
#include "traces/hf_config.h"

namespace tierflow::traces {
namespace {

using hf::Config;
using hf::families;
using hf::Family;
using hf::Json;
using hf::kCommonInert;
using hf::listed;
using hf::read_common;

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

// clang-format off
/// The multimodal wrappers (gemma3, llama4): the text model is read from text_config; the
/// vision tower and projector are not counted (tierflow models the decoder).
constexpr std::string_view kWrapperKeys[] = {
    "text_config", "vision_config", "image_token_index", "image_token_id", "boi_token_index",
    "eoi_token_index", "boa_token_index", "eoa_token_index", "mm_tokens_per_image",
    "tie_word_embeddings", "torch_dtype", "dtype", "projector_hidden_act",
    "multi_modal_projector_bias", "vision_feature_layer", "vision_feature_select_strategy"};
// clang-format on

/// The model's name from the config's own fields, and which one it came from: the last
/// part of `_name_or_path` (the hub id it was saved from), else `model_type`; lower case,
/// other characters '-'. The file's name says nothing the config does not.
std::pair<std::string, std::string> model_name(const Json& j, std::string_view model_type) {
  std::string raw;
  std::string origin = "the config's _name_or_path";
  const auto it = j.find("_name_or_path");
  const bool given = it != j.end() && it->is_string();
  if (given) raw = std::filesystem::path(it->get<std::string>()).filename().string();
  if (raw.empty()) {
    raw = std::string(model_type);
    origin = given ? "the config's model_type (its _name_or_path names no model)"
                   : "the config's model_type (it has no _name_or_path)";
  }
  std::string out;
  for (char ch : raw) {
    const auto u = static_cast<unsigned char>(ch);
    out +=
        std::isalnum(u) ? static_cast<char>(std::tolower(u)) : (ch == '.' || ch == '_' ? ch : '-');
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(0, 1);
  if (out.empty()) return {std::string(model_type), "the config's model_type"};
  return {out, origin};
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

/// The count-changing key `key` plausibly misspells (edit distance at most a third of its
/// length, at least 1), or nullopt.
std::optional<std::string_view> misspelt_feature(std::string_view key) {
  for (const auto& [k, what] : kFeatureKeys) {
    if (within_edit_distance(key, k, std::max(1, static_cast<int>(k.size()) / 3))) return k;
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
  // The text is valid JSON by now; nlohmann gives convenient access to the values. Should
  // the two readers ever disagree, nlohmann's complaint is an input error, not a crash.
  Json whole;
  try {
    whole = Json::parse(text);
  } catch (const Json::parse_error& e) {
    const SourcePos at = r.pos_at(std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size()));
    throw InputError::at(at, "malformed JSON: {}", e.what());
  }
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
  // Named, not a structured binding: lambdas below capture them (clang 14 cannot).
  auto type_and_pos = model_type(whole, top_pos, top);
  auto& type = type_and_pos.first;
  auto& type_pos = type_and_pos.second;

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
            "({}: it is not a field known to change counts){}",
            u.second.str(), u.first, type, opts.lenient_flag, did_you_mean(u.first, known)));
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
                   : fmt::format(
                         " ({} skips those that neither are nor look like a field "
                         "that changes counts)",
                         opts.lenient_flag);
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
  std::tie(a.name, a.sources["name"]) = model_name(whole, type);
  a.description = fmt::format("imported from {}", name);
  a.source = "config";
  a.sources["config"] = fmt::format("Hugging Face config.json ({})", name);
  read_common(c, a, fam->tied_default, fam->vocab_default);
  fam->build(c, a);
  check_arch_sizes(a);
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
