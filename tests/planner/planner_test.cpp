// Planner tests: pipeline text, pass goldens on a hand-made graph, and property tests on
// seeded random graphs (STYLE "Tests"): every plan verifies, the simulated peak fits the
// budget, unlimited memory means no transfers, results never beat the lower bounds.
#include "planner/planner.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>

#include "planner/offload.h"
#include "planner/outcome.h"
#include "planner/print.h"
#include "planner/state.h"
#include "sim/simulator.h"
#include "tests/support/fixtures.h"
#include "tests/support/plan_builders.h"
#include "tools/study/sim_evaluator.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

using namespace tierflow;
using namespace tierflow::planner;

namespace {

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
        "place,liveness,distance{select=8,prefetch=2,release=1},insert,verify",
        "reorder,place{multi=true},liveness,belady{warm=false},insert,schedule{room=soonest},"
        "verify"}) {
    CHECK(Pipeline::parse(text).str() == text);
  }
  for (const Policy& p : policies()) {
    CHECK(Pipeline::parse(p.pipeline).str() == p.pipeline);
  }
}

TEST_CASE("the tierflow portfolio: pipelines that print back as written, each said once") {
  const auto table = tierflow_portfolio();
  CHECK(table.size() >= 10);
  for (size_t i = 0; i < table.size(); ++i) {
    CAPTURE(table[i].pipeline);
    CHECK(Pipeline::parse(table[i].pipeline).str() == table[i].pipeline);
    CHECK(!table[i].tries.empty());
    // A variant varies an earlier entry that is no variant itself (planner/search.h).
    if (table[i].variant_of >= 0) {
      const auto v = static_cast<size_t>(table[i].variant_of);
      REQUIRE(v < i);
      CHECK(table[v].variant_of < 0);
      CHECK((!table[i].large || table[v].large));  // run in a cut search only with it
    }
    for (size_t j = 0; j < i; ++j) {
      CHECK(table[j].pipeline != table[i].pipeline);
      CHECK(table[j].tries != table[i].tries);
    }
  }
  // Every other policy's pipeline is tried as it is.
  for (const Policy& p : policies()) {
    if (p.name == "tierflow" || p.name == "resident") continue;
    CAPTURE(p.name);
    CHECK(std::any_of(table.begin(), table.end(),
                      [&](const PortfolioEntry& e) { return e.pipeline == p.pipeline; }));
  }
}

TEST_CASE("pipeline errors name the column and the nearest name") {
  CHECK(testing::pipeline_error("place,selct,insert") ==
        "--pipeline:1:7: unknown pass 'selct'; did you mean 'select'?");
  CHECK(testing::pipeline_error("place,select{min-byte=1MiB}") ==
        "--pipeline:1:7: pass 'select' has no option 'min-byte'; did you mean 'min-bytes'? (it "
        "takes min-bytes, preferred, headroom, exposed, lead)");
  CHECK(
      testing::pipeline_error("schedule{preferred=soon}") ==
      "--pipeline:1:1: option 'preferred' of pass 'schedule': 'soon' is not a finite non-negative "
      "number");
  CHECK(testing::pipeline_error("place,,verify") == "--pipeline:1:7: expected a pass name");
  CHECK(testing::pipeline_error("select{lead=1") == "--pipeline:1:14: unclosed '{'");
  CHECK(testing::pipeline_error("schedule{room=early}") ==
        "--pipeline:1:1: option 'room' of pass 'schedule': 'early' is not latest or soonest");
  CHECK(testing::pipeline_error("verify{x=1}") ==
        "--pipeline:1:1: pass 'verify' has no option 'x' (it takes none)");
  CHECK(testing::pipeline_error("") == "--pipeline:1:1: empty pipeline");
}

TEST_CASE("unknown policy hints: the nearest name, another system's closest policy, the list") {
  CHECK(unknown_policy_hint("hyperofload") == "; did you mean 'hyperoffload'?");
  CHECK(unknown_policy_hint("Hyper-Offload") == "; did you mean 'hyperoffload'?");
  CHECK(unknown_policy_hint("LAYERWISE") == "; did you mean 'layerwise'?");
  const std::string layerwise =
      "is closest to policy 'layerwise': stream every weight, the next layer's during this one "
      "(DeepSpeed ZeRO style)";
  CHECK(unknown_policy_hint("flexgen") == "; FlexGen " + layerwise);
  CHECK(unknown_policy_hint("FlexGen") == "; FlexGen " + layerwise);
  CHECK(unknown_policy_hint("DeepSpeed") == "; DeepSpeed " + layerwise);
  CHECK(unknown_policy_hint("zero") == "; ZeRO " + layerwise);
  CHECK(unknown_policy_hint("ZeRO-Inference") == "; ZeRO-Inference " + layerwise);
  CHECK(unknown_policy_hint("zero_offload") == "; ZeRO-Offload " + layerwise);
  CHECK(unknown_policy_hint("MindSpore") ==
        "; MindSpore is closest to policy 'distance': op-count distances for select, prefetch "
        "and release (MindSpore's strategy)");
  for (const auto& c : {std::pair{"lru", "LRU eviction"}, std::pair{"vLLM", "vLLM"},
                        std::pair{"UVM", "UVM (unified memory)"}}) {
    const auto& [name, system] = c;
    CAPTURE(c.first);
    CHECK(unknown_policy_hint(name) ==
          fmt::format("; {} is closest to policy 'reactive': fetch on a miss, evict least "
                      "recently used (a runtime without look-ahead)",
                      system));
  }
  CHECK(unknown_policy_hint("greedy") ==
        "; the policies are resident, reactive, layerwise, distance, hyperoffload, tierflow");
}

TEST_CASE("property: every policy on seeded random graphs") {
  const hw::Topology topo = testing::roomy_unit_hw();
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
      const uint64_t peak = study::device_peak(r);
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

TEST_CASE("property: paging pipelines and the scored portfolio on seeded random graphs") {
  // Belady paging in estimated time (warm and cold), reactive paging with look-ahead, and
  // tierflow with the simulator in the loop (its whole portfolio, each plan scored): every
  // plan verifies, its simulated peak fits the budget, and it never beats the bounds (the
  // paging bound included).
  const hw::Topology topo = testing::roomy_unit_hw();
  Target target;
  target.device_tier = *topo.tier_index("hbm");
  size_t planned = 0, offloaded = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    testing::RandomWorkloadOptions wo;
    wo.ops = 30 + static_cast<uint32_t>(seed % 20);
    const Workload w = testing::random_workload(seed, wo);
    study::SimEvaluator eval(w, topo);
    for (const std::string pipeline :
         {"place,liveness,belady,insert,verify", "place,liveness,belady{warm=false},insert,verify",
          "reorder,place{multi=true},liveness,belady,insert,schedule,verify",
          "place,liveness,reactive{evict=furthest,warm=true,ahead=4},insert,schedule,verify", ""}) {
      CAPTURE(seed);
      CAPTURE(pipeline);
      PlanRequest req;
      req.pipeline = pipeline;
      req.target = target;
      req.target.budget = uint64_t{1} << 40;
      const PlanOutcome free = make_plan(w, topo, req);
      REQUIRE_MESSAGE(free.ok, free.reason);
      const uint64_t budget =
          std::max(free.bounds.residency + free.bounds.residency / 4, free.resident_peak * 3 / 5);
      req.target.budget = budget;
      if (pipeline.empty()) req.evaluator = &eval;  // tierflow's portfolio
      const PlanOutcome out = make_plan(w, topo, req);
      if (!out.ok) {
        CHECK_MESSAGE(out.infeasible, out.reason);
        continue;
      }
      REQUIRE_FALSE(verify_plan(*out.plan, w).has_value());
      CHECK(out.estimated_peak <= budget);
      const sim::SimResult r = sim::simulate(*out.plan, w, topo);
      REQUIRE_MESSAGE(!r.error, r.error->message);
      CHECK(study::device_peak(r) <= budget);
      CHECK(r.makespan >= out.bounds.makespan_ps);
      ++planned;
      if (transfers(*out.plan) > 0) ++offloaded;
    }
  }
  CHECK(planned >= 60);
  CHECK(offloaded >= 50);
}

TEST_CASE("the paging bound is Belady's MIN byte by byte") {
  // x (4 B) and three 32 B weights read in turn, w0 w1 w2 w0 w1 w2 w0 w1 w2, one per op,
  // each op also reading the 4 B activation of the op before; budget 80 B.
  //   warm start, by first use: x 4, w0 32, w1 32, w2 12 of 32          (80 B)
  //   op2 w2: fetch 20; evict x 4 (never read again), 16 of w1 (next op4 > w0's op3)
  //   op4 w1: fetch 16; evict 16 of w0 (next op6 > w2's op5)
  //   op6 w0: fetch 16; evict 16 of w2 (next op8 > w1's op7)
  //   op8 w2: fetch 16                                          MIN: 20+16+16+16 = 68 B
  // The windows give less: in thirds each window reads x or an activation and all three
  // weights, 100 B, so 3 x (100 - 80) = 60 B; halves 2 x 20 B; pairs and single ops fit.
  // Cut into 1 MiB pages (as the bound once was), every tensor here counts as nothing.
  const Workload w = testing::cycle_workload(/*flops=*/100);
  const hw::Topology topo = testing::roomy_unit_hw();
  PlanRequest req;
  req.pipeline = "place,liveness,belady,insert,verify";
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = 80;
  const PlanOutcome out = make_plan(w, topo, req);
  REQUIRE_MESSAGE(out.ok, out.reason);
  CHECK(out.bounds.traffic_bytes == 68);
  // The plan moves whole tensors: at least the bound's bytes, and never faster than it.
  uint64_t fetched = 0;
  for (const Step& st : out.plan->programs.front().steps) {
    if (st.kind == StepKind::kPrefetch) fetched += w.tensors[st.target].bytes;
  }
  CHECK(fetched >= 68);
  const sim::SimResult r = sim::simulate(*out.plan, w, topo);
  REQUIRE(!r.error);
  CHECK(r.makespan >= out.bounds.makespan_ps);
}

TEST_CASE("the paging bound starts tensors pinned off the device on their tier") {
  // The graph of the test above (x, then w0 w1 w2 w0 w1 w2 w0 w1 w2 with 4 B activations),
  // every weight pinned to ddr: no plan has them on the device before it fetches them.
  //   no budget to speak of (1 MiB): each weight fetched once               32 x 3 = 96 B
  //   budget 80 B, warm start only x (4 B); w0, w1 cold:
  //   op0 w0: fetch 32; op1 w1: fetch 32; op2 w2: fetch 32, evict x 4, 16 of w1   (96 B)
  //   op4 w1: fetch 16; op6 w0: fetch 16; op8 w2: fetch 16 (as unpinned) 96 + 48 = 144 B
  // Unpinned, the bounds are 0 B and 68 B: the warm start held 76 B of weights.
  // Ops of 1,000 ns: a prefetch issued one op ahead hides a copy (under 200 ns), so the
  // streamed plan holds two weights at a time.
  const Workload w = testing::cycle_workload(/*flops=*/1000);
  const hw::Topology topo = testing::roomy_unit_hw();
  for (const auto& c :
       {std::tuple<uint64_t, uint64_t, uint64_t>{uint64_t{1} << 20, 0, 96}, {80, 68, 144}}) {
    const auto& [budget, unpinned, pinned] = c;
    CAPTURE(std::get<0>(c));
    PlanRequest req;
    req.pipeline = "place,liveness,belady,insert,verify";
    req.target.device_tier = *topo.tier_index("hbm");
    req.target.budget = budget;
    const PlanOutcome free = make_plan(w, topo, req);
    REQUIRE_MESSAGE(free.ok, free.reason);
    CHECK(free.bounds.traffic_bytes == unpinned);

    // Pinned tensors are streamed by `place` itself, fetched for each use; `schedule`
    // moves the prefetches late enough for the budget.
    req.pipeline = "place,liveness,insert,schedule,verify";
    req.pins = {{TensorKind::kWeight, {{static_cast<uint32_t>(*topo.tier_index("ddr")), 1.0}}}};
    const PlanOutcome out = make_plan(w, topo, req);
    REQUIRE_MESSAGE(out.ok, out.reason);
    CHECK(out.bounds.traffic_bytes == pinned);
    // The plan streams every weight for each use (9 x 32 B): never fewer bytes than the
    // bound, never faster than it.
    uint64_t fetched = 0;
    for (const Step& st : out.plan->programs.front().steps) {
      if (st.kind == StepKind::kPrefetch) fetched += w.tensors[st.target].bytes;
    }
    CHECK(fetched >= pinned);
    const sim::SimResult r = sim::simulate(*out.plan, w, topo);
    REQUIRE(!r.error);
    CHECK(r.makespan >= out.bounds.makespan_ps);
    CHECK(out.bounds.traffic_ps > 0);
  }
}

TEST_CASE("max-overhead finds the same least budget under any ceiling") {
  // Two decode tokens through four layers: op i of a token reads the 4 B activation before
  // it and its layer's 32 B weight, 10 FLOP (10 ns). Everything resident peaks at 140 B
  // (the weights' 128 B and three 4 B tensors); a copy takes over
  // 150 ns (ddr and pcie latency, DMA setup), more than the 1% of the 80 ns compute, so
  // the least budget within the overhead is the resident peak, whatever the ceiling. (The
  // search once took its upper end from the full budget's peak without planning at it:
  // every budget it planned lay below 140 B, and it returned the ceiling.)
  Workload w;
  w.name = "steady-decode";
  uint32_t wt[4];
  for (int k = 0; k < 4; ++k) {
    wt[k] = w.add_tensor({fmt::format("w{}", k), 32, TensorKind::kWeight});
  }
  uint32_t a = w.add_tensor({"x", 4, TensorKind::kInput});
  for (int i = 0; i < 8; ++i) {
    const TensorKind kind = i == 7 ? TensorKind::kOutput : TensorKind::kActivation;
    const uint32_t out = w.add_tensor({fmt::format("a{}", i), 4, kind});
    Op op{fmt::format("op{}", i), OpKind::kElementwise, Dtype::kBf16, 10, 0, {a, wt[i % 4]}};
    op.outputs = {out};
    op.layer = i % 4;
    w.add_op(std::move(op));
    a = out;
  }
  const hw::Topology topo = testing::roomy_unit_hw();
  study::SimEvaluator eval(w, topo);
  PlanRequest req;
  req.target.device_tier = *topo.tier_index("hbm");
  req.evaluator = &eval;
  req.max_overhead = 0.01;
  std::vector<uint64_t> answers;
  for (const uint64_t ceiling : {uint64_t{1} << 10, uint64_t{1} << 20}) {
    CAPTURE(ceiling);
    req.target.budget = ceiling;
    const PlanOutcome out = make_plan(w, topo, req);
    REQUIRE_MESSAGE(out.ok, out.reason);
    REQUIRE(out.evaluation);
    const auto limit = static_cast<int64_t>(static_cast<double>(out.bounds.compute_ps) * 1.01);
    CHECK(out.evaluation->makespan_ps <= limit);
    CHECK(out.resident_peak == 140);
    CHECK(out.budget == out.resident_peak);
    CHECK(out.evaluation->device_peak <= out.budget);
    answers.push_back(out.budget);
    // The least: one byte less (the resolution at this size) exceeds the overhead.
    PlanRequest below = req;
    below.max_overhead = -1;
    below.target.budget = out.budget - 1;
    const PlanOutcome less = make_plan(w, topo, below);
    CHECK_FALSE((less.ok && less.evaluation && less.evaluation->ok &&
                 less.evaluation->makespan_ps <= limit));
  }
  CHECK(answers[0] == answers[1]);
}

TEST_CASE("infeasible budgets are results with a reason") {
  const hw::Topology topo = testing::roomy_unit_hw();
  const Workload w = testing::random_workload(7);
  PlanRequest req;
  req.policy = "hyperoffload";
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = 64;  // below what single ops need
  const PlanOutcome out = make_plan(w, topo, req);
  CHECK_FALSE(out.ok);
  CHECK(out.infeasible);
  CHECK(out.reason.find("does not fit") != std::string::npos);
  CHECK(out.reason.find("; largest: ") != std::string::npos);
  // The bytes live at the peak by kind, largest first, with their tensor counts.
  const size_t at = out.reason.find("; live there: ");
  REQUIRE(at != std::string::npos);
  CHECK(out.reason.find(" tensor", at) < out.reason.find("; largest: "));
}

TEST_CASE("a KV-bound step that does not fit says the KV cache is what fills it") {
  const hw::Topology topo = testing::roomy_unit_hw();
  traces::GenOptions g;
  g.phase = traces::Phase::kDecode;
  g.layers = 2;
  g.batch = 64;
  g.context = 32768;
  g.tokens = 1;
  const Workload w = traces::generate(
      traces::load_arch(std::string(TIERFLOW_SOURCE_DIR) + "/configs/models/llama-3-8b.yaml"), g);
  PlanRequest req;
  req.policy = "resident";
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = uint64_t{1} << 30;
  const PlanOutcome out = make_plan(w, topo, req);
  REQUIRE_FALSE(out.ok);
  CAPTURE(out.reason);
  CHECK(out.reason.find("; live there: kv 16.1GiB (258 tensors), weight 2.77GiB (15 tensors)") !=
        std::string::npos);
}

TEST_CASE("the same request gives the same plan") {
  const hw::Topology topo = testing::roomy_unit_hw();
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

TEST_CASE("split_runs: a persisting tensor stored since its last change leaves after its last use") {
  // A KV block written by a decode step and only read by the later ones (FlexGen's KV cache
  // on disk): once stored, the device need not keep it to the end; a block changed in its
  // last run must stay (its only current copy is on the device).
  for (const bool last_modifies : {false, true}) {
    CAPTURE(last_modifies);
    Workload w;
    w.name = "kv-block";
    const uint32_t x = w.add_tensor({"x", 8, TensorKind::kInput});
    const uint32_t kv = w.add_tensor({"kv", 24, TensorKind::kKv});
    uint32_t a = x;
    const auto filler = [&](const std::string& name) {
      const uint32_t out = w.add_tensor({name + ".out", 8, TensorKind::kActivation});
      w.add_op({name, OpKind::kElementwise, Dtype::kBf16, 1000, 0, {a}, {out}});
      a = out;
    };
    w.add_op({"write", OpKind::kElementwise, Dtype::kBf16, 100, 0, {x}, {kv}});
    Op append{"append", OpKind::kAttention, Dtype::kBf16, 100, 0, {x}, {}};
    append.updates = {kv};
    w.add_op(std::move(append));
    for (const char* name : {"f0", "f1", "f2"}) filler(name);
    w.add_op({"read1", OpKind::kAttention, Dtype::kBf16, 100, 0, {kv, a}, {}});
    for (const char* name : {"f3", "f4", "f5"}) filler(name);
    Op read2{"read2", OpKind::kAttention, Dtype::kBf16, 100, 0, {kv, a}, {}};
    if (last_modifies) {
      read2.inputs = {a};
      read2.updates = {kv};
    }
    w.add_op(std::move(read2));
    const uint32_t y = w.add_tensor({"y", 8, TensorKind::kOutput});
    w.add_op({"head", OpKind::kElementwise, Dtype::kBf16, 100, 0, {a}, {y}});
    REQUIRE_FALSE(verify_workload(w));

    const hw::Topology topo = testing::roomy_unit_hw();
    PlanRequest req;
    req.target.device_tier = *topo.tier_index("hbm");
    PlanState s = initial_state(w, topo, req, uint64_t{1} << 20);
    PassContext ctx;
    REQUIRE(Pipeline::parse("place,liveness").run(s, ctx) != PassResult::kFailed);
    // Uses of kv: append (1), read1 (5), read2 (9); leave it between each.
    const std::vector<Run> runs =
        split_runs(s, kv, {0, 1},
                   SplitOptions{.tier = static_cast<uint32_t>(*topo.tier_index("ddr"))});
    REQUIRE(runs.size() == 3);
    CHECK(runs[0].store);  // the only current copy, read again later
    CHECK_FALSE(runs[1].store);
    CHECK(runs[1].fetched);
    if (last_modifies) {
      CHECK(runs[2].release == kNone);  // kept: the device holds the only current copy
    } else {
      CHECK(runs[2].release == runs[2].last + 1);
      CHECK_FALSE(runs[2].store);
    }
  }
}

// delta_of: the profile change of a tensor's new runs, as disjoint ascending pieces, is the
// new occupancy less the old one at every position; the common case (one run split into
// runs inside it) takes a shortcut that must agree with the general sweep.
TEST_CASE("delta_of is the new occupancy less the old, position by position") {
  Workload w;
  const uint32_t x = w.add_tensor({"x", 8, TensorKind::kWeight});
  for (int i = 0; i < 40; ++i) {
    const uint32_t y = w.add_tensor({fmt::format("y{}", i), 4, TensorKind::kOutput});
    w.add_op({fmt::format("op{}", i), OpKind::kElementwise, Dtype::kBf16, 100, 0, {x}, {y}});
  }
  REQUIRE_FALSE(verify_workload(w));
  const hw::Topology topo = testing::roomy_unit_hw();
  PlanRequest req;
  req.target.device_tier = *topo.tier_index("hbm");
  PlanState s = initial_state(w, topo, req, uint64_t{1} << 20);
  const uint32_t n = s.positions();
  std::mt19937_64 rng(7);
  // Runs over [lo, hi): ascending and apart when `apart`, else anywhere.
  auto runs_in = [&](uint32_t lo, uint32_t hi, size_t count, bool apart) {
    std::vector<Run> out;
    uint32_t at = lo;
    for (size_t k = 0; k < count && at < hi; ++k) {
      Run r;
      r.alloc = apart ? at + static_cast<uint32_t>(rng() % 3) : static_cast<uint32_t>(rng() % n);
      const uint32_t len = 1 + static_cast<uint32_t>(rng() % 6);
      r.release = rng() % 9 == 0 ? kNone : std::min(r.alloc + len, apart ? hi : n);
      r.hold = apart ? 0 : static_cast<uint32_t>(rng() % 3);
      r.first = r.last = r.alloc;
      if (apart && (r.alloc >= hi || (r.release != kNone && r.release > hi))) break;
      if (apart && r.release == kNone && hi < n) r.release = hi;
      out.push_back(r);
      at = (r.release == kNone ? n : r.release) + 1;
    }
    return out;
  };
  auto level = [&](const std::vector<Run>& runs, uint32_t p) {
    int64_t b = 0;
    for (const Span& sp : occupancy(runs, n)) b += sp.from <= p && p <= sp.to ? 8 : 0;
    return b;
  };
  for (int round = 0; round < 3000; ++round) {
    CAPTURE(round);
    const bool inside = round % 2 == 0;
    std::vector<Run> was;
    std::vector<Run> now;
    if (inside) {
      const auto lo = static_cast<uint32_t>(rng() % (n / 2));
      const auto hi = lo + 1 + static_cast<uint32_t>(rng() % (n - lo - 1));
      Run whole;
      whole.alloc = whole.first = lo;
      whole.last = hi - 1;
      whole.release = rng() % 4 == 0 ? kNone : hi;
      was = {whole};
      now = runs_in(lo, whole.release == kNone ? n : hi, 1 + rng() % 5, true);
    } else {
      was = runs_in(0, n, 1 + rng() % 3, false);
      now = runs_in(0, n, rng() % 4, false);
    }
    s.tensors[x].runs = was;
    const auto delta = delta_of(s, x, now);
    uint32_t prev_end = 0;
    for (size_t i = 0; i < delta.size(); ++i) {
      CHECK(delta[i].second != 0);
      CHECK(delta[i].first.from <= delta[i].first.to);
      if (i > 0) CHECK(delta[i].first.from >= prev_end);
      prev_end = delta[i].first.to + 1;
    }
    for (uint32_t p = 0; p < n; ++p) {
      int64_t sum = 0;
      for (const auto& [span, d] : delta) sum += span.from <= p && p <= span.to ? d : 0;
      CHECK(sum == level(now, p) - level(was, p));
    }
  }
}
