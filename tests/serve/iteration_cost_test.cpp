// The serving iteration cost against the simulator: an iteration over a uniform batch costs
// what `tierflow sim` says the generator's workload of that batch costs with everything
// resident (within 2%, the bar; in practice to a few parts in 10^4), for dense,
// MoE and MLA models, decode and prefill, with and without tensor parallelism.
#include "sim/serve/iteration_cost.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "hw_models/bind.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "sim/simulator.h"
#include "traces/arch_loader.h"

using namespace tierflow;

namespace {

std::string config(const std::string& rel) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/configs/" + rel;
}

/// The simulated makespan of `g`'s workload planned resident on the topology's first device.
serve::Time simulated(const traces::Arch& a, const traces::GenOptions& g, const hw::Topology& t) {
  const Workload w = traces::generate(a, g);
  planner::PlanRequest req;
  req.policy = "resident";
  req.target.device_tier = *t.tier_index(t.devices[0].local_tier);
  const planner::PlanOutcome out = planner::make_plan(w, t, req);
  REQUIRE(out.ok);
  const sim::SimResult r = sim::simulate(*out.plan, w, t);
  REQUIRE_FALSE(r.error);
  return r.makespan;
}

struct Case {
  std::string model;
  std::string hw;
  traces::Phase phase;
  int64_t batch;
  int64_t tokens;  ///< prefill: prompt tokens; decode: context
  int tp;
  Dtype weights = Dtype::kBf16;
};

}  // namespace

TEST_CASE("serve: an iteration costs what sim says the same batch costs") {
  const std::vector<Case> cases = {
      {"llama-3-8b", "h100-sxm-8gpu", traces::Phase::kDecode, 16, 4096, 1},
      {"llama-3-8b", "h100-sxm-8gpu", traces::Phase::kDecode, 1, 100, 1},
      {"llama-3-8b", "h100-sxm-8gpu", traces::Phase::kPrefill, 2, 1024, 1},
      {"llama-3-8b", "h100-sxm-8gpu", traces::Phase::kPrefill, 1, 8192, 2},
      {"llama-3-70b", "h200-sxm-8gpu", traces::Phase::kDecode, 64, 2000, 8},
      {"mixtral-8x7b", "h100-sxm-8gpu", traces::Phase::kDecode, 8, 1024, 2},
      {"mixtral-8x7b", "h100-sxm-8gpu", traces::Phase::kPrefill, 1, 512, 2},
      {"deepseek-v3", "h200-sxm-8gpu", traces::Phase::kDecode, 4, 512, 8, Dtype::kFp8},
      {"deepseek-v3", "h200-sxm-8gpu", traces::Phase::kPrefill, 1, 256, 8, Dtype::kFp8},
  };
  for (const Case& c : cases) {
    CAPTURE(c.model);
    CAPTURE(static_cast<int>(c.phase));
    CAPTURE(c.batch);
    CAPTURE(c.tokens);
    CAPTURE(c.tp);
    const traces::Arch a = traces::load_arch(config("models/" + c.model + ".yaml"));
    const hw::Topology t = hw::load_topology(config("hw/" + c.hw + ".yaml"));
    traces::GenOptions g;
    g.phase = c.phase;
    g.batch = c.batch;
    g.tp = c.tp;
    g.weight_dtype = c.weights;
    if (c.phase == traces::Phase::kPrefill) {
      g.seq = c.tokens;
    } else {
      g.context = c.tokens;
      g.tokens = 1;
    }
    serve::IterationCost cost(a, g, t, 0, *t.tier_index(t.devices[0].local_tier));
    std::vector<serve::SeqWork> work(static_cast<size_t>(c.batch));
    for (serve::SeqWork& s : work) {
      s = c.phase == traces::Phase::kPrefill ? serve::SeqWork{0, c.tokens, true}
                                             : serve::SeqWork{c.tokens, 1, true};
    }
    const double want = static_cast<double>(simulated(a, g, t));
    const double got = static_cast<double>(cost.time(work));
    CHECK(got == doctest::Approx(want).epsilon(0.02));
    // Far inside the bar: the same ops, timed by the same function. (A serving iteration
    // also samples the token a prefill's last chunk produces, which the generator's prefill
    // step leaves out: a few parts in 10^4 there.)
    CHECK(got == doctest::Approx(want).epsilon(1e-3));
    // Cached: the same shape again is a lookup, the same time.
    const uint64_t probes = cost.probes();
    CHECK(cost.time(work) == static_cast<serve::Time>(got));
    CHECK(cost.probes() == probes);
  }
}

TEST_CASE("serve: a mixed iteration is its decode and prefill parts on one op list") {
  const traces::Arch a = traces::load_arch(config("models/llama-3-8b.yaml"));
  const hw::Topology t = hw::load_topology(config("hw/h100-sxm-8gpu.yaml"));
  serve::IterationCost cost(a, traces::GenOptions{}, t, 0, *t.tier_index("hbm"));
  const std::vector<serve::SeqWork> decode(8, serve::SeqWork{2048, 1, true});
  const std::vector<serve::SeqWork> chunk{serve::SeqWork{1024, 512, false}};
  std::vector<serve::SeqWork> mixed = decode;
  mixed.push_back(chunk[0]);
  const serve::Time d = cost.time(decode);
  const serve::Time c = cost.time(chunk);
  const serve::Time m = cost.time(mixed);
  // Weights are read once per iteration: a mixed batch costs less than the two apart, more
  // than either.
  CHECK(m < d + c);
  CHECK(m > std::max(d, c));
  // A longer context costs more attention; a chunk that does not sample has no head.
  CHECK(cost.time(std::vector<serve::SeqWork>(8, serve::SeqWork{8192, 1, true})) > d);
  CHECK(cost.time(std::vector<serve::SeqWork>{serve::SeqWork{1024, 512, true}}) > c);
  CHECK(cost.weight_bytes() > 15'000'000'000ULL);
  CHECK(cost.kv_bytes_per_token() == 131072);  // 32 layers x 2 x 8 heads x 128 x 2 bytes
  CHECK(cost.workspace_bytes(8192, 256) > cost.workspace_bytes(512, 1));
}

TEST_CASE("serve: a TP group over two hosts pays its all-reduces across their network") {
  // Llama-3-8B at TP 16 on two H100 hosts (h100-cxl): each all-reduce rings through a
  // host's NVLink and over the GPUs' NICs. The iteration costs what it costs within one
  // domain plus, for every collective op, the difference hw::op_time gives it over the
  // two fabrics (no other op changes).
  const traces::Arch a = traces::load_arch(config("models/llama-3-8b.yaml"));
  const hw::Topology t = hw::load_topology(config("hw/h100-cxl.yaml"));
  const size_t hbm = *t.tier_index("hbm");
  const hw::Fabric f(t);
  std::vector<int> group;
  for (int d = 0; d < 16; ++d) group.push_back(d);
  const hw::GroupFabric gf = hw::group_fabric(f, hbm, group, true);
  REQUIRE_FALSE(gf.problem);
  REQUIRE(gf.fabric.domains == 2);
  for (const int64_t tokens : {int64_t{1}, int64_t{4096}}) {
    CAPTURE(tokens);
    traces::GenOptions g;
    g.tp = 16;
    g.phase = traces::Phase::kPrefill;
    g.seq = tokens;
    serve::IterationCost within(a, g, t, 0, hbm);
    serve::IterationCost across(a, g, t, 0, hbm);
    across.set_collective_fabric(gf.fabric);
    const serve::SeqWork work{0, tokens, true};
    const Workload w = traces::generate(a, g);
    serve::Time extra = 0;
    int collectives = 0;
    for (uint32_t i = 0; i < w.ops.size(); ++i) {
      if (w.ops[i].collective_bytes == 0) continue;
      ++collectives;
      extra += hw::op_time(t, 0, hbm, w, i, gf.fabric)->ps - hw::op_time(t, 0, hbm, w, i)->ps;
    }
    CHECK(collectives == 2 * a.layers);
    CHECK(extra > 0);
    CHECK(across.time(std::span<const serve::SeqWork>(&work, 1)) ==
          within.time(std::span<const serve::SeqWork>(&work, 1)) + extra);
  }
}
