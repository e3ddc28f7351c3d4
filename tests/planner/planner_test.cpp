// Planner tests: pipeline text, pass goldens on a hand-made graph, and property tests on
// seeded random graphs (STYLE "Tests"): every plan verifies, the simulated peak fits the
// budget, unlimited memory means no transfers, results never beat the lower bounds.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/diagnostics.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "planner/print.h"
#include "sim/simulator.h"
#include "tools/sim_evaluator.h"
#include "tests/support/plan_builders.h"

using namespace tierflow;
using namespace tierflow::planner;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;
const std::string kFixture = kSource + "/tests/fixtures/unit_hw.yaml";

hw::Topology roomy_unit_hw() {
  return hw::load_topology(kFixture, hw::LoadOptions{{"tiers.hbm.capacity=64MiB",
                                                      "tiers.ddr.capacity=64MiB"},
                                                     false});
}

std::string error_of(std::string_view pipeline) {
  try {
    (void)Pipeline::parse(pipeline);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

size_t transfers(const Plan& p) {
  size_t n = 0;
  for (const Program& prog : p.programs) {
    for (const Step& s : prog.steps) {
      n += s.kind == StepKind::kPrefetch || s.kind == StepKind::kStore ? 1 : 0;
    }
  }
  return n;
}

}  // namespace

TEST_CASE("pipelines print back as written") {
  for (std::string_view text :
       {"place,liveness,select{min-bytes=4MiB,preferred=1.5},insert,schedule{preferred=1.5},verify",
        "place{tier=ddr,multi=true},reorder,liveness,select,insert,refine{iterations=2},verify",
        "place,liveness,distance{select=8,prefetch=2,release=1},insert,verify"}) {
    CHECK(Pipeline::parse(text).str() == text);
  }
  for (const Policy& p : policies()) {
    CHECK(Pipeline::parse(p.pipeline).str() == p.pipeline);
  }
}

TEST_CASE("pipeline errors name the column and the nearest name") {
  CHECK(error_of("place,selct,insert") ==
        "--pipeline:1:7: unknown pass 'selct'; did you mean 'select'?");
  CHECK(error_of("place,select{min-byte=1MiB}") ==
        "--pipeline:1:7: pass 'select' has no option 'min-byte'; did you mean 'min-bytes'? (it "
        "takes min-bytes, preferred, headroom, exposed, lead)");
  CHECK(error_of("schedule{preferred=soon}") ==
        "--pipeline:1:1: option 'preferred' of pass 'schedule': 'soon' is not a non-negative "
        "number");
  CHECK(error_of("place,,verify") == "--pipeline:1:7: expected a pass name");
  CHECK(error_of("select{lead=1") == "--pipeline:1:14: unclosed '{'");
  CHECK(error_of("verify{x=1}") ==
        "--pipeline:1:1: pass 'verify' has no option 'x' (it takes none)");
  CHECK(error_of("") == "--pipeline:1:1: empty pipeline");
}

TEST_CASE("property: every policy on seeded random graphs") {
  const hw::Topology topo = roomy_unit_hw();
  Target target;
  target.device_tier = *topo.tier_index("hbm");
  size_t planned = 0, offloaded = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    testing::RandomWorkloadOptions wo;
    wo.ops = 30 + static_cast<uint32_t>(seed % 20);
    const Workload w = testing::random_workload(seed, wo);
    for (const Policy& policy : policies()) {
      CAPTURE(seed);
      CAPTURE(policy.name);
      PlanRequest req;
      req.policy = std::string(policy.name);
      req.target = target;

      // Unlimited memory: nothing moves.
      req.target.budget = uint64_t{1} << 40;
      const PlanOutcome free = make_plan(w, topo, req);
      REQUIRE_MESSAGE(free.ok, free.reason);
      CHECK_FALSE(verify_plan(*free.plan, w).has_value());
      CHECK(transfers(*free.plan) == 0);

      // A budget between the residency bound and the resident peak.
      const uint64_t budget =
          std::max(free.bounds.residency + free.bounds.residency / 4, free.resident_peak * 3 / 5);
      req.target.budget = budget;
      const PlanOutcome out = make_plan(w, topo, req);
      if (!out.ok) {
        CHECK_MESSAGE(out.infeasible, out.reason);  // a failure that is not "does not fit" is a bug
        continue;
      }
      REQUIRE_FALSE(verify_plan(*out.plan, w).has_value());
      CHECK(out.estimated_peak <= budget);
      const sim::SimResult r = sim::simulate(*out.plan, w, topo);
      REQUIRE_MESSAGE(!r.error, r.error->message);
      const uint64_t peak = cli::device_peak(r, topo, *out.plan);
      CHECK(peak <= budget);
      CHECK(peak >= out.bounds.residency);
      CHECK(r.makespan >= out.bounds.makespan_ps);
      CHECK(r.makespan >= out.bounds.compute_ps);
      ++planned;
      if (transfers(*out.plan) > 0) ++offloaded;
    }
  }
  // The budgets must mostly be met by offloading, or the checks above prove little.
  CHECK(planned >= 100);  // resident, and often layerwise (weights only), do not fit
  CHECK(offloaded >= 80);
}

TEST_CASE("infeasible budgets are results with a reason") {
  const hw::Topology topo = roomy_unit_hw();
  const Workload w = testing::random_workload(7);
  PlanRequest req;
  req.policy = "hyperoffload";
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = 64;  // below what single ops need
  const PlanOutcome out = make_plan(w, topo, req);
  CHECK_FALSE(out.ok);
  CHECK(out.infeasible);
  CHECK(out.reason.find("does not fit") != std::string::npos);
  CHECK(out.reason.find("largest live there") != std::string::npos);
}

TEST_CASE("the same request gives the same plan") {
  const hw::Topology topo = roomy_unit_hw();
  const Workload w = testing::random_workload(3);
  PlanRequest req;
  req.policy = "tierflow";
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = 20000;
  const PlanOutcome a = make_plan(w, topo, req);
  const PlanOutcome b = make_plan(w, topo, req);
  REQUIRE(a.ok == b.ok);
  if (a.ok) CHECK(plan_text(*a.plan, w) == plan_text(*b.plan, w));
}
