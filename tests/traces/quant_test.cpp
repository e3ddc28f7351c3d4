// Weight-only quantization (traces/quant.h): the bytes of quantized weights worked out by
// hand, the dtype matmuls compute in, and what the roofline makes of them on the H100.
#include "traces/quant.h"

#include <doctest/doctest.h>

#include <string>

#include "core/diagnostics.h"
#include "hw_models/cost.h"
#include "hw_models/loader.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

using namespace tierflow;
using namespace tierflow::traces;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

Arch model(const std::string& name) {
  return load_arch(find_arch(name, kSource + "/configs"));
}

GenOptions decode(Dtype weights) {
  GenOptions o;
  o.phase = Phase::kDecode;
  o.context = 256;
  o.tokens = 1;
  o.weight_dtype = weights;
  return o;
}

const Tensor& tensor(const Workload& w, std::string_view name) {
  for (const Tensor& t : w.tensors) {
    if (t.name == name) return t;
  }
  FAIL("no tensor " << name);
  return w.tensors.front();
}

uint32_t op_index(const Workload& w, std::string_view name) {
  for (uint32_t i = 0; i < w.ops.size(); ++i) {
    if (w.ops[i].name == name) return i;
  }
  FAIL("no op " << name);
  return 0;
}

uint64_t weight_bytes(const Workload& w) {
  uint64_t n = 0;
  for (const Tensor& t : w.tensors) n += t.kind == TensorKind::kWeight ? t.bytes : 0;
  return n;
}

hw::Topology h100(std::vector<std::string> sets = {}) {
  return hw::load_topology(kSource + "/configs/hw/h100-sxm-8gpu.yaml",
                           hw::LoadOptions{std::move(sets), false});
}

/// Time of op `name` of `w` on the H100 computing from its HBM.
int64_t op_ps(const hw::Topology& t, const Workload& w, std::string_view name) {
  const auto d = hw::op_time(t, 0, *t.tier_index("hbm"), w, op_index(w, name));
  REQUIRE(d.has_value());
  return d->ps;
}

}  // namespace

TEST_CASE("Llama-3-70B int4, groups of 128: the weight bytes worked out by hand") {
  // h 8192, I 28672, 64 query and 8 KV heads of 128, vocabulary 128256, 80 layers.
  // int4 packs two values a byte; each group of 128 inputs of an output channel has an
  // fp16 scale (2 B):
  //   wqkv    8192 x 10240: 41,943,040 + 64 x 10240 x 2 =  1,310,720 ->  43,253,760
  //   wo      8192 x  8192: 33,554,432 + 64 x  8192 x 2 =  1,048,576 ->  34,603,008
  //   gate_up 8192 x 57344: 234,881,024 + 64 x 57344 x 2 = 7,340,032 -> 242,221,056
  //   down   28672 x  8192: 117,440,512 + 224 x 8192 x 2 = 3,670,016 -> 121,110,528
  //   two RMSNorm weights in bf16: 2 x 8192 x 2 = 32,768
  //   per layer 441,221,120; x 80 = 35,297,689,600
  // plus the bf16 embedding and LM head (128256 x 8192 x 2 = 2,101,346,304 each) and the
  // final norm (16,384): 39,500,398,592 B (36.8 GiB; bf16: 141,107,412,992 B).
  const Workload w = generate(model("llama-3-70b"), decode(Dtype::kInt4));
  REQUIRE_FALSE(verify_workload(w).has_value());
  CHECK(tensor(w, "L0.wqkv").bytes == 43'253'760);
  CHECK(tensor(w, "L0.w_down").bytes == 121'110'528);
  CHECK(tensor(w, "L0.wqkv").dtype == Dtype::kInt4);
  CHECK(tensor(w, "embed.w").dtype == Dtype::kBf16);
  CHECK(tensor(w, "lm_head.w").dtype == Dtype::kBf16);
  CHECK(tensor(w, "L0.attn_norm.w").dtype == Dtype::kBf16);
  CHECK(weight_bytes(w) == 39'500'398'592);
  CHECK(weight_bytes(generate(model("llama-3-70b"), decode(Dtype::kBf16))) == 141'107'412'992);
  // The scheme is recorded.
  CHECK(w.meta.at("quant_group") == "128");
  CHECK(w.meta.at("quant_scale_dtype") == "\"fp16\"");
  CHECK(w.meta.at("quant_zeros") == "false");
  CHECK(w.meta.at("compute_dtype") == "\"bf16\"");
}

TEST_CASE("the other schemes: zero points, int8, per-channel, fp8, tensor-parallel shards") {
  const Arch a = model("llama-3-70b");
  GenOptions o = decode(Dtype::kInt4);
  o.quant_zeros = true;  // AWQ: + a 4-bit zero per group, 64 x 10240 / 2 = 327,680
  CHECK(tensor(generate(a, o), "L0.wqkv").bytes == 43'253'760 + 327'680);
  o = decode(Dtype::kInt8);  // 83,886,080 + 1,310,720 scales
  CHECK(tensor(generate(a, o), "L0.wqkv").bytes == 85'196'800);
  o.quant_group = 0;  // one fp16 scale per output channel: 83,886,080 + 10240 x 2
  CHECK(tensor(generate(a, o), "L0.wqkv").bytes == 83'906'560);
  o = decode(Dtype::kFp8);  // default per channel, fp32 scales: 83,886,080 + 10240 x 4
  const Workload f = generate(a, o);
  CHECK(tensor(f, "L0.wqkv").bytes == 83'927'040);
  CHECK(f.meta.at("quant_group") == "0");
  CHECK(f.meta.at("quant_scale_dtype") == "\"fp32\"");
  // tp 8, row-parallel down: 3584 inputs in 28 groups x 8192 outputs:
  // 14,680,064 + 28 x 8192 x 2 = 458,752
  o = decode(Dtype::kInt4);
  o.tp = 8;
  CHECK(tensor(generate(a, o), "L0.w_down").bytes == 14'680'064 + 458'752);
  // A group wider than the input dimension is one group: per channel.
  o = decode(Dtype::kInt4);
  o.quant_group = 100'000;
  CHECK(tensor(generate(a, o), "L0.wqkv").bytes == 41'943'040 + 10240 * 2);
  // MoE: the experts are quantized, the router is not.
  const Workload m = generate(model("mixtral-8x7b"), decode(Dtype::kInt4));
  REQUIRE_FALSE(verify_workload(m).has_value());
  CHECK(tensor(m, "L0.router.w").dtype == Dtype::kBf16);
  // gate+up 4096 x 28672: 58,720,256 + 32 x 28672 x 2; down 14336 x 4096: 29,360,128 +
  // 112 x 4096 x 2
  CHECK(tensor(m, "L0.expert0.w").bytes == 58'720'256 + 1'835'008 + 29'360'128 + 917'504);
}

TEST_CASE("16-bit weights and training keep the old layout") {
  const Arch a = model("llama-3-8b");
  const Workload w = generate(a, decode(Dtype::kBf16));
  CHECK(w.meta.count("quant_group") == 0);
  CHECK(w.meta.count("compute_dtype") == 0);
  GenOptions t = decode(Dtype::kFp8);
  t.phase = Phase::kTrain;
  t.seq = 16;
  t.layers = 1;
  const Workload tw = generate(a, t);
  REQUIRE_FALSE(verify_workload(tw).has_value());
  // fp8 training: every weight in fp8, no scales (4096 x 6144 wqkv).
  CHECK(tensor(tw, "L0.wqkv").bytes == 4096 * 6144);
  CHECK(tensor(tw, "embed.w").dtype == Dtype::kFp8);
}

TEST_CASE("matmuls on quantized weights compute in the activation dtype unless asked") {
  // The bug of issue 16: int8 weights made every matmul compute in int8, which the H100
  // has no peak rate for.
  const Arch a = model("llama-3-8b");
  for (Dtype d : {Dtype::kInt8, Dtype::kInt4, Dtype::kFp8}) {
    CAPTURE(name_of(d));
    const Workload w = generate(a, decode(d));
    for (const Op& op : w.ops) CHECK(op.dtype == Dtype::kBf16);
    CHECK(dequantized_dtype(w, w.ops[op_index(w, "t0.L0.gate_up")]) == d);
    CHECK_FALSE(dequantized_dtype(w, w.ops[op_index(w, "t0.lm_head")]).has_value());
  }
  // fp8 weights on fp8 tensor cores: the blocks' matmuls compute in fp8 and dequantize
  // nothing; the bf16 LM head stays bf16.
  GenOptions o = decode(Dtype::kFp8);
  o.compute_dtype = Dtype::kFp8;
  const Workload w = generate(a, o);
  CHECK(w.ops[op_index(w, "t0.L0.qkv")].dtype == Dtype::kFp8);
  CHECK_FALSE(dequantized_dtype(w, w.ops[op_index(w, "t0.L0.qkv")]).has_value());
  CHECK(w.ops[op_index(w, "t0.lm_head")].dtype == Dtype::kBf16);
  CHECK(w.meta.at("compute_dtype") == "\"fp8\"");
}

TEST_CASE("bad quantization options name their flag") {
  const Arch a = model("llama-3-8b");
  auto flag_of = [&](const GenOptions& o) -> std::string {
    try {
      (void)generate(a, o);
    } catch (const InputError& e) {
      return e.pos().file;
    }
    return "";
  };
  GenOptions o = decode(Dtype::kInt4);
  o.compute_dtype = Dtype::kFp8;  // neither bf16 nor int4
  CHECK(flag_of(o) == "--compute-dtype");
  o = decode(Dtype::kBf16);
  o.act_dtype = Dtype::kFp16;
  o.compute_dtype = Dtype::kBf16;  // 16-bit weights are not quantized
  CHECK(flag_of(o) == "--compute-dtype");
  o = decode(Dtype::kFp8);
  o.quant_zeros = true;
  CHECK(flag_of(o) == "--quant-zeros");
  o = decode(Dtype::kInt4);
  o.quant_group = -2;
  CHECK(flag_of(o) == "--quant-group");
  // A group or zero points for weights that are not quantized, or in training, would be
  // ignored: refused.
  o = decode(Dtype::kBf16);
  o.quant_group = 64;
  CHECK(flag_of(o) == "--quant-group");
  o.quant_group = -1;
  o.quant_zeros = true;
  CHECK(flag_of(o) == "--quant-zeros");
  o = decode(Dtype::kInt8);
  o.phase = Phase::kTrain;
  o.seq = 16;
  o.quant_group = 0;
  CHECK(flag_of(o) == "--quant-group");
}

TEST_CASE("H100: int4 decode is memory-bound on the quantized bytes, prefill pays the dequant") {
  const Arch a = model("llama-3-70b");
  const hw::Topology t = h100();
  // Decode, batch 1: the gate/up GEMV reads its weight once. bf16 939,524,096 B, int4
  // 242,221,056 B (x 0.258: 4.125 of 16 bits), both over 0.85 x 3.35 TB/s, plus 5 us launch.
  const Workload bf = generate(a, decode(Dtype::kBf16));
  const Workload q4 = generate(a, decode(Dtype::kInt4));
  const int64_t bf_ps = op_ps(t, bf, "t0.L0.gate_up");
  const int64_t q4_ps = op_ps(t, q4, "t0.L0.gate_up");
  const double launch = 5e6;
  const double want = 242'221'056.0 / 939'524'096.0;  // activations add ~0.01%
  CHECK((static_cast<double>(q4_ps) - launch) / (static_cast<double>(bf_ps) - launch) ==
        doctest::Approx(want).epsilon(0.002));
  // Prefill of 4 x 2048 tokens: compute-bound. The shipped H100 declares int4 at 1 (the
  // kernel keeps up with bf16): equal time; at 0.8 the int4 op takes 1/0.8 as long.
  GenOptions p = decode(Dtype::kBf16);
  p.phase = Phase::kPrefill;
  p.batch = 4;
  p.seq = 2048;
  p.layers = 1;
  const Workload pbf = generate(a, p);
  p.weight_dtype = Dtype::kInt4;
  const Workload pq4 = generate(a, p);
  CHECK(op_ps(t, pq4, "L0.gate_up") == op_ps(t, pbf, "L0.gate_up"));
  const hw::Topology slow = h100({"devices.h100.dequant_efficiency.int4=0.8"});
  CHECK(static_cast<double>(op_ps(slow, pq4, "L0.gate_up")) - launch ==
        doctest::Approx((static_cast<double>(op_ps(slow, pbf, "L0.gate_up")) - launch) / 0.8)
            .epsilon(1e-6));
  // fp8 compute doubles the peak: the fp8 prefill GEMM takes half the bf16 time.
  p.weight_dtype = Dtype::kFp8;
  p.compute_dtype = Dtype::kFp8;
  const Workload pf8 = generate(a, p);
  CHECK(static_cast<double>(op_ps(t, pf8, "L0.gate_up")) - launch ==
        doctest::Approx((static_cast<double>(op_ps(t, pbf, "L0.gate_up")) - launch) / 2)
            .epsilon(1e-3));
  // int4 arithmetic: the H100 has no int4 peak, and the error says what it has.
  p.weight_dtype = Dtype::kInt4;
  p.compute_dtype = Dtype::kInt4;
  const Workload pi4 = generate(a, p);
  CHECK_FALSE(hw::op_time(t, 0, *t.tier_index("hbm"), pi4, op_index(pi4, "L0.gate_up")));
  CHECK(t.devices[0].peak_dtypes() == "fp32, bf16, fp16, fp8");
}
