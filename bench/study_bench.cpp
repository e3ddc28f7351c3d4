// Studies end to end: topology load, workload generation, every plan and simulation.
//   what-if  min-memory for Llama-3-70B decode, batch 16, 32k context, 8 tokens, on one
//            H100 (target <= 10 s)
//   sweep    configs/sweeps/llama8b-decode-pcie.yaml: Llama-3-8B decode, 32 layers x 128
//            tokens, 4 batch sizes x 3 PCIe bandwidths x all six policies (72 points) on
//            all cores into a SQLite file, one committed transaction per point (target
//            >= 300 points per minute on a 2-core machine)
#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>

#include "core/huge_pages.h"
#include "tools/study/result_db.h"
#include "tools/study/sweep.h"
#include "tools/study/whatif.h"

namespace {

using namespace tierflow::study;

// The whole benchmark binary allocates as the tierflow CLI does (tools/cli/main.cpp).
const bool kAllocatorTuned = (tierflow::reuse_freed_memory(), true);

Scenario llama70b_decode() {
  Scenario s;
  s.hw = std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw/h100-sxm-8gpu.yaml";
  s.workload.model = "llama-3-70b";
  s.workload.gen.phase = tierflow::traces::Phase::kDecode;
  s.workload.gen.batch = 16;
  s.workload.gen.context = 32768;
  s.workload.gen.tokens = 8;
  return s;
}

/// A fresh Study each time: nothing cached from the last iteration.
void BM_WhatIfMinMemoryLlama70b(benchmark::State& state) {
  int64_t probes = 0;
  for (auto _ : state) {
    Study study;
    WhatIfOptions o;
    const Answer a = whatif(study, llama70b_decode(), o);
    benchmark::DoNotOptimize(a.number);
    probes = static_cast<int64_t>(a.probes.size());
  }
  state.counters["probes"] = static_cast<double>(probes);
}
BENCHMARK(BM_WhatIfMinMemoryLlama70b)->Unit(benchmark::kSecond)->Iterations(1);

void BM_WhatIfUpgradeLlama70b(benchmark::State& state) {
  for (auto _ : state) {
    Study study;
    WhatIfOptions o;
    o.question = Question::kUpgrade;
    const Answer a = whatif(study, llama70b_decode(), o);
    benchmark::DoNotOptimize(a.upgrades.size());
  }
}
BENCHMARK(BM_WhatIfUpgradeLlama70b)->Unit(benchmark::kSecond)->Iterations(1);

/// The spec is read and validated outside the timed region; each iteration starts from an
/// empty database file and a fresh Study.
void BM_SweepLlama8bDecodePcie(benchmark::State& state) {
  const SweepSpec spec =
      load_sweep_spec(std::string(TIERFLOW_SOURCE_DIR) + "/configs/sweeps/llama8b-decode-pcie.yaml");
  const auto db_path = std::filesystem::temp_directory_path() / "tierflow-bench-sweep.db";
  int64_t points = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::filesystem::remove(db_path);
    ResultDb db = ResultDb::for_sweep(db_path.string(), spec, Shard{});
    state.ResumeTiming();
    const SweepSummary s = run_sweep(spec, db, SweepOptions{});
    points = s.ran;
    benchmark::DoNotOptimize(s.ok);
  }
  std::filesystem::remove(db_path);
  state.counters["points"] = static_cast<double>(points);
  state.counters["points_per_min"] = benchmark::Counter(
      60.0 * static_cast<double>(points), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SweepLlama8bDecodePcie)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

}  // namespace
