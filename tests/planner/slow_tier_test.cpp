// Slow home tiers: weights pinned to a tier that reads at 1 GB/s must be planned as they
// are at HBM speed, only slower. Every policy, a real model's decode step on the shipped
// H100 topology, the pinned tier's read bandwidth from 1 GB/s to 3.35 TB/s.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "hw_models/loader.h"
#include "planner/planner.h"
#include "sim/simulator.h"
#include "tools/study/sim_evaluator.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

using namespace tierflow;
using namespace tierflow::planner;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

struct Outcome {
  bool ok = false;
  std::string reason;
  int64_t makespan = 0;
  int64_t bound = 0;  ///< the makespan lower bound
  int64_t pinned_bound = 0;
  uint64_t peak = 0;
  uint64_t weight_fetch_bytes = 0;  ///< bytes of weight prefetches in the plan
};

Outcome plan_at(const Workload& w, std::string_view policy, std::string_view tier,
                std::string_view bandwidth, uint64_t budget) {
  const hw::Topology topo = hw::load_topology(
      kSource + "/configs/hw/h100-sxm-8gpu.yaml",
      hw::LoadOptions{{fmt::format("tiers.{}.read_bandwidth={}", tier, bandwidth)}, false});
  PlanRequest req;
  req.policy = std::string(policy);
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = budget;
  req.pins = {{TensorKind::kWeight, {{static_cast<uint32_t>(*topo.tier_index(tier)), 1.0}}}};
  req.threads = 1;
  study::SimEvaluator eval(w, topo);
  req.evaluator = &eval;
  const PlanOutcome out = make_plan(w, topo, req);
  Outcome o;
  o.reason = out.reason;
  if (!out.ok) return o;
  const sim::SimResult r = sim::simulate(*out.plan, w, topo);
  if (r.error) {
    o.reason = r.error->message;
    return o;
  }
  o.ok = true;
  o.makespan = r.makespan;
  o.bound = out.bounds.makespan_ps;
  o.pinned_bound = out.bounds.pinned_ps;
  o.peak = study::device_peak(r);
  for (const Program& p : out.plan->programs) {
    for (const Step& st : p.steps) {
      if (st.kind == StepKind::kPrefetch && w.tensors[st.target].kind == TensorKind::kWeight) {
        o.weight_fetch_bytes += w.tensors[st.target].bytes;
      }
    }
  }
  return o;
}

/// Llama-3-8B decode, four layers, batch 16 from a 1,024-token context.
Workload llama8b_decode(int64_t tokens) {
  traces::GenOptions g;
  g.phase = traces::Phase::kDecode;
  g.batch = 16;
  g.context = 1024;
  g.tokens = tokens;
  g.layers = 4;
  return traces::generate(traces::load_arch(kSource + "/configs/models/llama-3-8b.yaml"), g);
}

}  // namespace

TEST_CASE("property: a plan that fits with a fast home tier fits with a slow one") {
  const Workload w = llama8b_decode(2);
  // Four layers and the embeddings (~3.8 GB of weights) in 3 GiB: every policy but
  // `resident` must stream more than the pinned weights' first fetch.
  const uint64_t budget = uint64_t{3} << 30;
  const std::vector<std::string> bandwidths = {"3350GB/s", "256GB/s", "64GB/s", "16GB/s",
                                               "4GB/s",    "2GB/s",   "1GB/s"};
  size_t checked = 0;
  for (const std::string tier : {"ddr", "ssd"}) {
    for (const Policy& policy : policies()) {
      CAPTURE(tier);
      CAPTURE(policy.name);
      const Outcome fast = plan_at(w, policy.name, tier, bandwidths.front(), budget);
      if (!fast.ok) {
        MESSAGE("does not fit at HBM speed either: ", fast.reason);
        continue;
      }
      for (size_t i = 1; i < bandwidths.size(); ++i) {
        CAPTURE(bandwidths[i]);
        const Outcome slow = plan_at(w, policy.name, tier, bandwidths[i], budget);
        REQUIRE_MESSAGE(slow.ok, slow.reason);
        CHECK(slow.peak <= budget);
        CHECK(slow.makespan >= fast.makespan);
        // The bound counts the pinned weights' read from the slow tier, and holds.
        CHECK(slow.makespan >= slow.bound);
        CHECK(slow.pinned_bound > 0);
        ++checked;
      }
    }
  }
  CHECK(checked >= 50);
}

TEST_CASE("pinned weights stay on the device across tokens where the budget has room") {
  // Weights pinned to a slow tier are read from it once when the device can hold them
  // (select merges their runs), and only the part that does not fit is read per token.
  const Workload w = llama8b_decode(4);
  uint64_t weights = 0;
  for (const Tensor& t : w.tensors) {
    if (t.kind == TensorKind::kWeight) weights += t.bytes;
  }
  for (const std::string policy : {"hyperoffload", "tierflow"}) {
    CAPTURE(policy);
    const Outcome roomy = plan_at(w, policy, "ssd", "4GB/s", uint64_t{12} << 30);
    REQUIRE_MESSAGE(roomy.ok, roomy.reason);
    CHECK(roomy.weight_fetch_bytes == weights);
    // Half the weights' room: some weights are read again each token, but far fewer than
    // all of them (4 tokens would read 4x the weights).
    const Outcome tight = plan_at(w, policy, "ssd", "4GB/s", weights / 2 + (uint64_t{1} << 30));
    REQUIRE_MESSAGE(tight.ok, tight.reason);
    CHECK(tight.weight_fetch_bytes > weights);
    CHECK(tight.weight_fetch_bytes < 3 * weights);
    CHECK(tight.makespan > roomy.makespan);
  }
}
