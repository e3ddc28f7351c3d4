// Host steps (core/plan.h): an op run by the host CPU next to the plan's host tier, beside
// the device, as FlexGen runs decode attention next to a host-resident KV cache. On
// tests/fixtures/unit_hw.yaml with a host CPU of 2 GFLOP/s per socket reading ddr: 2
// devices per socket share both, so a host op gets 1 FLOP/ns and 1 B/ns.
//
//   ddr <-> hbm over pcie: setup 155 ns, then 1 B/ns (tests/sim/simulator_test.cpp)
//   norm, 160 FLOP and 128 B on the device: 170 ns; with 400 FLOP: 410 ns
//   attention, 100 FLOP and 300 B on the host: max(100, 300) = 300 ns
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/io.h"
#include "core/plan.h"
#include "core/plan_json.h"
#include "hw_models/bind.h"
#include "hw_models/cost.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "tests/support/fixtures.h"
#include "tests/support/scratch_dir.h"

using namespace tierflow;
using namespace tierflow::sim;

namespace {

constexpr Time kNs = 1000;  // ps
constexpr uint32_t kHbm = 0, kDdr = 1, kSsd = 2;

hw::Topology with_cpu() {
  hw::Topology t = testing::unit_hw();
  t.system.cpu.tier = "ddr";
  t.system.cpu.peak[static_cast<size_t>(Dtype::kBf16)] = FlopRate{2e9};
  return t;
}

Step compute(uint32_t op, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kCompute, op, 0, kNoEvent, std::move(wait)};
}
Step on_host(uint32_t op, uint32_t ev, std::vector<uint32_t> wait = {}) {
  Step s{StepKind::kCompute, op, 0, ev, std::move(wait)};
  s.host = true;
  return s;
}
Step prefetch(uint32_t t, uint32_t ev, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kPrefetch, t, kDdr, ev, std::move(wait)};
}
Step store(uint32_t t, uint32_t ev) {
  return Step{StepKind::kStore, t, kDdr, ev, {}};
}
Step detach(uint32_t t, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kDetach, t, 0, kNoEvent, std::move(wait)};
}
Step host_prefetch(uint32_t t, uint32_t ev, std::vector<uint32_t> wait = {}) {
  Step s{StepKind::kPrefetch, t, kSsd, ev, std::move(wait)};
  s.host = true;
  return s;
}
Step host_detach(uint32_t t, std::vector<uint32_t> wait = {}) {
  Step s = detach(t, std::move(wait));
  s.host = true;
  return s;
}

// w (32 B weight, hbm), kv (256 B, ddr) --qproj--> q --attn (host)--> o --oproj--> y;
// `side` (400 FLOP) reads w and runs on the device while the host computes.
struct Attention {
  Workload w;
  uint32_t weight = 0, kv = 0, q = 0, o = 0, y = 0, z = 0;
  Attention() {
    weight = w.add_tensor({"w", 32, TensorKind::kWeight});
    kv = w.add_tensor({"kv", 256, TensorKind::kKv});
    q = w.add_tensor({"q", 16, TensorKind::kActivation});
    o = w.add_tensor({"o", 16, TensorKind::kActivation});
    y = w.add_tensor({"y", 16, TensorKind::kOutput});
    z = w.add_tensor({"z", 16, TensorKind::kOutput});
    w.add_op({"qproj", OpKind::kNorm, Dtype::kBf16, 160, 128, {weight}, {q}});
    w.add_op({"attn", OpKind::kAttention, Dtype::kBf16, 100, 300, {q, kv}, {o}});
    w.add_op({"side", OpKind::kNorm, Dtype::kBf16, 400, 128, {weight}, {z}});
    w.add_op({"oproj", OpKind::kNorm, Dtype::kBf16, 160, 128, {o, weight}, {y}});
  }
  // homes: w hbm, kv ddr (ssd in disk_plan()), q ddr (stored there), o ddr (made there),
  // y and z hbm
  [[nodiscard]] Plan plan(std::vector<Step> steps) const {
    Plan p;
    p.name = "host";
    p.topology_ref.file = "unit_hw.yaml";
    p.tiers = {"hbm", "ddr"};
    p.device_tier = kHbm;
    p.host_tier = kDdr;
    p.home = {kHbm, kDdr, kDdr, kDdr, kHbm, kHbm};
    p.programs = {Program{0, std::move(steps)}};
    return p;
  }
  //   0      170 ns        341 ns           641 ns         812 ns       982 ns
  //   |qproj=|= side 410 ns ====|== (580)                  |== oproj ===|
  //          |-setup-|q 16 B|   store q (event 1)
  //                         |== attn on the host 300 ns ==|            (event 2)
  //                                         prefetch o waits on 2 |-setup-|o|  (event 3)
  /// The cache on disk: the host fetches it to ddr for the host step (a host prefetch)
  /// and frees it there after (a host detach).
  [[nodiscard]] Plan disk_plan(std::vector<Step> steps) const {
    Plan p = plan(std::move(steps));
    p.tiers.push_back("ssd");
    p.home[kv] = kSsd;
    return p;
  }
  [[nodiscard]] Plan disk() const {
    return disk_plan({host_prefetch(kv, 4), compute(0), store(q, 1), on_host(1, 2, {1, 4}),
                      compute(2), detach(q, {1}), host_detach(kv, {2}), prefetch(o, 3, {2}),
                      compute(3, {3}), detach(o)});
  }
  [[nodiscard]] Plan good() const {
    return plan({compute(0), store(q, 1), on_host(1, 2, {1}), compute(2), detach(q, {1}),
                 prefetch(o, 3, {2}), compute(3, {3}), detach(o)});
  }
};

void require_ok(const SimResult& r) {
  if (r.error) FAIL("unexpected error: " << r.error->message);
}

std::string issue_of(const Plan& p, const Workload& w) {
  const auto issue = verify_plan(p, w);
  return issue ? issue->message : "";
}

}  // namespace

TEST_CASE("a host step runs beside the device: exact times, engines and tier use") {
  const Attention a;
  const Plan p = a.good();
  REQUIRE(issue_of(p, a.w).empty());
  CHECK(computes_on_host(p));
  const testing::ScratchDir dir("host_compute");
  Timeline tl(dir.file("host.json"));
  SimOptions o;
  o.timeline = &tl;
  std::vector<std::vector<StepTime>> times;
  o.step_times = &times;
  const SimResult r = simulate(p, a.w, with_cpu(), o);
  tl.finish();
  require_ok(r);
  CHECK(r.makespan == 982 * kNs);
  REQUIRE(r.devices.size() == 1);
  CHECK(r.devices[0].compute_ps == (170 + 410 + 170) * kNs);
  CHECK(r.devices[0].host_compute_ps == 300 * kNs);
  CHECK(r.devices[0].host_ops == 1);
  CHECK(r.devices[0].ops == 3);
  // The host step starts when the store it waits on lands, not when `side` (after it in
  // program order) ends; `side` starts right after qproj.
  CHECK(times[0][2].start == 341 * kNs);
  CHECK(times[0][2].end == 641 * kNs);
  CHECK(times[0][3].start == 170 * kNs);
  CHECK(times[0][3].end == 580 * kNs);
  CHECK(times[0][6].start == 812 * kNs);
  // o is made on ddr[0] (the socket of device 0): kv 256 + q 16 + o 16.
  bool ddr = false;
  for (const TierResult& t : r.tiers) {
    if (t.name != "ddr[0]") continue;
    ddr = true;
    CHECK(t.peak == 256 + 16 + 16);
  }
  CHECK(ddr);
  CHECK(read_text_file(dir.file("host.json")).find("\"host CPU\"") != std::string::npos);
}

TEST_CASE("a host step's time: the socket's CPU peak and its tier's bandwidth, shared") {
  Attention a;
  const Plan p = a.good();
  SUBCASE("memory-bound: 300 B at 1 B/ns") {
    CHECK(simulate(p, a.w, with_cpu(), {}).devices[0].host_compute_ps == 300 * kNs);
  }
  SUBCASE("compute-bound: 900 FLOP at 1 FLOP/ns, plus the launch overhead") {
    a.w.ops[1].flops = 900;
    hw::Topology t = with_cpu();
    t.system.cpu.launch_overhead = Duration{5 * kNs};
    CHECK(simulate(p, a.w, t, {}).devices[0].host_compute_ps == 905 * kNs);
  }
  SUBCASE("no host CPU: refused before the run") {
    const SimResult r = simulate(p, a.w, testing::unit_hw(), {});
    REQUIRE(r.error);
    CHECK(r.error->kind == RunError::Kind::kTopology);
    CHECK(r.error->message.find("describes no host CPU") != std::string::npos);
  }
  SUBCASE("a dtype the CPU has no rate for") {
    a.w.ops[1].dtype = Dtype::kFp8;
    const SimResult r = simulate(p, a.w, with_cpu(), {});
    REQUIRE(r.error);
    CHECK(r.error->message.find("runs on the host and computes in fp8") != std::string::npos);
  }
  SUBCASE("a host tier that is not the CPU's") {
    hw::Topology t = with_cpu();
    t.system.cpu.tier = "ssd";
    const SimResult r = simulate(p, a.w, t, {});
    REQUIRE(r.error);
    CHECK(r.error->message.find("is not the tier the host CPU") != std::string::npos);
  }
}

TEST_CASE("host step rules: each broken one is named") {
  const Attention a;
  struct Case {
    std::string name;
    Plan plan;
    std::string expect;
  };
  std::vector<Case> cases;
  cases.push_back({"no wait on the store of its input",
                   a.plan({compute(0), store(a.q, 1), on_host(1, 2), compute(2), detach(a.q, {1}),
                           prefetch(a.o, 3, {2}), compute(3, {3})}),
                   "runs on the host and reads tensor 2 'q', which has no current copy on 'ddr'"});
  cases.push_back({"prefetch of its output before its event",
                   a.plan({compute(0), store(a.q, 1), on_host(1, 2, {1}), compute(2),
                           prefetch(a.o, 3), compute(3, {3})}),
                   "prefetch of tensor 3 'o' before the host step of op 1"});
  cases.push_back({"no event", a.plan({compute(0), store(a.q, 1), on_host(1, kNoEvent, {1})}),
                   "a host step needs an 'event'"});
  Plan no_tier = a.good();
  no_tier.host_tier = kNoTier;
  cases.push_back({"no host tier", no_tier, "a host step needs the plan's 'host_tier'"});
  Plan device_tier = a.good();
  device_tier.host_tier = kHbm;
  cases.push_back({"host tier is the device tier", device_tier, "is the device tier"});
  Plan homed = a.good();
  homed.home[a.o] = kHbm;
  cases.push_back({"output homed off the host tier", homed, "its home must be 'ddr', not 'hbm'"});
  Step device_event = compute(0);
  device_event.event = 9;
  cases.push_back({"an event on a device step", a.plan({device_event}),
                   "a compute step on the device completes no event"});
  Step host_store = store(a.q, 4);
  host_store.host = true;
  cases.push_back({"a store on the host", a.plan({compute(0), host_store}),
                   "a store moves data off the device: it does not run on the host"});
  cases.push_back(
      {"store over what a host step reads",
       a.plan({compute(0), store(a.q, 1), on_host(1, 2, {1}), compute(2), store(a.q, 4)}),
       "store of tensor 2 'q' to 'ddr' while a host step reads it there: wait on event 2"});
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK(issue_of(c.plan, a.w).find(c.expect) != std::string::npos);
  }
  SUBCASE("an op that updates in place stays on the device") {
    Attention b;
    b.w.ops[1].updates = {b.kv};
    CHECK(issue_of(b.good(), b.w).find("updates tensor 1 'kv' in place") != std::string::npos);
  }
}

TEST_CASE("the cache on disk: a host prefetch brings it next to the CPU, a host detach frees it") {
  const Attention a;
  const Plan p = a.disk();
  REQUIRE(issue_of(p, a.w).empty());
  const hw::Topology t = with_cpu();
  std::vector<std::vector<StepTime>> times;
  SimOptions o;
  o.step_times = &times;
  const SimResult r = simulate(p, a.w, t, o);
  require_ok(r);
  // kv (256 B) crosses from ssd to ddr by the topology's route, alone on it, from time 0.
  const hw::Route* route = t.route(*t.tier_index("ssd"), *t.tier_index("ddr"));
  REQUIRE(route != nullptr);
  const Time fetch = hw::transfer_time_alone(*route, Bytes{256}).ps;
  CHECK(times[0][0].start == 0);
  CHECK(times[0][0].end == fetch);
  // The host step starts once both the fetch (event 4) and the store of q (341 ns) landed.
  REQUIRE(fetch > 341 * kNs);
  CHECK(times[0][3].start == fetch);
  CHECK(times[0][3].end == fetch + 300 * kNs);
  // Then o comes back as in good(): 171 ns, and oproj 170 ns.
  CHECK(r.makespan == fetch + (300 + 171 + 170) * kNs);
  CHECK(r.devices[0].bytes_in == 16);  // o only: the cache never reaches the device
  for (const TierResult& x : r.tiers) {
    CAPTURE(x.name);
    if (x.name == "ddr[0]") CHECK(x.peak == 256 + 16 + 16);  // kv while the host reads it
    if (x.name == "hbm[0]") CHECK(x.peak == 80);
  }
  // Written as plan/3 and read back the same.
  const std::string text = write_plan(p, &a.w);
  CHECK(text.find("{\"prefetch\": 1, \"from\": \"ssd\", \"on\": \"host\", \"event\": 4}") !=
        std::string::npos);
  CHECK(text.find("{\"detach\": 1, \"on\": \"host\", \"wait\": [2]}") != std::string::npos);
  CHECK(write_plan(read_plan_text(text, "p.json", ".").plan, &a.w) == text);
}

TEST_CASE("host copy rules: each broken one is named") {
  const Attention a;
  struct Case {
    std::string name;
    Plan plan;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"a host step that does not wait for the fetch",
       a.disk_plan({host_prefetch(a.kv, 4), compute(0), store(a.q, 1), on_host(1, 2, {1})}),
       "reads tensor 1 'kv', which has no current copy on 'ddr'"},
      {"a host step that reads what was never fetched",
       a.disk_plan({compute(0), store(a.q, 1), on_host(1, 2, {1})}),
       "reads tensor 1 'kv', which has no current copy on 'ddr'"},
      {"a fetch from the host tier itself", a.disk_plan({[&] {
         Step s = host_prefetch(a.q, 4);
         s.tier = kDdr;
         return s;
       }()}),
       "a host prefetch copies into the host tier 'ddr' from another tier, not from itself"},
      {"a second fetch of what the host holds",
       a.disk_plan({host_prefetch(a.kv, 4), compute(0, {4}), host_prefetch(a.kv, 5)}),
       "tensor 1 'kv' already has a copy on 'ddr': detach it there first"},
      {"a fetch while the first is in flight",
       a.disk_plan({host_prefetch(a.kv, 4), host_detach(a.kv)}),
       "host detach of tensor 1 'kv' while a transfer of it is in flight: wait on event 4"},
      {"a detach while the host step reads it",
       a.disk_plan({host_prefetch(a.kv, 4), compute(0), store(a.q, 1), on_host(1, 2, {1, 4}),
                    host_detach(a.kv)}),
       "host detach of tensor 1 'kv' while a host step reads it: wait on event 2"},
      {"a detach of the home copy", a.plan({compute(0), host_detach(a.kv)}),
       "host detach of tensor 1 'kv': 'ddr' is its home, whose copy stays"},
      {"a detach of nothing", a.disk_plan({compute(0), host_detach(a.kv)}),
       "host detach of tensor 1 'kv', which has no copy on 'ddr'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK(issue_of(c.plan, a.w).find(c.expect) != std::string::npos);
  }
  Plan no_tier = a.disk();
  no_tier.host_tier = kNoTier;
  CHECK(issue_of(no_tier, a.w).find("a host prefetch needs the plan's 'host_tier'") !=
        std::string::npos);
}

TEST_CASE("a plan with host steps is tierflow.plan/3 on disk and reads back the same") {
  const Attention a;
  const Plan p = a.good();
  const std::string text = write_plan(p, &a.w);
  CHECK(text.find("\"format\": \"tierflow.plan/3\"") != std::string::npos);
  CHECK(text.find("\"host_tier\": \"ddr\"") != std::string::npos);
  CHECK(text.find("\"compute\": 1, \"on\": \"host\", \"event\": 2") != std::string::npos);
  const LoadedPlan back = read_plan_text(text, "p.json", ".");
  CHECK(back.plan.host_tier == kDdr);
  REQUIRE(back.plan.programs.size() == 1);
  const std::vector<Step>& steps = back.plan.programs[0].steps;
  REQUIRE(steps.size() == p.programs[0].steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    CHECK(steps[i].host == p.programs[0].steps[i].host);
    CHECK(steps[i].event == p.programs[0].steps[i].event);
  }
  CHECK(write_plan(back.plan, &back.workload) == text);

  SUBCASE("a plan without host steps stays tierflow.plan/2") {
    Plan device = p;
    for (Step& s : device.programs[0].steps) s.host = false;
    device.host_tier = kNoTier;
    const std::string two = write_plan(device, &a.w);
    CHECK(two.find("\"format\": \"tierflow.plan/2\"") != std::string::npos);
    CHECK(two.find("host_tier") == std::string::npos);
    CHECK(two.find("\"on\"") == std::string::npos);
  }
  SUBCASE("'on' and 'host_tier' belong to plan/3") {
    std::string two = text;
    two.replace(two.find("tierflow.plan/3"), 15, "tierflow.plan/2");
    CHECK_THROWS_WITH_AS(read_plan_text(two, "p.json", "."),
                         doctest::Contains("is a field of 'tierflow.plan/3' plans"), InputError);
    std::string no_tier = text;
    no_tier.erase(no_tier.find("\"host_tier\": \"ddr\","), 20);
    CHECK_THROWS_WITH_AS(read_plan_text(no_tier, "p.json", "."),
                         doctest::Contains("names its 'host_tier'"), InputError);
    std::string bad_on = text;
    bad_on.replace(bad_on.find("\"on\": \"host\""), 12, "\"on\": \"hots\"");
    CHECK_THROWS_WITH_AS(read_plan_text(bad_on, "p.json", "."),
                         doctest::Contains("on: 'hots': expected 'device' (the default) or 'host'"),
                         InputError);
  }
}
