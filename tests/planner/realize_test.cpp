// realize_routing (planner/realize.h): a plan made on the planned routing, run on a
// realized one. Hand-built one-layer MoE workloads; every realized plan must verify.
#include "planner/realize.h"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

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

// The expert cache (planner/realize.h): a multi-token workload whose plan holds no routed
// expert itself, so that every hit comes from the cache.
namespace {

constexpr int kCacheExperts = 6;

// `layers` MoE layers per token "tT.LL." over experts 0..5 whose weights ("LL.expertE.w")
// are shared by every token; picks[t][l] are token t's experts in layer l (none: the
// planned workload).
Workload moe_tokens(const std::vector<std::vector<std::vector<int>>>& picks, int layers) {
  Workload w;
  w.name = "moe-tokens";
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kInput});
  std::vector<uint32_t> router_w;
  std::vector<std::vector<uint32_t>> ew(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    router_w.push_back(w.add_tensor({fmt::format("L{}.router.w", l), 256, TensorKind::kWeight}));
    for (int e = 0; e < kCacheExperts; ++e) {
      ew[static_cast<size_t>(l)].push_back(
          w.add_tensor({fmt::format("L{}.expert{}.w", l, e), kExpertBytes, TensorKind::kWeight}));
    }
  }
  for (size_t t = 0; t < picks.size(); ++t) {
    uint32_t in = x;
    for (int l = 0; l < layers; ++l) {
      const std::string p = fmt::format("t{}.L{}.", t, l);
      const uint32_t probs = w.add_tensor({p + "router.probs", 16, TensorKind::kActivation});
      w.add_op({p + "router", OpKind::kRouter, Dtype::kBf16, 100, 300,
                {in, router_w[static_cast<size_t>(l)]}, {probs}});
      std::vector<uint32_t> parts = {probs};
      for (int e : picks[t][static_cast<size_t>(l)]) {
        const uint32_t out =
            w.add_tensor({p + fmt::format("expert{}.out", e), 64, TensorKind::kActivation});
        w.add_op({p + fmt::format("expert{}", e), OpKind::kExpert, Dtype::kBf16, 1000,
                  kExpertBytes + 128, {in, ew[static_cast<size_t>(l)][static_cast<size_t>(e)]},
                  {out}});
        parts.push_back(out);
      }
      const bool last = t + 1 == picks.size() && l + 1 == layers;
      const uint32_t y = w.add_tensor(
          {p + "y", 64, last ? TensorKind::kOutput : TensorKind::kActivation});
      w.add_op({p + "moe_combine", OpKind::kElementwise, Dtype::kBf16, 100, 256, parts, {y}});
      in = y;
    }
  }
  return w;
}

// Computes every op in order; expert weights live in ddr (tier 1) and are never fetched
// (`check`: the plan verifies as it is, no op reading an expert weight).
Plan plan_without_experts(const Workload& w, bool check = true) {
  Plan p;
  p.name = "moe-tokens";
  p.tiers = {"hbm", "ddr"};
  p.device_tier = 0;
  p.home.assign(w.tensors.size(), 0);
  for (uint32_t t = 0; t < w.tensors.size(); ++t) {
    if (w.tensors[t].name.find(".expert") != std::string::npos) p.home[t] = 1;
  }
  Program prog;
  for (uint32_t o = 0; o < w.ops.size(); ++o) prog.steps.push_back({StepKind::kCompute, o, 0, kNoEvent, {}});
  p.programs.push_back(std::move(prog));
  if (check) REQUIRE_FALSE(verify_plan(p, w).has_value());
  return p;
}

// Seeded skewed picks: 2 of 6 experts per token and layer, expert e drawn with weight
// 1 / (e + 1)^1.2, the previous token's pair repeated with probability 0.4.
std::vector<std::vector<std::vector<int>>> seeded_picks(int tokens, int layers, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<std::vector<int>>> out(static_cast<size_t>(tokens));
  std::vector<double> weight;
  for (int e = 0; e < kCacheExperts; ++e) weight.push_back(std::pow(e + 1.0, -1.2));
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < layers; ++l) {
      if (t > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < 0.4) {
        out[static_cast<size_t>(t)].push_back(out[static_cast<size_t>(t - 1)][static_cast<size_t>(l)]);
        continue;
      }
      std::discrete_distribution<int> pick(weight.begin(), weight.end());
      const int a = pick(rng);
      int b = a;
      while (b == a) b = pick(rng);
      out[static_cast<size_t>(t)].push_back({std::min(a, b), std::max(a, b)});
    }
  }
  return out;
}

struct CacheCount {
  uint64_t hits = 0, misses = 0, evictions = 0;
};

// A textbook cache of `slots` experts over the accesses in the order they run, groups of
// one token's layer at a time: the group's picks are pinned (never evicted for each
// other); LRU evicts the least recently used, LFU the least picked (then LRU).
CacheCount brute_force(const std::vector<std::vector<std::vector<int>>>& picks, int layers,
                      size_t slots, bool lfu) {
  CacheCount r;
  std::map<std::pair<int, int>, uint64_t> last, count;  // (layer, expert) ->
  std::vector<std::pair<int, int>> cache;
  uint64_t clock = 0;
  for (const auto& token : picks) {
    for (int l = 0; l < layers; ++l) {
      std::vector<std::pair<int, int>> pinned;
      for (int e : token[static_cast<size_t>(l)]) pinned.emplace_back(l, e);
      for (int e : token[static_cast<size_t>(l)]) {
        const std::pair<int, int> key{l, e};
        if (std::ranges::find(cache, key) != cache.end()) {
          ++r.hits;
        } else {
          ++r.misses;
          while (cache.size() >= slots) {
            auto victim = cache.end();
            for (auto it = cache.begin(); it != cache.end(); ++it) {
              if (std::ranges::find(pinned, *it) != pinned.end()) continue;
              const auto rank = [&](const std::pair<int, int>& k) {
                return std::pair{lfu ? count[k] : 0, last[k]};
              };
              if (victim == cache.end() || rank(*it) < rank(*victim)) victim = it;
            }
            if (victim == cache.end()) {
              pinned.clear();
              continue;
            }
            cache.erase(victim);
            ++r.evictions;
          }
          cache.push_back(key);
        }
        last[key] = ++clock;
        ++count[key];
      }
    }
  }
  return r;
}

// The most expert weight bytes the realized plan holds on the device at once.
uint64_t expert_peak(const Plan& p, const Workload& w) {
  uint64_t now = 0, most = 0;
  for (const Step& s : p.programs[0].steps) {
    if (w.tensors[s.target].name.find(".expert") == std::string::npos ||
        w.tensors[s.target].kind != TensorKind::kWeight || s.kind == StepKind::kCompute) {
      continue;
    }
    if (s.kind == StepKind::kPrefetch) now += w.tensors[s.target].bytes;
    if (s.kind == StepKind::kDetach) now -= w.tensors[s.target].bytes;
    most = std::max(most, now);
  }
  return most;
}

}  // namespace

TEST_CASE("expert cache: hits, misses and evictions equal a brute-force LRU and LFU") {
  constexpr int kLayers = 3;
  const Workload planned = moe_tokens(std::vector<std::vector<std::vector<int>>>(
                                          40, std::vector<std::vector<int>>(kLayers)),
                                      kLayers);
  const Plan plan = plan_without_experts(planned);
  for (const uint32_t seed : {1U, 2U, 3U}) {
    const auto picks = seeded_picks(40, kLayers, seed);
    const Workload realized = moe_tokens(picks, kLayers);
    for (const size_t slots : {2U, 3U, 5U, 8U}) {
      for (const bool lfu : {false, true}) {
        CAPTURE(seed);
        CAPTURE(slots);
        CAPTURE(lfu);
        planner::ExpertCache cache;
        cache.kind = lfu ? planner::ExpertCacheKind::kLfu : planner::ExpertCacheKind::kLru;
        cache.bytes = slots * kExpertBytes;
        const auto r = realize_routing(plan, planned, realized, cache);
        CHECK_FALSE(verify_plan(r.plan, realized).has_value());
        const CacheCount ref = brute_force(picks, kLayers, slots, lfu);
        CHECK(r.stats.hits == ref.hits);
        CHECK(r.stats.misses == ref.misses);
        CHECK(r.stats.evictions == ref.evictions);
        CHECK(r.stats.expert_ops == ref.hits + ref.misses);
        CHECK(expert_peak(r.plan, realized) <= cache.bytes);
      }
    }
    // Without a cache every routed expert is a miss, one demand copy at a time.
    const auto off = realize_routing(plan, planned, realized);
    CHECK(off.stats.hits == 0);
    CHECK(expert_peak(off.plan, realized) == kExpertBytes);
  }
}

TEST_CASE("expert cache: the predictor prefetches the next layer's usual experts ahead") {
  // Layer 0 always picks expert 0; layer 1 picks expert 1 on even tokens, 2 on odd ones. A
  // 2-expert LRU cache misses every layer-1 pick; the predictor, at layer 0's router,
  // fetches layer 1's most picked expert (the lower of equals), which even tokens use.
  constexpr int kLayers = 2;
  std::vector<std::vector<std::vector<int>>> picks;
  for (int t = 0; t < 20; ++t) picks.push_back({{0}, {t % 2 == 0 ? 1 : 2}});
  const Workload planned = moe_tokens(std::vector<std::vector<std::vector<int>>>(
                                          20, std::vector<std::vector<int>>(kLayers)),
                                      kLayers);
  const Workload realized = moe_tokens(picks, kLayers);
  const Plan plan = plan_without_experts(planned);
  planner::ExpertCache cache = planner::parse_expert_cache("lru:16KiB", "--expert-cache");
  CHECK(cache.bytes == 4 * kExpertBytes);
  cache.bytes = 2 * kExpertBytes;
  const auto plain = realize_routing(plan, planned, realized, cache);
  cache.predict = true;
  const auto predicted = realize_routing(plan, planned, realized, cache);
  CHECK_FALSE(verify_plan(predicted.plan, realized).has_value());
  CHECK(predicted.stats.predicted > 0);
  CHECK(predicted.stats.predicted_bytes == predicted.stats.predicted * kExpertBytes);
  CHECK(plain.stats.hits == 19);  // layer 0 after the first token
  CHECK(predicted.stats.hits == 19 + 9);  // and layer 1 on even tokens after the first
  CHECK(predicted.stats.hits + predicted.stats.misses == plain.stats.hits + plain.stats.misses);
  CHECK(expert_peak(predicted.plan, realized) <= cache.bytes);
  // A predicted copy is not a demand fetch, and the expert that reads it waits on it.
  const auto& steps = predicted.plan.programs[0].steps;
  size_t checked = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (s.kind != StepKind::kPrefetch || s.demand) continue;
    for (size_t j = i + 1; j < steps.size(); ++j) {
      if (steps[j].kind == StepKind::kCompute &&
          std::ranges::find(realized.ops[steps[j].target].inputs, s.target) !=
              realized.ops[steps[j].target].inputs.end()) {
        CHECK(std::ranges::find(steps[j].wait, s.event) != steps[j].wait.end());
        ++checked;
        break;
      }
    }
  }
  CHECK(checked > 0);
}

TEST_CASE("expert cache: parsed and refused with the flag named") {
  using planner::parse_expert_cache;
  CHECK_FALSE(parse_expert_cache("none", "--expert-cache").on());
  const auto c = parse_expert_cache("lfu:8GiB,predict", "--expert-cache");
  CHECK(c.kind == planner::ExpertCacheKind::kLfu);
  CHECK(c.bytes == (uint64_t{8} << 30));
  CHECK(c.predict);
  CHECK(planner::to_string(c) == "lfu:8GiB,predict");
  CHECK(planner::to_string(parse_expert_cache(planner::to_string(c), "x")).size() > 0);
  const auto refused = [](const std::string& text, const std::string& needle) {
    CAPTURE(text);
    try {
      (void)parse_expert_cache(text, "--expert-cache");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(e.pos().file == "--expert-cache");
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  refused("lru", "needs its size");
  refused("lru:0B", "a size above 0");
  refused("lru:lots", "a size above 0");
  refused("arc:8GiB", "unknown expert cache policy 'arc': none, lru:SIZE or lfu:SIZE");
  refused("lfy:8GiB", "did you mean 'lfu'");
  refused("lru:8GiB,predic", "did you mean 'predict'");
  // A cache smaller than an expert holds none.
  CHECK_THROWS_AS(planner::routing_reserve(moe({0}), parse_expert_cache("lru:1KiB", "x"), "x"),
                  InputError);
  // The cache or one demand copy, and room for the largest realized group's outputs.
  const uint64_t one_output = 64;
  CHECK(planner::routing_reserve(moe({0}), parse_expert_cache("lru:64KiB", "x"), "x") ==
        65536 + one_output);
  CHECK(planner::routing_reserve(moe({0}), {}, "x") == kExpertBytes + one_output);
  CHECK(planner::routing_reserve(moe({1, 2}), {}, "x") == kExpertBytes + 2 * one_output);
}

TEST_CASE("expert cache: a plan's prefetch of a weight the cache holds takes the cache's copy") {
  // Token 0 picks expert 0, which the plan does not expect there: fetched into the cache.
  // The plan fetches expert 0 itself for token 1: that copy is the cache's, handed over
  // (no second copy); the plan's own detach releases it.
  const Workload planned = moe_tokens({{{}}, {{0}}}, 1);
  const Workload realized = moe_tokens({{{0}}, {{0}}}, 1);
  Plan plan = plan_without_experts(planned, /*check=*/false);
  const uint32_t w = tensor(planned, "L0.expert0.w");
  auto& steps = plan.programs[0].steps;
  const auto at = [&](const std::string& name) {
    return static_cast<std::ptrdiff_t>(compute_at(plan, planned, name));
  };
  steps.insert(steps.begin() + at("t1.L0.expert0") + 1, {StepKind::kDetach, w, 0, kNoEvent, {}});
  steps[static_cast<size_t>(at("t1.L0.expert0"))].wait = {0};
  steps.insert(steps.begin() + at("t1.L0.router"), {StepKind::kPrefetch, w, 1, 0, {}});
  // The output of token 1's expert is released after the combine.
  steps.push_back({StepKind::kDetach, tensor(planned, "t1.L0.expert0.out"), 0, kNoEvent, {}});
  REQUIRE_FALSE(verify_plan(plan, planned).has_value());
  planner::ExpertCache cache;
  cache.kind = planner::ExpertCacheKind::kLru;
  cache.bytes = 2 * kExpertBytes;
  const auto r = realize_routing(plan, planned, realized, cache);
  CHECK_FALSE(verify_plan(r.plan, realized).has_value());
  CHECK(r.stats.misses == 1);
  CHECK(r.stats.hits == 1);
  CHECK(r.stats.evictions == 0);
  const uint32_t rw = tensor(realized, "L0.expert0.w");
  const auto& out = r.plan.programs[0].steps;
  CHECK(std::ranges::count_if(out, [&](const Step& s) { return s.kind == StepKind::kPrefetch && s.target == rw; }) == 1);
  CHECK(std::ranges::count_if(out, [&](const Step& s) { return s.kind == StepKind::kDetach && s.target == rw; }) == 1);
  CHECK(expert_peak(r.plan, realized) == kExpertBytes);
}

TEST_CASE("expert cache: a plan made without the routed experts; the cache owns them all") {
  constexpr int kLayers = 2;
  const auto picks = seeded_picks(30, kLayers, 7);
  const Workload full = moe_tokens(std::vector<std::vector<std::vector<int>>>(30, {{0, 1}, {0, 1}}), kLayers);
  const Workload planned = planner::without_routed_experts(full);
  CHECK_FALSE(planner::has_routed_experts(planned));
  CHECK(std::ranges::none_of(planned.tensors, [](const Tensor& t) {
    return t.name.find(".expert") != std::string::npos;
  }));
  CHECK(planned.ops.size() == full.ops.size() - 30 * kLayers * 2);
  CHECK_FALSE(verify_workload(planned).has_value());
  const Workload realized = moe_tokens(picks, kLayers);
  const Plan plan = plan_without_experts(planned);
  planner::ExpertCache cache;
  cache.kind = planner::ExpertCacheKind::kLfu;
  cache.bytes = 3 * kExpertBytes;
  // Without a home for the experts the plan does not know their weights.
  CHECK_THROWS_AS(realize_routing(plan, planned, realized, cache), InputError);
  const auto r = realize_routing(plan, planned, realized, cache, "ddr");
  CHECK_FALSE(verify_plan(r.plan, realized).has_value());
  const uint32_t w = tensor(realized, "L1.expert3.w");
  CHECK(r.plan.tiers[r.plan.home[w]] == "ddr");
  const CacheCount ref = brute_force(picks, kLayers, 3, /*lfu=*/true);
  CHECK(r.stats.hits == ref.hits);
  CHECK(r.stats.misses == ref.misses);
  CHECK(expert_peak(r.plan, realized) <= cache.bytes);
}
