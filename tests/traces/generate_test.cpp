// Generated workloads agree with the closed-form accounting of traces/arch.h and with
// ../shared/reference/models.md.
#include "traces/generate.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/json_reader.h"
#include "core/workload_json.h"
#include "traces/arch_loader.h"
#include "traces/hf_import.h"

using namespace tierflow;
using namespace tierflow::traces;

namespace {

const std::string kConfigs = std::string(TIERFLOW_SOURCE_DIR) + "/configs";

Arch model(const std::string& name) {
  return load_arch(find_arch(name, kConfigs));
}

double weight_params(const Workload& w) {
  double n = 0;
  for (const Tensor& t : w.tensors) {
    if (t.kind == TensorKind::kWeight) {
      n += static_cast<double>(t.bytes) * 8.0 / kDtypeBits[static_cast<size_t>(t.dtype)];
    }
  }
  return n;
}

double flops(const Workload& w) {
  double f = 0;
  for (const Op& op : w.ops) f += op.flops;
  return f;
}

GenOptions decode(int64_t context, int64_t tokens) {
  GenOptions o;
  o.phase = Phase::kDecode;
  o.context = context;
  o.tokens = tokens;
  return o;
}

}  // namespace

TEST_CASE("weight tensors hold exactly the architecture's parameters, KV bytes match") {
  for (const std::string& name : shipped_arch_names(kConfigs)) {
    CAPTURE(name);
    const Arch a = model(name);
    const Workload w = generate(a, decode(300, 1));
    REQUIRE_FALSE(verify_workload(w).has_value());
    CHECK(weight_params(w) == count_params(a).total);
    // KV: every layer's blocks hold batch x kv_block tokens.
    uint64_t per_token = 0;
    std::map<int, uint64_t> layer_block;
    for (const Tensor& t : w.tensors) {
      if (t.kind == TensorKind::kKv) layer_block[t.layer] = t.bytes;
    }
    for (const auto& [l, b] : layer_block) per_token += b / 256;
    CHECK(per_token == kv_bytes_per_token(a, Dtype::kBf16));
    CHECK(static_cast<int>(layer_block.size()) == a.layers);
  }
}

TEST_CASE("every Hugging Face family's generated weights match its parameter count") {
  for (const char* family :
       {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3_moe", "deepseek_v2",
        "deepseek_v3", "opt", "gemma2_small", "gpt_oss_small", "llama4_small"}) {
    CAPTURE(std::string(family));
    const Arch a = import_hf_config(std::string(TIERFLOW_SOURCE_DIR) + "/tests/fixtures/hf/" +
                                    family + ".json");
    for (Phase phase : {Phase::kDecode, Phase::kPrefill, Phase::kTrain}) {
      GenOptions o = decode(20, 2);
      o.phase = phase;
      o.seq = 16;
      o.kv_block = 8;
      const Workload w = generate(a, o);
      REQUIRE_FALSE(verify_workload(w).has_value());
      CHECK(weight_params(w) == count_params(a).total);
    }
  }
}

TEST_CASE("released configs of the newer families: weights, KV and decode FLOPs agree") {
  for (const char* name : {"qwen3-8b", "gemma-2-9b", "gemma-3-27b-it", "phi-3-mini-4k-instruct",
                           "mistral-7b-v0.1", "llama-4-scout-17b-16e", "gpt-oss-20b"}) {
    CAPTURE(std::string(name));
    const Arch a = import_hf_config(std::string(TIERFLOW_SOURCE_DIR) +
                                    "/tests/fixtures/hf/released/" + name + ".json");
    // One token at context 8192 (it attends 8193 positions, itself included; a sliding
    // layer at most its window).
    const Workload w = generate(a, decode(8192, 1));
    REQUIRE_FALSE(verify_workload(w).has_value());
    CHECK(weight_params(w) == count_params(a).total);
    const double want = decode_flops_per_token(a, 8193);
    CHECK(std::abs(flops(w) - want) / want < 0.02);
    // The KV blocks the step holds: each layer's kept tokens rounded up to whole blocks of
    // 256 tokens.
    uint64_t kv = 0;
    uint64_t want_kv = 0;
    for (const Tensor& t : w.tensors) {
      if (t.kind == TensorKind::kKv) kv += t.bytes;
    }
    const uint64_t per_layer_token =
        kv_bytes_per_token(a, Dtype::kBf16) / static_cast<uint64_t>(a.layers);
    for (int l = 0; l < a.layers; ++l) {
      want_kv += (static_cast<uint64_t>(a.attended(l, 8193)) + 255) / 256 * 256 * per_layer_token;
    }
    CHECK(kv == want_kv);
  }
}

TEST_CASE("a sliding layer keeps its window in a ring of KV blocks") {
  // Two layers: layer 0 slides over 8 tokens, layer 1 is global.
  Arch a;
  a.name = "ring";
  a.family = "gemma2";
  a.hidden = 32;
  a.layers = 2;
  a.heads = 2;
  a.kv_heads = 1;
  a.head_dim = 16;
  a.vocab = 50;
  a.intermediate = 64;
  a.sliding_window = 8;
  a.full_attention_every = 2;
  a.post_norms = true;
  a.attn_softcap = true;
  GenOptions o = decode(20, 3);
  o.kv_block = 4;
  const Workload w = generate(a, o);
  REQUIRE_FALSE(verify_workload(w).has_value());
  std::map<int, int> blocks;
  for (const Tensor& t : w.tensors) {
    if (t.kind == TensorKind::kKv) ++blocks[t.layer];
  }
  // Layer 0: 8 tokens in 2 blocks, overwritten in turn; layer 1: 20 + 3 tokens, 6 blocks.
  CHECK(blocks[0] == 2);
  CHECK(blocks[1] == 6);
  // Step 0 writes position 20 into slot 20 % 8 = 4, the first token of block 1; step 2
  // writes position 22 into slot 6, block 1 again.
  std::map<std::string, const Op*> ops;
  for (const Op& op : w.ops) ops[op.name] = &op;
  const Op& q0 = *ops.at("t0.L0.qkv");
  REQUIRE(q0.updates.size() == 1);
  CHECK(w.tensors[q0.updates[0]].name == "L0.kv1");
  // The sliding layer attends 8 positions: 8 pairs of 2 heads × (16 + 16) × 2 FLOPs plus
  // the softcap, 3 FLOPs per logit.
  CHECK(ops.at("t2.L0.attention")->flops == 8 * 2 * 2 * 32 + 3.0 * 8 * 2);
  // The global layer attends 23 positions at step 2.
  CHECK(ops.at("t2.L1.attention")->flops == 23 * 2 * 2 * 32 + 3.0 * 23 * 2);
  // Gemma's extra norms are ops of their own.
  CHECK(ops.count("t0.L1.post_attn_norm") == 1);
  CHECK(ops.count("t0.L1.post_mlp_norm") == 1);
}

TEST_CASE("decode FLOPs per token are within 2% of the reference's explicit formula") {
  for (const char* name :
       {"llama-2-7b", "llama-3-8b", "llama-3-70b", "opt-30b", "mixtral-8x7b", "deepseek-v3"}) {
    CAPTURE(name);
    const Arch a = model(name);
    // One token at context 4096 (it attends 4097 positions, itself included).
    const double got = flops(generate(a, decode(4096, 1)));
    const double want = decode_flops_per_token(a, 4097);
    CHECK(std::abs(got - want) / want < 0.02);
  }
}

TEST_CASE("MoE decode touches the expected number of distinct experts per layer") {
  const Arch a = model("deepseek-v3");
  for (int64_t batch : {1, 8, 32}) {
    GenOptions o = decode(64, 1);
    o.batch = batch;
    o.layers = 4;  // 3 dense layers and the first MoE layer
    const Workload w = generate(a, o);
    int experts = 0;
    for (const Op& op : w.ops) {
      if (op.kind == OpKind::kExpert && op.name.find("shared") == std::string::npos) ++experts;
    }
    CAPTURE(batch);
    CHECK(experts == std::llround(expected_distinct_experts(256, 8, batch)));
  }
  // The reference's table: B = 8 touches 57.4 of DeepSeek-V3's 256 experts, 7.2 of Mixtral's 8.
  CHECK(expected_distinct_experts(256, 8, 8) == doctest::Approx(57.4).epsilon(0.002));
  CHECK(expected_distinct_experts(8, 2, 8) == doctest::Approx(7.2).epsilon(0.01));
}

TEST_CASE("seeded routing is reproducible and sends k experts per token") {
  const Arch a = model("mixtral-8x7b");
  GenOptions o = decode(64, 2);
  o.routing = Routing::kSeeded;
  o.seed = 7;
  o.batch = 4;
  o.layers = 2;
  const std::string one = write_workload(generate(a, o));
  CHECK(one == write_workload(generate(a, o)));
  o.seed = 8;
  CHECK(one != write_workload(generate(a, o)));
  // Expert FLOPs: batch x k x 3 matrices x 2 FLOPs per weight, plus the activation.
  double expert_flops = 0;
  for (const Op& op : generate(a, o).ops) {
    if (op.kind == OpKind::kExpert) expert_flops += op.flops;
  }
  const double per_assignment = 2.0 * 3.0 * 4096 * 14336 + 5.0 * 14336;
  CHECK(expert_flops == doctest::Approx(2 /*steps*/ * 2 /*layers*/ * 4 * 2 * per_assignment));
}

namespace {

/// Per layer, each expert's load summed over the generated ops ("t3.L1.expert5" -> L1, 5).
std::map<std::pair<int, int>, int64_t> expert_ops(const Workload& w) {
  std::map<std::pair<int, int>, int64_t> n;
  for (const Op& op : w.ops) {
    if (op.kind != OpKind::kExpert) continue;
    const auto l = op.name.find(".L");
    const auto e = op.name.rfind("expert");
    if (l == std::string::npos || e == std::string::npos) continue;
    ++n[{std::stoi(op.name.substr(l + 2)), std::stoi(op.name.substr(e + 6))}];
  }
  return n;
}

}  // namespace

TEST_CASE("skewed seeded routing: Zipf popularity per layer, tokens repeating their predecessor") {
  Arch a = model("mixtral-8x7b");
  GenOptions o = decode(64, 400);
  o.routing = Routing::kSeeded;
  o.layers = 2;
  SUBCASE("repeat 1: every token takes the first token's experts") {
    o.routing_repeat = 1;
    o.batch = 1;
    const auto n = expert_ops(generate(a, o));
    for (int l = 0; l < 2; ++l) {
      int used = 0;
      for (int e = 0; e < a.experts; ++e) used += n.count({l, e}) ? 1 : 0;
      CHECK(used == a.experts_per_token);  // batch 1: one sequence, one expert set
    }
  }
  SUBCASE("skew s, one expert per token: each expert's share is its Zipf weight") {
    a.experts_per_token = 1;
    o.routing_skew = 1.0;
    o.batch = 1;
    const auto n = expert_ops(generate(a, o));
    // Rank r of 8 is drawn with 1/r over H(8); the ranks' experts are a seeded permutation.
    double h = 0;
    for (int r = 1; r <= 8; ++r) h += 1.0 / r;
    for (int l = 0; l < 2; ++l) {
      std::vector<double> share;
      for (int e = 0; e < 8; ++e) share.push_back(n.count({l, e}) ? double(n.at({l, e})) : 0.0);
      std::sort(share.begin(), share.end(), std::greater<>());
      for (int r = 1; r <= 8; ++r) {
        const double p = 1.0 / r / h;
        const double sigma = std::sqrt(400 * p * (1 - p));
        CAPTURE(r);
        CHECK(std::abs(share[size_t(r - 1)] - 400 * p) < 4 * sigma + 1);
      }
    }
  }
  SUBCASE("bad values and the expected router are refused, naming the flag") {
    const auto error_of = [&](const GenOptions& x) -> std::string {
      try {
        (void)generate(a, x);
      } catch (const InputError& e) {
        return e.pos().file + ": " + e.message();
      }
      return "no error";
    };
    GenOptions x = o;
    x.routing_repeat = 1.5;
    CHECK(error_of(x) == "--routing-repeat: --routing-repeat is a probability, from 0 to 1, got 1.5");
    x = o;
    x.routing_skew = std::nan("");
    CHECK(error_of(x).starts_with("--routing-skew: --routing-skew must be from 0 to 8"));
    x = o;
    x.routing = Routing::kExpected;
    x.routing_skew = 1;
    CHECK(error_of(x).starts_with("--routing-skew: skew and repeats shape the seeded router"));
  }
}

TEST_CASE("generate -> write -> read -> write is byte-identical") {
  const Arch a = model("llama-3-8b");
  for (Phase phase : {Phase::kPrefill, Phase::kDecode, Phase::kTrain}) {
    GenOptions o = decode(100, 3);
    o.phase = phase;
    o.seq = 64;
    o.layers = 2;
    const std::string text = write_workload(generate(a, o));
    CHECK(write_workload(read_workload_text(text, "w.json")) == text);
  }
}

TEST_CASE("training: backward is twice the forward, one AdamW op per weight tensor") {
  const Arch a = model("llama-3-8b");
  GenOptions o;
  o.phase = Phase::kTrain;
  o.seq = 128;
  o.layers = 2;
  const Workload w = generate(a, o);
  REQUIRE_FALSE(verify_workload(w).has_value());
  double fwd = 0, bwd = 0;
  int adam = 0, weights = 0;
  for (const Op& op : w.ops) {
    const bool back =
        op.name.ends_with(".dgrad") || op.name.ends_with(".wgrad") || op.name.ends_with(".bwd");
    if (op.kind == OpKind::kOptimizer) {
      ++adam;
    } else if (back) {
      bwd += op.flops;
    } else if (op.name != "loss") {
      fwd += op.flops;
    }
  }
  for (const Tensor& t : w.tensors) weights += t.kind == TensorKind::kWeight ? 1 : 0;
  CHECK(bwd / fwd == doctest::Approx(2.0).epsilon(0.02));
  CHECK(adam == weights);
  // Checkpointing recomputes each layer's forward before its backward.
  o.checkpoint = true;
  const Workload c = generate(a, o);
  REQUIRE_FALSE(verify_workload(c).has_value());
  int recompute = 0;
  for (const Op& op : c.ops) recompute += op.name.starts_with("recompute.") ? 1 : 0;
  CHECK(recompute > 0);
  CHECK(flops(c) > flops(w));
}

TEST_CASE("tensor parallelism shards the projections and adds all-reduces") {
  const Arch a = model("llama-3-70b");
  GenOptions o = decode(256, 1);
  o.layers = 1;
  const Workload one = generate(a, o);
  o.tp = 8;
  const Workload eight = generate(a, o);
  // Norms are replicated; everything else is split 8 ways.
  CHECK(weight_params(eight) == doctest::Approx(weight_params(one) / 8).epsilon(0.001));
  int collectives = 0;
  uint64_t sent = 0;
  for (const Op& op : eight.ops) {
    if (op.kind == OpKind::kCollective) {
      ++collectives;
      sent += op.collective_bytes;
    }
  }
  CHECK(collectives == 2);
  // Ring all-reduce of one token's hidden state (8192 x 2 B): 2 x 7/8 of it, twice.
  CHECK(sent == 2 * static_cast<uint64_t>(2.0 * 7 / 8 * 8192 * 2));
  o.tp = 3;
  CHECK_THROWS_AS(generate(a, o), InputError);
}

TEST_CASE("parameter counts equal Hugging Face's, instantiated on the meta device") {
  // tests/python/hf_param_counts.json is written by tests/python/gen_param_counts.py from the
  // pinned transformers classes; families whose class that release lacks are listed as skipped.
  const std::string path = std::string(TIERFLOW_SOURCE_DIR) + "/tests/python/hf_param_counts.json";
  const auto doc = nlohmann::json::parse(read_text_file(path));
  int checked = 0;
  for (const auto& m : doc.at("models")) {
    const std::string name = m.at("name");
    CAPTURE(name);
    const auto want = m.at("params").get<double>();
    if (m.contains("shipped") && !m.at("shipped").is_null()) {
      const Arch a = model(name);
      CHECK(count_params(a).total == want);
      GenOptions o = decode(16, 1);
      CHECK(weight_params(generate(a, o)) == want);
    }
    const Arch imported = import_hf_config_text(m.at("config").dump(), name + ".config.json");
    CHECK(count_params(imported).total == want);
    ++checked;
  }
  CHECK(checked >= 7);
}

namespace {

/// `w` does the work of `whole`: the same FLOPs and the same KV cache bytes.
void check_same_work(const Workload& w, const Workload& whole) {
  const auto flops = [](const Workload& x) {
    double n = 0;
    for (const Op& op : x.ops) n += op.flops;
    return n;
  };
  const auto kv = [](const Workload& x) {
    uint64_t n = 0;
    for (const Tensor& t : x.tensors) n += t.kind == TensorKind::kKv ? t.bytes : 0;
    return n;
  };
  CHECK(flops(w) == doctest::Approx(flops(whole)).epsilon(1e-12));
  CHECK(kv(w) == kv(whole));
}

}  // namespace

TEST_CASE("micro-batches: FlexGen's zig-zag decode, the same work as the whole batch") {
  const Arch a = model("llama-3-8b");
  GenOptions o = decode(512, 2);
  o.batch = 8;
  o.layers = 2;
  const Workload whole = generate(a, o);
  o.micro_batches = 1;
  CHECK(write_workload(generate(a, o)) == write_workload(whole));  // 1: the workload as without
  o.micro_batches = 4;
  const Workload w = generate(a, o);
  check_same_work(w, whole);  // split four ways
  CHECK(w.ops.size() == 4 * whole.ops.size());
  CHECK(w.meta.at("micro_batches") == "4");
  // Zig-zag: per step, each layer for every micro-batch in turn; a layer's weight is read by
  // the four micro-batches' ops one after another, with no other layer's op between them.
  std::vector<std::string> order;  // "t0.L1" per op of a layer, in workload order
  for (const Op& op : w.ops) {
    int t = 0, m = 0, l = 0;
    if (std::sscanf(op.name.c_str(), "t%d.mb%d.L%d.", &t, &m, &l) == 3) {
      CHECK(op.name.starts_with(fmt::format("t{}.mb{}.L{}.", t, m, l)));
      const std::string key = fmt::format("t{}.L{}", t, l);
      if (order.empty() || order.back() != key) order.push_back(key);
    }
  }
  CHECK(order == std::vector<std::string>{"t0.L0", "t0.L1", "t1.L0", "t1.L1"});
  // Each micro-batch has its own KV blocks, a quarter of the batch's bytes each.
  uint64_t mb0 = 0;
  for (const Tensor& t : w.tensors) mb0 += t.name.starts_with("mb0.L0.kv") ? t.bytes : 0;
  uint64_t all0 = 0;
  for (const Tensor& t : whole.tensors) all0 += t.name.starts_with("L0.kv") ? t.bytes : 0;
  CHECK(mb0 * 4 == all0);
  // Refused: a count that does not divide the batch, and a step that is not decode.
  o.micro_batches = 3;
  CHECK_THROWS_WITH_AS(generate(a, o),
                       "--micro-batches: 3 does not divide the batch of 8 into micro-batches of "
                       "whole sequences",
                       InputError);
  o.micro_batches = 2;
  o.phase = Phase::kTrain;
  CHECK_THROWS_WITH_AS(generate(a, o), doctest::Contains("a training step runs its batch whole"),
                       InputError);
  // More micro-batches x layers x steps than the largest workload: refused before any op.
  o.phase = Phase::kDecode;
  o.batch = int64_t{1} << 20;
  o.micro_batches = o.batch;
  o.layers = 0;
  CHECK_THROWS_WITH_AS(generate(a, o), doctest::Contains("1048576 micro-batches x 32 layers x 2 steps"),
                       InputError);
}

TEST_CASE("micro-batches: a prefill in zig-zag blocks, the same work as the whole batch") {
  const Arch a = model("llama-3-8b");
  GenOptions o{.phase = Phase::kPrefill, .batch = 4, .seq = 128, .kv_block = 32, .layers = 2};
  const Workload whole = generate(a, o);
  o.micro_batches = 1;
  CHECK(write_workload(generate(a, o)) == write_workload(whole));  // 1: the workload as without
  o.micro_batches = 2;
  const Workload w = generate(a, o);
  REQUIRE_FALSE(verify_workload(w));
  check_same_work(w, whole);
  // The largest activation is half the whole batch's: each micro-batch carries its own.
  const auto act = [](const Tensor& t) { return t.kind == TensorKind::kActivation ? t.bytes : 0; };
  uint64_t big_whole = 0, big = 0;
  for (const Tensor& t : whole.tensors) big_whole = std::max(big_whole, act(t));
  for (const Tensor& t : w.tensors) big = std::max(big, act(t));
  CHECK(big * 2 == big_whole);
  // Zig-zag: each layer for both micro-batches in turn.
  std::vector<std::string> order;
  for (const Op& op : w.ops) {
    int m = 0, l = 0;
    if (std::sscanf(op.name.c_str(), "mb%d.L%d.", &m, &l) == 2) {
      const std::string key = fmt::format("L{}", l);
      if (order.empty() || order.back() != key) order.push_back(key);
    }
  }
  CHECK(order == std::vector<std::string>{"L0", "L1"});
  CHECK(w.meta.at("micro_batches") == "2");
}

TEST_CASE("generate's errors name the CLI's flags, or with field_names the fields") {
  const Arch a = model("llama-3-8b");
  GenOptions o;
  o.layers = 1;
  o.context = int64_t{1} << 40;
  CHECK_THROWS_WITH_AS(
      generate(a, o), "--context: --context 1099511627776 is above the largest allowed, 1073741824",
      InputError);
  o.field_names = true;  // Python's tierflow.generate, study and sweep specs
  CHECK_THROWS_WITH_AS(generate(a, o),
                       "context: context 1099511627776 is above the largest allowed, 1073741824",
                       InputError);
  o.context = 1 << 20;
  o.kv_block = 1;
  o.layers = 32;
  CHECK_THROWS_WITH_AS(generate(a, o),
                       doctest::Contains("KV-cache blocks, above the largest "
                                         "workload generated, 16777216 tensors; "
                                         "raise kv_block"),
                       InputError);
  o.field_names = false;
  CHECK_THROWS_WITH_AS(generate(a, o), doctest::Contains("; raise --kv-block"), InputError);
}
