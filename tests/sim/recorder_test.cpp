// What the simulator records beside its results (sim/recorder.h): tier counters only for
// the tier instances a plan touches, split by tensor kind, and the same samples as time
// series (sim/series.h). Times on tests/fixtures/unit_hw.yaml, worked out in
// tests/sim/simulator_test.cpp: ddr -> hbm setup 155 ns at 1 B/ns, a norm op 170 ns.
#include "sim/recorder.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hw_models/loader.h"
#include "sim/report.h"
#include "sim/series.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "tests/support/plan_builders.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/fixtures.h"

namespace tierflow::sim {
namespace {

using json = nlohmann::ordered_json;  // keys in file order
using tierflow::testing::ScratchDir;

constexpr Time kNs = 1000;  // ps
constexpr uint32_t kHbm = 0, kDdr = 1;

using tierflow::testing::unit_hw;

Step compute(uint32_t op, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kCompute, op, 0, kNoEvent, std::move(wait)};
}

// h (32 B weight, home hbm) --norm0--> a (16 B); x (64 B weight, home ddr), a --norm1--> b
// (16 B output). norm1: 100 FLOP, 64 B -> 110 ns.
//  0        155 ns    219 ns
//  |--setup--|= x 64 =|                      prefetch x (step 0, transfer 0)
//  |== norm0 170 ns ==|                      step 1
//             170 ns  |..|                   step 2 stalls 49 ns on the prefetch
//                     219 ns |== norm1 110 ==| 329 ns; then x and h are detached
struct Scenario {
  Workload w;
  Plan p;
};

Scenario stalled_prefetch() {
  Scenario s;
  Workload& w = s.w;
  const uint32_t h = w.add_tensor({"h", 32, TensorKind::kWeight});
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kWeight});
  const uint32_t a = w.add_tensor({"a", 16, TensorKind::kActivation});
  const uint32_t b = w.add_tensor({"b", 16, TensorKind::kOutput});
  w.add_op({"norm0", OpKind::kNorm, Dtype::kBf16, 160, 128, {h}, {a}});
  w.add_op({"norm1", OpKind::kNorm, Dtype::kBf16, 100, 64, {x, a}, {b}});
  s.p.name = "test";
  s.p.tiers = {"hbm", "ddr", "ssd"};
  s.p.device_tier = kHbm;
  s.p.home = {kHbm, kDdr, kHbm, kHbm};
  s.p.programs = {Program{
      0,
      {Step{StepKind::kPrefetch, x, kDdr, 1, {}}, compute(0), compute(1, {1}),
       Step{StepKind::kDetach, x, 0, kNoEvent, {}}, Step{StepKind::kDetach, h, 0, kNoEvent, {}}}}};
  REQUIRE_FALSE(verify_plan(s.p, s.w).has_value());
  return s;
}

std::vector<json> counters(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<json> out;
  const json doc = json::parse(text.str());
  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "C") out.push_back(e);
  }
  return out;
}

TEST_CASE("tier counters exist only for the tier instances the plan touches") {
  // unit_hw has 4 devices (hbm[0..3]), 2 sockets (ddr[0..1]) and one ssd; the plan runs on
  // device 0 and homes x on ddr: hbm[0] and ddr[0] only. (A counter of zeros for every
  // other instance would bury the two that matter under rows of flat lines.)
  const Scenario s = stalled_prefetch();
  const hw::Topology t = unit_hw();
  ScratchDir dir("recorder-touched");
  const std::string path = dir.file("t.json");
  Timeline tl(path);
  SimOptions o;
  o.timeline = &tl;
  const SimResult r = simulate(s.p, s.w, t, o);
  tl.finish();
  REQUIRE_FALSE(r.error.has_value());
  std::set<std::string> names;
  for (const json& c : counters(path)) names.insert(c.at("name").get<std::string>());

  for (const std::string& name : names) {
    if (name.find(" GB/s") != std::string::npos) continue;  // link rates
    const bool ours = name.rfind("hbm[0] ", 0) == 0 || name.rfind("ddr[0] ", 0) == 0;
    CHECK_MESSAGE(ours, name);
  }
  CHECK(names.count("hbm[0] bytes") == 1);
  CHECK(names.count("hbm[0] bytes by kind") == 1);
  CHECK(names.count("ddr[0] bytes") == 1);
  CHECK(names.count("ddr[0] bytes by kind") == 1);
}

TEST_CASE("the by-kind counter holds the kinds the tier may hold and adds up to the total") {
  const Scenario s = stalled_prefetch();
  const hw::Topology t = unit_hw();
  ScratchDir dir("recorder-kinds");
  const std::string path = dir.file("t.json");
  Timeline tl(path);
  SimOptions o;
  o.timeline = &tl;
  REQUIRE_FALSE(simulate(s.p, s.w, t, o).error.has_value());
  tl.finish();
  // hbm[0]: h and x (weight), a (activation), b (output); ddr[0]: x (weight).
  std::map<std::string, double> total;  // the latest total per tier
  int checked = 0;
  for (const json& c : counters(path)) {
    const std::string name = c.at("name");
    if (name == "hbm[0] bytes" || name == "ddr[0] bytes") {
      total[name] = c.at("args").at("value");
      continue;
    }
    if (name.find("by kind") == std::string::npos) continue;
    const json& args = c.at("args");
    std::vector<std::string> keys;
    double sum = 0;
    for (const auto& [k, v] : args.items()) {
      keys.push_back(k);
      sum += v.get<double>();
    }
    if (name == "hbm[0] bytes by kind") {
      CHECK(keys == std::vector<std::string>{"weight", "activation", "output"});
      CHECK(sum == total["hbm[0] bytes"]);
    } else {
      CHECK(keys == std::vector<std::string>{"weight"});
      CHECK(sum == total["ddr[0] bytes"]);
    }
    ++checked;
  }
  // hbm[0]: 0 (weight 96, activation 16), 219 ns (+ output 16), 329 ns (weights detached);
  // ddr[0]: 0 (x).
  CHECK(checked == 4);
}

TEST_CASE("the series: memory by kind, link rates, compute, stalls and waits") {
  const Scenario s = stalled_prefetch();
  const hw::Topology t = unit_hw();
  SimSeries series;
  SimOptions o;
  o.series = &series;
  const SimResult r = simulate(s.p, s.w, t, o);
  REQUIRE_FALSE(r.error.has_value());

  REQUIRE(series.tiers.size() == 2);  // slot order: hbm instances first
  const TierSeries& hbm = series.tiers[0];
  CHECK(hbm.name == "hbm[0]");
  CHECK(hbm.capacity == 128);
  const uint32_t weight = 1U << size_t(TensorKind::kWeight);
  const uint32_t activation = 1U << size_t(TensorKind::kActivation);
  const uint32_t output = 1U << size_t(TensorKind::kOutput);
  CHECK(hbm.kinds == (weight | activation | output));
  // At 0: h 32 + x 64 (prefetch issued) = 96 B of weights, a 16 B; at 219 ns b 16 B;
  // at 329 ns x and h detached.
  const std::vector<LevelChange> want = {
      {0, 96, uint32_t(TensorKind::kWeight)},
      {0, 16, uint32_t(TensorKind::kActivation)},
      {219 * kNs, 16, uint32_t(TensorKind::kOutput)},
      {329 * kNs, 0, uint32_t(TensorKind::kWeight)},
  };
  REQUIRE(hbm.changes.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(hbm.changes[i].time == want[i].time);
    CHECK(hbm.changes[i].bytes == want[i].bytes);
    CHECK(hbm.changes[i].kind == want[i].kind);
  }
  const TierSeries& ddr = series.tiers[1];
  CHECK(ddr.name == "ddr[0]");
  REQUIRE(ddr.changes.size() == 1);
  CHECK(ddr.changes[0].bytes == 64);

  // The prefetch's flow: 1 B/ns from the end of its setup until it lands.
  REQUIRE(series.links.size() == 1);
  const LinkSeries& pcie = series.links[0];
  CHECK(pcie.capacity == doctest::Approx(1e9));
  REQUIRE(pcie.changes.size() == 2);
  CHECK(pcie.changes[0].time == 155 * kNs);
  CHECK(pcie.changes[0].bytes_per_s == doctest::Approx(1e9));
  CHECK(pcie.changes[1].time == 219 * kNs);
  CHECK(pcie.changes[1].bytes_per_s == 0);

  REQUIRE(series.compute.size() == 2);
  CHECK(series.compute[0].step == 1);
  CHECK(series.compute[0].end == 170 * kNs);
  CHECK(series.compute[1].op == 1);
  CHECK(series.compute[1].start == 219 * kNs);
  CHECK(series.compute[1].end == 329 * kNs);
  REQUIRE(series.stalls.size() == 1);
  CHECK(series.stalls[0].step == 2);
  CHECK_FALSE(series.stalls[0].memory);
  CHECK(series.stalls[0].start == 170 * kNs);
  CHECK(series.stalls[0].end == 219 * kNs);
  REQUIRE(series.waits.size() == 1);
  CHECK(series.waits[0].step == 2);
  CHECK(series.waits[0].transfer == 0);
  CHECK(series.waits[0].end - series.waits[0].start == r.transfers[0].exposed);
}

TEST_CASE("the series: a memory stall, and the store's destination counted by kind") {
  // h (32 B, home hbm) --norm0--> x (64 B) ; h --norm1--> y (64 B). hbm holds 128 B, so
  // norm1's output fits only once x is stored to ddr (155 ns setup + 64 ns) and detached.
  //  0              170 ns                     389 ns               559 ns
  //  |=== norm0 ====|--setup 155--|= x 64 B =| store x, detach x at 389 ns
  //                 |.. norm1 waits for memory |=== norm1 170 ===|
  Workload w;
  w.add_tensor({"h", 32, TensorKind::kWeight});
  w.add_tensor({"x", 64, TensorKind::kActivation});
  w.add_tensor({"y", 64, TensorKind::kOutput});
  w.add_op({"norm0", OpKind::kNorm, Dtype::kBf16, 160, 128, {0}, {1}});
  w.add_op({"norm1", OpKind::kNorm, Dtype::kBf16, 160, 128, {0}, {2}});
  Plan p;
  p.tiers = {"hbm", "ddr"};
  p.device_tier = kHbm;
  p.home = {kHbm, kHbm, kHbm};
  p.programs = {Program{0,
                        {compute(0), Step{StepKind::kStore, 1, kDdr, 0, {}},
                         Step{StepKind::kDetach, 1, 0, kNoEvent, {0}}, compute(1)}}};
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  SimSeries series;
  SimOptions o;
  o.on_full = OnFull::kWait;
  o.series = &series;
  REQUIRE_FALSE(simulate(p, w, unit_hw(), o).error.has_value());
  REQUIRE(series.stalls.size() == 1);
  CHECK(series.stalls[0].memory);
  CHECK(series.stalls[0].step == 3);
  CHECK(series.stalls[0].start == 170 * kNs);
  CHECK(series.stalls[0].end == 389 * kNs);
  CHECK(series.waits.empty());
  REQUIRE(series.tiers.size() == 2);
  const TierSeries& ddr = series.tiers[1];
  CHECK(ddr.name == "ddr[0]");
  CHECK(ddr.kinds == 1U << size_t(TensorKind::kActivation));
  REQUIRE(ddr.changes.size() == 1);
  CHECK(ddr.changes[0].time == 170 * kNs);  // allocated when the store issues
  CHECK(ddr.changes[0].bytes == 64);
  // The store's flow leaves hbm over pcie: the hbm->rc direction.
  REQUIRE(series.links.size() == 1);
  CHECK(series.links[0].changes.front().time == 325 * kNs);
}

TEST_CASE("the series of random plans add up to the simulator's results") {
  // An hbm small enough that some plans wait for memory (--on-full wait), a few do not fit.
  const hw::Topology t =
      unit_hw({"tiers.hbm.capacity=32KiB", "tiers.ddr.capacity=1MiB", "tiers.ssd.capacity=4MiB"});
  int ran = 0, waited_for_memory = 0, waited_for_transfers = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    testing::RandomWorkloadOptions wo;
    wo.ops = 30;
    const Workload w = testing::random_workload(seed, wo);
    testing::RandomPlanOptions po;
    po.host_tiers = {"ddr", "ssd"};
    const Plan p = testing::random_plan(seed, w, {/*devices=*/1 + uint32_t(seed % 3), "hbm"}, po);
    SimSeries series;
    SimOptions o;
    o.on_full = OnFull::kWait;
    o.series = &series;
    const SimResult r = simulate(p, w, t, o);
    if (r.error) continue;  // a plan that needs more than the small hbm at once
    ++ran;
    for (const DeviceResult& d : r.devices) {
      waited_for_memory += d.stall_memory_ps > 0 ? 1 : 0;
      waited_for_transfers += d.stall_transfer_ps > 0 ? 1 : 0;
    }

    // Per program: compute, stalls by cause and waits match the device results.
    for (uint32_t prog = 0; prog < r.devices.size(); ++prog) {
      const DeviceResult& d = r.devices[prog];
      Time compute = 0, transfer = 0, memory = 0, waited = 0;
      uint64_t ops = 0;
      for (const ComputeSpan& c : series.compute) {
        if (c.program != prog) continue;
        compute += c.end - c.start;
        ++ops;
      }
      for (const StallSpan& x : series.stalls) {
        if (x.program == prog) (x.memory ? memory : transfer) += x.end - x.start;
      }
      for (const WaitSpan& x : series.waits) {
        if (x.program != prog) continue;
        waited += x.end - x.start;
        CHECK(r.transfers[x.transfer].end == x.end);  // a wait ends when its transfer lands
      }
      CHECK(compute == d.compute_ps);
      CHECK(ops == d.ops);
      CHECK(transfer == d.stall_transfer_ps);
      CHECK(memory == d.stall_memory_ps);
      CHECK(waited == d.stall_transfer_ps);
    }
    // Every tier instance that held bytes has a series whose kinds end at its final level
    // and never rise above its peak (sampled per instant, so a peak inside an instant may
    // be higher than every sample).
    for (const TierResult& tr : r.tiers) {
      CAPTURE(tr.name);
      const TierSeries* ts = nullptr;
      for (const TierSeries& x : series.tiers) {
        if (x.name == tr.name) ts = &x;
      }
      REQUIRE(ts != nullptr);
      std::array<uint64_t, kKindSlots> level{};
      uint64_t most = 0;
      for (size_t i = 0; i < ts->changes.size(); ++i) {
        const LevelChange& c = ts->changes[i];
        CHECK((ts->kinds >> c.kind & 1) == 1);
        level[c.kind] = c.bytes;
        if (i + 1 == ts->changes.size() || ts->changes[i + 1].time != c.time) {
          uint64_t sum = 0;
          for (const uint64_t b : level) sum += b;
          most = std::max(most, sum);
        }
      }
      uint64_t final_level = 0;
      for (const uint64_t b : level) final_level += b;
      CHECK(final_level == tr.final_level);
      CHECK(most <= tr.peak);
    }
    // Link rates never exceed the capacity.
    for (const LinkSeries& l : series.links) {
      for (const RateChange& c : l.changes) CHECK(c.bytes_per_s <= l.capacity * (1 + 1e-9));
    }
  }
  // The cases above are not vacuous: most plans run, some wait for memory (34 runs, 4
  // programs with memory stalls, 67 with transfer stalls when written).
  CHECK(ran >= 30);
  CHECK(waited_for_memory > 0);
  CHECK(waited_for_transfers > 0);
}

TEST_CASE("recording changes nothing the simulator reports") {
  const Scenario s = stalled_prefetch();
  const hw::Topology t = unit_hw();
  const ReportContext ctx{s.p, s.w, t, "test"};
  const std::string plain = report_json(simulate(s.p, s.w, t), ctx, /*with_transfers=*/true);
  ScratchDir dir("recorder-same");
  Timeline tl(dir.file("t.json"));
  SimSeries series;
  SimOptions o;
  o.timeline = &tl;
  o.series = &series;
  CHECK(report_json(simulate(s.p, s.w, t, o), ctx, /*with_transfers=*/true) == plain);
  tl.finish();
}

}  // namespace
}  // namespace tierflow::sim
