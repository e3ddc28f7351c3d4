// Pins, whole and partial (`--pin weight=ddr:0.4`, `weight=hbm:0.2,ddr:0.8`): how tensors are
// dealt to the shares, the parser's errors, and every policy honouring them in its plan.
#include "planner/pins.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>

#include "core/diagnostics.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "sim/simulator.h"
#include "tools/study/sim_evaluator.h"
#include "tools/study/target.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

using namespace tierflow;
using namespace tierflow::planner;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

/// `layers` layers of four weights each (sizes 3, 1, 4, 2 units) and one activation.
Workload layered(int layers) {
  Workload w;
  w.name = "layered";
  uint32_t a = w.add_tensor({"x", 8, TensorKind::kInput});
  const uint64_t sizes[] = {3, 1, 4, 2};
  for (int l = 0; l < layers; ++l) {
    for (int k = 0; k < 4; ++k) {
      const uint32_t wt =
          w.add_tensor({fmt::format("L{}.w{}", l, k), sizes[k] * 1024, TensorKind::kWeight});
      const uint32_t out = w.add_tensor({fmt::format("L{}.a{}", l, k), 8, TensorKind::kActivation});
      Op op{fmt::format("L{}.op{}", l, k), OpKind::kMatmul, Dtype::kBf16, 1e6, 0, {a, wt}};
      op.layer = l;
      op.outputs = {out};
      w.add_op(std::move(op));
      a = out;
    }
  }
  return w;
}

uint64_t bytes_on(const Workload& w, const std::vector<uint32_t>& tier, uint32_t which) {
  uint64_t b = 0;
  for (uint32_t t = 0; t < w.tensors.size(); ++t) b += tier[t] == which ? w.tensors[t].bytes : 0;
  return b;
}

/// Llama-3-8B's first layers (generated with `g`) on one H100 of the shipped server.
struct Llama8bOnH100 {
  explicit Llama8bOnH100(const traces::GenOptions& g)
      : w(traces::generate(traces::load_arch(kSource + "/configs/models/llama-3-8b.yaml"), g)),
        topo(hw::load_topology(kSource + "/configs/hw/h100-sxm-8gpu.yaml")),
        hbm(static_cast<uint32_t>(*topo.tier_index("hbm"))),
        ddr(static_cast<uint32_t>(*topo.tier_index("ddr"))) {}
  Workload w;
  hw::Topology topo;
  uint32_t hbm, ddr;
};

std::string parse_error(const std::string& pin, const hw::Topology& topo) {
  try {
    (void)study::parse_pins({pin}, topo);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("partial pins deal each share its fraction to within one tensor, over every layer") {
  const Workload w = layered(16);
  const uint64_t total = 16 * 10 * 1024, largest = 4 * 1024;
  for (double f : {0.1, 0.25, 0.4, 0.5, 0.75, 0.9}) {
    CAPTURE(f);
    const std::vector<uint32_t> tier = pinned_tiers(w, {{TensorKind::kWeight, {{1, f}}}});
    const auto got = static_cast<double>(bytes_on(w, tier, 1));
    CHECK(std::abs(got - f * static_cast<double>(total)) <= static_cast<double>(largest));
    // Spread: every quarter of the model holds about its part, not the first layers only.
    for (int q = 0; q < 4; ++q) {
      uint64_t in_q = 0;
      for (uint32_t t = 0; t < w.tensors.size(); ++t) {
        const int layer = (static_cast<int>(t) - 1) / 8;  // x, then 8 tensors per layer
        if (t > 0 && layer / 4 == q && tier[t] == 1) in_q += w.tensors[t].bytes;
      }
      CHECK(std::abs(static_cast<double>(in_q) - f * static_cast<double>(total) / 4) <=
            2.0 * static_cast<double>(largest));
    }
    // Activations are never dealt by a weight pin.
    for (uint32_t t = 0; t < w.tensors.size(); ++t) {
      if (w.tensors[t].kind != TensorKind::kWeight) CHECK(tier[t] == kNone);
    }
  }
  // Two shares, and the later pin of a kind replaces the earlier.
  const std::vector<uint32_t> two = pinned_tiers(
      w, {{TensorKind::kWeight, {{1, 1.0}}}, {TensorKind::kWeight, {{0, 0.2}, {2, 0.8}}}});
  CHECK(bytes_on(w, two, 1) == 0);
  CHECK(std::abs(static_cast<double>(bytes_on(w, two, 0)) - 0.2 * total) <= largest);
  CHECK(bytes_on(w, two, 0) + bytes_on(w, two, 2) == total);
  // A whole pin takes every tensor; the same inputs give the same deal.
  const std::vector<uint32_t> whole = pinned_tiers(w, {{TensorKind::kWeight, {{1, 1.0}}}});
  CHECK(bytes_on(w, whole, 1) == total);
  CHECK(pinned_tiers(w, {{TensorKind::kWeight, {{1, 0.4}}}}) ==
        pinned_tiers(w, {{TensorKind::kWeight, {{1, 0.4}}}}));
  const std::vector<std::string> ids = {"hbm", "ddr", "ssd"};
  const auto lines = describe_pins(w, {{TensorKind::kWeight, {{0, 0.2}, {2, 0.8}}}}, ids);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("on 'hbm' (asked 20%)") != std::string::npos);
  CHECK(lines[1].find("on 'ssd' (asked 80%)") != std::string::npos);
}

TEST_CASE("--pin errors name the pin and what is wrong") {
  const hw::Topology topo = hw::load_topology(kSource + "/configs/hw/h100-sxm-8gpu.yaml");
  CHECK(parse_error("weight=ddr:1.5", topo).find("must be in (0, 1]") != std::string::npos);
  CHECK(parse_error("weight=ddr:0", topo).find("must be in (0, 1]") != std::string::npos);
  CHECK(parse_error("weight=ddr:abc", topo).find("not a fraction") != std::string::npos);
  CHECK(parse_error("weight=hbm,ddr", topo).find("give every tier of a split pin its fraction") !=
        std::string::npos);
  CHECK(parse_error("weight=hbm:0.6,ddr:0.6", topo).find("add up to 1.2") != std::string::npos);
  CHECK(parse_error("weight=ddr:0.5,ddr:0.2", topo).find("appears twice") != std::string::npos);
  CHECK(parse_error("weight=dd:0.3", topo).find("did you mean 'ddr'") != std::string::npos);
  CHECK(parse_error("weigth=ddr", topo).find("did you mean 'weight'") != std::string::npos);
  CHECK(parse_error("weight", topo).find("is not KIND=TIER") != std::string::npos);
  const auto pins = study::parse_pins({"weight=hbm:20%+ddr:0.8", "kv=ssd"}, topo);
  REQUIRE(pins.size() == 2);
  REQUIRE(pins[0].shares.size() == 2);
  CHECK(pins[0].shares[0].fraction == doctest::Approx(0.2));
  CHECK(pins[1].kind == TensorKind::kKv);
  CHECK(pins[1].shares[0].fraction == 1.0);
}

TEST_CASE("every policy honours partial pins: homes as dealt, device shares never leave") {
  const Llama8bOnH100 m(
      {.phase = traces::Phase::kDecode, .batch = 8, .context = 1024, .tokens = 2, .layers = 4});
  const Workload& w = m.w;
  const hw::Topology& topo = m.topo;
  const uint32_t hbm = m.hbm, ddr = m.ddr;
  const std::vector<Pin> pins = {{TensorKind::kWeight, {{hbm, 0.2}, {ddr, 0.5}}}};
  const std::vector<uint32_t> dealt = pinned_tiers(w, pins);
  int planned = 0;
  for (const Policy& policy : policies()) {
    CAPTURE(policy.name);
    PlanRequest req;
    req.policy = std::string(policy.name);
    req.target.device_tier = hbm;
    // 3.25 GiB, below the weights and KV cache (3.7 GiB): the policies offload besides the pins.
    req.target.budget = uint64_t{13} << 28;
    req.pins = pins;
    req.threads = 1;
    study::SimEvaluator eval(w, topo);
    req.evaluator = &eval;
    const PlanOutcome out = make_plan(w, topo, req);
    if (!out.ok) {
      // layerwise: with a fifth of the weights kept on the device it cannot stream enough.
      CHECK_MESSAGE(out.infeasible, out.reason);
      continue;
    }
    ++planned;
    const Plan& p = *out.plan;
    std::map<uint32_t, int> fetched;
    for (const Step& s : p.programs[0].steps) {
      if (s.kind == StepKind::kPrefetch) ++fetched[s.target];
    }
    for (uint32_t t = 0; t < w.tensors.size(); ++t) {
      if (dealt[t] == kNone) continue;
      CAPTURE(w.tensors[t].name);
      if (dealt[t] == hbm) {
        CHECK(p.tiers[p.home[t]] == "hbm");
        CHECK(fetched[t] == 0);
      } else {
        CHECK(p.tiers[p.home[t]] == "ddr");
        CHECK(fetched[t] >= 1);
      }
    }
    // The bound knows the pinned-off weights start off the device.
    uint64_t cold = 0;
    for (uint32_t t = 0; t < w.tensors.size(); ++t)
      cold += dealt[t] == ddr ? w.tensors[t].bytes : 0;
    CHECK(out.bounds.traffic_bytes >= cold);
    CHECK(out.bounds.pinned_bytes == cold);
    CHECK(out.bounds.pinned_tier == ddr);
    CHECK(out.bounds.makespan_ps >= out.bounds.pinned_ps);
  }
  CHECK(planned >= 5);
}

TEST_CASE("a KV cache pinned off the device leaves it: a prefill's blocks are stored home") {
  // The prefill writes each layer's KV blocks and reads them once, right away: no gap to
  // leave at, and KV persists. Pinned to ddr, its durable copy belongs there: each block is
  // stored after its last use, so the device holds the blocks of one layer at a time, not
  // the whole cache to the end.
  const Llama8bOnH100 m(
      {.phase = traces::Phase::kPrefill, .batch = 4, .seq = 2048, .kv_block = 256, .layers = 8});
  const Workload& w = m.w;
  const hw::Topology& topo = m.topo;
  uint64_t kv_bytes = 0;
  for (const Tensor& t : w.tensors) kv_bytes += t.kind == TensorKind::kKv ? t.bytes : 0;
  REQUIRE(kv_bytes > 0);
  for (const char* policy : {"hyperoffload", "tierflow"}) {
    CAPTURE(policy);
    PlanRequest req;
    req.policy = policy;
    req.target.device_tier = m.hbm;
    req.pins = {{TensorKind::kKv, {{m.ddr, 1.0}}}};
    req.threads = 1;
    study::SimEvaluator eval(w, topo);
    req.evaluator = &eval;
    const PlanOutcome out = make_plan(w, topo, req);
    REQUIRE_MESSAGE(out.ok, out.reason);
    const Plan& p = *out.plan;
    uint64_t stored = 0, detached = 0;
    for (const Step& s : p.programs[0].steps) {
      if (w.tensors[s.target].kind != TensorKind::kKv) continue;
      if (s.kind == StepKind::kStore) {
        stored += w.tensors[s.target].bytes;
        CHECK(p.tiers[s.tier] == "ddr");
      }
      if (s.kind == StepKind::kDetach) detached += w.tensors[s.target].bytes;
    }
    CHECK(stored == kv_bytes);    // every block, once
    CHECK(detached == kv_bytes);  // and off the device after it
    const sim::SimResult r = sim::simulate(p, w, topo, {});
    CHECK_FALSE(r.error);
  }
}
