// What-if searches end to end: topology load, workload generation, every probe's plan and
// simulation (target: min-memory for Llama-3-70B decode, batch 16, 32k context, 8 tokens,
// on one H100, <= 10 s).
#include <benchmark/benchmark.h>

#include <string>

#include "tools/study/whatif.h"

namespace {

using namespace tierflow::study;

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

}  // namespace
