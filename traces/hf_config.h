// The pieces of the Hugging Face importer (traces/hf_import.cpp) that the families
// (traces/hf_families.cpp) share: the keys every family reads or ignores, a family's key
// lists and build function, and Config, the checked access to a config's values. Not a
// public interface.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.h"
#include "traces/arch.h"

namespace tierflow::traces::hf {

using Json = nlohmann::json;
using Keys = std::span<const std::string_view>;

/// Read for every family.
inline constexpr std::string_view kCommonGraph[] = {
    "model_type",          "hidden_size",         "num_hidden_layers",   "num_attention_heads",
    "vocab_size",          "tie_word_embeddings", "torch_dtype",         "dtype",
    "quantization_config", "is_encoder_decoder",  "add_cross_attention", "pruned_heads",
    "max_position_embeddings"};

/// PretrainedConfig bookkeeping, token ids, training-only and generation settings:
/// none of them shapes a weight or an op of a forward step.
// clang-format off
inline constexpr std::string_view kCommonInert[] = {
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

inline bool listed(const Keys& ks, std::string_view key) {
  return std::find(ks.begin(), ks.end(), key) != ks.end();
}
inline bool listed(const std::vector<Keys>& lists, std::string_view key) {
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

/// The keys every family reads (kCommonGraph): sizes, vocabulary, tied head, dtype.
/// `tied_default` and `vocab_default` are the family's class defaults (Family).
void read_common(const Config& c, Arch& a, bool tied_default, int vocab_default);

/// Every family the importer builds, by the model_type of its (text) config.
const std::vector<Family>& families();

}  // namespace tierflow::traces::hf
