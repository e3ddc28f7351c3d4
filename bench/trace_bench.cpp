// Generating, writing and reading a million-op workload: Llama-3-70B decode,
// 80 layers x 1,000 tokens from a 4,096-token context.
#include <benchmark/benchmark.h>

#include "core/io.h"
#include "core/workload_json.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

namespace {

using namespace tierflow;

traces::GenOptions decode_1000() {
  traces::GenOptions o;
  o.phase = traces::Phase::kDecode;
  o.context = 4096;
  o.tokens = 1000;
  return o;
}

const traces::Arch& llama70b() {
  static const traces::Arch a = traces::load_arch(
      traces::find_arch("llama-3-70b", std::string(TIERFLOW_SOURCE_DIR) + "/configs"));
  return a;
}

void BM_GenerateAndWrite(benchmark::State& state) {
  for (auto _ : state) {
    const Workload w = traces::generate(llama70b(), decode_1000());
    write_file_atomic("/tmp/tierflow_bench_workload.json", write_workload(w));
    state.counters["ops"] = static_cast<double>(w.ops.size());
  }
}
BENCHMARK(BM_GenerateAndWrite)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_Generate(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(traces::generate(llama70b(), decode_1000()));
}
BENCHMARK(BM_Generate)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_Read(benchmark::State& state) {
  write_file_atomic("/tmp/tierflow_bench_workload.json",
                    write_workload(traces::generate(llama70b(), decode_1000())));
  for (auto _ : state) {
    const Workload w = read_workload("/tmp/tierflow_bench_workload.json");
    benchmark::DoNotOptimize(w.ops.data());
  }
}
BENCHMARK(BM_Read)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
