// The replay executor on the CPU backend: every step runs, in an order the §6 rules allow
// (checked on the recorded times), a plan that breaks a rule is refused with the
// simulator's words, and the device arena's measured peak is the simulator's prediction.
#include "tools/replay/executor.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "core/plan_json.h"
#include "hw_models/loader.h"
#include "sim/simulator.h"
#include "tests/replay/replay_checks.h"
#include "tests/support/fixtures.h"
#include "tests/support/plan_builders.h"
#include "tools/replay/cpu_backend.h"

using namespace tierflow;
using namespace tierflow::replay;
using tierflow::testing::allocation_order_fixed;
using tierflow::testing::check_order;
using tierflow::testing::check_peaks_equal;
using tierflow::testing::simulated_peak;
using tierflow::testing::steps_of;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;
using tierflow::testing::unit_hw;

/// The fixture with room for the host-step plans (tests/fixtures/plans/host_*.json) and a
/// host CPU next to ddr with a rate for `dtype` only.
hw::Topology host_unit_hw(const std::string& dtype = "bf16") {
  return unit_hw(
      {"tiers.hbm.capacity=4KiB", "system.cpu.tier=ddr", "system.cpu.peak." + dtype + "=2GFLOP/s"});
}

hw::Topology roomy_unit_hw() {
  return unit_hw({"tiers.hbm.capacity=1MiB", "tiers.ddr.capacity=1MiB"});
}

/// Random workloads have ops of up to 16M FLOPs, 16 ms on the fixture's 1 GFLOP/s: the
/// default time scale runs them 100 times faster than modelled, so that a plan takes
/// milliseconds.
ReplayResult run(const Plan& p, const Workload& w, const hw::Topology& t, double scale = 0.01) {
  CpuBackendOptions o;
  o.time_scale = scale;
  CpuBackend backend(o);
  return replay::replay(p, w, t, backend);
}

}  // namespace

TEST_CASE("tiny.json replays every step in a legal order; peak equals the simulator's") {
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/tiny.json");
  const hw::Topology t = unit_hw({"tiers.hbm.capacity=4KiB"});
  const ReplayResult r = run(lp.plan, lp.workload, t, /*scale=*/100);
  REQUIRE_FALSE(r.error);
  CHECK(r.backend == "cpu");
  CHECK(r.shift == 0);
  CHECK(r.steps == steps_of(lp.plan));
  CHECK(r.programs[0].transfers == 3);
  check_order(lp.plan, r);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  // hbm holds kv (512) from the start; x (64) and w (96) land, y (64) and z (64) are made:
  // 800 bytes at the peak, while mm runs.
  CHECK(simulated_peak(s, "hbm[0]") == 800);
  check_peaks_equal(r, s, /*unshifted=*/true);
  // The measured makespan is at least the simulated one less rounding: the CPU backend
  // never runs a step faster than its modelled time.
  CHECK(r.makespan >= s.makespan - 1000);
}

namespace {

/// A CPU backend that keeps what the executor handed it: the setup and every compute step.
class Recording final : public Backend {
 public:
  explicit Recording(const CpuBackendOptions& o = {}) : inner_(o) {}
  std::string name() const override { return inner_.name(); }
  uint64_t memory_limit() const override { return inner_.memory_limit(); }
  void start(const BackendSetup& setup) override {
    setup_ = setup;
    inner_.start(setup);
  }
  std::optional<Block> allocate(ArenaId arena, uint64_t bytes, uint64_t logical) override {
    return inner_.allocate(arena, bytes, logical);
  }
  void free(const Block& b) override { inner_.free(b); }
  void copy(const CopyRequest& r, Completion done) override { inner_.copy(r, std::move(done)); }
  void compute(uint32_t program, const ComputeWork& work, Completion done) override {
    {
      const std::lock_guard lock(m_);
      computed_.push_back(work);
    }
    inner_.compute(program, work, std::move(done));
  }
  void host_compute(uint32_t program, const ComputeWork& work, Completion done) override {
    {
      const std::lock_guard lock(m_);
      host_computed_.push_back(work);
    }
    inner_.host_compute(program, work, std::move(done));
  }
  Time now() const override { return inner_.now(); }
  ArenaStats arena_stats(ArenaId arena) const override { return inner_.arena_stats(arena); }
  void stop() override { inner_.stop(); }

  BackendSetup setup_;
  std::vector<ComputeWork> computed_;
  std::vector<ComputeWork> host_computed_;

 private:
  CpuBackend inner_;
  std::mutex m_;
};

}  // namespace

TEST_CASE("compute steps carry the device's launch overhead; the setup lists each kind once") {
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/tiny.json");
  const hw::Topology t =
      unit_hw({"tiers.hbm.capacity=4KiB", "devices.dev.launch_overhead=200ns"});
  Recording backend;
  const ReplayResult r = replay::replay(lp.plan, lp.workload, t, backend);
  REQUIRE_FALSE(r.error);
  REQUIRE_FALSE(backend.computed_.empty());
  std::set<std::tuple<std::string, std::string, double>> kinds;
  for (const ComputeWork& w : backend.computed_) {
    CAPTURE(w.kind);
    CHECK(w.launch == std::min<Time>(w.duration, 200'000));
    CHECK(w.duration > 0);
    kinds.emplace(w.dtype, w.kind, w.flops);
  }
  REQUIRE(backend.setup_.work.size() == kinds.size());
  size_t i = 0;
  for (const auto& [dtype, kind, flops] : kinds) {
    CHECK(backend.setup_.work[i].dtype == dtype);
    CHECK(backend.setup_.work[i].kind == kind);
    CHECK(backend.setup_.work[i].flops == flops);
    ++i;
  }
}

TEST_CASE("host steps run on the host engine beside the device, timed as the simulator") {
  // tests/sim/host_compute_test.cpp works the simulated times out by hand: the host step
  // (attn, 300 ns) starts when q's store lands, while the device runs `side`.
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/host_attention.json");
  const hw::Topology t = host_unit_hw();
  CpuBackendOptions o;
  o.time_scale = 1000;  // 1 us of plan time in 1 ms
  Recording backend(o);
  const ReplayResult r = replay::replay(lp.plan, lp.workload, t, backend);
  REQUIRE_FALSE(r.error);
  CHECK(backend.setup_.host);
  CHECK(r.steps == steps_of(lp.plan));
  check_order(lp.plan, r);
  REQUIRE(backend.host_computed_.size() == 1);
  CHECK(backend.host_computed_[0].duration == 300'000);
  CHECK(backend.host_computed_[0].kind == "attention");
  // The device's warm-up list holds device ops only: norm, never the host's attention.
  for (const ComputeWork& w : backend.setup_.work) CHECK(w.kind != "attention");
  CHECK(backend.computed_.size() == 3);
  const ProgramRecord& prog = r.programs[0];
  CHECK(prog.host_ops == 1);
  const StepRecord& attn = prog.steps[2];
  const StepRecord& store = prog.steps[1];
  const StepRecord& side = prog.steps[3];
  CHECK(prog.host_ps == attn.end - attn.start);
  CHECK(attn.end - attn.start >= 300'000);
  CHECK(attn.start >= store.end);
  // The device ran `side` while the host computed: it started before the host step ended.
  CHECK(side.start < attn.end);
  // The prefetch of o waits on the host step.
  CHECK(prog.steps[5].issue >= attn.end);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  check_peaks_equal(r, s, /*unshifted=*/true);
  CHECK(r.makespan >= s.makespan - 1000);
}

TEST_CASE("the cache on disk: host copies run on the copy engines, the host step after them") {
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/host_disk_attention.json");
  const hw::Topology t = host_unit_hw();
  const ReplayResult r = run(lp.plan, lp.workload, t, 1000);
  REQUIRE_FALSE(r.error);
  CHECK(r.steps == steps_of(lp.plan));
  check_order(lp.plan, r);
  const ProgramRecord& prog = r.programs[0];
  CHECK(prog.transfers == 3);  // kv to the host, q to the host, o back
  const StepRecord& fetch = prog.steps[0];
  const StepRecord& attn = prog.steps[3];
  const StepRecord& free_kv = prog.steps[6];
  CHECK(attn.start >= fetch.end);
  CHECK(free_kv.issue >= attn.end);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  check_peaks_equal(r, s, /*unshifted=*/true);
  // The host tier's arena held the cache while the host read it, and let it go after.
  for (const ArenaRecord& a : r.arenas) {
    if (a.spec.name != "ddr[0]") continue;
    CHECK(a.stats.logical_peak == 256 + 16 + 16);
    CHECK(a.stats.logical_in_use == 16 + 16);
  }
}

TEST_CASE("a host step in a dtype the host CPU has no rate for is refused as the simulator does") {
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/host_attention.json");
  const hw::Topology t = host_unit_hw("fp32");
  const ReplayResult r = run(lp.plan, lp.workload, t, 1000);
  REQUIRE(r.error);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  REQUIRE(s.error);
  CHECK(r.error->kind == ReplayError::Kind::kTopology);
  CHECK(r.error->message == s.error->message);
  CHECK(r.error->message.find("runs on the host and computes in bf16") != std::string::npos);
}

TEST_CASE("resident and streamed plans on random workloads: order and exact peaks") {
  const hw::Topology t = roomy_unit_hw();
  size_t exact = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    testing::RandomWorkloadOptions wo;
    wo.ops = 24;
    const Workload w = testing::random_workload(seed, wo);
    testing::StreamOptions so;
    so.lookahead = 1 + uint32_t(seed % 3);
    for (const Plan& p : {testing::resident_plan(w, {/*devices=*/1, "hbm"}),
                          testing::streamed_plan(w, {/*devices=*/1, "hbm"}, so)}) {
      CAPTURE(p.name);
      const ReplayResult r = run(p, w, t);
      REQUIRE_FALSE(r.error);
      CHECK(r.steps == steps_of(p));
      check_order(p, r);
      if (allocation_order_fixed(p)) {
        check_peaks_equal(r, sim::simulate(p, w, t), /*unshifted=*/true);
        ++exact;
      }
    }
  }
  CHECK(exact >= 8);  // every resident plan and most streamed ones
}

TEST_CASE("random plans with one to three programs run every step in a legal order") {
  const hw::Topology t =
      unit_hw({"tiers.hbm.capacity=1MiB", "tiers.ddr.capacity=1MiB", "tiers.ssd.capacity=4MiB"});
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    testing::RandomWorkloadOptions wo;
    wo.ops = 20;
    const Workload w = testing::random_workload(seed, wo);
    testing::RandomPlanOptions po;
    po.host_tiers = {"ddr", "ssd"};
    const Plan p = testing::random_plan(seed, w, {/*devices=*/1 + uint32_t(seed % 3), "hbm"}, po);
    const ReplayResult r = run(p, w, t);
    REQUIRE_FALSE(r.error);
    CHECK(r.steps == steps_of(p));
    check_order(p, r);
    // Multiple programs: each device arena's peak is that of its own program.
    const sim::SimResult s = sim::simulate(p, w, t);
    REQUIRE_FALSE(s.error);
    for (const ArenaRecord& a : r.arenas) {
      if (a.spec.device) CHECK(a.stats.in_use == a.stats.logical_in_use);
    }
    if (allocation_order_fixed(p)) check_peaks_equal(r, s, /*unshifted=*/true);
  }
}

TEST_CASE("a plan that breaks a rule is refused with the simulator's program, step and message") {
  const hw::Topology t = unit_hw({"tiers.hbm.capacity=4KiB", "tiers.ddr.capacity=1MiB"});
  SUBCASE("a compute step that does not wait for its prefetch") {
    const LoadedPlan lp =
        read_plan(kSource + "/tests/errors/plan/01-compute-without-wait.json", /*verify=*/false);
    const ReplayResult r = run(lp.plan, lp.workload, t);
    const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
    REQUIRE(r.error);
    REQUIRE(s.error);
    CHECK(r.error->kind == ReplayError::Kind::kPlanRule);
    CHECK(s.error->kind == sim::SimError::Kind::kPlanRule);
    CHECK(r.error->program == s.error->program);
    CHECK(r.error->step == s.error->step);
    CHECK(r.error->tensor == s.error->tensor);
    CHECK(r.error->message == s.error->message);
    CHECK(r.error->program == 0);
    CHECK(r.error->step == 2);
    CHECK(r.steps == 0);  // refused before anything ran
  }
  SUBCASE("program 1 detaches an activation before its reader") {
    testing::RandomWorkloadOptions wo;
    wo.ops = 12;
    const Workload w = testing::random_workload(7, wo);
    Plan p = testing::resident_plan(w, {/*devices=*/2, "hbm"});
    // The first produced tensor that a later op reads, detached right after it is made.
    uint32_t victim = UINT32_MAX;
    for (uint32_t o = 1; o < w.ops.size() && victim == UINT32_MAX; ++o) {
      for (uint32_t x : w.ops[o].inputs) {
        if (w.tensors[x].origin == 0) victim = x;
      }
    }
    REQUIRE(victim != UINT32_MAX);
    auto& steps = p.programs[1].steps;
    steps.insert(steps.begin() + 1, Step{StepKind::kDetach, victim, 0, kNoEvent, {}});
    const ReplayResult r = run(p, w, roomy_unit_hw());
    const sim::SimResult s = sim::simulate(p, w, roomy_unit_hw());
    REQUIRE(r.error);
    REQUIRE(s.error);
    CHECK(r.error->kind == ReplayError::Kind::kPlanRule);
    CHECK(r.error->program == 1);
    CHECK(r.error->program == s.error->program);
    CHECK(r.error->step == s.error->step);
    CHECK(r.error->tensor == s.error->tensor);
    CHECK(r.error->message == s.error->message);
  }
}

TEST_CASE("a device tier too small for the resident tensors is a capacity error") {
  // The fixture's 128-byte hbm cannot hold tiny.json's 512-byte kv: the simulator says so
  // before the step starts, and so does the replayer.
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/tiny.json");
  const hw::Topology t = unit_hw({});
  const ReplayResult r = run(lp.plan, lp.workload, t);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  REQUIRE(r.error);
  REQUIRE(s.error);
  CHECK(r.error->kind == ReplayError::Kind::kCapacity);
  CHECK(s.error->kind == sim::SimError::Kind::kCapacity);
  CHECK(r.error->message.starts_with("'hbm[0]' is full before the step starts"));
  CHECK(r.error->message.substr(0, 60) == s.error->message.substr(0, 60));
}

TEST_CASE("a plan larger than the memory limit replays with sizes divided by a power of two") {
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/tiny.json");
  const hw::Topology t = unit_hw({"tiers.hbm.capacity=4KiB"});
  CpuBackendOptions o;
  o.memory_limit = 512;  // the arenas need 1 KiB at full size: 800 B of hbm, 224 B of ddr
  CpuBackend backend(o);
  const ReplayResult r = replay::replay(lp.plan, lp.workload, t, backend);
  REQUIRE_FALSE(r.error);
  CHECK(r.shift > 0);
  check_order(lp.plan, r);
  // Logical bytes stay exact; the arena holds each size divided by 2^shift, rounded up.
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  CHECK(r.arenas[0].stats.logical_peak == simulated_peak(s, "hbm[0]"));
  CHECK(r.arenas[0].stats.peak < r.arenas[0].stats.logical_peak);
  uint64_t reserved = 0;
  for (const ArenaRecord& a : r.arenas) reserved += a.spec.physical;
  CHECK(reserved <= 512);
}

TEST_CASE("programs that wait on each other's events are stuck, as the simulator says") {
  // Each program's prefetch waits on the other program's prefetch: neither can issue.
  Workload w;
  w.name = "pair";
  const uint32_t x = w.add_tensor(Tensor{"x", 64, TensorKind::kInput});
  const uint32_t y = w.add_tensor(Tensor{"y", 64, TensorKind::kOutput});
  Op op;
  op.name = "norm";
  op.flops = 64;
  op.inputs = {x};
  op.outputs = {y};
  w.add_op(op);
  Plan p;
  p.name = "stuck";
  p.tiers = {"hbm", "ddr"};
  p.device_tier = 0;
  p.home = {1, 0};
  for (uint32_t d = 0; d < 2; ++d) {
    Program prog;
    prog.device = d;
    prog.steps.push_back(Step{StepKind::kPrefetch, x, 1, /*event=*/d + 1, {2 - d}});
    prog.steps.push_back(Step{StepKind::kCompute, 0, 0, kNoEvent, {d + 1}});
    p.programs.push_back(prog);
  }
  REQUIRE_FALSE(verify_plan(p, w));
  // The cycle is found before any run (`plan verify`, read_plan), at the first step it
  // blocks.
  const auto cycle = find_wait_cycle(p);
  REQUIRE(cycle);
  CHECK(cycle->program == 0);
  CHECK(cycle->step == 0);
  CHECK(cycle->message ==
        "waits on event 2, which program 1 step 0 completes, and that step cannot run before "
        "this one does: the programs wait on each other forever");
  p.programs[1].steps[0].wait.clear();  // program 1 no longer waits: both run
  CHECK_FALSE(find_wait_cycle(p));
  p.programs[1].steps[0].wait = {1};
  const hw::Topology t = roomy_unit_hw();
  const ReplayResult r = run(p, w, t);
  const sim::SimResult s = sim::simulate(p, w, t);
  REQUIRE(r.error);
  REQUIRE(s.error);
  CHECK(r.error->kind == ReplayError::Kind::kDeadlock);
  CHECK(s.error->kind == sim::SimError::Kind::kDeadlock);
  CHECK(r.error->program == s.error->program);
  CHECK(r.error->step == s.error->step);
  CHECK(r.error->message == s.error->message);
  CHECK(r.steps == 0);
}

// Paced copies share link directions max-min fairly, as the simulator does. Link 0 carries
// 10 GB/s, link 1 2 GB/s; A (9 MB) crosses link 0, B (2 MB) links 0 and 1, C (2 MB) link 1.
// B and C split link 1 (1 GB/s each), so A gets the 9 GB/s of link 0 that B cannot use:
//
//   A: |== 9 GB/s: 1 ms ==|
//   B: |======== 1 GB/s: 2 ms ========|
//   C: |======== 1 GB/s: 2 ms ========|
//
// (An equal share of link 0 would give A 5 GB/s and 1.8 ms.) At a time scale of 100 the
// copies take 100 and 200 ms of real time, far above the thread hand-offs.
TEST_CASE("paced copies share links max-min fairly") {
  CpuBackendOptions o;
  o.time_scale = 100;
  CpuBackend backend(o);
  BackendSetup setup;
  setup.arenas = {{"hbm[0]", 1 << 20, 1 << 20, true}, {"ddr[0]", 1 << 20, 1 << 20, false}};
  setup.engine_groups = {{"link0", 4}, {"link1", 4}};
  setup.resources = {10e9, 2e9};
  setup.programs = 1;
  backend.start(setup);
  const auto src = backend.allocate(1, 4096, 4096);
  const auto dst = backend.allocate(0, 4096, 4096);
  REQUIRE(src);
  REQUIRE(dst);
  struct Copy {
    const char* name;
    std::vector<uint32_t> engines;
    double bytes;
  };
  const std::vector<Copy> copies{{"A", {0}, 9e6}, {"B", {0, 1}, 2e6}, {"C", {1}, 2e6}};
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<Time, Time>> spans(copies.size());
  size_t done = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    CopyRequest r;
    r.src = *src;
    r.dst = *dst;
    r.logical_bytes = static_cast<uint64_t>(copies[i].bytes);
    r.engines = copies[i].engines;
    r.resources = copies[i].engines;  // link i is engine group i and resource i
    r.bandwidth = 100e9;  // the routes' own caps are not what limits them
    r.body = static_cast<Time>(copies[i].bytes / r.bandwidth * 1e12);
    backend.copy(r, [&, i](Time start, Time end) {
      const std::lock_guard lock(m);
      spans[i] = {start, end};
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return done == copies.size(); });
  }
  backend.stop();
  const double expected_ms[] = {1.0, 2.0, 2.0};
  for (size_t i = 0; i < copies.size(); ++i) {
    CAPTURE(copies[i].name);
    const double ms = static_cast<double>(spans[i].second - spans[i].first) / 1e9;
    CHECK(ms == doctest::Approx(expected_ms[i]).epsilon(0.15));
  }
}

// Paced copies share what the simulator's flows share (hw_models/fabric.h): a half-duplex
// link's two directions as one resource, and a tier's port. Each case runs two 1 MB copies
// at once that only such a resource slows down, and checks every copy's duration against
// the simulator's on the same plan and topology.
//   half duplex:  a store (hbm -> ddr) and a prefetch (ddr -> hbm) over pcie at 1 GB/s
//                 made half duplex: 0.5 GB/s each, 2 ms, where directions of their own
//                 would give 1 ms;
//   tier port:    two prefetches from ddr (read port 2 GB/s) over a 4 GB/s pcie: 1 GB/s
//                 each, 1 ms, where each route's own cap would give 0.5 ms;
//   contended:    the store starts first and the prefetch beside it, on a link whose b->a
//                 (rc->hbm) direction has a contended setup of 1 ms: the store takes 1 ms;
//                 the prefetch waits out 1 ms more setup, then shares rc->hbm with the
//                 prefetch the store's end lets go: 3 ms from its start (setup included).
// At a time scale of 100 the copies take 100 to 200 ms of real time.
TEST_CASE("paced copies share a half-duplex link and a tier port as the simulator does") {
  constexpr uint64_t kBytes = 1'000'000;
  Workload w;
  w.name = "share";
  w.add_tensor({"a", kBytes, TensorKind::kWeight});  // 0, homed in ddr
  w.add_tensor({"b", kBytes, TensorKind::kWeight});  // 1, homed in ddr
  w.add_tensor({"x", 64, TensorKind::kInput});       // 2, on the device
  w.add_tensor({"o", kBytes, TensorKind::kActivation});
  w.add_tensor({"z", 64, TensorKind::kOutput});
  w.add_op({"make", OpKind::kElementwise, Dtype::kBf16, 64, 128, {2}, {3}});
  w.add_op({"use", OpKind::kElementwise, Dtype::kBf16, 64, 128, {2, 0, 1}, {4}});
  const auto step = [](StepKind k, uint32_t target, uint32_t tier, uint32_t event,
                       std::vector<uint32_t> wait = {}) {
    return Step{k, target, tier, event, std::move(wait)};
  };
  Plan p;
  p.name = "share";
  p.tiers = {"hbm", "ddr"};
  p.device_tier = 0;
  p.home = {1, 1, 0, 1, 0};
  struct Case {
    const char* name;
    std::vector<std::string> sets;
    std::vector<Step> steps;
    std::map<uint32_t, double> ms;  ///< step -> the copy's expected duration
    bool whole = false;             ///< ms from start to end, setup included (else the body)
  };
  // A store and a prefetch at once, then a prefetch once the store has landed.
  const std::vector<Step> both_ways = {step(StepKind::kCompute, 0, 0, kNoEvent),
                                       step(StepKind::kStore, 3, 1, 0),
                                       step(StepKind::kPrefetch, 0, 1, 1),
                                       step(StepKind::kPrefetch, 1, 1, 2, {0}),
                                       step(StepKind::kCompute, 1, 0, kNoEvent, {1, 2}),
                                       step(StepKind::kDetach, 3, 0, kNoEvent),
                                       step(StepKind::kDetach, 0, 0, kNoEvent),
                                       step(StepKind::kDetach, 1, 0, kNoEvent)};
  const std::vector<Case> cases{
      {"half duplex", {"links.pcie.duplex=half"}, both_ways, {{1, 2.0}, {2, 2.0}}},
      {"tier port",
       {"links.pcie.bandwidth=4GB/s"},
       {step(StepKind::kCompute, 0, 0, kNoEvent), step(StepKind::kPrefetch, 0, 1, 1),
        step(StepKind::kPrefetch, 1, 1, 2), step(StepKind::kCompute, 1, 0, kNoEvent, {1, 2}),
        step(StepKind::kStore, 3, 1, 0), step(StepKind::kDetach, 3, 0, kNoEvent, {0}),
        step(StepKind::kDetach, 0, 0, kNoEvent), step(StepKind::kDetach, 1, 0, kNoEvent)},
       {{1, 1.0}, {2, 1.0}}},
      {"contended",
       {"links.pcie.contended_setup_reverse=1ms"},
       both_ways,
       {{1, 1.0}, {2, 3.0}},
       true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    p.programs = {Program{0, c.steps}};
    REQUIRE_FALSE(verify_plan(p, w));
    std::vector<std::string> sets = c.sets;
    sets.insert(sets.end(), {"tiers.hbm.capacity=16MiB", "tiers.ddr.capacity=16MiB"});
    const hw::Topology t = unit_hw(sets);
    const sim::SimResult s = sim::simulate(p, w, t, {});
    REQUIRE_FALSE(s.error);
    const ReplayResult r = run(p, w, t, /*scale=*/100);
    REQUIRE_FALSE(r.error);
    for (const auto& m : c.ms) {
      const auto at = m.first;  // a plain name: clang 14 cannot capture a binding
      const auto& ms = m.second;
      CAPTURE(at);
      const auto tr = std::find_if(s.transfers.begin(), s.transfers.end(),
                                   [&](const sim::TransferRecord& x) { return x.step == at; });
      REQUIRE(tr != s.transfers.end());
      const StepRecord& rec = r.programs[0].steps[at];
      // The body, bytes moving: the route's setup latency (tens of ns) is left out.
      CHECK(double(tr->end - (c.whole ? tr->start : tr->active)) / 1e9 ==
            doctest::Approx(ms).epsilon(0.01));
      CHECK(double(rec.end - rec.start) / 1e9 == doctest::Approx(ms).epsilon(0.15));
    }
  }
}
