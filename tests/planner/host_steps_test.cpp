// Attention run by the host CPU (planner/host_steps.h, FlexGen's --cpu): OPT-175B's first two
// layers decoding 4 tokens on FlexGen's T4 machine, the weights and the KV cache homed in
// host memory. Every policy's plan, moved, verifies, runs every attention op as a host step,
// never fetches the context's KV cache to the GPU, sends each token's query and KV block to
// the host once, and is simulated with the host CPU's time for those ops.
#include "planner/host_steps.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/diagnostics.h"
#include "core/plan_json.h"
#include "hw_models/cost.h"
#include "hw_models/loader.h"
#include "sim/simulator.h"
#include "tools/study/sim_evaluator.h"
#include "tools/study/study.h"

using namespace tierflow;
using namespace tierflow::study;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

constexpr int kLayers = 2, kTokens = 4;

Scenario opt_on_t4(const std::string& policy, bool on_host, bool kv_on_host = true) {
  Scenario s;
  s.hw = kSource + "/configs/hw/t4-flexgen.yaml";
  s.workload.model = "opt-175b";
  for (const auto& [field, value] : {std::pair{"phase", "decode"},
                                     {"layers", "2"},
                                     {"tokens", "4"},
                                     {"context", "512"},
                                     {"batch", "8"},
                                     {"kv_block", "8"},
                                     {"weight_dtype", "fp16"},
                                     {"act_dtype", "fp16"}}) {
    set_field(s, field, value, "test");
  }
  s.pins = {"weight=ddr"};
  if (kv_on_host) s.pins.push_back("kv=ddr");
  s.policy = policy;
  s.threads = 1;
  if (on_host) set_field(s, "on_host", "attention", "--on-host");
  return s;
}

}  // namespace

TEST_CASE(
    "attention on the host: every policy's plan moves it, verifies, keeps the KV cache home") {
  Study study;
  const hw::Topology topo = hw::load_topology(kSource + "/configs/hw/t4-flexgen.yaml");
  for (const std::string policy : {"layerwise", "hyperoffload", "tierflow"}) {
    CAPTURE(policy);
    const Trial t = study.run(opt_on_t4(policy, true));
    REQUIRE(t.ok);
    const PhaseResult& p = t.main();
    const Workload& w = *p.workload;
    const Plan& plan = *p.outcome.plan;
    CHECK(p.host.moved == kLayers * kTokens);
    CHECK(p.host.kept == 0);
    REQUIRE_FALSE(verify_plan(plan, w).has_value());
    REQUIRE(plan.host_tier < plan.tiers.size());
    CHECK(plan.tiers[plan.host_tier] == "ddr");
    CHECK(plan.meta.at("on_host") == "\"attention\"");

    int host_steps = 0, sends = 0;
    int64_t host_ps = 0;
    for (const Step& s : plan.programs.at(0).steps) {
      if (s.kind == StepKind::kCompute) {
        // Exactly the attention ops run on the host.
        CHECK(s.host == (w.ops[s.target].kind == OpKind::kAttention));
        if (s.host) {
          ++host_steps;
          host_ps += hw::host_op_time(topo, 0, w, s.target)->ps;
        }
        continue;
      }
      const Tensor& x = w.tensors[s.target];
      // The context's KV cache (external) is read where it lives: never fetched.
      if (x.kind == TensorKind::kKv && x.origin == kExternal) {
        FAIL_CHECK("a cache step moves context KV block " << x.name);
      }
      if (s.kind == StepKind::kStore && s.tier == plan.host_tier &&
          (x.kind == TensorKind::kKv || x.name.ends_with(".q"))) {
        ++sends;
      }
    }
    CHECK(host_steps == kLayers * kTokens);
    // Per token and layer, its query and the KV block it appends to go to the host once.
    CHECK(sends == 2 * kLayers * kTokens);
    REQUIRE(p.sim.has_value());
    REQUIRE(p.sim->devices.size() == 1);
    CHECK(p.sim->devices[0].host_ops == uint64_t{kLayers * kTokens});
    CHECK(p.sim->devices[0].host_compute_ps == host_ps);
    // The bounds of the device's share of the step bound the moved plan: the weights the
    // device reads must cross; the working set is a device op's.
    const planner::Bounds& b = p.outcome.bounds;
    CHECK(p.makespan_ps >= b.makespan_ps);
    CHECK(p.device_peak >= b.residency);
    CHECK(w.ops[b.residency_op].kind != OpKind::kAttention);
    uint64_t weights = 0;
    for (const Tensor& x : w.tensors) weights += x.kind == TensorKind::kWeight ? x.bytes : 0;
    CHECK(b.traffic_bytes >= weights);
    CHECK(b.makespan_ps >= b.compute_ps);
    // Written and read back: the same plan, tierflow.plan/3.
    Plan copy = plan;
    copy.topology_ref.file = "t4-flexgen.yaml";
    const std::string text = write_plan(copy, &w);
    CHECK(text.find("tierflow.plan/3") != std::string::npos);
    CHECK(write_plan(read_plan_text(text, "p.json", ".").plan, &w) == text);
  }
}

TEST_CASE(
    "the step planned for --on-host: the ops that move read no cache; the budget is "
    "the device's") {
  Study study;
  const hw::Topology topo = hw::load_topology(kSource + "/configs/hw/t4-flexgen.yaml");
  Scenario s = opt_on_t4("tierflow", false);
  set_field(s, "batch", "64", "test");
  const Trial device = study.run(s);
  REQUIRE(device.ok);
  const Workload& w = *device.main().workload;
  const auto ddr = static_cast<uint32_t>(*topo.tier_index("ddr"));
  std::vector<uint32_t> pinned(w.tensors.size(), UINT32_MAX);
  for (uint32_t x = 0; x < w.tensors.size(); ++x) {
    const TensorKind k = w.tensors[x].kind;
    if (w.tensors[x].origin == kExternal && (k == TensorKind::kKv || k == TensorKind::kWeight)) {
      pinned[x] = ddr;
    }
  }
  const std::vector<OpKind> attention{OpKind::kAttention};
  const auto planned = planner::host_planned(w, topo, *topo.tier_index("gddr"), pinned, attention);
  REQUIRE(planned.has_value());
  REQUIRE(planned->ops.size() == w.ops.size());
  REQUIRE(planned->tensors.size() == w.tensors.size());
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    CAPTURE(w.ops[o].name);
    if (w.ops[o].kind != OpKind::kAttention) {
      CHECK(planned->ops[o].inputs == w.ops[o].inputs);
      continue;
    }
    // The context's cache blocks are gone; the query and the block this token appends to
    // (made on the device) stay.
    CHECK(planned->ops[o].inputs.size() < w.ops[o].inputs.size());
    for (uint32_t x : planned->ops[o].inputs) CHECK(w.tensors[x].origin != kExternal);
  }
  // Nothing pinned to the CPU's tier: nothing can be known to move before planning.
  const std::vector<uint32_t> none(w.tensors.size(), UINT32_MAX);
  CHECK_FALSE(
      planner::host_planned(w, topo, *topo.tier_index("gddr"), none, attention).has_value());

  // A budget below an attention op's working set (its layer's whole cache): the device
  // could not run it, the host can; the step plans, every attention op on the host, and
  // the device never holds more than the budget.
  const uint64_t attention_set = device.main().outcome.bounds.residency;
  CHECK(w.ops[device.main().outcome.bounds.residency_op].kind == OpKind::kAttention);
  const uint64_t budget = attention_set * 9 / 10;
  s.budget = budget;
  const Trial tight = study.run(s);
  CHECK_FALSE(tight.ok);
  set_field(s, "on_host", "attention", "--on-host");
  const Trial host = study.run(s);
  REQUIRE_MESSAGE(host.ok, host.main().why());
  CHECK(host.main().host.moved == kLayers * kTokens);
  CHECK(host.main().device_peak <= budget);
}

TEST_CASE("attention on the host with the KV cache on disk: the host fetches it, frees it") {
  Study study;
  for (const std::string policy : {"layerwise", "tierflow"}) {
    CAPTURE(policy);
    Scenario s = opt_on_t4(policy, true);
    s.pins = {"weight=ddr", "kv=ssd"};
    const Trial t = study.run(s);
    REQUIRE_MESSAGE(t.ok, t.main().why());
    const PhaseResult& p = t.main();
    const Workload& w = *p.workload;
    const Plan& plan = *p.outcome.plan;
    CHECK(p.host.moved == kLayers * kTokens);
    REQUIRE_FALSE(verify_plan(plan, w).has_value());
    const auto ssd = static_cast<uint32_t>(std::ranges::find(plan.tiers, std::string("ssd")) -
                                           plan.tiers.begin());
    REQUIRE(ssd < plan.tiers.size());
    std::map<uint32_t, int> fetched, freed;  // per context KV block
    uint64_t staged = 0;
    for (const Step& x : plan.programs.at(0).steps) {
      const Tensor& tensor = w.tensors[x.target];
      if (x.kind == StepKind::kCompute) continue;
      const bool context = tensor.kind == TensorKind::kKv && tensor.origin == kExternal;
      if (!context) continue;
      // The context's cache never reaches the GPU: only the host fetches it, from its home.
      REQUIRE(x.host);
      if (x.kind == StepKind::kPrefetch) {
        CHECK(x.tier == ssd);
        ++fetched[x.target];
        staged += tensor.bytes;
      } else {
        CHECK(x.kind == StepKind::kDetach);
        ++freed[x.target];
      }
    }
    CHECK_FALSE(fetched.empty());
    CHECK(fetched == freed);  // every copy the host fetched is freed there
    // Each token's attention of a layer reads every context block of that layer.
    uint64_t reads = 0;
    for (const Op& op : w.ops) {
      if (op.kind != OpKind::kAttention) continue;
      for (uint32_t x : op.inputs) {
        const Tensor& tensor = w.tensors[x];
        if (tensor.kind == TensorKind::kKv && tensor.origin == kExternal) reads += tensor.bytes;
      }
    }
    CHECK(staged == reads);
    REQUIRE(p.sim.has_value());
    CHECK(p.sim->devices[0].host_ops == uint64_t{kLayers * kTokens});
    CHECK(p.makespan_ps >= p.outcome.bounds.makespan_ps);
    // Never faster than with the cache in host memory (the disk is read once per token;
    // here the weights crossing PCIe hide most of it).
    const Trial ddr = study.run(opt_on_t4(policy, true));
    REQUIRE(ddr.ok);
    CHECK(ddr.main().makespan_ps <= p.makespan_ps);
  }
}

TEST_CASE("the cache on disk: a block the device filled is fetched from disk, not kept") {
  // 10 tokens in 8-token blocks: the block each layer's first 8 tokens fill is final after
  // the 8th and stored home; the 9th and 10th tokens' attention fetch it from disk like the
  // context, and the host lets it go after each (the other layer's attention runs between).
  Study study;
  Scenario s = opt_on_t4("layerwise", true);
  set_field(s, "tokens", "10", "test");
  s.pins = {"weight=ddr", "kv=ssd"};
  const Trial t = study.run(s);
  REQUIRE_MESSAGE(t.ok, t.main().why());
  const Workload& w = *t.main().workload;
  const Plan& plan = *t.main().outcome.plan;
  REQUIRE_FALSE(verify_plan(plan, w).has_value());
  std::map<uint32_t, int> made_fetched, made_freed;  // per KV block made in the step
  for (const Step& x : plan.programs.at(0).steps) {
    if (x.kind == StepKind::kCompute || !x.host) continue;
    const Tensor& tensor = w.tensors[x.target];
    if (tensor.kind != TensorKind::kKv || tensor.origin == kExternal) continue;
    ++(x.kind == StepKind::kPrefetch ? made_fetched : made_freed)[x.target];
  }
  REQUIRE(made_fetched.size() == kLayers);
  for (const auto& entry : made_fetched) {
    const uint32_t block = entry.first;  // a plain name: CAPTURE takes it in a lambda
    CAPTURE(w.tensors[block].name);
    CHECK(entry.second == 2);  // for the 9th and the 10th token
    // After every read: the first 8 tokens' (the next token changes it, and its sync store
    // brings the new value), the 9th's and the 10th's.
    CHECK(made_freed.at(block) == 10);
  }
  REQUIRE(t.main().sim.has_value());
  CHECK_FALSE(t.main().sim->error);
}

TEST_CASE("the planner scores a plan of the step it plans for --on-host as it will run") {
  Study study;
  const hw::Topology topo = hw::load_topology(kSource + "/configs/hw/t4-flexgen.yaml");
  const Trial device = study.run(opt_on_t4("layerwise", false));
  REQUIRE(device.ok);
  const Workload& w = *device.main().workload;
  const Plan& plan = *device.main().outcome.plan;
  const std::vector<OpKind> attention{OpKind::kAttention};
  std::vector<uint32_t> pinned(w.tensors.size(), UINT32_MAX);
  const auto ddr = static_cast<uint32_t>(*topo.tier_index("ddr"));
  for (uint32_t x = 0; x < w.tensors.size(); ++x) {
    if (w.tensors[x].origin == kExternal) pinned[x] = ddr;
  }
  const auto planned = planner::host_planned(w, topo, *topo.tier_index("gddr"), pinned, attention);
  REQUIRE(planned.has_value());
  // The device plan fetches a cache the planned step no longer reads: still a plan of it.
  REQUIRE_FALSE(verify_plan(plan, *planned).has_value());
  HostMoveEvaluator eval(*planned, w, topo, attention);
  const planner::Evaluation e = eval.evaluate(plan, /*verified=*/false);
  REQUIRE_MESSAGE(e.ok, e.error);
  const planner::HostPlan moved = planner::move_to_host(plan, w, topo, attention, "test");
  const sim::SimResult r = sim::simulate(moved.plan, w, topo);
  REQUIRE_FALSE(r.error);
  CHECK(e.makespan_ps == r.makespan);
  CHECK(e.makespan_ps < sim::simulate(plan, w, topo).makespan);  // the host's time, not the GPU's
  // A plan that breaks a rule of the planned step is scored as failing, never moved.
  Plan broken = plan;
  auto& steps = broken.programs[0].steps;
  const auto fetch = std::ranges::find_if(steps, [&](const Step& s) {
    return s.kind == StepKind::kPrefetch && w.tensors[s.target].kind == TensorKind::kWeight;
  });
  REQUIRE(fetch != steps.end());
  steps.erase(fetch);
  const planner::Evaluation bad = eval.evaluate(broken, /*verified=*/false);
  CHECK_FALSE(bad.ok);
  CHECK_FALSE(bad.error.empty());
}

TEST_CASE("the device's share of a step: the moved ops gone, what they make external") {
  Study study;
  const Trial t = study.run(opt_on_t4("layerwise", false));
  REQUIRE(t.ok);
  const Workload& w = *t.main().workload;
  std::vector<bool> moved(w.ops.size());
  for (uint32_t o = 0; o < w.ops.size(); ++o) moved[o] = w.ops[o].kind == OpKind::kAttention;
  std::vector<uint32_t> op_of;
  const Workload d = planner::device_share(w, moved, op_of);
  CHECK(d.ops.size() == w.ops.size() - kLayers * kTokens);
  REQUIRE(op_of.size() == d.ops.size());
  for (uint32_t o = 0; o < d.ops.size(); ++o) CHECK(d.ops[o].name == w.ops[op_of[o]].name);
  for (uint32_t x = 0; x < w.tensors.size(); ++x) {
    const uint32_t origin = w.tensors[x].origin;
    if (origin == kExternal || moved[origin]) {
      CHECK(d.tensors[x].origin == kExternal);
    } else {
      CHECK(op_of[d.tensors[x].origin] == origin);
    }
  }
  CHECK_FALSE(verify_workload(d).has_value());
}

TEST_CASE("attention on the host: less over PCIe and sooner than on the device") {
  Study study;
  for (const std::string policy : {"layerwise", "tierflow"}) {
    CAPTURE(policy);
    const Trial device = study.run(opt_on_t4(policy, false));
    const Trial host = study.run(opt_on_t4(policy, true));
    REQUIRE(device.ok);
    REQUIRE(host.ok);
    CHECK(host.main().moved_bytes < device.main().moved_bytes);
    CHECK(host.main().makespan_ps < device.main().makespan_ps);
  }
}

TEST_CASE("attention stays on the device where its KV cache is not homed on the host tier") {
  Study study;
  const Trial device = study.run(opt_on_t4("layerwise", false, /*kv_on_host=*/false));
  const Trial t = study.run(opt_on_t4("layerwise", true, /*kv_on_host=*/false));
  REQUIRE(t.ok);
  CHECK(t.main().host.moved == 0);
  CHECK(t.main().host.kept == kLayers * kTokens);
  CHECK(t.main().host.why_kept.find("which is not homed on 'ddr'") != std::string::npos);
  // Nothing moved: the plan is the one made for the device.
  CHECK(write_plan(*t.main().outcome.plan, nullptr) ==
        write_plan(*device.main().outcome.plan, nullptr));
}

TEST_CASE("--on-host: op kinds and topologies it refuses") {
  CHECK_THROWS_WITH_AS(planner::parse_host_ops("atention", "--on-host"),
                       "--on-host: 'atention' is not an op kind (one of: matmul, attention, norm, "
                       "elementwise, embedding, router, expert, collective, optimizer, other); "
                       "did you mean 'attention'?",
                       InputError);
  CHECK_THROWS_WITH_AS(planner::parse_host_ops("attention,", "--on-host"),
                       doctest::Contains("'' is not an op kind"), InputError);
  CHECK(planner::parse_host_ops("", "x").empty());
  CHECK(planner::parse_host_ops("attention,norm,attention", "x") ==
        std::vector<OpKind>{OpKind::kAttention, OpKind::kNorm});
  CHECK(planner::host_ops_text({OpKind::kAttention, OpKind::kNorm}) == "attention,norm");
  Study study;
  Scenario s = opt_on_t4("layerwise", true);
  s.hw = kSource + "/configs/hw/h100-sxm-8gpu.yaml";
  s.pins = {"weight=ddr", "kv=ddr"};
  set_field(s, "weight_dtype", "bf16", "test");
  set_field(s, "act_dtype", "bf16", "test");
  CHECK_THROWS_WITH_AS(study.run(s), doctest::Contains("describes no host CPU (system.cpu)"),
                       InputError);
}
