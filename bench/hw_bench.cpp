// Loading and costing topologies: the work every plan, sim and sweep point starts with.
#include <benchmark/benchmark.h>

#include "core/units.h"
#include "hw_models/cost.h"
#include "hw_models/loader.h"

namespace {

using namespace tierflow;

std::string config(const char* name) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw/" + name;
}

void BM_LoadTopology(benchmark::State& state, const char* name) {
  const std::string path = config(name);
  for (auto _ : state) {
    hw::Topology t = hw::load_topology(path);
    benchmark::DoNotOptimize(t.routes.data());
  }
}
BENCHMARK_CAPTURE(BM_LoadTopology, h100_sxm_8gpu, "h100-sxm-8gpu.yaml")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_LoadTopology, cloudmatrix384, "cloudmatrix384.yaml")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_LoadTopology, h100_cxl, "h100-cxl.yaml")->Unit(benchmark::kMicrosecond);

void BM_ParseQuantity(benchmark::State& state) {
  const char* texts[] = {"80GiB", "64GB/s", "400Gb/s", "1.5us", "989.4TFLOP/s"};
  size_t i = 0;
  for (auto _ : state) {
    const char* s = texts[i++ % 5];
    switch (s[0]) {
      case '8':
        benchmark::DoNotOptimize(parse_bytes(s));
        break;
      case '6':
      case '4':
        benchmark::DoNotOptimize(parse_bandwidth(s));
        break;
      case '1':
        benchmark::DoNotOptimize(parse_duration(s));
        break;
      default:
        benchmark::DoNotOptimize(parse_flop_rate(s));
        break;
    }
  }
}
BENCHMARK(BM_ParseQuantity);

void BM_TransferTimeAlone(benchmark::State& state) {
  const hw::Topology t = hw::load_topology(config("h100-sxm-8gpu.yaml"));
  const hw::Route* r = t.route(0, 1);
  uint64_t bytes = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(hw::transfer_time_alone(*r, Bytes{bytes}));
    bytes = bytes * 3 + 1;
  }
}
BENCHMARK(BM_TransferTimeAlone);

}  // namespace
