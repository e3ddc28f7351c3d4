#include "traces/arch_params.h"

#include <fmt/format.h>

namespace tierflow::traces {

using schema::declare;
using schema::declare_enum;
using schema::Field;
using schema::Input;
using schema::Schema;
using schema::Spec;
using schema::ValueType;

namespace {

/// A yes/no field written `true` or `false` in YAML, stored in a bool. It is an enum
/// of two words to the schema, so describe lists the choices and a typo such as `ture`
/// gets a suggestion.
Field<Arch> declare_flag(std::string key, bool Arch::*member, std::string desc) {
  Field<Arch> f;
  f.key = std::move(key);
  f.type = ValueType::kEnum;
  f.default_text = "false";
  f.description = std::move(desc);
  f.choices = {"false", "true"};
  f.set = [member, choices = f.choices, k = f.key](Arch& a, const Input& in) {
    a.*member = schema::parse_choice(in, k, choices) == 1;
  };
  f.get = [member](const Arch& a) { return std::string(a.*member ? "true" : "false"); };
  return f;
}

/// The family: one of kFamilyNames, stored as its text.
Field<Arch> declare_family() {
  Field<Arch> f;
  f.key = "family";
  f.type = ValueType::kEnum;
  f.required = true;
  f.description = "Hugging Face model_type whose module structure the parameter count follows";
  for (auto n : kFamilyNames) f.choices.emplace_back(n);
  f.set = [choices = f.choices](Arch& a, const Input& in) {
    a.family = choices[schema::parse_choice(in, "family", choices)];
  };
  f.get = [](const Arch& a) { return a.family; };
  return f;
}

/// A count that may be zero ("absent").
Spec count0(std::string desc) {
  return Spec{.def = "0", .desc = std::move(desc), .min_int = 0};
}

}  // namespace

const Schema<Arch>& arch_schema() {
  static const Schema<Arch> kSchema = [] {
    Schema<Arch> r{"model", "", "A decoder-only transformer architecture.", {}};
    auto& f = r.fields;
    f.push_back(declare("name", &Arch::name,
                        Spec{.type = ValueType::kName, .required = true, .desc = "model id"}));
    f.push_back(declare("description", &Arch::description,
                        Spec{.type = ValueType::kString, .desc = "free text"}));
    f.push_back(declare_family());
    f.push_back(declare("source", &Arch::source,
                        Spec{.type = ValueType::kString,
                             .desc = "citation key (from `sources`) for numbers that carry none "
                                     "of their own"}));
    // Shape.
    f.push_back(declare("hidden", &Arch::hidden, Spec{.required = true, .desc = "h: model width"}));
    f.push_back(
        declare("layers", &Arch::layers,
                Spec{.required = true, .desc = "L: decoder blocks (MTP modules excluded)"}));
    f.push_back(declare("heads", &Arch::heads, Spec{.required = true, .desc = "n_h: query heads"}));
    f.push_back(declare("kv_heads", &Arch::kv_heads,
                        Spec{.desc = "n_kv: key/value heads (GQA); defaults to `heads` (MHA)"}));
    f.push_back(declare("head_dim", &Arch::head_dim,
                        Spec{.desc = "d_h: width of one head (GQA); defaults to hidden / heads"}));
    f.push_back(declare("vocab", &Arch::vocab, Spec{.required = true, .desc = "V: vocabulary"}));
    f.push_back(declare("intermediate", &Arch::intermediate,
                        count0("I: dense FFN width; 0 when every layer is MoE")));
    f.push_back(declare_enum(
        "attention", &Arch::attention, kAttentionKindNames,
        Spec{.def = "gqa", .desc = "gqa (grouped-query or multi-head) or mla (latent)"}));
    f.push_back(declare_enum(
        "mlp", &Arch::mlp, kMlpKindNames,
        Spec{.def = "gated", .desc = "gated: gate, up, down (SwiGLU); plain: fc1, fc2"}));
    f.push_back(declare_enum(
        "norm", &Arch::norm, kNormKindNames,
        Spec{.def = "rmsnorm", .desc = "rmsnorm (weight) or layernorm (weight and bias)"}));
    f.push_back(declare_flag("qkv_bias", &Arch::qkv_bias, "q, k and v projections have biases"));
    f.push_back(declare_flag("o_bias", &Arch::o_bias, "the output projection has a bias"));
    f.push_back(declare_flag("mlp_bias", &Arch::mlp_bias, "MLP matrices have biases"));
    f.push_back(declare_flag("qk_norm", &Arch::qk_norm, "per-head RMSNorm on q and k (Qwen3)"));
    f.push_back(declare_flag("tied_embeddings", &Arch::tied_embeddings,
                             "the LM head shares the input embedding matrix"));
    f.push_back(declare("learned_positions", &Arch::learned_positions,
                        count0("rows of a learned position table (OPT: max positions + 2); "
                               "0 = rotary")));
    f.push_back(declare("project_in_out", &Arch::project_in_out,
                        count0("embedding width when it differs from hidden (OPT "
                               "word_embed_proj_dim); adds project_in and project_out")));
    f.push_back(declare("max_context", &Arch::max_context,
                        count0("the longest context the model declares, in tokens (Hugging "
                               "Face max_position_embeddings); longer ones are warned about; "
                               "0 = not declared")));
    f.push_back(declare("sliding_window", &Arch::sliding_window,
                        count0("a sliding layer attends to (and keeps KV for) at most this "
                               "many past tokens; 0 = full attention on every layer")));
    f.push_back(declare("full_attention_every", &Arch::full_attention_every,
                        count0("with sliding_window: layer i attends to the full context when "
                               "(i + 1) % n == 0, the others slide (Gemma-2 2, Gemma-3 6); "
                               "0 = every layer slides")));
    f.push_back(declare_flag("post_norms", &Arch::post_norms,
                             "RMSNorms after attention and after the MLP too (Gemma-2/3: four "
                             "per block)"));
    f.push_back(declare_flag("attention_sinks", &Arch::attention_sinks,
                             "one learned sink logit per query head and layer (gpt-oss)"));
    f.push_back(declare_flag("attn_softcap", &Arch::attn_softcap,
                             "tanh softcapping of the attention logits (Gemma-2)"));
    f.push_back(declare_flag("final_softcap", &Arch::final_softcap,
                             "tanh softcapping of the final logits (Gemma-2)"));
    // Mixture of experts.
    f.push_back(declare("experts", &Arch::experts, count0("E: routed experts per MoE layer")));
    f.push_back(declare("experts_per_token", &Arch::experts_per_token,
                        count0("k: routed experts each token uses")));
    f.push_back(declare("shared_experts", &Arch::shared_experts,
                        count0("S: always-on experts per MoE layer")));
    f.push_back(declare("moe_intermediate", &Arch::moe_intermediate,
                        count0("I_e: width of one routed expert")));
    f.push_back(declare("shared_intermediate", &Arch::shared_intermediate,
                        count0("width of one shared expert; 0 = moe_intermediate")));
    f.push_back(declare("first_dense_layers", &Arch::first_dense_layers,
                        count0("leading layers with a dense FFN")));
    f.push_back(declare("moe_layer_freq", &Arch::moe_layer_freq,
                        Spec{.def = "1",
                             .desc = "after the dense ones, layer i is MoE when i % "
                                     "moe_layer_freq == moe_layer_offset"}));
    f.push_back(declare("moe_layer_offset", &Arch::moe_layer_offset,
                        count0("see moe_layer_freq (Qwen-MoE decoder_sparse_step s: freq s, "
                               "offset s-1)")));
    f.push_back(declare_flag("router_bias", &Arch::router_bias,
                             "per-expert score-correction bias in the router (DeepSeek-V3)"));
    f.push_back(declare_flag("shared_expert_gate", &Arch::shared_expert_gate,
                             "sigmoid gate (h -> 1) on the shared expert (Qwen2-MoE)"));
    // Multi-head latent attention.
    f.push_back(declare("q_lora_rank", &Arch::q_lora_rank,
                        count0("MLA query compression rank; 0 = uncompressed queries")));
    f.push_back(declare("kv_lora_rank", &Arch::kv_lora_rank,
                        count0("MLA latent width (cached per token)")));
    f.push_back(declare("qk_nope_head_dim", &Arch::qk_nope_head_dim,
                        count0("MLA per-head q/k width without rotary")));
    f.push_back(declare("qk_rope_head_dim", &Arch::qk_rope_head_dim,
                        count0("MLA rotary width (its key is shared and cached)")));
    f.push_back(declare("v_head_dim", &Arch::v_head_dim, count0("MLA per-head value width")));
    f.push_back(declare_enum("checkpoint_dtype", &Arch::checkpoint_dtype, kDtypeNames,
                             Spec{.def = "bf16", .desc = "element type of the published weights"}));
    return r;
  }();
  return kSchema;
}

const std::vector<schema::TopKey>& model_top_level_keys() {
  static const std::vector<schema::TopKey> kKeys = {
      {"tierflow", "format tag: `model/1`"},
      {"sources", "citation key -> citation text"},
  };
  return kKeys;
}

}  // namespace tierflow::traces
