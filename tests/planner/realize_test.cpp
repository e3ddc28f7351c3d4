// realize_routing (planner/realize.h): a plan made on the planned routing, run on a
// realized one. Hand-built one-layer MoE workloads; every realized plan must verify.
#include "planner/realize.h"

#include <doctest/doctest.h>

#include <algorithm>

#include "core/diagnostics.h"
#include "core/plan_json.h"

using namespace tierflow;
using tierflow::planner::realize_routing;

namespace {

constexpr uint64_t kExpertBytes = 4096;

// One MoE layer "L0." with 3 experts whose weights live in ddr; `experts` are the routed
// ones. Tensors: x, router.w, expert0..2.w, probs, expertN.out per routed expert, y.
Workload moe(const std::vector<int>& experts) {
  Workload w;
  w.name = "moe";
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kInput});
  const uint32_t rw = w.add_tensor({"L0.router.w", 256, TensorKind::kWeight});
  std::vector<uint32_t> ew;
  for (int e = 0; e < 3; ++e) {
    ew.push_back(
        w.add_tensor({"L0.expert" + std::to_string(e) + ".w", kExpertBytes, TensorKind::kWeight}));
  }
  const uint32_t probs = w.add_tensor({"L0.router.probs", 16, TensorKind::kActivation});
  w.add_op({"L0.router", OpKind::kRouter, Dtype::kBf16, 100, 300, {x, rw}, {probs}});
  std::vector<uint32_t> parts = {probs};
  for (int e : experts) {
    const uint32_t out =
        w.add_tensor({"L0.expert" + std::to_string(e) + ".out", 64, TensorKind::kActivation});
    w.add_op({"L0.expert" + std::to_string(e),
              OpKind::kExpert,
              Dtype::kBf16,
              1000,
              kExpertBytes + 128,
              {x, ew[static_cast<size_t>(e)]},
              {out}});
    parts.push_back(out);
  }
  const uint32_t y = w.add_tensor({"y", 64, TensorKind::kOutput});
  w.add_op({"L0.moe_combine", OpKind::kElementwise, Dtype::kBf16, 100, 256, parts, {y}});
  return w;
}

uint32_t tensor(const Workload& w, const std::string& name) {
  for (uint32_t i = 0; i < w.tensors.size(); ++i) {
    if (w.tensors[i].name == name) return i;
  }
  FAIL("no tensor " << name);
  return 0;
}

uint32_t op(const Workload& w, const std::string& name) {
  for (uint32_t i = 0; i < w.ops.size(); ++i) {
    if (w.ops[i].name == name) return i;
  }
  FAIL("no op " << name);
  return 0;
}

// Prefetches each planned expert's weight before the router runs, computes the experts in
// order (each waiting on its prefetch), detaches each weight after use and the expert
// outputs after the combine. Tiers: 0 = hbm (device), 1 = ddr.
Plan plan_for(const Workload& w, const std::vector<int>& experts) {
  Plan p;
  p.name = "moe";
  p.tiers = {"hbm", "ddr"};
  p.device_tier = 0;
  p.home.assign(w.tensors.size(), 0);
  for (int e = 0; e < 3; ++e) p.home[tensor(w, "L0.expert" + std::to_string(e) + ".w")] = 1;
  Program prog;
  uint32_t ev = 0;
  for (int e : experts) {
    prog.steps.push_back(
        {StepKind::kPrefetch, tensor(w, "L0.expert" + std::to_string(e) + ".w"), 1, ev++, {}});
  }
  prog.steps.push_back({StepKind::kCompute, op(w, "L0.router"), 0, kNoEvent, {}});
  ev = 0;
  for (int e : experts) {
    const std::string n = "L0.expert" + std::to_string(e);
    prog.steps.push_back({StepKind::kCompute, op(w, n), 0, kNoEvent, {ev++}});
    prog.steps.push_back({StepKind::kDetach, tensor(w, n + ".w"), 0, kNoEvent, {}});
  }
  prog.steps.push_back({StepKind::kCompute, op(w, "L0.moe_combine"), 0, kNoEvent, {}});
  for (int e : experts) {
    prog.steps.push_back(
        {StepKind::kDetach, tensor(w, "L0.expert" + std::to_string(e) + ".out"), 0, kNoEvent, {}});
  }
  p.programs.push_back(std::move(prog));
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  return p;
}

// The index of the compute step of `name` in program 0.
size_t compute_at(const Plan& p, const Workload& w, const std::string& name) {
  const auto& steps = p.programs[0].steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind == StepKind::kCompute && w.ops[steps[i].target].name == name) return i;
  }
  FAIL("not computed: " << name);
  return 0;
}

}  // namespace

TEST_CASE(
    "planned {0,1}, realized {1,2}: one hit, one miss fetched on demand, one wasted prefetch") {
  const Workload planned = moe({0, 1});
  const Workload realized = moe({1, 2});
  const auto r = realize_routing(plan_for(planned, {0, 1}), planned, realized);
  CHECK_FALSE(verify_plan(r.plan, realized).has_value());
  CHECK(r.stats.expert_ops == 2);
  CHECK(r.stats.hits == 1);
  CHECK(r.stats.misses == 1);
  CHECK(r.stats.miss_bytes == kExpertBytes);
  CHECK(r.stats.wasted == 1);
  CHECK(r.stats.wasted_bytes == kExpertBytes);

  // Expert 2 takes expert 0's place: a demand prefetch right before it, which it waits on,
  // and a detach right after it.
  const auto& steps = r.plan.programs[0].steps;
  const size_t at = compute_at(r.plan, realized, "L0.expert2");
  REQUIRE(at >= 1);
  const Step& fetch = steps[at - 1];
  CHECK(fetch.kind == StepKind::kPrefetch);
  CHECK(fetch.demand);
  CHECK(fetch.target == tensor(realized, "L0.expert2.w"));
  CHECK(r.plan.tiers[fetch.tier] == "ddr");
  CHECK(steps[at].wait == std::vector<uint32_t>{fetch.event});
  CHECK(steps[at + 1].kind == StepKind::kDetach);
  CHECK(steps[at + 1].target == tensor(realized, "L0.expert2.w"));
  CHECK(at < compute_at(r.plan, realized, "L0.expert1"));
  // Expert 0's weight is still prefetched (wasted) and its detach waits for the copy.
  const auto wasted = std::ranges::find_if(steps, [&](const Step& s) {
    return s.kind == StepKind::kDetach && s.target == tensor(realized, "L0.expert0.w");
  });
  REQUIRE(wasted != steps.end());
  CHECK(wasted->wait == std::vector<uint32_t>{0});
  // Exactly one demand step; the new output is released after the combine.
  CHECK(std::ranges::count_if(steps, [](const Step& s) { return s.demand; }) == 1);
  CHECK(steps.back().kind == StepKind::kDetach);

  // The flag survives the plan's JSON form, and the output is deterministic.
  Plan written = r.plan;
  written.topology_ref.file = "hw.yaml";
  const std::string text = write_plan(written, &realized);
  CHECK(text.find("\"demand\": true") != std::string::npos);
  const LoadedPlan back = read_plan_text(text, "realized.json", ".");
  CHECK(write_plan(back.plan, &realized) == text);
  Plan again = realize_routing(plan_for(planned, {0, 1}), planned, realized).plan;
  again.topology_ref.file = "hw.yaml";
  CHECK(write_plan(again, &realized) == text);
}

TEST_CASE("the same routing: every expert a hit, nothing wasted, the plan unchanged") {
  const Workload w = moe({0, 1});
  const Plan p = plan_for(w, {0, 1});
  const auto r = realize_routing(p, w, w);
  CHECK(r.stats.hits == 2);
  CHECK(r.stats.misses == 0);
  CHECK(r.stats.wasted == 0);
  CHECK(write_plan(r.plan, &w).find("demand") == std::string::npos);
  CHECK(r.plan.programs[0].steps.size() == p.programs[0].steps.size());
}

TEST_CASE("more realized experts than planned: the extra misses follow the group's last place") {
  const Workload planned = moe({0});
  const Workload realized = moe({1, 2});
  const auto r = realize_routing(plan_for(planned, {0}), planned, realized);
  CHECK_FALSE(verify_plan(r.plan, realized).has_value());
  CHECK(r.stats.misses == 2);
  CHECK(r.stats.hits == 0);
  CHECK(r.stats.wasted == 1);
  const size_t a = compute_at(r.plan, realized, "L0.expert1");
  const size_t b = compute_at(r.plan, realized, "L0.expert2");
  CHECK(a < b);
  CHECK(b < compute_at(r.plan, realized, "L0.moe_combine"));
  // At most one demand copy at a time: expert 1's weight is detached before expert 2's
  // demand prefetch.
  const auto& steps = r.plan.programs[0].steps;
  CHECK(steps[a + 1].kind == StepKind::kDetach);
  CHECK(steps[a + 2].demand);
}

TEST_CASE("workloads that differ beyond the routed experts are an input error") {
  const Workload planned = moe({0, 1});
  Workload realized = moe({1, 2});
  realized.ops[op(realized, "L0.moe_combine")].name = "L0.combine";
  CHECK_THROWS_AS(realize_routing(plan_for(planned, {0, 1}), planned, realized), InputError);
}

TEST_CASE("demand_reserve is the largest routed expert weight") {
  CHECK(planner::demand_reserve(moe({0, 1})) == kExpertBytes);
  CHECK(planner::has_routed_experts(moe({0})));
  Workload dense;
  dense.add_tensor({"x", 64, TensorKind::kInput});
  CHECK_FALSE(planner::has_routed_experts(dense));
  CHECK(planner::demand_reserve(dense) == 0);
}
