// Serving: the whole Mooncake conversation trace (12,031 requests, one hour) served by
// Llama-3-70B on an 8-GPU H200 node (TP 8, a 1 TB DDR tier), and replayed against the cache
// alone, and with its blocks split into 16-token pages; requests simulated per second are
// reported as a counter. Requests and replicas
// scale the cost: the same trace at twice and four times the rate over 2 replicas of TP 4.
// Disaggregated: one prefill and one decode replica of TP 4, every request's KV handed over
// NVLink. Routers: four replicas of TP 2 routed least-loaded and kv-aware (the latter reads
// every queue and every replica's cache at each arrival). Pipeline stages: one replica of
// TP 4 x PP 2, two batches in flight. Many replicas: their setup.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "hw_models/loader.h"
#include "sim/serve/engine.h"
#include "traces/arch_loader.h"
#include "traces/requests.h"

namespace {

using namespace tierflow;

const std::string kTrace =
    std::string(TIERFLOW_SOURCE_DIR) + "/../shared/data/mooncake/conversation_trace.jsonl";

void serve_mooncake(benchmark::State& state, bool cache_only, int replicas, int tp, int copies,
                    uint32_t page_tokens = 512, int prefill_replicas = 0,
                    serve::RouterKind router = serve::RouterKind::kRoundRobin, int pp = 1) {
  if (!std::filesystem::exists(kTrace)) {
    state.SkipWithError("the Mooncake trace is not at ../shared/data/mooncake");
    return;
  }
  const std::string configs = std::string(TIERFLOW_SOURCE_DIR) + "/configs/";
  const traces::Arch arch = traces::load_arch(configs + "models/llama-3-70b.yaml");
  const hw::Topology topo = hw::load_topology(configs + "hw/h200-sxm-8gpu.yaml");
  traces::TraceOptions read;
  read.block_tokens = page_tokens;
  traces::RequestTrace trace = traces::read_request_trace(kTrace, read);
  // More requests: the trace again, shifted by its own span (the same traffic repeated).
  const size_t n = trace.requests.size();
  const int64_t span = trace.requests.back().arrival_ps + 1;
  for (int c = 1; c < copies; ++c) {
    for (size_t i = 0; i < n; ++i) {
      traces::Request r = trace.requests[i];
      r.arrival_ps += span * c;
      r.id = trace.requests.size();
      trace.requests.push_back(std::move(r));
    }
  }
  traces::GenOptions gen;
  gen.tp = tp;
  serve::ServeOptions o;
  o.replicas = replicas;
  o.prefill_replicas = prefill_replicas;
  o.router = router;
  o.pp = pp;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, 1'000'000'000'000ULL}};
  for (auto _ : state) {
    const serve::ServeResult r = cache_only ? serve::cache_only(trace, arch, gen, topo, o)
                                            : serve::serve(trace, arch, gen, topo, o);
    benchmark::DoNotOptimize(r.levels.size());
  }
  state.counters["requests_per_s"] = benchmark::Counter(
      static_cast<double>(trace.requests.size()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_ServeMooncake70bTp8(benchmark::State& state) {
  serve_mooncake(state, false, 1, 8, 1);
}
BENCHMARK(BM_ServeMooncake70bTp8)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

void BM_ServeMooncakeCacheOnly(benchmark::State& state) {
  serve_mooncake(state, true, 1, 8, 1);
}
BENCHMARK(BM_ServeMooncakeCacheOnly)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

// The same with the trace's 512-token blocks split into vLLM's 16-token pages: 32 times the
// blocks in every cache level.
void BM_ServeMooncakePages16(benchmark::State& state) {
  serve_mooncake(state, false, 1, 8, 1, 16);
}
BENCHMARK(BM_ServeMooncakePages16)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

void BM_ServeMooncake2xTwoReplicas(benchmark::State& state) {
  serve_mooncake(state, false, 2, 4, 2);
}
BENCHMARK(BM_ServeMooncake2xTwoReplicas)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

void BM_ServeMooncake4xTwoReplicas(benchmark::State& state) {
  serve_mooncake(state, false, 2, 4, 4);
}
BENCHMARK(BM_ServeMooncake4xTwoReplicas)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

void BM_ServeMooncakeDisaggregated(benchmark::State& state) {
  serve_mooncake(state, false, 1, 4, 1, 512, 1);
}
BENCHMARK(BM_ServeMooncakeDisaggregated)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

void BM_ServeMooncakePipeline(benchmark::State& state) {
  serve_mooncake(state, false, 1, 4, 1, 512, 0, serve::RouterKind::kRoundRobin, 2);
}
BENCHMARK(BM_ServeMooncakePipeline)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

void BM_ServeMooncakeFourReplicasLeastLoaded(benchmark::State& state) {
  serve_mooncake(state, false, 4, 2, 1, 512, 0, serve::RouterKind::kLeastLoaded);
}
BENCHMARK(BM_ServeMooncakeFourReplicasLeastLoaded)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_ServeMooncakeFourReplicasKvAware(benchmark::State& state) {
  serve_mooncake(state, false, 4, 2, 1, 512, 0, serve::RouterKind::kKvAware);
}
BENCHMARK(BM_ServeMooncakeFourReplicasKvAware)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// Setting up many replicas: Llama-3-8B on N copies of CloudMatrix384 (384 N replicas of TP 1,
// each with its device level and path), a handful of requests, so that the setup is what is
// timed. Each replica's path once checked every level for cycles, which made the setup
// quadratic in the replicas (1024 copies of gb200-nvl72 took 22 s); now linear.
void BM_ServeSetupManyReplicas(benchmark::State& state) {
  const auto copies = static_cast<int>(state.range(0));
  const std::string configs = std::string(TIERFLOW_SOURCE_DIR) + "/configs/";
  const traces::Arch arch = traces::load_arch(configs + "models/llama-3-8b.yaml");
  const hw::Topology one = hw::load_topology(configs + "hw/cloudmatrix384.yaml");
  const hw::Topology topo = hw::load_topology(
      configs + "hw/cloudmatrix384.yaml",
      hw::LoadOptions{{fmt::format("system.hosts={}", one.system.hosts * copies),
                       fmt::format("system.supernodes={}", copies),
                       fmt::format("devices.ascend910c.count={}", one.devices[0].count * copies)},
                      false,
                      "--set"});
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=2/s,n=20,prompt=fixed:512,output=fixed:4", traces::TraceOptions{}, "bench");
  serve::ServeOptions o;
  o.replicas = topo.devices[0].count;
  for (auto _ : state) {
    const serve::ServeResult r = serve::serve(trace, arch, traces::GenOptions{}, topo, o);
    benchmark::DoNotOptimize(r.levels.size());
  }
  state.counters["replicas"] = static_cast<double>(o.replicas);
}
BENCHMARK(BM_ServeSetupManyReplicas)
    ->Arg(4)
    ->Arg(16)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
