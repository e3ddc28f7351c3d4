// The shipped model files against the model reference (../shared/reference/models.md
// §2.2), the decode FLOPs and distinct-expert formulas (§2.3), and the model loader.
#include "traces/arch.h"

#include <doctest/doctest.h>

#include <cmath>

#include "traces/arch_loader.h"

using namespace tierflow;
using namespace tierflow::traces;

namespace {

std::string configs() {
  return std::string(TIERFLOW_SOURCE_DIR) + "/configs";
}

Arch shipped(const std::string& name) {
  return load_arch(arch_path(name, configs()), {}, /*require_sources=*/true);
}

struct Expected {
  const char* name;
  double ref_total;   ///< published / reference total, parameters
  double ref_active;  ///< reference active count
  int64_t total;      ///< exact, from the per-family formula (arch.cpp), worked in each file
  int64_t active;
  uint64_t kv_bf16;  ///< KV bytes per token over all layers, bf16: exact
};

// Exact totals derived by hand from §2.1 (the yaml headers show the sums).
// Llama-3-70B, per layer: attention 2·8192² + 2·8192·1024 = 150,994,944, MLP
// 3·8192·28672 = 704,643,072, norms 2·8192: 855,654,400 (reference 855.7 M); ×80 plus
// embedding and head 2·128256·8192 plus the final norm 8192 = 70,553,706,496.
const Expected kModels[] = {
    {"llama-2-7b", 6.74e9, 6.74e9, 6'738'415'616, 6'738'415'616, 32 * 16'384},
    {"llama-3-8b", 8.03e9, 8.03e9, 8'030'261'248, 8'030'261'248, 32 * 4'096},
    {"llama-3-70b", 70.55e9, 70.55e9, 70'553'706'496, 70'553'706'496, 80 * 4'096},
    {"llama-3.1-70b", 70.55e9, 70.55e9, 70'553'706'496, 70'553'706'496, 80 * 4'096},
    {"llama-3.1-405b", 405.85e9, 405.85e9, 405'853'388'800, 405'853'388'800, 516'096},
    {"mixtral-8x7b", 46.70e9, 12.88e9, 46'702'792'704, 12'879'925'248, 32 * 4'096},
    {"deepseek-v3", 671.03e9, 37.55e9, 671'026'419'200, 37'552'297'472, 61 * 1'152},
    {"opt-175b", 174.6e9, 174.6e9, 174'604'468'224, 174'604'468'224, 96 * 49'152},
    {"opt-30b", 29.97e9, 29.97e9, 29'974'540'288, 29'974'540'288, 48 * 28'672},
};

}  // namespace

TEST_CASE("every shipped model loads with every number cited") {
  const auto names = shipped_arch_names(configs());
  CHECK(names.size() == std::size(kModels));
  for (const auto& n : names) {
    CAPTURE(n);
    const Arch a = shipped(n);
    CHECK(a.name == n);
    CHECK(!a.sources.empty());
  }
}

TEST_CASE("parameter totals match the reference within 0.5% and the formula exactly") {
  for (const auto& m : kModels) {
    CAPTURE(m.name);
    const Arch a = shipped(m.name);
    const ParamCount p = count_params(a);
    CHECK(std::abs(p.total / m.ref_total - 1.0) < 0.005);
    CHECK(std::abs(p.active / m.ref_active - 1.0) < 0.005);
    CHECK(static_cast<int64_t>(p.total) == m.total);
    CHECK(static_cast<int64_t>(p.active) == m.active);
    CHECK(kv_bytes_per_token(a, Dtype::kBf16) == m.kv_bf16);
  }
}

TEST_CASE("KV bytes per token are exact (reference §2.2 and the ISCA'25 cross-check)") {
  CHECK(kv_bytes_per_token(shipped("llama-3-70b"), Dtype::kBf16) == 327'680);
  CHECK(kv_bytes_per_token(shipped("deepseek-v3"), Dtype::kBf16) == 70'272);
  CHECK(kv_bytes_per_token(shipped("llama-3.1-405b"), Dtype::kBf16) == 516'096);
  // Other element types scale by their width: fp8 halves, int4 quarters.
  CHECK(kv_bytes_per_token(shipped("llama-3-70b"), Dtype::kFp8) == 163'840);
  CHECK(kv_bytes_per_token(shipped("llama-3-70b"), Dtype::kInt4) == 81'920);
}

TEST_CASE("per-block counts match the reference's per-layer column") {
  const ParamCount ds = count_params(shipped("deepseek-v3"));
  // MLA: q_a 7168·1536 + norm 1536 + q_b 1536·128·192 + kv_a 7168·576 + norm 512
  //      + kv_b 512·128·256 + o 128·128·7168 = 187,107,328 (reference 187.1 M).
  CHECK(ds.attention_per_layer == 187'107'328.0);
  CHECK(ds.expert == 44'040'192.0);                // 3·7168·2048 (reference 44.0 M)
  CHECK(ds.dense_mlp_per_layer == 396'361'728.0);  // 3·7168·18432 (reference 396.4 M)
  // 257 experts + router 256·7168 + bias 256, plus attention and two norms: 11,507 M.
  CHECK(ds.moe_per_layer + ds.attention_per_layer + ds.norms_per_layer == 11'507'286'272.0);
  const ParamCount mx = count_params(shipped("mixtral-8x7b"));
  CHECK(mx.expert == 176'160'768.0);  // 3·4096·14336 (reference 176.2 M)
  CHECK(mx.moe_per_layer + mx.attention_per_layer + mx.norms_per_layer == 1'451'270'144.0);
  const ParamCount opt = count_params(shipped("opt-175b"));
  // 4h² + 4h + 2h·4h + 4h + h + two LayerNorms 4h = 1,812,099,072 (reference 1,812 M).
  CHECK(opt.attention_per_layer + opt.dense_mlp_per_layer + opt.norms_per_layer == 1'812'099'072.0);
  CHECK(opt.lm_head == 0.0);                             // tied
  CHECK(opt.embedding == (50272.0 + 2050.0) * 12288.0);  // tokens + learned positions
}

TEST_CASE("DeepSeek-V3: the first three layers are dense, the rest MoE") {
  const Arch a = shipped("deepseek-v3");
  CHECK_FALSE(a.is_moe_layer(0));
  CHECK_FALSE(a.is_moe_layer(2));
  CHECK(a.is_moe_layer(3));
  CHECK(a.is_moe_layer(60));
  CHECK(a.head_dim == 192);  // MLA: head_dim is the q·k width, 128 + 64
}

TEST_CASE("decode FLOPs per token follow the reference's explicit formula") {
  // Llama-3-8B at context 1000:
  //   N_active_nonembed = 8,030,261,248 − 2·128256·4096 = 6,979,588,096
  //   2·N = 13,959,176,192; LM head 2·4096·128256 = 1,050,673,152;
  //   attention 4·L·c·n_h·d_h = 4·32·1000·32·128 = 524,288,000
  //   total = 15,534,137,344
  CHECK(decode_flops_per_token(shipped("llama-3-8b"), 1000) == 15'534'137'344.0);
  // DeepSeek-V3 at context 1000 (absorbed MLA):
  //   2·(37,552,297,472 − 2·129280·7168) = 71,397,878,784; head 2·7168·129280 =
  //   1,853,358,080; attention 61·(2·128·1000·576 + 2·128·1000·512) = 16,990,208,000
  //   total = 90,241,444,864
  CHECK(decode_flops_per_token(shipped("deepseek-v3"), 1000) == 90'241'444'864.0);
}

TEST_CASE("a sliding window caps the attention span of decode") {
  Arch a = shipped("llama-3-8b");
  const double at4k = decode_flops_per_token(a, 4096);
  a.sliding_window = 4096;
  CHECK(decode_flops_per_token(a, 8192) == at4k);
  CHECK(decode_flops_per_token(a, 100) < at4k);
}

TEST_CASE("expected distinct experts: E·(1 − (1 − k/E)^B), reference §2.3 table") {
  CHECK(expected_distinct_experts(256, 8, 1) == doctest::Approx(8.0));
  CHECK(expected_distinct_experts(256, 8, 8) == doctest::Approx(57.4).epsilon(0.001));
  CHECK(expected_distinct_experts(256, 8, 32) == doctest::Approx(163.3).epsilon(0.002));
  CHECK(std::round(expected_distinct_experts(256, 8, 128)) == 252.0);
  CHECK(expected_distinct_experts(8, 2, 1) == doctest::Approx(2.0));
  // Mixtral B = 8: 8·(1 − 0.75⁸) = 7.199
  CHECK(expected_distinct_experts(8, 2, 8) == doctest::Approx(7.2).epsilon(0.001));
  CHECK(std::round(expected_distinct_experts(8, 2, 32)) == 8.0);
  CHECK(expected_distinct_experts(8, 2, 0) == 0.0);
  CHECK(expected_distinct_experts(8, 8, 3) == 8.0);
}

// ---- loader ----

namespace {
const std::string kTiny = R"(tierflow: model/1
name: tiny
family: llama
sources: {S1: "by hand"}
source: S1
hidden: 64
layers: 2
heads: 4
kv_heads: 2
vocab: 100
intermediate: 96
)";
}  // namespace

TEST_CASE("a small hand-written model: defaults and --set") {
  const Arch a = load_arch_text(kTiny, "tiny.yaml");
  CHECK(a.head_dim == 16);  // hidden / heads
  // Per layer: q 64·64 + k, v 2·64·32 + o 64·64 = 12,288; MLP 3·64·96 = 18,432; norms
  // 128 -> 30,848; ×2 + embedding 6,400 + head 6,400 + final norm 64 = 74,560.
  CHECK(count_params(a).total == 74'560.0);
  const Arch b = load_arch_text(kTiny, "tiny.yaml", {"layers=1", "tied_embeddings=true"});
  CHECK(count_params(b).total == 74'560.0 - 30'848.0 - 6'400.0);
  CHECK(b.origins.find("layers")->source == "--set");
}

TEST_CASE("a model file may define anchors under x- keys and use them through aliases") {
  std::string aliased = kTiny;
  aliased.replace(aliased.find("hidden: 64"), 10, "x-dims: {d: &d 64}\nhidden: *d");
  const Arch a = load_arch_text(aliased, "a.yaml");
  CHECK(a.hidden == 64);
  CHECK(count_params(a).total == count_params(load_arch_text(kTiny, "tiny.yaml")).total);
  // A value that is wrong where it is used is reported there, with where it is written.
  CHECK_THROWS_WITH_AS(load_arch_text(aliased + "attention: *d\n", "a.yaml"),
                       "a.yaml:13:1: bad value for 'attention': '64' is not one of: gqa, mla "
                       "(through an alias: written at a.yaml:6:13)",
                       InputError);
}

TEST_CASE("loader errors name the position and suggest the nearest key") {
  CHECK_THROWS_WITH_AS(load_arch_text(kTiny + "layer: 3\n", "m.yaml"),
                       "m.yaml:12:1: unknown key 'layer' in the model; did you mean 'layers'?",
                       InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(kTiny, "m.yaml", {"hiden=128"}),
                       "--set:1:1: unknown key 'hiden' in the model; did you mean 'hidden'?",
                       InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(kTiny, "m.yaml", {"layers=2", "layers=x"}),
                       doctest::Contains("--set:2:8: bad value for 'layers'"), InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(kTiny + "qkv_bias: ture\n", "m.yaml"),
                       doctest::Contains("m.yaml:12:11: bad value for 'qkv_bias': 'ture' is not "
                                         "one of: false, true; did you mean 'true'?"),
                       InputError);
  // 3 KV heads cannot serve 4 query heads evenly.
  CHECK_THROWS_WITH_AS(
      load_arch_text(kTiny, "m.yaml", {"kv_heads=3"}),
      doctest::Contains("--set:1:10: model 'tiny': kv_heads 3 must divide heads 4"), InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(kTiny + "experts_per_token: 2\n", "m.yaml"),
                       doctest::Contains("m.yaml:12:20: model 'tiny': 'experts_per_token' needs "
                                         "'experts' > 0"),
                       InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(kTiny.substr(kTiny.find('\n') + 1), "m.yaml"),
                       doctest::Contains("missing required key 'tierflow'"), InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(kTiny + "attention: mla\n", "m.yaml"),
                       doctest::Contains("'attention: mla' needs 'kv_lora_rank' > 0"), InputError);
}

TEST_CASE("citations: unknown keys are errors; require_sources wants one per number") {
  std::string uncited = kTiny;
  uncited.erase(uncited.find("source: S1\n"), 11);
  CHECK_NOTHROW(load_arch_text(uncited, "m.yaml"));
  CHECK_THROWS_WITH_AS(load_arch_text(uncited, "m.yaml", {}, /*require_sources=*/true),
                       doctest::Contains("m.yaml:5:9: 'hidden' has no source"), InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(uncited + "head_dim: {value: 16, source: s1}\n", "m.yaml"),
                       doctest::Contains("unknown source 's1': not defined under 'sources'; did "
                                         "you mean 'S1'?"),
                       InputError);
}

TEST_CASE("find_arch: shipped names, paths, and suggestions") {
  CHECK(find_arch("llama-3-8b", configs()) == configs() + "/models/llama-3-8b.yaml");
  CHECK(find_arch("x/y.yaml", configs()) == "x/y.yaml");
  CHECK_THROWS_WITH_AS(find_arch("llama-3-8", configs()),
                       doctest::Contains("unknown model 'llama-3-8'"), InputError);
  CHECK_THROWS_WITH_AS(find_arch("mixtral-8x7", configs()),
                       doctest::Contains("did you mean 'mixtral-8x7b'?"), InputError);
}

TEST_CASE("a model file expresses the per-layer attention of Gemma-2 and gpt-oss") {
  // Gemma-2-9B written as a model file: the same facts as its imported config.json.
  const std::string gemma = R"(tierflow: model/1
name: gemma-2-9b
family: gemma2
hidden: 3584
layers: 42
heads: 16
kv_heads: 8
head_dim: 256
vocab: 256000
intermediate: 14336
tied_embeddings: true
post_norms: true
attn_softcap: true
final_softcap: true
sliding_window: 4096
full_attention_every: 2
)";
  const Arch a = load_arch_text(gemma, "gemma.yaml");
  CHECK(count_params(a).total == 9'241'705'984.0);
  CHECK(a.is_sliding_layer(0));
  CHECK_FALSE(a.is_sliding_layer(1));
  // 21 layers at 8,192 tokens and 21 at 4,096, 8,192 B per layer and token.
  CHECK(kv_bytes_at(a, Dtype::kBf16, 8192) == 8192ULL * (21 * 8192 + 21 * 4096));
  // Without full_attention_every every layer slides (Mistral).
  const Arch all = load_arch_text(gemma, "gemma.yaml", {"full_attention_every=0"});
  CHECK(kv_bytes_at(all, Dtype::kBf16, 8192) == 8192ULL * 42 * 4096);
  // fp4 KV packs two elements per byte: a quarter of the bf16 bytes.
  CHECK(kv_bytes_at(a, Dtype::kFp4, 8192) == kv_bytes_at(a, Dtype::kBf16, 8192) / 4);
  CHECK_THROWS_WITH_AS(load_arch_text(gemma, "gemma.yaml", {"sliding_window=0"}),
                       doctest::Contains("'full_attention_every' needs 'sliding_window' > 0"),
                       InputError);
  CHECK_THROWS_WITH_AS(load_arch_text(gemma, "gemma.yaml", {"full_attention_every=1"}),
                       doctest::Contains("full_attention_every 1 makes every layer full"),
                       InputError);
  // gpt-oss-20b: biased experts (mlp_bias), biased router, attention sinks.
  const std::string oss = R"(tierflow: model/1
name: gpt-oss-20b
family: gpt_oss
hidden: 2880
layers: 24
heads: 64
kv_heads: 8
head_dim: 64
vocab: 201088
qkv_bias: true
o_bias: true
mlp_bias: true
attention_sinks: true
experts: 32
experts_per_token: 4
moe_intermediate: 2880
router_bias: true
sliding_window: 128
full_attention_every: 2
)";
  const ParamCount p = count_params(load_arch_text(oss, "oss.yaml"));
  CHECK(p.total == 20'914'757'184.0);
  CHECK(p.active - p.embedding == 3'608'307'264.0);
}

TEST_CASE("kv_bytes_at without a window is the per-token figure times the context") {
  const Arch a = shipped("llama-3-70b");
  CHECK(kv_bytes_at(a, Dtype::kBf16, 8192) == 327'680ULL * 8192);
  CHECK(kv_bytes_at(a, Dtype::kBf16, 0) == 0);
}
