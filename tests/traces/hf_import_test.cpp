// Importing Hugging Face config.json files: one small hand-written config per family
// (tests/fixtures/hf/), each with the parameter count worked out by hand, and the
// errors for unknown fields, unknown model types, bad JSON and unmodelled features.
#include "traces/hf_import.h"

#include <doctest/doctest.h>

#include "core/json_reader.h"
#include "traces/arch_loader.h"

using namespace tierflow;
using namespace tierflow::traces;

namespace {

std::string fixture(std::string_view name) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/tests/fixtures/hf/" + std::string(name);
}

/// A released config.json (tests/fixtures/hf/released/, values as published; the model id
/// is its _name_or_path).
Arch released(std::string_view name) {
  return import_hf_config(fixture("released/" + std::string(name) + ".json"));
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
                                         "'lama': tierflow imports deepseek_v2, deepseek_v3, "
                                         "gemma2, gemma3, gemma3_text, gpt_oss, llama, llama4, "
                                         "llama4_text, mistral, mixtral, opt, phi3, qwen2, "
                                         "qwen2_moe, qwen3, qwen3_moe; did you mean 'llama'?"),
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

TEST_CASE("import errors: no_rope_layers items are 0 or 1") {
  const auto llama4 = [](const std::string& layers) {
    return R"({"model_type": "llama4_text", "hidden_size": 32, "num_hidden_layers": 4,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 16,
 "intermediate_size_mlp": 64, "num_local_experts": 4, "num_experts_per_tok": 1,
 "interleave_moe_layer_step": 2, "attention_chunk_size": 8, "vocab_size": 50,
 "no_rope_layers": )" +
           layers + "}";
  };
  CHECK_NOTHROW(import_hf_config_text(llama4("[1, 1, 1, 0]"), "c.json"));
  for (const std::string bad :
       {"[2, 2, 2, 2]", "[-7, 1, 1, 0]", "[true, 1, 1, 0]", "[0.5, 1, 1, 0]"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(import_hf_config_text(llama4(bad), "c.json"),
                         doctest::Contains("'no_rope_layers' item 0 is"), InputError);
  }
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
                       doctest::Contains("c.json:2:28: model 'llama': kv_heads 3 must divide "
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

TEST_CASE("gemma2 (small): four norms per block, tied head, a softcap that is null") {
  // h 32, L 2, n_h 2, n_kv 1, d 16, I 64, V 50, tied.
  // attention 32·32 + 2·32·16 + 32·32 = 3,072; MLP 3·32·64 = 6,144; norms 4·32 = 128
  // layer 9,344; ×2 = 18,688; embedding 1,600 (tied) + final 32 -> 20,320
  const Arch a = import_hf_config(fixture("gemma2_small.json"));
  CHECK(count_params(a).total == 20'320.0);
  CHECK(a.attn_softcap);
  CHECK_FALSE(a.final_softcap);  // written as null
}

TEST_CASE("gpt_oss (small): biases, sinks, biased experts and router") {
  // h 32, L 2, n_h 4, n_kv 2, d 8, 4 experts of width 16, top-2, V 50, untied.
  // attention 3·1,024 (q, k+v, o) + biases 32 + 32 + 32 + sinks 4 = 3,172
  // expert 3·32·16 + 2·16 + 32 = 1,600; ×4 = 6,400; router 32·4 + 4 = 132; norms 64
  // layer 9,768; ×2 = 19,536; embedding 1,600 + head 1,600 + final 32 -> 22,768
  // active: each layer − 2 experts (3,200) -> 16,368
  const ParamCount p = count("gpt_oss_small.json");
  CHECK(p.total == 22'768.0);
  CHECK(p.active == 16'368.0);
}

TEST_CASE("llama4 (small): dense and MoE layers interleaved, shared expert") {
  // h 32, L 4, n_h 2, n_kv 1, d 16, V 50; step 2: layers 1, 3 MoE.
  // attention 3,072; dense layers: MLP 3·32·64 = 6,144 + norms 64 -> 9,280
  // MoE layers: 4 experts of 3·32·16 = 1,536 -> 6,144, router 128, shared 1,536 -> 7,808
  //   + norms 64 -> 10,944
  // total 2·9,280 + 2·10,944 + embedding 1,600 + head 1,600 + final 32 = 43,680
  // active: each MoE layer − 3 experts (4,608) -> 34,464
  const Arch a = import_hf_config(fixture("llama4_small.json"));
  CHECK_FALSE(a.is_moe_layer(0));
  CHECK(a.is_moe_layer(1));
  const ParamCount p = count_params(a);
  CHECK(p.total == 43'680.0);
  CHECK(p.active == 34'464.0);
  // Chunk 8 on layers 0-2, layer 3 global (no_rope_layer_interval 4, the default).
  CHECK(a.sliding_window == 8);
  CHECK(a.full_attention_every == 4);
}

// ---- released configs of the families in use now ----
//
// Counts are derived by hand from the architecture (formulas in traces/arch.cpp) and
// compared with the published figures; Gemma-2, Phi-3 and Mistral are also checked against
// the pinned transformers classes (tests/python/test_param_counts.py). KV bytes per token
// are 2·n_kv·d·2 bytes (bf16) per layer; "KV at c" sums min(c, window) tokens over the
// sliding layers and c over the others.

TEST_CASE("qwen3 (dense): Qwen3-8B, q/k norms, untied head") {
  // h 4096, L 36, n_h 32, n_kv 8, d 128, I 12288, V 151936.
  // attention 2·4096·4096 + 2·4096·1024 = 41,943,040 + q/k norms 2·128 -> 41,943,296
  // MLP 3·4096·12288 = 150,994,944; norms 8,192; layer 192,946,432; ×36 = 6,946,071,552
  // embedding = head = 151936·4096 = 622,329,856; final norm 4,096
  // total 8,190,735,360 (model card: 8.2B, 6.95B non-embedding: 6,946,075,648)
  const Arch a = released("qwen3-8b");
  CHECK(a.family == "qwen3");
  CHECK(a.name == "qwen3-8b");
  CHECK(a.sources.at("name") == "the config's _name_or_path");
  CHECK(a.qk_norm);
  CHECK_FALSE(a.tied_embeddings);
  CHECK(a.sliding_window == 0);
  const ParamCount p = count_params(a);
  CHECK(p.total == 8'190'735'360.0);
  CHECK(p.total - p.embedding - p.lm_head == 6'946'075'648.0);
  // 2·8·128·2 = 4,096 B per layer; ×36
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 147'456);
  CHECK(kv_bytes_at(a, Dtype::kBf16, 8192) == 147'456ULL * 8192);
}

TEST_CASE("gemma2: Gemma-2-9B, alternating sliding layers, softcapping, tied, four norms") {
  // h 3584, L 42, n_h 16, n_kv 8, d 256, I 14336, V 256000, tied.
  // attention 2·3584·4096 + 2·3584·2048 = 44,040,192; MLP 3·3584·14336 = 154,140,672
  // norms 4·3584 = 14,336; layer 198,195,200; ×42 = 8,324,198,400
  // embedding 256000·3584 = 917,504,000 (tied head); final norm 3,584
  // total 9,241,705,984 (transformers' Gemma2ForCausalLM gives the same)
  const Arch a = released("gemma-2-9b");
  CHECK(a.family == "gemma2");
  CHECK(a.tied_embeddings);
  CHECK(a.post_norms);
  CHECK(a.attn_softcap);
  CHECK(a.final_softcap);
  CHECK(a.checkpoint_dtype == Dtype::kFp32);
  CHECK(a.sliding_window == 4096);
  CHECK(a.full_attention_every == 2);
  CHECK(a.is_sliding_layer(0));
  CHECK_FALSE(a.is_sliding_layer(1));
  CHECK(a.is_sliding_layer(40));
  CHECK_FALSE(a.is_sliding_layer(41));
  CHECK(count_params(a).total == 9'241'705'984.0);
  // 2·8·256·2 = 8,192 B per layer and token; ×42
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 344'064);
  // At 8k: 21 global layers keep 8,192 tokens, 21 sliding ones 4,096:
  // 8,192·(21·8,192 + 21·4,096) = 2,113,929,216 B; all 42 at 8,192 tokens would be
  // 2,818,572,288 B, a third more.
  CHECK(kv_bytes_at(a, Dtype::kBf16, 8192) == 2'113'929'216ULL);
  CHECK(kv_bytes_at(a, Dtype::kBf16, 1000) == 344'064ULL * 1000);  // below the window
  // Softcapping: 3 FLOPs per attention logit (n_h·attended per layer) and per final logit.
  Arch plain = a;
  plain.attn_softcap = plain.final_softcap = false;
  const double extra = 3.0 * 16 * (21 * 8192 + 21 * 4096) + 3.0 * 256000;
  CHECK(decode_flops_per_token(a, 8192) - decode_flops_per_token(plain, 8192) == extra);
}

TEST_CASE("gemma3: Gemma-3-27B (multimodal wrapper), 5 local : 1 global, q/k norms") {
  // text_config: h 5376, L 62, n_h 32, n_kv 16, d 128, I 21504; vocab_size and
  // sliding_window_pattern absent: the Gemma3TextConfig defaults 262,208 and 6.
  // attention 3·5376·4096 + 4096·5376... = q 22,020,096 + k, v 22,020,096 + o 22,020,096
  //   + q/k norms 256 = 66,060,544; MLP 3·5376·21504 = 346,816,512; norms 4·5376 = 21,504
  // layer 412,898,560; ×62 = 25,599,710,720; + final norm 5,376 = 25,599,716,096
  //   non-embedding (Gemma 3 report, table 1: 25,600M)
  // embedding 262208·5376 = 1,409,630,208 (tied); total 27,009,346,304 (the vision tower,
  // 417M in the report, is not counted)
  const Arch a = released("gemma-3-27b-it");
  CHECK(a.family == "gemma3_text");
  CHECK(a.vocab == 262'208);
  CHECK(a.qk_norm);
  CHECK(a.tied_embeddings);
  CHECK_FALSE(a.attn_softcap);
  CHECK_FALSE(a.final_softcap);
  CHECK(a.full_attention_every == 6);
  CHECK(a.is_sliding_layer(4));
  CHECK_FALSE(a.is_sliding_layer(5));
  const ParamCount p = count_params(a);
  CHECK(p.total == 27'009'346'304.0);
  CHECK(p.total - p.embedding == 25'599'716'096.0);
  // 2·16·128·2 = 8,192 B per layer; ×62
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 507'904);
  // At 8k: layers 5, 11, ..., 59 (10) keep 8,192 tokens, the 52 others 1,024:
  // 8,192·(10·8,192 + 52·1,024) = 1,107,296,256 B
  CHECK(kv_bytes_at(a, Dtype::kBf16, 8192) == 1'107'296'256ULL);
}

TEST_CASE("phi3: Phi-3-mini-4k, a 2047-token window on every layer") {
  // h 3072, L 32, n_h = n_kv = 32, d 96, I 8192, V 32064, untied.
  // attention 4·3072² = 37,748,736; MLP 3·3072·8192 = 75,497,472; norms 6,144
  // layer 113,252,352; ×32 = 3,624,075,264; embedding = head = 98,500,608; final 3,072
  // total 3,821,079,552 (model card: 3.8B; transformers' Phi3ForCausalLM the same)
  const Arch a = released("phi-3-mini-4k-instruct");
  CHECK(a.family == "phi3");
  CHECK(count_params(a).total == 3'821'079'552.0);
  CHECK(a.sliding_window == 2047);
  CHECK(a.full_attention_every == 0);
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 393'216);  // 2·32·96·2·32
  CHECK(kv_bytes_at(a, Dtype::kBf16, 4096) == 393'216ULL * 2047);
}

TEST_CASE("mistral: Mistral-7B-v0.1, a 4096-token window on every layer") {
  // attention 2·4096·4096 + 2·4096·1024 = 41,943,040; MLP 3·4096·14336 = 176,160,768;
  // norms 8,192; layer 218,112,000; ×32 = 6,979,584,000; embedding = head = 131,072,000;
  // final 4,096 -> 7,241,732,096 (transformers' MistralForCausalLM the same)
  const Arch a = released("mistral-7b-v0.1");
  CHECK(count_params(a).total == 7'241'732'096.0);
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 131'072);
  CHECK(kv_bytes_at(a, Dtype::kBf16, 8192) == 131'072ULL * 4096);
  CHECK(kv_bytes_at(a, Dtype::kBf16, 8192) == kv_bytes_at(a, Dtype::kBf16, 4096));
}

TEST_CASE(
    "llama4: Llama-4-Scout-17B-16E (multimodal wrapper), MoE with shared expert, "
    "chunked attention") {
  // text_config: h 5120, L 48, n_h 40, n_kv 8, d 128, V 202048, 16 experts of width 8192,
  // top-1, one shared expert of width 8192, interleave_moe_layer_step 1 (every layer MoE,
  // so intermediate_size_mlp 16384 is unused).
  // attention 2·5120·5120 + 2·5120·1024 = 62,914,560 (the q/k L2 norm has no weights)
  // expert 3·5120·8192 = 125,829,120; 16 + shared = 2,139,095,040; router 5120·16 = 81,920
  // norms 10,240; layer 2,202,101,760; ×48 = 105,700,884,480
  // embedding = head = 202048·5120 = 1,034,485,760; final 5,120
  // total 107,769,861,120 (model card: 109B with the vision tower, not counted here)
  // active: each layer − 15 experts (1,887,436,800) -> 17,172,894,720 (card: 17B)
  const Arch a = released("llama-4-scout-17b-16e");
  CHECK(a.family == "llama4_text");
  CHECK(a.experts == 16);
  CHECK(a.shared_experts == 1);
  CHECK(a.intermediate == 0);
  const ParamCount p = count_params(a);
  CHECK(p.total == 107'769'861'120.0);
  CHECK(p.active == 17'172'894'720.0);
  // Chunked attention (chunk 8192) on 3 of 4 layers, modelled as a window: layers 3, 7,
  // ..., 47 (12) are global.
  CHECK(a.sliding_window == 8192);
  CHECK(a.full_attention_every == 4);
  CHECK_FALSE(a.is_sliding_layer(3));
  CHECK(a.is_sliding_layer(4));
  CHECK(kv_bytes_per_token(a, Dtype::kBf16) == 196'608);  // 2·8·128·2·48
  // At 32k: 4,096·(12·32,768 + 36·8,192) = 2,818,572,288 B
  CHECK(kv_bytes_at(a, Dtype::kBf16, 32768) == 2'818'572'288ULL);
}

TEST_CASE("llama4: interleaved dense and MoE layers (Maverick's step 2)") {
  // Scout's text config with interleave_moe_layer_step 2, 4 layers: layers 1, 3 MoE,
  // layers 0, 2 dense with intermediate_size_mlp 16384.
  std::string text = read_text_file(fixture("released/llama-4-scout-17b-16e.json"));
  const auto at = text.find("\"interleave_moe_layer_step\": 1");
  REQUIRE(at != std::string::npos);
  text.replace(at, 30, "\"interleave_moe_layer_step\": 2");
  const auto layers = text.find("\"num_hidden_layers\": 48");
  REQUIRE(layers != std::string::npos);
  text.replace(layers, 23, "\"num_hidden_layers\": 4");
  const Arch a = import_hf_config_text(text, "maverick-like.json");
  CHECK_FALSE(a.is_moe_layer(0));
  CHECK(a.is_moe_layer(1));
  CHECK(a.intermediate == 16384);
  // dense layer: 62,914,560 + 3·5120·16384 = 251,658,240 + 10,240 = 314,583,040
  // MoE layer 2,202,101,760; 2·(314,583,040 + 2,202,101,760) + 2,068,971,520 + 5,120
  CHECK(count_params(a).total == 7'102'346'240.0);
}

TEST_CASE("gpt_oss: gpt-oss-120b and -20b, biased experts, sinks, alternating windows") {
  // h 2880, n_h 64, n_kv 8, d 64, V 201088, experts of width 2880, top-4, untied.
  // attention 2880·4096 + 2·2880·512 + 4096·2880 = 26,542,080 + biases 4096 + 1024 + 2880
  //   + sinks 64 = 26,550,144 per layer
  // expert 3·2880·2880 + 2·2880 + 2880 (biases) = 24,891,840; router 2880·E + E
  // 120b (L 36, E 128): MoE 3,186,524,288; layer 3,213,080,192 (norms 5,760); ×36
  //   = 115,670,886,912; + embedding and head 2·579,133,440 + final 2,880
  //   = 116,829,156,672 (model card: 116.83B; attention 0.96B, MLP 114.71B)
  // active without the embedding, as the card counts it: 5,132,849,472 (card: 5.13B)
  const Arch big = released("gpt-oss-120b");
  CHECK(big.family == "gpt_oss");
  CHECK(big.attention_sinks);
  CHECK(big.mlp_bias);
  CHECK(big.router_bias);
  CHECK(big.checkpoint_dtype == Dtype::kFp4);
  const ParamCount p = count_params(big);
  CHECK(p.total == 116'829'156'672.0);
  CHECK(p.active - p.embedding == 5'132'849'472.0);
  CHECK(p.attention_per_layer * 36 == 955'805'184.0);
  CHECK(p.moe_per_layer * 36 == 114'714'874'368.0);
  // 20b (L 24, E 32): 20,914,757,184 total (card 20.91B), 3,608,307,264 active (3.61B)
  const ParamCount q = count_params(released("gpt-oss-20b"));
  CHECK(q.total == 20'914'757'184.0);
  CHECK(q.active - q.embedding == 3'608'307'264.0);
  // Layers alternate: even ones slide over 128 tokens.
  CHECK(big.sliding_window == 128);
  CHECK(big.full_attention_every == 2);
  CHECK(kv_bytes_per_token(big, Dtype::kBf16) == 73'728);  // 2·8·64·2·36
  // At 8k: 2,048·(18·8,192 + 18·128) = 306,708,480 B
  CHECK(kv_bytes_at(big, Dtype::kBf16, 8192) == 306'708'480ULL);
}

TEST_CASE("unknown fields: all listed at once; --lenient warns for those that change no count") {
  const std::string text = R"({"model_type": "qwen3", "hidden_size": 64,
 "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
 "intermediate_size": 96, "frobnicate": 1, "attn_logit_softcapping": 50.0,
 "num_key_value_head": 2})";
  CHECK_THROWS_WITH_AS(
      import_hf_config_text(text, "c.json"),
      "c.json:3:27: 3 unknown fields in config.json for model_type 'qwen3': 'frobnicate' at "
      "3:27, 'attn_logit_softcapping' at 3:44 (would change: attention logit softcapping "
      "(FLOPs)), 'num_key_value_head' at 4:2 (did you mean 'num_key_value_heads'? it would "
      "change: KV heads (attention parameters, KV bytes)); tierflow does not know whether they "
      "change the graph (--lenient skips those that neither are nor look like a field that "
      "changes counts)",
      InputError);
  // Lenient: the softcap (it would change FLOPs) and the misspelt KV heads stay errors.
  std::vector<std::string> warnings;
  CHECK_THROWS_WITH_AS(import_hf_config_text(text, "c.json", {true, &warnings}),
                       doctest::Contains("c.json:3:44: 2 unknown fields in config.json for "
                                         "model_type 'qwen3': 'attn_logit_softcapping' at 3:44"),
                       InputError);
  std::string ok = text;
  ok.replace(ok.find("\"attn_logit_softcapping\": 50.0,"), 31, "");
  ok.replace(ok.find("\"num_key_value_head\": 2"), 23, "\"use_cache\": true");
  warnings.clear();
  const Arch a = import_hf_config_text(ok, "c.json", {true, &warnings});
  CHECK(a.family == "qwen3");
  CHECK(count_params(a).total == count_params(import_hf_config_text(
                                                  R"({"model_type": "qwen3", "hidden_size": 64,
 "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
 "intermediate_size": 96})",
                                                  "d.json"))
                                     .total);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] ==
        "c.json:3:27: warning: unknown field 'frobnicate' in config.json for model_type "
        "'qwen3' ignored (--lenient: it is not a field known to change counts)");
  // Without --lenient the same text is an error naming the field.
  CHECK_THROWS_WITH_AS(import_hf_config_text(ok, "c.json"),
                       doctest::Contains("c.json:3:27: unknown field 'frobnicate'"), InputError);
}

TEST_CASE("import errors: wrappers and per-layer patterns") {
  CHECK_THROWS_WITH_AS(import_hf_config_text(R"({"model_type": "gemma3"})", "c.json"),
                       doctest::Contains("needs a 'text_config' object"), InputError);
  CHECK_THROWS_WITH_AS(
      import_hf_config_text(R"({"model_type": "llama4", "text_config": {"model_type": "llama"}})",
                            "c.json"),
      "c.json:1:42: text_config of a 'llama4' config must have model_type 'llama4_text', got "
      "'llama'",
      InputError);
  CHECK_THROWS_WITH_AS(import_hf_config_text(R"({"model_type": "gemma3", "vision_tower_x": 1,
 "text_config": {"model_type": "gemma3_text"}})",
                                             "c.json"),
                       doctest::Contains("c.json:1:26: unknown field 'vision_tower_x'"),
                       InputError);
  // A pattern that is not "every n-th layer global".
  const std::string gpt = R"({"model_type": "gpt_oss", "hidden_size": 64,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
 "vocab_size": 100, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "sliding_window": 8,
 "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]})";
  CHECK_THROWS_WITH_AS(import_hf_config_text(gpt, "c.json"),
                       doctest::Contains("c.json:5:2: 'layer_types': layer 2 breaks the pattern "
                                         "of a full-attention layer every 2"),
                       InputError);
  std::string typo = gpt;
  typo.replace(typo.find("\"full_attention\", \"full"), 16, "\"ful_attention\"");
  CHECK_THROWS_WITH_AS(import_hf_config_text(typo, "c.json"),
                       doctest::Contains("layer_types entry 'ful_attention' is not one of: "
                                         "full_attention, sliding_attention, chunked_attention; "
                                         "did you mean 'full_attention'?"),
                       InputError);
}

TEST_CASE("max_position_embeddings is the model's declared maximum context") {
  CHECK(released("mistral-7b-v0.1").max_context == 32768);
  CHECK(released("phi-3-mini-4k-instruct").max_context == 4096);
  CHECK(released("gemma-2-9b").max_context == 8192);
  // Absent: not declared.
  const std::string text = R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 50})";
  CHECK(import_hf_config_text(text, "config.json").max_context == 0);
}

TEST_CASE("a config without _name_or_path is named by its model_type, whatever its file") {
  const Arch a = import_hf_config(fixture("gemma2_small.json"));
  CHECK(a.name == "gemma2");
  CHECK(a.sources.at("name") == "the config's model_type (it has no _name_or_path)");
  const std::string text = R"({"model_type": "llama", "_name_or_path": "", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 100})";
  CHECK(import_hf_config_text(text, "/tmp/some-file.json").name == "llama");
}
