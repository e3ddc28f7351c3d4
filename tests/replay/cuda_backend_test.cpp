// The replay executor on the CUDA backend: every step runs in an order the §6 rules allow,
// the device arena's measured peak is the simulator's prediction byte for byte, and a plan
// that breaks a rule is refused before anything runs. Built only with the CUDA backend;
// each case that needs a GPU says it was skipped, and passes, on a machine without one.
#include "tools/replay/cuda_backend.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cuda_runtime_api.h>
#include <map>
#include <string>
#include <vector>

#include "core/plan_json.h"
#include "hw_models/loader.h"
#include "sim/simulator.h"
#include "tests/replay/replay_checks.h"
#include "tests/support/plan_builders.h"
#include "tools/replay/executor.h"

using namespace tierflow;
using namespace tierflow::replay;
using tierflow::testing::allocation_order_fixed;
using tierflow::testing::check_order;
using tierflow::testing::check_peaks_equal;
using tierflow::testing::simulated_peak;
using tierflow::testing::steps_of;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;
const std::string kFixture = kSource + "/tests/fixtures/unit_hw.yaml";

/// True (with a message) when this machine has no CUDA device to run on.
bool no_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return false;
  (void)cudaGetLastError();
  const std::string why =
      e == cudaSuccess ? std::string("cudaGetDeviceCount found none") : cudaGetErrorString(e);
  MESSAGE("skipped: no CUDA device (" << why << ")");
  return true;
}

/// The fixture with room for random plans, and ops 1000 times faster than its 1 GFLOP/s
/// (a random op of up to 16M FLOPs then lasts at most 33 us of real time: the CUDA backend
/// runs at time scale 1).
hw::Topology gpu_unit_hw(std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), {"tiers.hbm.capacity=1MiB", "tiers.ddr.capacity=1MiB",
                             "devices.dev.peak.bf16=1TFLOP/s"});
  return hw::load_topology(kFixture, hw::LoadOptions{std::move(sets), false});
}

ReplayResult run(const Plan& p, const Workload& w, const hw::Topology& t,
                 CudaComputeKind compute = CudaComputeKind::kTimed, uint64_t limit = 0) {
  CudaBackendOptions o;
  o.compute = compute;
  o.memory_limit = limit == 0 ? uint64_t{256} << 20 : limit;
  o.gemm_max_dim = 1024;
  CudaBackend backend(o);
  return replay::replay(p, w, t, backend);
}

/// The replay's error, for a failed check to print.
std::string error_text(const ReplayResult& r) { return r.error ? r.error->message : "(none)"; }

}  // namespace

TEST_CASE("gemm_shape: dimensions are multiples of 64 within the cap, FLOPs close to the op's") {
  CHECK(gemm_shape(0, 4096).repeats == 0);
  CHECK(gemm_shape(-1, 4096).repeats == 0);
  // 2 * 64^3: exactly one GEMM of 64^3.
  const GemmShape tiny = gemm_shape(2.0 * 64 * 64 * 64, 4096);
  CHECK(tiny.m == 64);
  CHECK(tiny.n == 64);
  CHECK(tiny.k == 64);
  CHECK(tiny.repeats == 1);
  // Fewer FLOPs than the smallest GEMM still run one.
  CHECK(gemm_shape(10, 4096).repeats == 1);
  // 10^15 FLOPs with a 4096 cap: ceil(10^15 / (2 * 4096^3)) = 7276 runs of about 4096^3.
  const GemmShape big = gemm_shape(1e15, 4096);
  CHECK(big.repeats == 7276);
  CHECK(big.m == 4096);
  CHECK(big.k == 4096);
  for (int i = 0; i < 50; ++i) {  // 2 * 1024^3 to about 10^16 FLOPs
    const double flops = 2.0 * 1024 * 1024 * 1024 * std::pow(1.37, i);
    CAPTURE(flops);
    for (uint32_t cap : {1024u, 4096u, 5000u}) {
      CAPTURE(cap);
      const GemmShape s = gemm_shape(flops, cap);
      CHECK(s.m == s.n);
      for (uint32_t d : {s.m, s.k}) {
        CHECK(d % 64 == 0);
        CHECK(d >= 64);
        CHECK(d <= cap);
      }
      const double got = 2.0 * s.m * s.n * s.k * s.repeats;
      CHECK(std::abs(got / flops - 1) < 0.05);
    }
  }
}

TEST_CASE("without a GPU, the CUDA backend is refused with CUDA's reason") {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
    MESSAGE("skipped: this machine has a CUDA device");
    return;
  }
  (void)cudaGetLastError();
  CHECK(cuda_device_problem(0).starts_with("no CUDA device"));
  try {
    CudaBackend backend;
    FAIL("a CUDA backend was made without a device");
  } catch (const CudaError& e) {
    // The failed call, where it was made and CUDA's words.
    CHECK(std::string(e.what()).starts_with("cudaSetDevice(o_.device) failed at "));
    CHECK(std::string(e.what()).find("cuda_backend.cpp:") != std::string::npos);
  }
}

TEST_CASE("CUDA backend: tiny.json replays every step; the hbm peak equals the simulator's") {
  if (no_gpu()) return;
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/tiny.json");
  const hw::Topology t =
      hw::load_topology(kFixture, hw::LoadOptions{{"tiers.hbm.capacity=4KiB"}, false});
  const ReplayResult r = run(lp.plan, lp.workload, t);
  REQUIRE_FALSE_MESSAGE(r.error, error_text(r));
  CHECK(r.backend == "cuda");
  CHECK(r.shift == 0);
  CHECK(r.steps == steps_of(lp.plan));
  CHECK(r.programs[0].transfers == 3);
  CHECK(r.makespan > 0);
  check_order(lp.plan, r);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  // hbm holds kv (512) from the start; x (64) and w (96) land, y (64) and z (64) are made:
  // 800 bytes at the peak, while mm runs.
  CHECK(simulated_peak(s, "hbm[0]") == 800);
  check_peaks_equal(r, s);
}

TEST_CASE("CUDA backend: host steps run on a host thread beside the GPU, in both modes") {
  if (no_gpu()) return;
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/host_attention.json");
  // The host CPU at 2 MFLOP/s, 1 MFLOP/s per device: the host step (attn, 100 FLOP) lasts
  // 100 us, long enough to see the GPU run `side` meanwhile.
  const hw::Topology t =
      hw::load_topology(kFixture, hw::LoadOptions{{"tiers.hbm.capacity=4KiB", "system.cpu.tier=ddr",
                                                   "system.cpu.peak.bf16=2MFLOP/s"},
                                                  false});
  for (const CudaComputeKind kind : {CudaComputeKind::kTimed, CudaComputeKind::kGemm}) {
    const ReplayResult r = run(lp.plan, lp.workload, t, kind);
    REQUIRE_FALSE_MESSAGE(r.error, error_text(r));
    CHECK(r.steps == steps_of(lp.plan));
    check_order(lp.plan, r);
    CHECK(r.programs[0].host_ops == 1);
    const StepRecord& attn = r.programs[0].steps[2];
    CHECK(attn.end - attn.start >= 100'000'000);
    CHECK(r.programs[0].steps[3].start < attn.end);  // `side` ran on the GPU meanwhile
    check_peaks_equal(r, sim::simulate(lp.plan, lp.workload, t));
  }
}

TEST_CASE("CUDA backend: resident and streamed plans, timed and gemm compute, exact peaks") {
  if (no_gpu()) return;
  const hw::Topology t = gpu_unit_hw();
  for (const CudaComputeKind compute : {CudaComputeKind::kTimed, CudaComputeKind::kGemm}) {
    CAPTURE(compute == CudaComputeKind::kGemm);
    size_t exact = 0;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      CAPTURE(seed);
      testing::RandomWorkloadOptions wo;
      wo.ops = 24;
      const Workload w = testing::random_workload(seed, wo);
      testing::StreamOptions so;
      so.lookahead = 1 + uint32_t(seed % 3);
      for (const Plan& p : {testing::resident_plan(w, {/*devices=*/1, "hbm"}),
                            testing::streamed_plan(w, {/*devices=*/1, "hbm"}, so)}) {
        CAPTURE(p.name);
        const ReplayResult r = run(p, w, t, compute);
        REQUIRE_FALSE_MESSAGE(r.error, error_text(r));
        CHECK(r.steps == steps_of(p));
        check_order(p, r);
        if (allocation_order_fixed(p)) {
          check_peaks_equal(r, sim::simulate(p, w, t));
          ++exact;
        }
      }
    }
    CHECK(exact >= 4);  // at least every resident plan
  }
}

TEST_CASE("CUDA backend: random plans with one to three programs on one GPU") {
  if (no_gpu()) return;
  const hw::Topology t = gpu_unit_hw({"tiers.ssd.capacity=4MiB"});
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    CAPTURE(seed);
    testing::RandomWorkloadOptions wo;
    wo.ops = 20;
    const Workload w = testing::random_workload(seed, wo);
    testing::RandomPlanOptions po;
    po.host_tiers = {"ddr", "ssd"};
    const Plan p = testing::random_plan(seed, w, {/*devices=*/1 + uint32_t(seed % 3), "hbm"}, po);
    const ReplayResult r = run(p, w, t);
    REQUIRE_FALSE_MESSAGE(r.error, error_text(r));
    CHECK(r.steps == steps_of(p));
    check_order(p, r);
    if (allocation_order_fixed(p)) check_peaks_equal(r, sim::simulate(p, w, t));
  }
}

TEST_CASE("CUDA backend: a plan larger than the memory limit is refused, naming both sizes") {
  if (no_gpu()) return;
  // The CUDA backend copies real sizes only (max_shift 0): where the CPU backend divides
  // every size by a power of two, it refuses before any step runs.
  const LoadedPlan lp = read_plan(kSource + "/tests/fixtures/plans/tiny.json");
  const hw::Topology t =
      hw::load_topology(kFixture, hw::LoadOptions{{"tiers.hbm.capacity=4KiB"}, false});
  const ReplayResult r = run(lp.plan, lp.workload, t, CudaComputeKind::kTimed, /*limit=*/512);
  REQUIRE(r.error);
  CHECK(r.error->kind == ReplayError::Kind::kTopology);
  CHECK(r.steps == 0);
  CHECK_MESSAGE(r.error->message.find("at their real sizes") != std::string::npos,
                r.error->message);
  CHECK_MESSAGE(r.error->message.find("512B") != std::string::npos, r.error->message);
  // With room, the same plan replays at its real sizes.
  const ReplayResult ok = run(lp.plan, lp.workload, t, CudaComputeKind::kTimed, /*limit=*/4096);
  REQUIRE_FALSE_MESSAGE(ok.error, error_text(ok));
  CHECK(ok.shift == 0);
  check_order(lp.plan, ok);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  CHECK(ok.arenas[0].stats.peak == simulated_peak(s, "hbm[0]"));
}

TEST_CASE("CUDA backend: a plan that breaks a rule is refused before anything runs") {
  if (no_gpu()) return;
  // Compute step 2 reads x without waiting for its prefetch: the verifier refuses it, with
  // the simulator's program, step and words, and no step runs on the GPU.
  const LoadedPlan lp =
      read_plan(kSource + "/tests/errors/plan/01-compute-without-wait.json", /*verify=*/false);
  const hw::Topology t = hw::load_topology(
      kFixture, hw::LoadOptions{{"tiers.hbm.capacity=4KiB", "tiers.ddr.capacity=1MiB"}, false});
  const ReplayResult r = run(lp.plan, lp.workload, t);
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, t);
  REQUIRE(r.error);
  REQUIRE(s.error);
  CHECK(r.error->kind == ReplayError::Kind::kPlanRule);
  CHECK(r.error->program == 0);
  CHECK(r.error->step == 2);
  CHECK(r.error->message == s.error->message);
  CHECK(r.steps == 0);
  CHECK(r.arenas.empty());  // the backend was never started
}
