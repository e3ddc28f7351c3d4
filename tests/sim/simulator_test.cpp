// The simulator on tests/fixtures/unit_hw.yaml, where every time can be worked out on
// paper: 1 GB/s = 1 byte per ns, 1 GFLOP/s = 1 FLOP per ns. Each case writes its
// timeline out before the assertions.
//
// Fixture numbers used below (see the fixture's diagram):
//   ddr <-> hbm over pcie: setup = ddr 100 + pcie 20 + rc 5 + dma 30 = 155 ns (both ways),
//                          bandwidth min(ddr 2, pcie 1, hbm 4) = 1 B/ns
//   ssd  -> hbm over nvme, pcie: setup = ssd read 1000 + nvme 50 + rc 5 + pcie 20 + dma 30
//                          = 1105 ns
//   norm op, 160 FLOP and 128 B: max(160 ns, 128 B / 4 B/ns) + launch 10 = 170 ns
#include "sim/simulator.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "hw_models/loader.h"
#include "sim/models/ledger.h"
#include "sim/report.h"
#include "tests/support/fixtures.h"

using namespace tierflow;
using namespace tierflow::sim;

namespace {

constexpr Time kNs = 1000;  // ps

using tierflow::testing::unit_hw;

// Plan tiers used throughout: 0 = hbm (device), 1 = ddr, 2 = ssd.
constexpr uint32_t kHbm = 0, kDdr = 1, kSsd = 2;

Step compute(uint32_t op, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kCompute, op, 0, kNoEvent, std::move(wait)};
}
Step prefetch(uint32_t t, uint32_t ev, uint32_t from = kDdr, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kPrefetch, t, from, ev, std::move(wait)};
}
Step store(uint32_t t, uint32_t ev, uint32_t to = kDdr) {
  return Step{StepKind::kStore, t, to, ev, {}};
}
Step detach(uint32_t t, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kDetach, t, 0, kNoEvent, std::move(wait)};
}

Plan make_plan(std::vector<uint32_t> home, std::vector<Program> programs) {
  Plan p;
  p.name = "test";
  p.tiers = {"hbm", "ddr", "ssd"};
  p.device_tier = kHbm;
  p.home = std::move(home);
  p.programs = std::move(programs);
  return p;
}

// A norm op: 160 FLOP, 128 B -> 170 ns.
Op norm(std::string name, std::vector<uint32_t> in, std::vector<uint32_t> out) {
  return Op{std::move(name), OpKind::kNorm, Dtype::kBf16, 160, 128, std::move(in), std::move(out)};
}

const LinkResult& link(const SimResult& r, const std::string& name) {
  for (const LinkResult& l : r.links) {
    if (l.name == name) return l;
  }
  FAIL("no resource named " << name);
  return r.links.front();
}

const TierResult& tier(const SimResult& r, const std::string& name) {
  for (const TierResult& t : r.tiers) {
    if (t.name == name) return t;
  }
  FAIL("no tier named " << name);
  return r.tiers.front();
}

SimResult run(const Plan& p, const Workload& w, const hw::Topology& t,
              OnFull on_full = OnFull::kFail) {
  SimOptions o;
  o.on_full = on_full;
  return simulate(p, w, t, o);
}

void require_ok(const SimResult& r) {
  if (r.error) FAIL("unexpected error: " << r.error->message);
}

}  // namespace

TEST_CASE("a single prefetch: setup, then bytes at the bottleneck rate") {
  // x (64 B, home ddr) --norm--> y (64 B)
  Workload w;
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kInput});
  const uint32_t y = w.add_tensor({"y", 64, TensorKind::kActivation});
  w.add_op(norm("norm", {x}, {y}));
  const Plan p = make_plan({kDdr, kHbm},
                           {Program{0, {prefetch(x, 1), compute(0, {1}), detach(x), detach(y)}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  //  0           155 ns         219 ns                  389 ns
  //  |---setup----|== x 64 B ===|                          prefetch x (issue = start = 0)
  //  .. compute stalls on event 1 |====== norm 170 ns ======|
  //  hbm[0]: 64 B from 0 (x), 128 B from 219 ns (y allocated when norm starts)
  const SimResult r = run(p, w, unit_hw());
  require_ok(r);
  REQUIRE(r.transfers.size() == 1);
  const TransferRecord& t = r.transfers[0];
  CHECK(t.kind == StepKind::kPrefetch);
  CHECK(t.bytes == 64);
  CHECK(t.issue == 0);
  CHECK(t.start == 0);
  CHECK(t.active == 155 * kNs);
  CHECK(t.end == 219 * kNs);
  CHECK(t.exposed == 219 * kNs);
  CHECK(r.makespan == 389 * kNs);
  REQUIRE(r.devices.size() == 1);
  CHECK(r.devices[0].compute_ps == 170 * kNs);
  CHECK(r.devices[0].stall_transfer_ps == 219 * kNs);
  CHECK(r.devices[0].stall_memory_ps == 0);
  CHECK(r.devices[0].compute_end == 389 * kNs);
  CHECK(r.devices[0].bytes_in == 64);
  const TierResult& hbm = tier(r, "hbm[0]");
  CHECK(hbm.peak == 128);
  CHECK(hbm.peak_time == 219 * kNs);
  CHECK(hbm.final_level == 0);
  // 64 B for 219 ns + 128 B for 170 ns over 389 ns.
  CHECK(hbm.average == doctest::Approx((64.0 * 219 + 128.0 * 170) / 389));
  const LinkResult& pcie = link(r, "pcie[0] rc->hbm");
  CHECK(pcie.bytes == doctest::Approx(64));
  CHECK(pcie.busy_ps == 64 * kNs);
  CHECK(pcie.capacity == doctest::Approx(1e9));
  CHECK(pcie.peak_rate == doctest::Approx(1e9));
  CHECK(pcie.transfers == 1);
  CHECK(pcie.queue_ps == 0);
}

TEST_CASE("two prefetches share the PCIe link: half each, then the survivor gets it all") {
  // a (64 B) and b (96 B), both home ddr, both issued at 0 (2 copy engines).
  Workload w;
  const uint32_t a = w.add_tensor({"a", 64, TensorKind::kWeight});
  const uint32_t b = w.add_tensor({"b", 96, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {a, b}, {y}));
  const Plan p = make_plan({kDdr, kDdr, kHbm},
                           {Program{0, {prefetch(a, 1), prefetch(b, 2), compute(0, {1, 2})}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  //  0        155 ns               283 ns        315 ns                 485 ns
  //  |--setup--|= a 0.5 B/ns, 128 ns =|                                  a: 64 B
  //  |--setup--|= b 0.5 B/ns (64 B) ==|= b 1 B/ns, 32 B =|               b: 96 B
  //                                                      |== norm 170 ==|
  // The norm waits on event 1 (a) from 0 to 283 ns, then on event 2 (b) to 315 ns:
  // a is exposed 283 ns, b 32 ns; the stall is 315 ns.
  const SimResult r = run(p, w, unit_hw({"tiers.hbm.capacity=4KiB"}));
  require_ok(r);
  REQUIRE(r.transfers.size() == 2);
  CHECK(r.transfers[0].start == 0);
  CHECK(r.transfers[1].start == 0);
  CHECK(r.transfers[0].active == 155 * kNs);
  CHECK(r.transfers[1].active == 155 * kNs);
  CHECK(r.transfers[0].end == 283 * kNs);
  CHECK(r.transfers[1].end == 315 * kNs);
  CHECK(r.transfers[0].exposed == 283 * kNs);
  CHECK(r.transfers[1].exposed == 32 * kNs);
  CHECK(r.makespan == 485 * kNs);
  CHECK(r.devices[0].stall_transfer_ps == 315 * kNs);
  const LinkResult& pcie = link(r, "pcie[0] rc->hbm");
  CHECK(pcie.bytes == doctest::Approx(160));
  CHECK(pcie.busy_ps == 160 * kNs);
  // Two flows for 128 ns, one for 32 ns: (256 + 32) / 160.
  CHECK(pcie.mean_concurrency == doctest::Approx(288.0 / 160));
  CHECK(pcie.peak_rate == doctest::Approx(1e9));
  CHECK(pcie.transfers == 2);
  // The ddr read port (2 B/ns) carries both at 0.5 + 0.5: not the bottleneck.
  const LinkResult& ddr = link(r, "ddr[0] read");
  CHECK(ddr.capacity == doctest::Approx(2e9));
  CHECK(ddr.peak_rate == doctest::Approx(1e9));
}

TEST_CASE("a flow across two links runs at the narrower one") {
  // ssd -> hbm crosses nvme (1 GB/s x 0.5 efficiency = 0.5 B/ns) and pcie (1 B/ns).
  // The ssd read port is raised to 4 GB/s so that nvme alone is the bottleneck.
  Workload w;
  const uint32_t x = w.add_tensor({"x", 100, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {x}, {y}));
  const Plan p = make_plan({kSsd, kHbm}, {Program{0, {prefetch(x, 1, kSsd), compute(0, {1})}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  //  0                 1105 ns                 1305 ns             1475 ns
  //  |------setup-------|== 100 B at 0.5 B/ns ==|                    prefetch x
  //                                             |==== norm 170 ====|
  const SimResult r = run(p, w, unit_hw({"tiers.ssd.read_bandwidth=4GB/s"}));
  require_ok(r);
  REQUIRE(r.transfers.size() == 1);
  CHECK(r.transfers[0].active == 1105 * kNs);
  CHECK(r.transfers[0].end == 1305 * kNs);
  CHECK(r.makespan == 1475 * kNs);
  const LinkResult& nvme = link(r, "nvme ssd->rc");
  CHECK(nvme.capacity == doctest::Approx(0.5e9));
  CHECK(nvme.peak_rate == doctest::Approx(0.5e9));
  CHECK(nvme.busy_ps == 200 * kNs);
  const LinkResult& pcie = link(r, "pcie[0] rc->hbm");
  CHECK(pcie.capacity == doctest::Approx(1e9));
  CHECK(pcie.peak_rate == doctest::Approx(0.5e9));  // half used: nvme limits the flow
  CHECK(pcie.busy_ps == 200 * kNs);
  CHECK(pcie.bytes == doctest::Approx(100));
}

TEST_CASE("with one copy engine the second prefetch queues until the first lands") {
  Workload w;
  const uint32_t a = w.add_tensor({"a", 64, TensorKind::kWeight});
  const uint32_t b = w.add_tensor({"b", 96, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {a, b}, {y}));
  const Plan p = make_plan({kDdr, kDdr, kHbm},
                           {Program{0, {prefetch(a, 1), prefetch(b, 2), compute(0, {1, 2})}}});
  //  0        155 ns    219 ns                374 ns               470 ns            640 ns
  //  |--setup--|= a 64 =|                                                              a
  //  |..... b queued ....|------ b setup -------|===== b 96 B =====|                   b
  //                                                                |== norm 170 ==|
  // b: issue 0, start 219, active 374, end 470; the link's queueing is 219 ns.
  // The link is busy only while bytes flow: 64 + 96 = 160 ns.
  const SimResult r = run(p, w, unit_hw({"tiers.hbm.capacity=4KiB", "links.pcie.copy_engines=1"}));
  require_ok(r);
  REQUIRE(r.transfers.size() == 2);
  CHECK(r.transfers[0].start == 0);
  CHECK(r.transfers[0].end == 219 * kNs);
  CHECK(r.transfers[1].issue == 0);
  CHECK(r.transfers[1].start == 219 * kNs);
  CHECK(r.transfers[1].active == 374 * kNs);
  CHECK(r.transfers[1].end == 470 * kNs);
  CHECK(r.transfers[1].exposed == (470 - 219) * kNs);
  CHECK(r.makespan == 640 * kNs);
  CHECK(r.devices[0].stall_transfer_ps == 470 * kNs);
  const LinkResult& pcie = link(r, "pcie[0] rc->hbm");
  CHECK(pcie.queue_ps == 219 * kNs);
  CHECK(pcie.max_queue_ps == 219 * kNs);
  CHECK(pcie.busy_ps == 160 * kNs);
  CHECK(pcie.mean_concurrency == doctest::Approx(1.0));
}

TEST_CASE("half duplex: a prefetch and a store share one capacity; full duplex they do not") {
  // x (64 B, home ddr) is prefetched while k (64 B, home hbm) is stored to ddr.
  Workload w;
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kWeight});
  const uint32_t k = w.add_tensor({"k", 64, TensorKind::kKv});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {x}, {y}));
  const Plan p =
      make_plan({kDdr, kHbm, kHbm}, {Program{0, {prefetch(x, 1), store(k, 2), compute(0, {1})}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());

  SUBCASE("full duplex") {
    //  0        155 ns    219 ns              389 ns
    //  |--setup--|= x 64 =|                          rc->hbm at 1 B/ns
    //  |--setup--|= k 64 =|                          hbm->rc at 1 B/ns
    //                     |==== norm 170 ====|
    const SimResult r = run(p, w, unit_hw({"tiers.hbm.capacity=4KiB"}));
    require_ok(r);
    REQUIRE(r.transfers.size() == 2);
    CHECK(r.transfers[0].end == 219 * kNs);
    CHECK(r.transfers[1].kind == StepKind::kStore);
    CHECK(r.transfers[1].end == 219 * kNs);
    CHECK(r.makespan == 389 * kNs);
    CHECK(link(r, "pcie[0] rc->hbm").busy_ps == 64 * kNs);
    CHECK(link(r, "pcie[0] hbm->rc").busy_ps == 64 * kNs);
  }
  SUBCASE("full duplex whose directions slow each other") {
    // duplex_efficiency 0.75: both directions together at 0.75 x (1 + 1) B/ns, each 0.75.
    //  0        155 ns         240.33 ns              410.33 ns
    //  |--setup--|= x 64 / 0.75 =|
    //  |--setup--|= k 64 / 0.75 =|
    //                            |==== norm 170 ====|
    const SimResult r =
        run(p, w, unit_hw({"tiers.hbm.capacity=4KiB", "links.pcie.duplex_efficiency=0.75"}));
    require_ok(r);
    REQUIRE(r.transfers.size() == 2);
    // 155 ns + 64 B / 0.75 B/ns = 240,333.3 ps, rounded up to the picosecond.
    CHECK(r.transfers[0].end == 240'334);
    CHECK(r.transfers[1].end == 240'334);
    CHECK(r.makespan == 240'334 + 170 * kNs);
    // Each direction still carries its own bytes; the shared capacity carries both.
    CHECK(link(r, "pcie[0] rc->hbm").bytes == doctest::Approx(64));
    CHECK(link(r, "pcie[0] hbm<->rc").bytes == doctest::Approx(128));
    CHECK(link(r, "pcie[0] hbm<->rc").peak_rate == doctest::Approx(1.5e9));
  }
  SUBCASE("a transfer starting while the other direction carries one pays contended_setup") {
    // pcie is [hbm, rc]: the store k runs a->b. x starts first (nothing the other way);
    // k starts beside it and pays 100 ns more setup.
    //  0        155 ns    219 ns          255 ns    319 ns     389 ns
    //  |--setup--|= x 64 =|                                            rc->hbm
    //  |--setup + 100 ns contended ------|= k 64 =|                    hbm->rc
    //                     |======== norm 170 ==========================|
    const SimResult r =
        run(p, w, unit_hw({"tiers.hbm.capacity=4KiB", "links.pcie.contended_setup=100ns"}));
    require_ok(r);
    REQUIRE(r.transfers.size() == 2);
    CHECK(r.transfers[0].end == 219 * kNs);
    CHECK(r.transfers[1].active == 255 * kNs);
    CHECK(r.transfers[1].end == 319 * kNs);
    CHECK(r.makespan == 389 * kNs);
    // Each direction its own: b->a's setting does not slow k, and x started alone.
    const SimResult rev =
        run(p, w, unit_hw({"tiers.hbm.capacity=4KiB", "links.pcie.contended_setup_reverse=100ns"}));
    require_ok(rev);
    CHECK(rev.transfers[0].end == 219 * kNs);
    CHECK(rev.transfers[1].end == 219 * kNs);
  }
  SUBCASE("one direction alone is not slowed by duplex_efficiency") {
    const Plan one = make_plan({kDdr, kHbm, kHbm}, {Program{0, {prefetch(x, 1), compute(0, {1})}}});
    const SimResult r =
        run(one, w, unit_hw({"tiers.hbm.capacity=4KiB", "links.pcie.duplex_efficiency=0.75"}));
    require_ok(r);
    CHECK(r.transfers[0].end == 219 * kNs);
  }
  SUBCASE("half duplex") {
    //  0        155 ns                283 ns              453 ns
    //  |--setup--|= x 0.5 B/ns, 128 ns =|                        one 1 B/ns resource
    //  |--setup--|= k 0.5 B/ns, 128 ns =|                        for both directions
    //                                 |==== norm 170 ====|
    const SimResult r = run(p, w, unit_hw({"tiers.hbm.capacity=4KiB", "links.pcie.duplex=half"}));
    require_ok(r);
    REQUIRE(r.transfers.size() == 2);
    CHECK(r.transfers[0].end == 283 * kNs);
    CHECK(r.transfers[1].end == 283 * kNs);
    CHECK(r.makespan == 453 * kNs);
    const LinkResult& pcie = link(r, "pcie[0] hbm<->rc");
    CHECK(pcie.bytes == doctest::Approx(128));
    CHECK(pcie.busy_ps == 128 * kNs);
    CHECK(pcie.mean_concurrency == doctest::Approx(2.0));
    CHECK(pcie.peak_rate == doctest::Approx(1e9));
  }
}

TEST_CASE("a dispatching runtime's host issues steps in program order, and bounds ops") {
  // x (64 B, home ddr) is prefetched (155 ns setup + 64 ns) and read by norm (170 ns);
  // then y (16 B) is detached and a second norm on x runs.
  Workload w;
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  const uint32_t z = w.add_tensor({"z", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {x}, {y}));
  w.add_op(norm("norm2", {x}, {z}));
  const Plan p = make_plan({kDdr, kHbm, kHbm},
                           {Program{0, {prefetch(x, 1), compute(0, {1}), detach(y), compute(1)}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  const auto makespan = [&](std::vector<std::string> sets) {
    sets.emplace_back("tiers.hbm.capacity=4KiB");
    const SimResult r = run(p, w, unit_hw(sets));
    require_ok(r);
    return r.makespan;
  };
  // No dispatch: 219 ns for the copy, then two ops of 170 ns.
  CHECK(makespan({}) == 559 * kNs);
  // The prefetch is issued when its host call returns (300 ns): 519 ns, then 340 ns of ops.
  CHECK(makespan({"devices.dev.dispatch_copy=300ns"}) == 859 * kNs);
  // Ops last at least their dispatch (500 ns each): 219 + 500 + 500.
  CHECK(makespan({"devices.dev.dispatch_compute=500ns"}) == 1219 * kNs);
  // The copy is issued at 300 ns and lands at 519, the first op runs to 689; the second
  // op's host work begins after the copy's, the first op's and the detach's: 300 + 100 +
  // 400 = 800 ns, so it runs from 800 to 970.
  CHECK(makespan({"devices.dev.dispatch_copy=300ns", "devices.dev.dispatch_compute=100ns",
                  "devices.dev.dispatch_detach=400ns"}) == (800 + 170) * kNs);
}

TEST_CASE("a staged copy through a host bounce buffer takes bytes x sum(1 / leg)") {
  // ssd -> ddr at 10 GB/s (the drive), then ddr -> hbm at 25 GB/s (PCIe), one 1 MiB buffer:
  // 1 MB takes 100 us + 40 us, where a cut-through route would take 100 us.
  Workload w;
  const uint32_t x = w.add_tensor({"x", 1'000'000, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {x}, {y}));
  const Plan p = make_plan({kSsd, kHbm}, {Program{0, {prefetch(x, 1, kSsd), compute(0, {1})}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  const auto landed = [&](const std::string& pin) {
    const SimResult r =
        run(p, w, hw::load_topology_text(tierflow::testing::bounce_box_yaml(1, pin), "b.yaml"));
    require_ok(r);
    REQUIRE(r.transfers.size() == 1);
    return r.transfers[0].end;
  };
  CHECK(landed("  - {from: ssd, to: hbm, via: [nvme, pcie]}\n") == 100'000 * kNs);
  CHECK(landed("  - {from: ssd, to: hbm, via: [nvme, pcie], buffer: 1MiB}\n") == 140'000 * kNs);
  CHECK(landed("  - {from: ssd, to: hbm, via: [nvme, pcie], buffer: 1MiB, buffers: 2}\n") ==
        100'000 * kNs);
}

TEST_CASE("a 1-byte transfer is all latency: setup + 1 ns") {
  Workload w;
  const uint32_t x = w.add_tensor({"x", 1, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  // 10 FLOP, 0 B: max(10 ns, 0) + launch 10 = 20 ns
  w.add_op({"tiny", OpKind::kElementwise, Dtype::kBf16, 10, 0, {x}, {y}});
  const Plan p = make_plan({kDdr, kHbm}, {Program{0, {prefetch(x, 1), compute(0, {1})}}});
  //  0        155 ns 156 ns     176 ns
  //  |--setup--|=1=|               prefetch x
  //                |= tiny 20 =|
  const SimResult r = run(p, w, unit_hw());
  require_ok(r);
  REQUIRE(r.transfers.size() == 1);
  CHECK(r.transfers[0].active == 155 * kNs);
  CHECK(r.transfers[0].end == 156 * kNs);
  CHECK(r.transfers[0].end - r.transfers[0].issue == 156 * kNs);
  CHECK(r.makespan == 176 * kNs);
}

TEST_CASE("compute waits on a prefetch it could not hide: exact stall and exposed time") {
  // h (32 B, home hbm) --norm0--> a (16 B); x (64 B, home ddr), a --norm1--> b (16 B)
  // norm1: 100 FLOP, 64 B -> max(100, 16) + 10 = 110 ns.
  Workload w;
  const uint32_t h = w.add_tensor({"h", 32, TensorKind::kWeight});
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kWeight});
  const uint32_t a = w.add_tensor({"a", 16, TensorKind::kActivation});
  const uint32_t b = w.add_tensor({"b", 16, TensorKind::kOutput});
  w.add_op(norm("norm0", {h}, {a}));
  w.add_op({"norm1", OpKind::kNorm, Dtype::kBf16, 100, 64, {x, a}, {b}});
  const Plan p =
      make_plan({kHbm, kDdr, kHbm, kHbm},
                {Program{0, {prefetch(x, 1), compute(0), compute(1, {1}), detach(x), detach(h)}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  //  0        155 ns    219 ns
  //  |--setup--|= x 64 =|                      prefetch x
  //  |== norm0 170 ns ==|                      (ends at 170 ns)
  //             170 ns  |..|                   stall 49 ns on event 1
  //                     219 ns |== norm1 110 ==| 329 ns
  const SimResult r = run(p, w, unit_hw());
  require_ok(r);
  REQUIRE(r.transfers.size() == 1);
  CHECK(r.transfers[0].end == 219 * kNs);
  CHECK(r.transfers[0].exposed == 49 * kNs);
  CHECK(r.devices[0].stall_transfer_ps == 49 * kNs);
  CHECK(r.devices[0].compute_ps == 280 * kNs);
  CHECK(r.devices[0].compute_end == 329 * kNs);
  CHECK(r.makespan == 329 * kNs);
  // hbm[0]: h 32 + x 64 at 0, + a 16 at 0 (norm0 starts), + b 16 at 219 ns = 128 B.
  CHECK(tier(r, "hbm[0]").peak == 128);
  CHECK(tier(r, "hbm[0]").peak_time == 219 * kNs);
}

namespace {

// a (96 B) --norm0--> ya (16 B); b (64 B), ya --norm1--> yb (16 B); a and b home ddr.
// hbm holds 128 B: after norm0, a + ya = 112 B, so b (64 B) fits only once a is detached.
Workload memory_workload() {
  Workload w;
  w.add_tensor({"a", 96, TensorKind::kWeight});
  w.add_tensor({"b", 64, TensorKind::kWeight});
  w.add_tensor({"ya", 16, TensorKind::kActivation});
  w.add_tensor({"yb", 16, TensorKind::kOutput});
  w.add_op(norm("norm0", {0}, {2}));
  w.add_op(norm("norm1", {1, 2}, {3}));
  return w;
}

}  // namespace

TEST_CASE("memory full: strict mode fails naming the tier, step and time") {
  const Workload w = memory_workload();
  // step 2 prefetches b before step 3 detaches a.
  const Plan p =
      make_plan({kDdr, kDdr, kHbm, kHbm}, {Program{0,
                                                   {prefetch(0, 1), compute(0, {1}), prefetch(1, 2),
                                                    detach(0), compute(1, {2}), detach(1)}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  //  0        155 ns           251 ns               421 ns
  //  |--setup--|== a 96 B ======|                     prefetch a
  //                             |==== norm0 170 ====| ya allocated: 96 + 16 = 112 B
  //                                                  prefetch b: 64 B > 16 B free
  const SimResult r = run(p, w, unit_hw());
  REQUIRE(r.error.has_value());
  CHECK(r.error->kind == SimError::Kind::kCapacity);
  CHECK(r.error->program == 0);
  CHECK(r.error->step == 2);
  CHECK(r.error->time == 421 * kNs);
  CHECK(r.error->message.find("'hbm[0]'") != std::string::npos);
  CHECK(r.error->message.find("prefetch step 2") != std::string::npos);
}

TEST_CASE("memory stall: an op waits until a written-back tensor is detached") {
  // h (32 B, home hbm) --norm0--> x (64 B) ; h --norm1--> y (64 B). hbm holds 128 B:
  // h + x = 96 B, so norm1's output fits only once x is stored to ddr and detached.
  Workload w;
  w.add_tensor({"h", 32, TensorKind::kWeight});
  w.add_tensor({"x", 64, TensorKind::kActivation});
  w.add_tensor({"y", 64, TensorKind::kOutput});
  w.add_op(norm("norm0", {0}, {1}));
  w.add_op(norm("norm1", {0}, {2}));
  const Plan p = make_plan({kHbm, kHbm, kHbm},
                           {Program{0, {compute(0), store(1, 0), detach(1, {0}), compute(1)}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  //  0              170 ns                     389 ns               559 ns
  //  |=== norm0 ====|                                               x allocated at 0
  //                 |--setup 155--|= x 64 B =|                      store x (hbm -> ddr)
  //                 |..... norm1 waits for 64 B of hbm .....|       detach x at 389 ns
  //                                            |=== norm1 170 ===|
  SUBCASE("wait: a memory stall of 219 ns") {
    const SimResult r = run(p, w, unit_hw(), OnFull::kWait);
    require_ok(r);
    CHECK(r.devices[0].stall_memory_ps == 219 * kNs);
    CHECK(r.devices[0].stall_transfer_ps == 0);
    CHECK(r.makespan == 559 * kNs);
    CHECK(tier(r, "hbm[0]").peak == 96);
    CHECK(tier(r, "ddr[0]").peak == 64);
  }
  SUBCASE("fail: norm1 does not fit when reached") {
    const SimResult r = run(p, w, unit_hw(), OnFull::kFail);
    REQUIRE(r.error.has_value());
    CHECK(r.error->kind == SimError::Kind::kCapacity);
    CHECK(r.error->step == 3);
    CHECK(r.error->time == 170 * kNs);
  }
}

TEST_CASE("memory full with on_full = wait") {
  const Workload w = memory_workload();
  SUBCASE("the detach that frees the bytes comes after the prefetch") {
    // A cache step that cannot issue does not hold back the steps after it (simulator.h
    // glossary): the prefetch of b (step 2) waits for memory, the detach of a (step 3)
    // issues at 421 ns and frees 96 B, and b issues at once.
    //  0        155 ns    251 ns          421 ns    576 ns   640 ns          810 ns
    //  |--setup--|= a 96 =|                                          prefetch a
    //                     |== norm0 170 ==|                          detach a at 421 ns
    //                                     |--setup--|= b 64 =|       prefetch b
    //                                                        |== norm1 170 ==|
    const Plan p = make_plan({kDdr, kDdr, kHbm, kHbm},
                             {Program{0,
                                      {prefetch(0, 1), compute(0, {1}), prefetch(1, 2), detach(0),
                                       compute(1, {2}), detach(1)}}});
    const SimResult r = run(p, w, unit_hw(), OnFull::kWait);
    require_ok(r);
    REQUIRE(r.transfers.size() == 2);
    CHECK(r.transfers[1].issue == 421 * kNs);
    CHECK(r.transfers[1].end == 640 * kNs);
    CHECK(r.makespan == 810 * kNs);
    // norm1 waits on b's event: a transfer wait, not a memory wait.
    CHECK(r.devices[0].stall_memory_ps == 0);
    CHECK(r.devices[0].stall_transfer_ps == (251 + 219) * kNs);
  }
  SUBCASE("the detach comes first: b fits when reached, no memory stall") {
    //  0        155 ns    251 ns          421 ns    576 ns   640 ns          810 ns
    //  |--setup--|= a 96 =|                                          prefetch a
    //                     |== norm0 170 ==|                          detach a at 421 ns
    //                                     |--setup--|= b 64 =|       prefetch b
    //                                                        |== norm1 170 ==|
    const Plan p = make_plan({kDdr, kDdr, kHbm, kHbm},
                             {Program{0,
                                      {prefetch(0, 1), compute(0, {1}), detach(0), prefetch(1, 2),
                                       compute(1, {2}), detach(1)}}});
    REQUIRE_FALSE(verify_plan(p, w).has_value());
    const SimResult r = run(p, w, unit_hw(), OnFull::kWait);
    require_ok(r);
    CHECK(r.devices[0].stall_memory_ps == 0);
    REQUIRE(r.transfers.size() == 2);
    CHECK(r.transfers[1].issue == 421 * kNs);
    CHECK(r.transfers[1].end == (421 + 155 + 64) * kNs);
    CHECK(r.makespan == (421 + 155 + 64 + 170) * kNs);
    // stall: 0..251 ns on a, 421..640 ns on b
    CHECK(r.devices[0].stall_transfer_ps == (251 + 219) * kNs);
  }
}

namespace {

// x (64 B, ddr) --norm--> y (16 B); y, w (64 B, ddr) --mm--> z (16 B), mm updates kv (32 B,
// home hbm). mm: 100 FLOP at 1 x 0.5 -> 200 ns + 10 = 210 ns (64 B -> 16 ns).
Workload rules_workload() {
  Workload w;
  w.add_tensor({"x", 64, TensorKind::kInput});       // 0
  w.add_tensor({"w", 64, TensorKind::kWeight});      // 1
  w.add_tensor({"kv", 32, TensorKind::kKv});         // 2
  w.add_tensor({"y", 16, TensorKind::kActivation});  // 3
  w.add_tensor({"z", 16, TensorKind::kOutput});      // 4
  w.add_op(norm("norm", {0}, {3}));
  w.add_op({"mm", OpKind::kMatmul, Dtype::kBf16, 100, 64, {3, 1}, {4}, {2}});
  return w;
}

Plan rules_plan(std::vector<Step> steps) {
  return make_plan({kDdr, kDdr, kHbm, kHbm, kHbm}, {Program{0, std::move(steps)}});
}

}  // namespace

TEST_CASE("each §6 rule broken: a plan-rule error at the time the step is reached") {
  const Workload w = rules_workload();
  const hw::Topology t = unit_hw({"tiers.hbm.capacity=4KiB"});

  SUBCASE("compute on a non-resident input") {
    //  0        155 ns    219 ns              389 ns
    //  |--setup--|= x 64 =|== norm 170 ns ====|  step 2 (mm reads w, never prefetched)
    const Plan p = rules_plan({prefetch(0, 1), compute(0, {1}), compute(1)});
    const SimResult r = run(p, w, t);
    REQUIRE(r.error.has_value());
    CHECK(r.error->kind == SimError::Kind::kPlanRule);
    CHECK(r.error->program == 0);
    CHECK(r.error->step == 2);
    CHECK(r.error->tensor == 1);
    CHECK(r.error->time == 389 * kNs);
    CHECK(r.error->message ==
          "op 'mm' reads tensor 1 'w', which is not resident on 'hbm': prefetch it first, or "
          "do not detach it earlier");
  }
  SUBCASE("detach that loses modified data still needed") {
    //  0        155 ns         283 ns              453 ns
    //  |--setup--|= x 0.5 B/ns =|                      x and w share pcie: 128 ns each
    //  |--setup--|= w 0.5 B/ns =|
    //                           |== norm 170 ns ===|  step 3: detach y, which only hbm
    //                                                 holds and mm (step 4) reads
    const Plan p =
        rules_plan({prefetch(0, 1), prefetch(1, 2), compute(0, {1}), detach(3), compute(1, {2})});
    const SimResult r = run(p, w, t);
    REQUIRE(r.error.has_value());
    CHECK(r.error->kind == SimError::Kind::kPlanRule);
    CHECK(r.error->program == 0);
    CHECK(r.error->step == 3);
    CHECK(r.error->tensor == 3);
    CHECK(r.error->time == 453 * kNs);
    CHECK(r.error->message.starts_with("detach of tensor 3 'y' loses data"));
  }
  SUBCASE("detach of a tensor with a transfer in flight") {
    //  0        155 ns    219 ns              389 ns
    //  |--setup--|= x 64 =|== norm 170 ns ====|  step 2: prefetch w issued at 389 ns
    //                                            step 3: detach w without waiting, 389 ns
    const Plan p = rules_plan({prefetch(0, 1), compute(0, {1}), prefetch(1, 2), detach(1)});
    const SimResult r = run(p, w, t);
    REQUIRE(r.error.has_value());
    CHECK(r.error->kind == SimError::Kind::kPlanRule);
    CHECK(r.error->program == 0);
    CHECK(r.error->step == 3);
    CHECK(r.error->tensor == 1);
    CHECK(r.error->time == 389 * kNs);
    CHECK(r.error->message ==
          "detach of tensor 1 'w' while a transfer uses it: wait on event 2 first");
  }
}

TEST_CASE("two programs waiting on each other's events deadlock") {
  // h (32 B, home hbm) --norm0--> a; x (64 B, ddr) --norm1--> b.
  // Program 0 (device 0): norm0; prefetch x (event 1) after event 2; norm1 after event 1.
  // Program 1 (device 1): norm0; prefetch x (event 2) after event 1; norm1 after event 2.
  //  0                 170 ns
  //  |== norm0 (p0) ==|  p0 step 1 waits on event 2, which p1 step 1 completes, which
  //  |== norm0 (p1) ==|  waits on event 1, which p0 step 1 completes: nothing moves.
  Workload w;
  const uint32_t h = w.add_tensor({"h", 32, TensorKind::kWeight});
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kWeight});
  const uint32_t a = w.add_tensor({"a", 16, TensorKind::kActivation});
  const uint32_t b = w.add_tensor({"b", 16, TensorKind::kOutput});
  w.add_op(norm("norm0", {h}, {a}));
  w.add_op(norm("norm1", {x}, {b}));
  const Plan p = make_plan({kHbm, kDdr, kHbm, kHbm},
                           {Program{0, {compute(0), prefetch(x, 1, kDdr, {2}), compute(1, {1})}},
                            Program{1, {compute(0), prefetch(x, 2, kDdr, {1}), compute(1, {2})}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  const SimResult r = run(p, w, unit_hw());
  REQUIRE(r.error.has_value());
  CHECK(r.error->kind == SimError::Kind::kDeadlock);
  CHECK(r.error->program == 0);
  CHECK(r.error->step == 1);
  CHECK(r.error->tensor == int(x));
  CHECK(r.error->time == 170 * kNs);
  CHECK(r.transfers.empty());
}

TEST_CASE("a plan tier the topology lacks is a topology error before the run") {
  Workload w;
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {x}, {y}));
  Plan p = make_plan({kDdr, kHbm}, {Program{0, {prefetch(x, 1), compute(0, {1})}}});
  p.tiers = {"hbm", "cxl"};
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  const SimResult r = run(p, w, unit_hw());
  REQUIRE(r.error.has_value());
  CHECK(r.error->kind == SimError::Kind::kTopology);
  CHECK(r.error->time == -1);
  CHECK(r.error->message.find("'cxl'") != std::string::npos);
  CHECK(r.error->message.find("unit-hw") != std::string::npos);
}

TEST_CASE("the ledger's peak, live set and kinds on a small plan") {
  // h (32 B weight, home hbm), x (64 B weight, home ddr) --norm (workspace 8 B)--> y (16 B)
  Workload w;
  const uint32_t h = w.add_tensor({"h", 32, TensorKind::kWeight});
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  Op op = norm("norm", {h, x}, {y});
  op.workspace = 8;
  w.add_op(op);
  const Plan p = make_plan({kHbm, kDdr, kHbm},
                           {Program{0, {prefetch(x, 1), compute(0, {1}), detach(x), detach(h)}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  //  0        155 ns    219 ns              389 ns
  //  |--setup--|= x 64 =|== norm 170 ns ====|
  //  hbm[0]: 32 (h) + 64 (x) = 96 B from 0; + y 16 + workspace 8 = 120 B at 219 ns (peak);
  //          at 389 ns workspace, x and h go: 16 B (y) remain.
  //  ddr[0]: x's home copy, 64 B throughout.
  const SimResult r = run(p, w, unit_hw({"tiers.hbm.capacity=4KiB"}));
  require_ok(r);
  CHECK(r.makespan == 389 * kNs);
  const TierResult& hbm = tier(r, "hbm[0]");
  CHECK(hbm.peak == 120);
  CHECK(hbm.peak_time == 219 * kNs);
  CHECK(hbm.final_level == 16);
  CHECK(hbm.average == doctest::Approx((96.0 * 219 + 120.0 * 170) / 389));
  CHECK(hbm.live_count == 4);
  REQUIRE(hbm.largest.size() == 4);
  CHECK(hbm.largest[0].what == x);
  CHECK(hbm.largest[0].bytes == 64);
  CHECK(hbm.largest[1].what == h);
  CHECK(hbm.largest[1].bytes == 32);
  CHECK(hbm.largest[2].what == y);
  CHECK(hbm.largest[3].what == (0 | kWorkspaceBit));
  CHECK(hbm.largest[3].bytes == 8);
  REQUIRE(hbm.peak_by_kind.size() == kTensorKindNames.size() + 1);
  CHECK(hbm.peak_by_kind[size_t(TensorKind::kWeight)] == 96);
  CHECK(hbm.peak_by_kind[size_t(TensorKind::kActivation)] == 16);
  CHECK(hbm.peak_by_kind[kTensorKindNames.size()] == 8);
  const TierResult& ddr = tier(r, "ddr[0]");
  CHECK(ddr.peak == 64);
  CHECK(ddr.final_level == 64);
  CHECK(ddr.average == doctest::Approx(64.0));
  CHECK(ddr.live_count == 0);
  REQUIRE(ddr.largest.size() == 1);
  CHECK(ddr.largest[0].what == x);
  CHECK(ddr.largest[0].is_static);
}

TEST_CASE("two runs of the same plan give identical results") {
  // The two-flow plan plus a store, on two devices sharing ddr[0].
  Workload w;
  const uint32_t a = w.add_tensor({"a", 64, TensorKind::kWeight});
  const uint32_t b = w.add_tensor({"b", 96, TensorKind::kWeight});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kActivation});
  w.add_op(norm("norm", {a, b}, {y}));
  const Plan p =
      make_plan({kDdr, kDdr, kHbm}, {Program{0,
                                             {prefetch(a, 1), prefetch(b, 2), compute(0, {1, 2}),
                                              store(y, 3), detach(a), detach(b), detach(y, {3})}},
                                     Program{1,
                                             {prefetch(b, 4), prefetch(a, 5), compute(0, {4, 5}),
                                              store(y, 6), detach(a), detach(b), detach(y, {6})}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  const hw::Topology t = unit_hw({"tiers.hbm.capacity=4KiB", "links.pcie.copy_engines=1"});
  const SimResult r1 = run(p, w, t);
  const SimResult r2 = run(p, w, t);
  require_ok(r1);
  const ReportContext c{p, w, t, "p.json"};
  CHECK(report_json(r1, c, true) == report_json(r2, c, true));
  CHECK(r1.makespan == r2.makespan);
  CHECK(r1.events == r2.events);
  CHECK(r1.solves == r2.solves);
  REQUIRE(r1.transfers.size() == r2.transfers.size());
  for (size_t i = 0; i < r1.transfers.size(); ++i) {
    CHECK(r1.transfers[i].start == r2.transfers[i].start);
    CHECK(r1.transfers[i].end == r2.transfers[i].end);
    CHECK(r1.transfers[i].exposed == r2.transfers[i].exposed);
  }
}

TEST_CASE("step times: when each step of the single-prefetch plan ran") {
  // The plan of "a single prefetch" above, recorded per step:
  //   0 prefetch x  issued 0, last byte at 219 ns
  //   1 norm        219 ns -> 389 ns
  //   2 detach x    389 ns (its anchor, norm, has finished)
  //   3 detach y    389 ns
  Workload w;
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kInput});
  const uint32_t y = w.add_tensor({"y", 64, TensorKind::kActivation});
  w.add_op(norm("norm", {x}, {y}));
  const Plan p = make_plan({kDdr, kHbm},
                           {Program{0, {prefetch(x, 1), compute(0, {1}), detach(x), detach(y)}}});
  std::vector<std::vector<StepTime>> times{{StepTime{7, 7}}};  // stale: simulate() resizes
  SimOptions o;
  o.step_times = &times;
  const SimResult r = simulate(p, w, unit_hw(), o);
  require_ok(r);
  REQUIRE(times.size() == 1);
  REQUIRE(times[0].size() == 4);
  CHECK(times[0][0].start == 0);
  CHECK(times[0][0].end == 219 * kNs);
  CHECK(times[0][1].start == 219 * kNs);
  CHECK(times[0][1].end == 389 * kNs);
  for (size_t i : {size_t{2}, size_t{3}}) {
    CHECK(times[0][i].start == 389 * kNs);
    CHECK(times[0][i].end == 389 * kNs);
  }
}

TEST_CASE("stop_after: a run stops once its unbegun prefetches surely end it after the limit") {
  // a and b (32 B each, home ddr) feed two norms; b's prefetch issues after the first.
  //  0      155 187       357    512 544       714 ns
  //  |setup a|=a=|== n1 ==|setup b|=b=|== n2 ==|
  Workload w;
  const uint32_t a = w.add_tensor({"a", 32, TensorKind::kInput});
  const uint32_t b = w.add_tensor({"b", 32, TensorKind::kInput});
  const uint32_t y = w.add_tensor({"y", 32, TensorKind::kActivation});
  const uint32_t z = w.add_tensor({"z", 32, TensorKind::kActivation});
  w.add_op(norm("n1", {a}, {y}));
  w.add_op(norm("n2", {b, y}, {z}));
  const Plan p = make_plan({kDdr, kDdr, kHbm, kHbm},
                           {Program{0,
                                    {prefetch(a, 1), compute(0, {1}), detach(a), prefetch(b, 2),
                                     compute(1, {2}), detach(b), detach(y), detach(z)}}});
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  const SimResult full = run(p, w, unit_hw());
  require_ok(full);
  CHECK_FALSE(full.stopped);
  CHECK(full.makespan == 714 * kNs);
  SimOptions o;
  o.ingress = 1e9;  // 1 B/ns
  // At the limit the bound never passes it: the same run to its end.
  o.stop_after = full.makespan;
  const SimResult same = simulate(p, w, unit_hw(), o);
  require_ok(same);
  CHECK_FALSE(same.stopped);
  CHECK(same.makespan == full.makespan);
  CHECK(same.transfers.size() == full.transfers.size());
  // Just below it, the run stops at its last event, which passes the limit.
  o.stop_after = full.makespan - 1;
  const SimResult late = simulate(p, w, unit_hw(), o);
  CHECK(late.stopped);
  CHECK_FALSE(late.error.has_value());
  CHECK(late.makespan == full.makespan);
  // Below 187 ns: at a's setup (155 ns) the 32 bytes of b not begun take it to 187 ns.
  o.stop_after = 180 * kNs;
  const SimResult early = simulate(p, w, unit_hw(), o);
  CHECK(early.stopped);
  CHECK(early.makespan == 155 * kNs);
  CHECK(early.transfers.empty());
  // At 187 ns exactly: not yet at 155 ns (the bound is 187 ns); at 187 ns (a landed) b's
  // 32 bytes still take it to 219 ns.
  o.stop_after = 187 * kNs;
  const SimResult at = simulate(p, w, unit_hw(), o);
  CHECK(at.stopped);
  CHECK(at.makespan == 187 * kNs);
}
