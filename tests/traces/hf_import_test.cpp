// Importing Hugging Face config.json files: one small hand-written config per family
// (tests/fixtures/hf/), each with the parameter count worked out by hand, and the
// errors for unknown fields, unknown model types, bad JSON and unmodelled features.
#include "traces/hf_import.h"

#include <doctest/doctest.h>

#include "traces/arch_loader.h"

using namespace tierflow;
using namespace tierflow::traces;

namespace {

std::string fixture(std::string_view name) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/tests/fixtures/hf/" + std::string(name);
}

ParamCount count(std::string_view name) {
  return count_params(import_hf_config(fixture(name)));
}

}  // namespace

TEST_CASE("llama: attention_bias on q, k, v, o; mlp_bias; tied head") {
  // h 64, L 2, n_h 4, n_kv 2, d 16 (absent: 64 / 4), V 100, I 96.
  // attention 64·64 + 2·64·32 + 64·64 = 12,288 + biases (64 + 2·32) + 64 = 12,480
  // MLP 3·64·96 = 18,432 + biases 2·96 + 64 = 18,688; norms 2·64 = 128
  // layer 31,296; ×2 = 62,592; embedding 100·64 = 6,400; head tied; final norm 64
  // total 69,056
  const Arch a = import_hf_config(fixture("llama.json"));
  CHECK(a.family == "llama");
  CHECK(a.head_dim == 16);
  CHECK(a.tied_embeddings);
  CHECK(count_params(a).total == 69'056.0);
  CHECK(a.checkpoint_dtype == Dtype::kBf16);
}

TEST_CASE("mistral: explicit head_dim, sliding window recorded") {
  // h 64, n_h 4, n_kv 1, d 32: attention 64·128 + 2·64·32 + 128·64 = 20,480
  // MLP 3·64·128 = 24,576; norms 128; layer 45,184; ×2 = 90,368
  // embedding 6,400 + head 6,400 + final norm 64 -> 103,232
  const Arch a = import_hf_config(fixture("mistral.json"));
  CHECK(count_params(a).total == 103'232.0);
  CHECK(a.sliding_window == 32);
  CHECK(a.checkpoint_dtype == Dtype::kFp16);
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 2 * 2 * 1 * 32 * 2);
}

TEST_CASE("mixtral: intermediate_size is the expert width") {
  // h 32, n_h 4, n_kv 2, d 8: attention 1,024 + 2·32·16 + 1,024 = 3,072
  // expert 3·32·64 = 6,144; 4 experts 24,576; router 32·4 = 128; norms 64
  // layer 27,840; ×2 = 55,680; embedding 1,600 + head 1,600 + final 32 -> 58,912
  // active: layer − 2 idle experts 12,288 = 15,552; ×2 + 3,232 -> 34,336
  const ParamCount p = count("mixtral.json");
  CHECK(p.total == 58'912.0);
  CHECK(p.active == 34'336.0);
  CHECK(p.dense_mlp_per_layer == 0.0);
}

TEST_CASE("qwen2: q, k, v biases, no o bias") {
  // attention 12,288 + biases 64 + 2·32 = 12,416; MLP 18,432; norms 128
  // layer 30,976; ×2 = 61,952; embedding 6,400 (tied) + final 64 -> 68,416
  CHECK(count("qwen2.json").total == 68'416.0);
}

TEST_CASE("qwen2_moe: decoder_sparse_step 2, gated shared expert") {
  // h 32, n_h = n_kv = 4 (absent), d 8: attention 1,024 + 2·1,024 + 1,024 = 4,096
  //   + q, k, v biases 32 + 2·32 = 4,192; norms 64
  // layers 0, 2 dense: MLP 3·32·48 = 4,608 -> 8,864 each
  // layers 1, 3 MoE: 4 experts of 3·32·16 = 1,536 -> 6,144; router 128; shared 3·32·64
  //   = 6,144; shared gate 32 -> 12,448 -> 16,704 each
  // total 2·8,864 + 2·16,704 + embedding 1,600 + head 1,600 + final 32 = 54,368
  // active: each MoE layer − 2·1,536 -> 48,224
  const Arch a = import_hf_config(fixture("qwen2_moe.json"));
  CHECK_FALSE(a.is_moe_layer(0));
  CHECK(a.is_moe_layer(1));
  CHECK_FALSE(a.is_moe_layer(2));
  CHECK(a.is_moe_layer(3));
  const ParamCount p = count_params(a);
  CHECK(p.total == 54'368.0);
  CHECK(p.active == 48'224.0);
}

TEST_CASE("qwen3_moe: per-head q/k norms, head_dim wider than hidden / heads") {
  // h 32, n_h 4, n_kv 2, d 16: attention 32·64 + 2·32·32 + 64·32 = 6,144 + q/k norms 32
  // MoE: 8 experts of 1,536 = 12,288 + router 256; norms 64; layer 18,784
  // ×2 = 37,568 + 3,232 -> 40,800; active: layer − 6·1,536 = 9,568; ×2 + 3,232 -> 22,368
  const ParamCount p = count("qwen3_moe.json");
  CHECK(p.total == 40'800.0);
  CHECK(p.active == 22'368.0);
}

TEST_CASE("qwen3: dense, per-head q/k norms, explicit head_dim, no biases") {
  // h 32, L 2, n_h 4, n_kv 2, d 16, I 48, V 50, untied.
  // attention 32·64 + 2·32·32 + 64·32 = 6,144 + q/k norms 2·16 = 6,176
  // MLP 3·32·48 = 4,608; norms 64; layer 10,848; ×2 = 21,696
  // embedding 1,600 + head 1,600 + final norm 32 -> 24,928
  const Arch a = import_hf_config(fixture("qwen3.json"));
  CHECK(a.family == "qwen3");
  CHECK(a.qk_norm);
  CHECK_FALSE(a.qkv_bias);
  CHECK(a.head_dim == 16);
  CHECK(count_params(a).total == 24'928.0);
  // KV per token: 2 (K and V) · n_kv 2 · d 16 · 2 B · L 2 = 256 B.
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 256);
}

TEST_CASE("qwen3: Qwen3-8B against its model card (8.2B, 6.95B without embeddings)") {
  // transformers 4.47.1 (the newest on Debian's torch 1.13) has no Qwen3 class, so the count
  // is by hand: attention 4096·4096 + 2·4096·1024 + 4096·4096 + q/k norms 2·128
  // = 41,943,296; MLP 3·4096·12288 = 150,994,944; norms 8,192; layer 192,946,432; ×36
  // = 6,946,071,552 + final norm 4,096 = 6,946,075,648 (the card's 6.95B); embedding and
  // head 2·151,936·4,096 = 1,244,659,712; total 8,190,735,360 (the card's 8.2B).
  const std::string cfg = R"({"model_type": "qwen3", "hidden_size": 4096,
 "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
 "max_position_embeddings": 40960, "rope_theta": 1000000, "rms_norm_eps": 1e-06,
 "tie_word_embeddings": false, "use_sliding_window": false, "sliding_window": null,
 "max_window_layers": 36})";
  const ParamCount p = count_params(import_hf_config_text(cfg, "qwen3-8b.json"));
  CHECK(p.total == 8'190'735'360.0);
  CHECK(p.total - p.embedding - p.lm_head == 6'946'075'648.0);
  // KV per token: 2 · 8 · 128 · 2 B · 36 = 147,456 B (144 KiB).
  CHECK(kv_bytes_per_token(import_hf_config_text(cfg, "qwen3-8b.json"), Dtype::kBf16) == 147'456);
}

TEST_CASE("phi3: fused qkv and gate_up (Llama's parameters), sliding window on every layer") {
  // h 64, L 2, n_h 4, n_kv 4, d 16 (absent: 64 / 4), I 96, V 100, untied.
  // qkv 64·(64 + 2·64) = 12,288; o 64·64 = 4,096; MLP 3·64·96 = 18,432; norms 128
  // layer 34,944; ×2 = 69,888; embedding 6,400 + head 6,400 + final norm 64 -> 82,752
  const Arch a = import_hf_config(fixture("phi3.json"));
  CHECK(a.family == "phi3");
  CHECK(a.head_dim == 16);
  CHECK(a.sliding_window == 48);
  CHECK(count_params(a).total == 82'752.0);
  // KV per token: 2 · 4 · 16 · 2 B · 2 = 512 B; a sequence keeps at most the window's 48.
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 512);
}

TEST_CASE("deepseek_v2: MLA without query compression, two shared experts") {
  // h 32, n_h 2, nope 8, rope 4, v 8, kv_r 8, q_r none:
  //   q 32·2·12 = 768; kv_a 32·12 + norm 8 = 392; kv_b 8·2·16 = 256; o 2·8·32 = 512
  //   attention 1,928; norms 64
  // layer 0 dense: 3·32·64 = 6,144 -> 8,136
  // layers 1, 2: 4 experts 6,144 + router 128 + shared 2·1,536 = 9,344 -> 11,336 each
  // total 8,136 + 22,672 + 3,232 = 34,040; active: MoE layers − 2·1,536 each -> 27,896
  const Arch a = import_hf_config(fixture("deepseek_v2.json"));
  CHECK(a.attention == AttentionKind::kMla);
  CHECK_FALSE(a.router_bias);
  const ParamCount p = count_params(a);
  CHECK(p.total == 34'040.0);
  CHECK(p.active == 27'896.0);
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 3 * (8 + 4) * 2);
}

TEST_CASE("deepseek_v3: compressed queries, router bias, FP8 checkpoint, MTP ignored") {
  // q_a 32·16 + norm 16 = 528; q_b 16·2·12 = 384; kv_a 392; kv_b 256; o 512 -> 2,072
  // layer 0 dense: 2,072 + 64 + 6,144 = 8,280
  // layers 1, 2: 8 experts 12,288 + router 256 + bias 8 + shared 1,536 = 14,088
  //   -> 16,224 each
  // total 8,280 + 32,448 + 3,232 = 43,960; active: MoE layers − 6·1,536 -> 25,528
  const Arch a = import_hf_config(fixture("deepseek_v3.json"));
  CHECK(a.router_bias);
  CHECK(a.checkpoint_dtype == Dtype::kFp8);
  CHECK(a.layers == 3);  // num_nextn_predict_layers adds nothing
  const ParamCount p = count_params(a);
  CHECK(p.total == 43'960.0);
  CHECK(p.active == 25'528.0);
}

TEST_CASE("opt: LayerNorm, biases, learned positions with offset 2, tied head") {
  // h 32, I 64: attention 4·32² + 4·32 = 4,224; MLP 2·32·64 + 64 + 32 = 4,192
  // LayerNorms 2·(32 + 32) = 128; layer 8,544; ×2 = 17,088
  // embedding 50·32 = 1,600 + positions (16 + 2)·32 = 576; head tied; final LayerNorm 64
  // total 19,328
  const Arch a = import_hf_config(fixture("opt.json"));
  CHECK(a.name == "opt-tiny");
  CHECK(a.learned_positions == 18);
  CHECK(a.head_dim == 8);
  CHECK(count_params(a).total == 19'328.0);
}

TEST_CASE("opt: word_embed_proj_dim adds project_in and project_out") {
  std::string text = R"({"model_type": "opt", "hidden_size": 32, "ffn_dim": 64,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 50,
    "max_position_embeddings": 16, "word_embed_proj_dim": 16})";
  // As opt.json but the embedding is 50·16 = 800 and projections add 2·16·32 = 1,024:
  // 17,088 + 800 + 576 + 1,024 + 64 = 19,552
  const ParamCount p = count_params(import_hf_config_text(text, "config.json"));
  CHECK(p.total == 19'552.0);
  CHECK(p.projections == 1'024.0);
}

TEST_CASE("import errors: unknown field, unknown model_type, bad JSON") {
  // "num_key_value_head" (line 6) is a typo: unknown fields are never skipped.
  CHECK_THROWS_WITH_AS(
      import_hf_config(fixture("bad_unknown_field.json")),
      doctest::Contains("bad_unknown_field.json:6:3: unknown field 'num_key_value_head' in "
                        "config.json for model_type 'llama'; tierflow does not know whether it "
                        "changes the graph; did you mean 'num_key_value_heads'?"),
      InputError);
  CHECK_THROWS_WITH_AS(import_hf_config(fixture("bad_model_type.json")),
                       doctest::Contains("bad_model_type.json:3:3: unsupported model_type "
                                         "'lama': tierflow imports llama, mistral, mixtral, "
                                         "qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, "
                                         "deepseek_v3, opt, phi3; did you mean 'llama'?"),
                       InputError);
  // The comma after 64 (line 3) is missing: reported at the key that follows, line 4.
  CHECK_THROWS_WITH_AS(import_hf_config(fixture("bad_syntax.json")),
                       doctest::Contains("bad_syntax.json:4:3: expected ',' or '}', got a string"),
                       InputError);
  CHECK_THROWS_WITH_AS(import_hf_config_text("[1, 2]", "c.json"),
                       "c.json:1:1: expected an object for a config.json, got an array",
                       InputError);
  CHECK_THROWS_WITH_AS(import_hf_config_text(R"({"model_type": "llama", "hidden_size": 64,
 "hidden_size": 32})",
                                             "c.json"),
                       "c.json:2:2: duplicate field 'hidden_size'", InputError);
  CHECK_THROWS_WITH_AS(import_hf_config_text(R"({"model_type": "mistral"})", "c.json"),
                       doctest::Contains("has no 'hidden_size'"), InputError);
  CHECK_THROWS_WITH_AS(import_hf_config(fixture("nope.json")),
                       doctest::Contains("cannot open file"), InputError);
}

TEST_CASE("import errors: features that change the graph and are not modelled") {
  CHECK_THROWS_WITH_AS(import_hf_config(fixture("bad_qwen2_sliding.json")),
                       doctest::Contains("bad_qwen2_sliding.json:8:3: use_sliding_window: true "
                                         "(sliding-window attention on some layers) is not "
                                         "modelled"),
                       InputError);
  CHECK_THROWS_WITH_AS(import_hf_config(fixture("bad_opt_postnorm.json")),
                       doctest::Contains("bad_opt_postnorm.json:10:3: do_layer_norm_before: "
                                         "false"),
                       InputError);
  const std::string qwen3 = R"({"model_type": "qwen3_moe", "hidden_size": 32,
 "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 50, "intermediate_size": 48,
 "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
 "mlp_only_layers": [0]})";
  CHECK_THROWS_WITH_AS(import_hf_config_text(qwen3, "c.json"),
                       doctest::Contains("c.json:4:2: a non-empty mlp_only_layers [0] is not "
                                         "modelled"),
                       InputError);
  const std::string v3 = R"({"model_type": "deepseek_v3", "hidden_size": 32,
 "num_attention_heads": 2, "num_hidden_layers": 3, "vocab_size": 50, "intermediate_size": 64,
 "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
 "v_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
 "moe_intermediate_size": 16, "first_k_dense_replace": 1, "moe_layer_freq": 2})";
  CHECK_THROWS_WITH_AS(import_hf_config_text(v3, "c.json"),
                       doctest::Contains("moe_layer_freq other than 1 is not modelled"),
                       InputError);
  // A value the importer cannot place is reported at its key: 3 KV heads for 4 heads.
  const std::string llama = R"({"model_type": "llama", "hidden_size": 64,
 "num_attention_heads": 4, "num_key_value_heads": 3, "num_hidden_layers": 2,
 "vocab_size": 100, "intermediate_size": 96})";
  CHECK_THROWS_WITH_AS(import_hf_config_text(llama, "c.json"),
                       doctest::Contains("c.json:2:28: model 'c': kv_heads 3 must divide "
                                         "heads 4"),
                       InputError);
  CHECK_THROWS_WITH_AS(
      import_hf_config_text(R"({"model_type": "llama", "torch_dtype": "bfloat61",
 "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100})",
                            "c.json"),
      doctest::Contains("c.json:1:25: torch_dtype 'bfloat61' is not one of: bfloat16, float16, "
                        "float32; did you mean 'bfloat16'?"),
      InputError);
}
