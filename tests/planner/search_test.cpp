// The tierflow policy's search (planner/search.h) on seeded random graphs, with the
// simulator as its evaluator: the same plan, score, counters and notes whatever the number
// of threads, and never a longer simulated makespan than the baseline policies, whose
// pipelines are in its portfolio (the gate only skips plans that cannot beat the best).
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>

#include "hw_models/loader.h"
#include "planner/outcome.h"
#include "planner/pass.h"
#include "planner/planner.h"
#include "planner/print.h"
#include "planner/realize.h"
#include "planner/state.h"
#include "sim/simulator.h"
#include "tests/support/plan_builders.h"
#include "tools/study/sim_evaluator.h"

using namespace tierflow;
using namespace tierflow::planner;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

std::string notes_of(const PlanOutcome& o) {
  std::string out;
  for (const std::string& n : o.notes) out += n + "\n";
  for (const PortfolioTrial& t : o.portfolio) {
    out += t.pipeline + " " + t.result + (t.best ? " best" : "") + "\n";
  }
  for (const Stat& s : o.stats) out += s.pass + " " + s.name + " " + std::to_string(s.value) + "\n";
  return out;
}

/// The unit topology with 64 MiB of HBM and of DDR, and its PCIe link at `pcie` if given.
hw::Topology small_topology(const std::string& pcie = "") {
  std::vector<std::string> sets = {"tiers.hbm.capacity=64MiB", "tiers.ddr.capacity=64MiB"};
  if (!pcie.empty()) sets.push_back("links.pcie.bandwidth=" + pcie);
  return hw::load_topology(kSource + "/tests/fixtures/unit_hw.yaml", hw::LoadOptions{sets, false});
}

/// Seeded random workload `seed` and a request at a budget between its residency bound and
/// its resident peak, so that plans offload.
struct Offloading {
  Workload w;
  PlanRequest req;
};
Offloading offloading(uint64_t seed, const hw::Topology& topo) {
  testing::RandomWorkloadOptions wo;
  wo.ops = 40 + static_cast<uint32_t>(seed % 25);
  Offloading o{testing::random_workload(seed, wo), {}};
  o.req.target.device_tier = *topo.tier_index("hbm");
  o.req.target.budget = uint64_t{1} << 40;
  o.req.policy = "resident";
  const PlanOutcome free = make_plan(o.w, topo, o.req);
  REQUIRE(free.ok);
  o.req.target.budget =
      std::max(free.bounds.residency + free.bounds.residency / 4, free.resident_peak / 2);
  return o;
}

/// The search on seeded workloads, cut when they have `cut_ops` ops or more: the same
/// result on any number of threads, the portfolio as --explain prints it, and a makespan
/// no worse than each baseline's. Returns how many baselines were compared.
size_t check_search(uint64_t seeds, size_t cut_ops) {
  const hw::Topology topo = small_topology();
  size_t compared = 0;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    CAPTURE(seed);
    const auto [w, offload] = offloading(seed, topo);
    PlanRequest req = offload;
    req.policy = "tierflow";
    req.search_cut_ops = cut_ops;
    const bool cut = w.ops.size() >= cut_ops;

    std::optional<PlanOutcome> first;
    for (unsigned threads : {1U, 2U, 5U}) {
      CAPTURE(threads);
      study::SimEvaluator eval(w, topo);
      PlanRequest r = req;
      r.evaluator = &eval;
      r.threads = threads;
      PlanOutcome out = make_plan(w, topo, r);
      if (!first) {
        first = std::move(out);
        continue;
      }
      REQUIRE(out.ok == first->ok);
      CHECK(out.reason == first->reason);
      CHECK(out.pipeline == first->pipeline);
      CHECK(notes_of(out) == notes_of(*first));
      if (!out.ok) continue;
      CHECK(plan_text(*out.plan, w) == plan_text(*first->plan, w));
      REQUIRE(out.evaluation.has_value());
      CHECK(out.evaluation->makespan_ps == first->evaluation->makespan_ps);
    }
    if (!cut) {
      // With passes printed, nothing is shared, skipped or stopped early (every pipeline
      // runs to its end and is scored, and no search is cut): the same winner, plan and
      // score. What the search shares (prefixes, repeated plans and selections, the gate)
      // changes no outcome.
      study::SimEvaluator eval(w, topo);
      PlanRequest r = req;
      r.evaluator = &eval;
      r.threads = 1;
      r.after_pass = [](std::string_view, const PlanState&) {};
      const PlanOutcome full = make_plan(w, topo, r);
      REQUIRE(full.ok == first->ok);
      CHECK(full.pipeline == first->pipeline);
      if (full.ok) {
        CHECK(plan_text(*full.plan, w) == plan_text(*first->plan, w));
        CHECK(full.evaluation->makespan_ps == first->evaluation->makespan_ps);
      }
    }
    // The portfolio as --explain prints it: the table's pipelines in order, each with a
    // result, one of them the best.
    const auto table = tierflow_portfolio();
    REQUIRE(!first->portfolio.empty());
    REQUIRE(first->portfolio.size() <= table.size());
    size_t best = 0;
    for (size_t i = 0; i < first->portfolio.size(); ++i) {
      const PortfolioTrial& t = first->portfolio[i];
      CHECK(t.pipeline == table[i].pipeline);
      CHECK(t.tries == table[i].tries);
      CHECK(!t.result.empty());
      CHECK((t.result == "not run: search cut") == (cut && !table[i].large));
      // An entry for routed experts runs only where there are some.
      CHECK((t.result == "not run: no routed experts") ==
            (!(cut && !table[i].large) && table[i].experts && !has_routed_experts(w)));
      if (t.best) {
        ++best;
        CHECK(t.result.rfind("skipped", 0) != 0);  // the best was simulated
      }
    }
    CHECK(best == 1);
    const bool noted =
        std::any_of(first->notes.begin(), first->notes.end(),
                    [](const std::string& n) { return n.rfind("search cut: ", 0) == 0; });
    CHECK(noted == cut);
    if (!first->ok || !first->evaluation || !first->evaluation->ok) continue;
    // The plan returned is the one scored (a cut search sheds the plans of scored trials
    // and emits the best's again).
    CHECK_FALSE(verify_plan(*first->plan, w).has_value());
    {
      study::SimEvaluator eval(w, topo);
      CHECK(eval.evaluate(*first->plan, /*verified=*/false).makespan_ps == first->evaluation->makespan_ps);
    }
    for (const char* baseline : {"reactive", "layerwise", "distance", "hyperoffload"}) {
      CAPTURE(std::string(baseline));
      CAPTURE(notes_of(*first));
      study::SimEvaluator eval(w, topo);
      PlanRequest r = req;
      r.policy = baseline;
      r.evaluator = &eval;
      const PlanOutcome b = make_plan(w, topo, r);
      if (!b.ok || !b.evaluation || !b.evaluation->ok) continue;
      CHECK(first->evaluation->makespan_ps <= b.evaluation->makespan_ps);
      ++compared;
    }
  }
  return compared;
}

}  // namespace

TEST_CASE("the tierflow search: same result on any number of threads, no worse than baselines") {
  // Enough baselines that ran, or the comparison proves little.
  CHECK(check_search(24, kSearchCutOps) >= 30);
}

TEST_CASE("a cut search runs the large entries only, the same on any number of threads") {
  // Every seeded workload is over a cut of 1 op: the baselines as they are still run, so
  // the cut plan is no worse than theirs.
  CHECK(check_search(12, 1) >= 15);
}

// SearchLimits::fetch_bytes lets a selection pass give up once its plan surely copies that
// many bytes, and the search then skips the plan unscored: a pass that gave up must have
// planned at least the limit in fetches that stay in the plan (reactive's look-ahead may
// drop a fetch it made ahead, so those count only once read), and one that did not give
// up may have planned less.
TEST_CASE("a selection pass gives up at the fetch limit only with that much surely fetched") {
  const hw::Topology topo = small_topology();
  size_t gave_up = 0, ran = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    CAPTURE(seed);
    const auto [w, req] = offloading(seed, topo);
    const uint64_t budget = req.target.budget;
    for (const char* pass : {"reactive{evict=furthest,warm=true,ahead=32}",
                             "reactive{evict=furthest,warm=true,ahead=4}", "reactive", "belady"}) {
      CAPTURE(pass);
      const Pipeline p = Pipeline::parse(std::string("place{multi=true},liveness,") + pass);
      PlanState whole = initial_state(w, topo, req, budget);
      PassContext ctx;
      if (p.run(whole, ctx) == PassResult::kFailed) continue;
      const uint64_t all = fetched_bytes(whole);
      if (all == 0) continue;
      ++ran;
      for (uint64_t limit : {uint64_t{1}, all / 4, all / 2, all - 1, all, all + 1}) {
        CAPTURE(limit);
        PlanState s = initial_state(w, topo, req, budget);
        PassContext c;
        c.limits.fetch_bytes = limit;
        const PassResult r = p.run(s, c);
        if (c.limits.gave_up) {
          CHECK(r == PassResult::kFailed);
          CHECK(fetched_bytes(s) >= limit);
          CHECK(all >= limit);
          ++gave_up;
        } else {
          REQUIRE(r != PassResult::kFailed);
          CHECK(fetched_bytes(s) == all);  // the limit changes nothing when not reached
        }
      }
    }
  }
  CHECK(ran >= 20);
  CHECK(gave_up >= 20);  // the limit is reached often enough for the checks to mean much
}

// The verify pass vouches for the plan it checked, and only for that plan: the simulator
// then skips its own check of the rules and scores it exactly as it does unchecked.
TEST_CASE("a plan the verify pass checked is simulated unchecked, with the same result") {
  const hw::Topology topo = small_topology("200kB/s");
  size_t moved = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    CAPTURE(seed);
    const auto [w, req] = offloading(seed, topo);
    study::SimEvaluator eval(w, topo);
    for (const char* text : {"place{multi=true},liveness,select,insert,schedule,verify",
                             "reorder,place{multi=true},liveness,belady,insert,verify"}) {
      CAPTURE(text);
      PlanState s = initial_state(w, topo, req, req.target.budget);
      PassContext ctx;
      if (Pipeline::parse(text).run(s, ctx) == PassResult::kFailed) continue;
      REQUIRE(s.emitted.verified());
      const Plan& plan = s.plan();
      const bool moves = std::any_of(plan.programs[0].steps.begin(), plan.programs[0].steps.end(),
                                     [](const Step& x) { return x.kind == StepKind::kPrefetch; });
      if (moves) ++moved;
      sim::SimOptions checked, trusted;
      trusted.verified = true;
      const sim::SimResult a = sim::simulate(plan, w, topo, checked);
      const sim::SimResult b = sim::simulate(plan, w, topo, trusted);
      REQUIRE_FALSE(a.error.has_value());
      REQUIRE_FALSE(b.error.has_value());
      CHECK(a.makespan == b.makespan);
      CHECK(a.events == b.events);
      CHECK(a.transfers.size() == b.transfers.size());
      CHECK(study::device_peak(a) == study::device_peak(b));
      CHECK(eval.evaluate(plan, true).makespan_ps == eval.evaluate(plan, false).makespan_ps);
      // A shed plan comes back the same, still checked; changed runs are not.
      s.emitted.shed();
      (void)s.plan();
      CHECK(s.emitted.verified());
      s.emitted.runs_changed();
      (void)s.plan();
      CHECK_FALSE(s.emitted.verified());
    }
    // Without a verify pass nothing vouches for the plan.
    PlanState s = initial_state(w, topo, req, req.target.budget);
    PassContext ctx;
    if (Pipeline::parse("place,liveness,select,insert,schedule").run(s, ctx) !=
        PassResult::kFailed) {
      (void)s.plan();
      CHECK_FALSE(s.emitted.verified());
    }
  }
  CHECK(moved >= 10);  // most plans move data, or the simulations compared prove little
}

// PlanRequest::hint: the entry it names runs and is scored first, as a bound for the gate.
// Whatever the hint (any entry of the portfolio, or none it knows), the plan, its score and
// the entry kept are the same as without one; only reasons for skipping may differ. And a
// good hint spares work: it rules out entries before it that the search would have scored,
// and stops the simulation of a plan once it surely ends after the hint's.
TEST_CASE("a hint changes the work of the search, never its plan") {
  size_t spared = 0;
  size_t stopped = 0;
  // Slow links, so that copies and not compute bound most plans (the gate has work to do).
  for (const char* link : {"200kB/s", "50kB/s"}) {
    const hw::Topology topo = small_topology(link);
    for (size_t cut_ops : {kSearchCutOps, size_t{1}}) {
      for (uint64_t seed = 1; seed <= 12; ++seed) {
        CAPTURE(link);
        CAPTURE(seed);
        CAPTURE(cut_ops);
        const auto [w, offload] = offloading(seed, topo);
        PlanRequest req = offload;
        req.policy = "tierflow";
        req.search_cut_ops = cut_ops;
        study::SimEvaluator plain_eval(w, topo);
        req.evaluator = &plain_eval;
        req.threads = 1;
        const PlanOutcome plain = make_plan(w, topo, req);
        auto scored = [](const PlanOutcome& o) {
          return static_cast<size_t>(
              std::count_if(o.portfolio.begin(), o.portfolio.end(), [](const PortfolioTrial& t) {
                return t.result.rfind("skipped", 0) != 0 && t.result.rfind("not run", 0) != 0;
              }));
        };
        std::vector<std::string> hints = {"no,such,pipeline", "place,liveness,verify"};
        // The entry that wins (a sweep's hint: the winner of a point like it), and every
        // entry over three seeds in turn (a third of them per seed).
        const auto table = tierflow_portfolio();
        for (size_t k = 0; k < table.size(); ++k) {
          const bool won = k < plain.portfolio.size() && plain.portfolio[k].best;
          if (won || (k + seed) % 3 == 0) hints.emplace_back(table[k].pipeline);
        }
        for (const std::string& hint : hints) {
          for (unsigned threads : {1U, 3U}) {
            if (threads > 1 && seed % 3 != 0) continue;  // threads on a third of the seeds
            CAPTURE(hint);
            CAPTURE(threads);
            study::SimEvaluator eval(w, topo);
            PlanRequest r = req;
            r.evaluator = &eval;
            r.threads = threads;
            r.hint = hint;
            const PlanOutcome out = make_plan(w, topo, r);
            REQUIRE(out.ok == plain.ok);
            CHECK(out.reason == plain.reason);
            CHECK(out.pipeline == plain.pipeline);
            REQUIRE(out.portfolio.size() == plain.portfolio.size());
            for (size_t i = 0; i < out.portfolio.size(); ++i) {
              CHECK(out.portfolio[i].best == plain.portfolio[i].best);
            }
            REQUIRE(out.stats.size() == plain.stats.size());
          for (size_t i = 0; i < out.stats.size(); ++i) {
            CHECK(out.stats[i].pass == plain.stats[i].pass);
            CHECK(out.stats[i].name == plain.stats[i].name);
            CHECK(out.stats[i].value == plain.stats[i].value);
          }
          CHECK(out.notes == plain.notes);
            if (!out.ok) continue;
            CHECK(plan_text(*out.plan, w) == plan_text(*plain.plan, w));
            REQUIRE(out.evaluation.has_value());
            CHECK(out.evaluation->makespan_ps == plain.evaluation->makespan_ps);
            if (threads == 1 && scored(out) < scored(plain)) ++spared;
            for (const PortfolioTrial& t : out.portfolio) {
              if (t.result.rfind("skipped: ends after", 0) == 0) ++stopped;
            }
          }
        }
      }
    }
  }
  CHECK(spared >= 3);  // hints rule out entries the search would have scored
  // ... and stop simulations once a plan surely ends after the hint's (Search::score).
  CHECK(stopped >= 20);
}

// TrafficMemo: plans of one workload share the traffic bound's bytes, computed once per
// order, budget and pins. With the memo every outcome is what it is without one, across
// policies, links and budgets; and the memo holds one case per distinct order and budget.
TEST_CASE("a traffic memo shared by plans of one workload changes no outcome") {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    CAPTURE(seed);
    const hw::Topology base = small_topology();
    const auto [w, offload] = offloading(seed, base);
    auto memo = std::make_shared<TrafficMemo>(w);
    std::set<uint64_t> budgets;
    for (const char* link : {"1GB/s", "50kB/s"}) {
      const hw::Topology topo = small_topology(link);
      for (const uint64_t budget : {offload.target.budget, offload.target.budget * 3 / 2}) {
        budgets.insert(budget);
        for (const char* policy : {"tierflow", "hyperoffload", "reactive", "resident"}) {
          CAPTURE(link);
          CAPTURE(budget);
          CAPTURE(std::string(policy));
          PlanRequest req = offload;
          req.policy = policy;
          req.target.budget = budget;
          req.threads = 1;
          study::SimEvaluator e1(w, topo), e2(w, topo);
          req.evaluator = &e1;
          const PlanOutcome plain = make_plan(w, topo, req);
          req.evaluator = &e2;
          req.traffic_memo = memo;
          const PlanOutcome shared = make_plan(w, topo, req);
          CHECK(shared.bounds.traffic_bytes == plain.bounds.traffic_bytes);
          CHECK(shared.bounds.makespan_ps == plain.bounds.makespan_ps);
          CHECK(shared.ok == plain.ok);
          CHECK(shared.pipeline == plain.pipeline);
          CHECK(notes_of(shared) == notes_of(plain));
          if (shared.ok && plain.ok) CHECK(plan_text(*shared.plan, w) == plan_text(*plain.plan, w));
        }
      }
    }
    // The orders seen: the workload's own and what reorder makes of it (at most two
    // reorder modes), per budget.
    CHECK(memo->size() >= budgets.size());
    CHECK(memo->size() <= 3 * budgets.size());
    // The liveness of an order is made once and shared by every plan of the workload.
    PlanRequest req = offload;
    req.traffic_memo = memo;
    const PlanState a = initial_state(w, base, req, offload.target.budget);
    const hw::Topology slow = small_topology("50kB/s");
    const PlanState b = initial_state(w, slow, req, offload.target.budget * 2);
    CHECK(a.liveness.get() == b.liveness.get());
    PlanRequest alone = offload;
    const PlanState c = initial_state(w, base, alone, offload.target.budget);
    CHECK(c.liveness.get() != a.liveness.get());
    CHECK(c.liveness->uses == a.liveness->uses);
    CHECK(c.liveness->born == a.liveness->born);
  }
}

// StartMemo: plans of one workload on one topology share their start states (the initial
// state and the states after each leading prefix, per target and budget). With the memo
// every outcome is what it is without one, whatever the policy and the budget, also when
// plans ask for the same state at once; a state made for one policy is named for the next;
// and the memo holds the states of the last two budgets only.
TEST_CASE("start states shared by plans of one workload on one topology change no outcome") {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    const hw::Topology topo = small_topology("50kB/s");
    const Offloading made = offloading(seed, topo);  // (no bindings: the threads capture w)
    const Workload& w = made.w;
    const PlanRequest& offload = made.req;
    auto memo = std::make_shared<StartMemo>();
    const std::vector<std::string> policies = {"resident", "reactive",     "layerwise",
                                               "distance", "hyperoffload", "tierflow"};
    size_t budgets = 0;
    for (const uint64_t budget :
         {offload.target.budget, offload.target.budget * 3 / 2, offload.target.budget * 2}) {
      ++budgets;
      std::vector<PlanOutcome> plain(policies.size()), shared(policies.size());
      std::vector<std::thread> threads;
      for (size_t k = 0; k < policies.size(); ++k) {
        PlanRequest req = offload;
        req.policy = policies[k];
        req.target.budget = budget;
        req.threads = 1;
        study::SimEvaluator e1(w, topo);
        req.evaluator = &e1;
        plain[k] = make_plan(w, topo, req);
        // The shared plans run at once: the first to ask makes a state, the others wait.
        threads.emplace_back([&, k, req]() mutable {
          study::SimEvaluator e2(w, topo);
          req.evaluator = &e2;
          req.start_memo = memo;
          shared[k] = make_plan(w, topo, req);
        });
      }
      for (std::thread& t : threads) t.join();
      // Per budget: the initial state, after `place,liveness` (every baseline, and the
      // tierflow search's own baselines) and after the search's two reorders; those of the
      // last two budgets are kept.
      CHECK(memo->size() == std::min<size_t>(4 * budgets, StartMemo::kKept));
      for (size_t k = 0; k < policies.size(); ++k) {
        CAPTURE(budget);
        CAPTURE(policies[k]);
        CHECK(shared[k].ok == plain[k].ok);
        CHECK(shared[k].reason == plain[k].reason);
        CHECK(shared[k].pipeline == plain[k].pipeline);
        CHECK(shared[k].resident_peak == plain[k].resident_peak);
        CHECK(shared[k].bounds.makespan_ps == plain[k].bounds.makespan_ps);
        CHECK(shared[k].bounds.residency == plain[k].bounds.residency);
        CHECK(notes_of(shared[k]) == notes_of(plain[k]));
        if (shared[k].ok && plain[k].ok) {
          CHECK(plan_text(*shared[k].plan, w) == plan_text(*plain[k].plan, w));
          CHECK(shared[k].plan->meta.at("policy") == plain[k].plan->meta.at("policy"));
          CHECK(shared[k].evaluation->makespan_ps == plain[k].evaluation->makespan_ps);
        }
      }
    }
  }
}

// StartMemo::put_score: a search that scored a plan its baseline entry as it is repeats
// leaves the score for that baseline's own plan, which then is not simulated again: its
// outcome is the unshared one (the score included), and the score is taken once.
TEST_CASE("a baseline's plan takes the score of the same plan a search scored") {
  size_t reused = 0;
  for (const char* link : {"50kB/s", "200kB/s"}) {
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      CAPTURE(link);
      CAPTURE(seed);
      const hw::Topology topo = small_topology(link);
      const Offloading made = offloading(seed, topo);
      const Workload& w = made.w;
      auto memo = std::make_shared<StartMemo>();
      PlanRequest req = made.req;
      req.threads = 1;
      req.start_memo = memo;
      study::SimEvaluator searched(w, topo);
      req.policy = "tierflow";
      req.evaluator = &searched;
      (void)make_plan(w, topo, req);
      for (const char* policy : {"hyperoffload", "reactive", "distance", "layerwise"}) {
        CAPTURE(std::string(policy));
        PlanRequest alone = made.req;
        alone.policy = policy;
        alone.threads = 1;
        study::SimEvaluator e0(w, topo), e1(w, topo), e2(w, topo);
        alone.evaluator = &e0;
        const PlanOutcome plain = make_plan(w, topo, alone);
        PlanRequest shared = alone;
        shared.start_memo = memo;
        shared.evaluator = &e1;
        const PlanOutcome first = make_plan(w, topo, shared);
        shared.evaluator = &e2;
        const PlanOutcome again = make_plan(w, topo, shared);
        REQUIRE(first.ok == plain.ok);
        if (!plain.ok) continue;
        CHECK(plan_text(*first.plan, w) == plan_text(*plain.plan, w));
        REQUIRE(first.evaluation.has_value());
        CHECK(first.evaluation->ok == plain.evaluation->ok);
        CHECK(first.evaluation->makespan_ps == plain.evaluation->makespan_ps);
        CHECK(first.evaluation->device_peak == plain.evaluation->device_peak);
        CHECK(first.evaluation->exposed_by_event == plain.evaluation->exposed_by_event);
        if (e1.runs() == 0) ++reused;
        CHECK(e2.runs() == 1);  // taken by the first: the second simulates
        CHECK(again.evaluation->makespan_ps == plain.evaluation->makespan_ps);
      }
    }
  }
  CHECK(reused >= 8);  // hyperoffload as it is repeats the first entry on most of these
}

// Variants (PortfolioEntry::variant_of): a selection leaving more of the budget free runs
// after the other entries, and not at all when the selection it varies already copies for
// longer than the best plan takes. On these workloads that rule skips variants, and the
// search still keeps the plan a search that runs every pipeline to its end keeps.
TEST_CASE("variants whose selection already copies too long are not run, the plan the same") {
  size_t skipped = 0, ran = 0;
  for (const char* link : {"200kB/s", "50kB/s", "5MB/s"}) {
    const hw::Topology topo = small_topology(link);
    for (uint64_t seed = 1; seed <= 16; ++seed) {
      CAPTURE(link);
      CAPTURE(seed);
      const auto [w, offload] = offloading(seed, topo);
      PlanRequest req = offload;
      req.policy = "tierflow";
      req.threads = 1;
      study::SimEvaluator eval(w, topo);
      req.evaluator = &eval;
      const PlanOutcome out = make_plan(w, topo, req);
      const auto table = tierflow_portfolio();
      REQUIRE(out.portfolio.size() == table.size());
      for (size_t i = 0; i < table.size(); ++i) {
        if (table[i].variant_of < 0) continue;
        CAPTURE(out.portfolio[i].result);
        const std::string& r = out.portfolio[i].result;
        if (r.rfind("skipped: a variant of #", 0) == 0) {
          ++skipped;
          CHECK_FALSE(out.portfolio[i].best);
        } else if (r.rfind("skipped", 0) != 0 && r.rfind("not run", 0) != 0) {
          ++ran;
        }
      }
      study::SimEvaluator full_eval(w, topo);
      PlanRequest full = req;
      full.evaluator = &full_eval;
      full.after_pass = [](std::string_view, const PlanState&) {};
      const PlanOutcome all = make_plan(w, topo, full);
      REQUIRE(all.ok == out.ok);
      CHECK(all.pipeline == out.pipeline);
      if (!out.ok) continue;
      CHECK(plan_text(*all.plan, w) == plan_text(*out.plan, w));
      CHECK(all.evaluation->makespan_ps == out.evaluation->makespan_ps);
    }
  }
  CHECK(skipped >= 3);
  CHECK(ran >= 3);
  MESSAGE("variants skipped ", skipped, ", scored ", ran);
}
