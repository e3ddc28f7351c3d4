// Tests of the `page` pass (planner/paging.h): each combination of its strategies on small
// workloads, its option checks, and the presets `reactive` and `belady` planning exactly as
// the `page` pipelines they stand for while keeping their own names.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/diagnostics.h"
#include "core/plan_json.h"
#include "hw_models/loader.h"
#include "planner/outcome.h"
#include "planner/planner.h"
#include "sim/simulator.h"
#include "tests/support/fixtures.h"
#include "tests/support/plan_builders.h"
#include "tools/study/sim_evaluator.h"

using namespace tierflow;
using namespace tierflow::planner;

namespace {

PlanOutcome plan_with(const Workload& w, const hw::Topology& topo, std::string pipeline,
                      uint64_t budget) {
  PlanRequest req;
  req.pipeline = std::move(pipeline);
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = budget;
  return make_plan(w, topo, req);
}

double stat_of(const PlanOutcome& o, std::string_view pass, std::string_view name) {
  for (const Stat& s : o.stats) {
    if (s.pass == pass && s.name == name) return s.value;
  }
  FAIL("no stat '" << name << "' of pass '" << pass << "'");
  return 0;
}

/// The plan as written, less the pipeline that made it.
std::string plan_text(const PlanOutcome& o) {
  Plan p = *o.plan;
  p.pipeline.clear();
  return write_plan(p, nullptr);
}

}  // namespace

TEST_CASE("page: every strategy combination pages the cycle of three weights") {
  // Budget 80 B: x and two of the three 32 B weights. Each combination's plan verifies
  // and fits when simulated; counting under `page`. On this cycle the least recently used
  // weight is always the next one read, so LRU fetches on every read of a weight not
  // warm, and evicting the furthest next use never fetches more.
  const Workload w = testing::cycle_workload();
  const hw::Topology topo = testing::roomy_unit_hw();
  struct Case {
    std::string options;
    bool lru;
  };
  const std::vector<Case> cases = {
      {"evict=lru", true},
      {"evict=lru,warm=true", true},
      {"evict=furthest", false},
      {"evict=furthest,warm=true", false},
      {"evict=furthest,prefetch=ahead,ahead=2", false},
      {"evict=furthest,prefetch=ahead,ahead=2,warm=true,headroom=0.05", false},
      {"evict=furthest,clock=time", false},
      {"evict=furthest,clock=time,prefetch=ahead,ahead=2", false},
      {"evict=furthest,clock=time,prefetch=link", false},
      {"evict=furthest,clock=time,prefetch=link,warm=true", false},
  };
  double lru_fetches = 0, least_furthest = 1e9;
  for (const Case& c : cases) {
    const std::string pipeline = fmt::format("place,liveness,page{{{}}},insert,verify", c.options);
    CAPTURE(pipeline);
    const PlanOutcome out = plan_with(w, topo, pipeline, 80);
    REQUIRE_MESSAGE(out.ok, out.reason);
    CHECK(out.pipeline == pipeline);  // prints back as written
    REQUIRE_FALSE(verify_plan(*out.plan, w).has_value());
    CHECK(out.estimated_peak <= 80);
    const sim::SimResult r = sim::simulate(*out.plan, w, topo);
    REQUIRE_MESSAGE(!r.error, r.error->message);
    CHECK(study::device_peak(r) <= 80);
    const double fetches = stat_of(out, "page", "fetches");
    CHECK(fetches > 0);
    if (c.options == "evict=lru") lru_fetches = fetches;
    if (!c.lru) least_furthest = std::min(least_furthest, fetches);
    // What the paging bound allows: Belady's MIN fetches 68 B here.
    CHECK(out.bounds.traffic_bytes == 68);
  }
  // Cold LRU: w0 w1 w2 fetched for each of their nine reads.
  CHECK(lru_fetches == 9);
  CHECK(least_furthest < lru_fetches);
}

TEST_CASE("page: the clock in estimated time reports its model") {
  const Workload w = testing::cycle_workload();
  const hw::Topology topo = testing::roomy_unit_hw();
  const PlanOutcome out = plan_with(
      w, topo, "place,liveness,page{evict=furthest,clock=time,prefetch=link},insert,verify", 80);
  REQUIRE_MESSAGE(out.ok, out.reason);
  // Room for paged tensors: 80 B less the activations (4 B in, 4 B out at each op).
  CHECK(stat_of(out, "page", "room for paged tensors") == 72);
  CHECK(stat_of(out, "page", "modelled makespan ms") > 0);
  // Fetching only on a miss (no `schedule` after it to move the fetches): every prefetch
  // sits right before the compute that reads it.
  auto fetched_early = [&](const PlanOutcome& o) {
    size_t early = 0;
    const auto& steps = o.plan->programs.front().steps;
    for (size_t k = 0; k < steps.size(); ++k) {
      if (steps[k].kind != StepKind::kPrefetch) continue;
      size_t c = k;
      while (steps[c].kind != StepKind::kCompute) ++c;
      const Op& op = w.ops[steps[c].target];
      if (std::count(op.inputs.begin(), op.inputs.end(), steps[k].target) == 0) ++early;
    }
    return early;
  };
  const PlanOutcome miss =
      plan_with(w, topo, "place,liveness,page{evict=furthest,clock=time},insert,verify", 80);
  REQUIRE_MESSAGE(miss.ok, miss.reason);
  CHECK(fetched_early(miss) == 0);
  CHECK(stat_of(miss, "page", "fetches") > 0);
}

TEST_CASE("page: options that do not go together are errors at the pass") {
  CHECK(testing::pipeline_error("place,page{prefetch=link}")
            .find("option 'prefetch' of pass 'page': 'link' needs clock=time") !=
        std::string::npos);
  CHECK(testing::pipeline_error("place,page{clock=time}")
            .find("option 'evict' of pass 'page': 'lru' only fetches on a miss") !=
        std::string::npos);
  CHECK(testing::pipeline_error("page{evict=furthest,prefetch=ahead}")
            .find("'ahead' needs ahead=K") != std::string::npos);
  CHECK(testing::pipeline_error("page{evict=furthest,ahead=4}")
            .find("only prefetch=ahead looks ahead") != std::string::npos);
  // Shares of the budget lie in [0, 1): more would leave less than nothing to plan in.
  CHECK(testing::pipeline_error("page{headroom=2}")
            .find("option 'headroom' of pass 'page': '2' is not a share of the budget in [0, 1)") !=
        std::string::npos);
  CHECK(testing::pipeline_error("reactive{keep=100%}").find("is not a share of the budget") !=
        std::string::npos);
  CHECK(testing::pipeline_error("select{headroom=1}").find("is not a share of the budget") !=
        std::string::npos);
  CHECK(testing::pipeline_error("page{clock=days}").find("'days' is not ops or time") !=
        std::string::npos);
  // The presets take the options they always took, and no others.
  CHECK(testing::pipeline_error("belady{clock=ops}").find("pass 'belady' has no option 'clock'") !=
        std::string::npos);
  CHECK(testing::pipeline_error("reactive{prefetch=link}")
            .find("pass 'reactive' has no option 'prefetch'") != std::string::npos);
  CHECK(testing::pipeline_error("reactive{evict=lru,ahead=4}")
            .empty());  // the look-ahead needs furthest
}

TEST_CASE("page: reactive and belady plan as the page pipelines they stand for") {
  // Each preset against its page spelling, on the cycle and on seeded random graphs at a
  // budget that makes them page: the same plan, the same counters, and the preset's own
  // name in the pipeline as run and in --stats.
  const hw::Topology topo = testing::roomy_unit_hw();
  const std::vector<std::pair<std::string, std::string>> presets = {
      {"reactive", "page"},
      {"reactive{evict=furthest}", "page{evict=furthest}"},
      {"reactive{evict=lru,ahead=4}", "page"},
      {"reactive{evict=furthest,warm=true,ahead=4}",
       "page{evict=furthest,prefetch=ahead,ahead=4,warm=true}"},
      {"reactive{evict=furthest,keep=0.5,headroom=0.1}",
       "page{evict=furthest,keep=0.5,headroom=0.1}"},
      {"belady", "page{evict=furthest,clock=time,prefetch=link,warm=true}"},
      {"belady{warm=false}", "page{evict=furthest,clock=time,prefetch=link}"},
  };
  std::vector<std::pair<Workload, uint64_t>> cases = {{testing::cycle_workload(), 80}};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Workload w = testing::random_workload(seed);
    const PlanOutcome free = plan_with(w, topo, "place,liveness,insert,verify", uint64_t{1} << 40);
    REQUIRE_MESSAGE(free.ok, free.reason);
    const uint64_t budget =
        std::max(free.bounds.residency + free.bounds.residency / 4, free.resident_peak * 3 / 5);
    cases.emplace_back(std::move(w), budget);
  }
  size_t paged = 0;
  for (const auto& spelling : presets) {
    const std::string& preset = spelling.first;
    const std::string name = preset.substr(0, preset.find('{'));
    for (const auto& c : cases) {
      const Workload& w = c.first;
      const uint64_t budget = c.second;
      const std::string a = fmt::format("place,liveness,{},insert,schedule,verify", preset);
      const std::string b =
          fmt::format("place,liveness,{},insert,schedule,verify", spelling.second);
      CAPTURE(a);
      CAPTURE(w.name);
      const PlanOutcome x = plan_with(w, topo, a, budget);
      const PlanOutcome y = plan_with(w, topo, b, budget);
      REQUIRE(x.ok == y.ok);
      CHECK(x.pipeline == a);  // the recorded pipeline is the preset's, as written
      CHECK(y.pipeline == b);
      if (!x.ok) {
        // The same failure, named after the pass as written.
        CHECK(x.infeasible == y.infeasible);
        std::string reason = y.reason;
        const size_t at = reason.find("page: ");
        if (at != std::string::npos) reason.replace(at, 4, name);
        CHECK(x.reason == reason);
        continue;
      }
      CHECK(plan_text(x) == plan_text(y));
      REQUIRE(x.stats.size() == y.stats.size());
      for (size_t k = 0; k < x.stats.size(); ++k) {
        const bool pager = x.stats[k].pass == name;
        CHECK(y.stats[k].pass == (pager ? "page" : x.stats[k].pass));
        CHECK(x.stats[k].name == y.stats[k].name);
        CHECK(x.stats[k].value == y.stats[k].value);
        if (pager && x.stats[k].name == "fetches" && x.stats[k].value > 0) ++paged;
      }
    }
  }
  CHECK(paged >= 30);  // most cases page, or the comparison proves little
}

TEST_CASE("page: its counters and a target it cannot meet go to the pass report") {
  // The state keeps the plan; what the passes report travels beside it, in the context.
  const Workload w = testing::cycle_workload();
  const hw::Topology topo = testing::roomy_unit_hw();
  PlanRequest req;
  req.target.device_tier = *topo.tier_index("hbm");
  const Pipeline p = Pipeline::parse("place,liveness,page{evict=furthest},insert,verify");
  {
    PlanState s = initial_state(w, topo, req, 80);
    PassContext ctx;
    REQUIRE(p.run(s, ctx) == PassResult::kChanged);
    CHECK_FALSE(ctx.report.infeasible);
    const auto fetches = std::find_if(ctx.report.stats.begin(), ctx.report.stats.end(),
                                      [](const Stat& st) { return st.name == "fetches"; });
    REQUIRE(fetches != ctx.report.stats.end());
    CHECK(fetches->pass == "page");
    CHECK(fetches->value > 0);
  }
  {
    // 36 B: no op fits, each reading 4 B and a 32 B weight and writing 4 B.
    PlanState s = initial_state(w, topo, req, 36);
    PassContext ctx;
    REQUIRE(p.run(s, ctx) == PassResult::kFailed);
    CHECK(ctx.report.infeasible);
    CHECK(ctx.failure.starts_with("page: does not fit: op "));
  }
}
