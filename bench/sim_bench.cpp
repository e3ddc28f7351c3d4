// Simulator: the event queue under the hold model, one max-min re-solve of a large
// connected component, and whole plans of real models.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "hw_models/loader.h"
#include "sim/kernel/event_queue.h"
#include "hw_models/flows.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "tests/support/plan_builders.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

namespace {

using namespace tierflow::sim;
using tierflow::hw::FlowNetwork;

// Hold model: N events pending; each step pops the earliest and schedules one at
// now + a random increment, so the queue size stays N.
void BM_EventQueueHold(benchmark::State& state) {
  const auto pending = static_cast<size_t>(state.range(0));
  std::mt19937_64 rng(42);
  constexpr Time kMean = 1'000'000;  // 1 us
  EventQueue q;
  q.reserve(pending + 1);
  for (size_t i = 0; i < pending; ++i) {
    q.schedule(static_cast<Time>(rng() % (2 * kMean)), 0, static_cast<uint32_t>(i));
  }
  Event ev;
  for (auto _ : state) {
    q.pop(ev);
    q.schedule(ev.time + static_cast<Time>(rng() % (2 * kMean)), 0, ev.data);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventQueueHold)->Arg(10'000)->Arg(1'000'000);

// 256 flows, each over 2-4 of 128 resources (one connected component). Each iteration
// ends one flow, starts another and re-solves: the whole component is recomputed.
void BM_MaxMinResolve(benchmark::State& state) {
  constexpr int kResources = 128;
  constexpr int kFlows = 256;
  // Routes are drawn before timing (a pool larger than any component's history that
  // matters), so that the loop times the network and not the generator.
  constexpr size_t kPool = 4096;
  std::mt19937_64 rng(7);
  FlowNetwork net;
  for (int r = 0; r < kResources; ++r) net.add_resource(1e9 * static_cast<double>(1 + r % 4));
  std::vector<std::vector<uint32_t>> pool(kPool);
  for (std::vector<uint32_t>& res : pool) {
    const size_t hops = 2 + rng() % 3;
    while (res.size() < hops) {
      const auto r = static_cast<uint32_t>(rng() % kResources);
      if (std::find(res.begin(), res.end(), r) == res.end()) res.push_back(r);
    }
  }
  size_t next = 0;
  const auto route = [&]() -> const std::vector<uint32_t>& {
    const std::vector<uint32_t>& res = pool[next];
    next = (next + 1) % kPool;
    return res;
  };
  std::vector<uint32_t> flows;
  for (int f = 0; f < kFlows; ++f) flows.push_back(net.start(route(), 1e12, 0));
  net.solve(0);
  Time now = 0;
  size_t victim = 0;
  size_t changed = 0;
  for (auto _ : state) {
    ++now;
    net.finish(flows[victim], now);
    flows[victim] = net.start(route(), 1e12, now);
    victim = (victim + 1) % flows.size();
    net.solve(now);
    changed += net.changed_flows().size();
  }
  state.counters["flows_changed"] =
      benchmark::Counter(static_cast<double>(changed), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_MaxMinResolve);

}  // namespace

// Whole plans: Llama-3-70B decode (80 layers x 1,000 tokens) on one H100 with the weights
// streamed from host DDR layer by layer, and one DeepSeek-V3 decode step on all 384 NPUs
// of CloudMatrix384 with every NPU streaming its weight shard from the shared pool.
namespace scenarios {

using namespace tierflow;

long rss_kib(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long v = -1;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, n) == 0) v = std::strtol(line + n + 1, nullptr, 10);
  }
  std::fclose(f);
  return v;
}

/// Resets the peak-RSS mark (Linux: writing 5 to clear_refs), so VmHWM afterwards is the
/// peak of what runs next.
void reset_peak() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

struct Scenario {
  Workload w;
  Plan plan;
  hw::Topology topo;
};

/// A decode workload of `model` on `topology`, with every device streaming its weights
/// from `host_tier`, two ops ahead of use.
Scenario streamed_decode(const std::string& model, int tokens, int tp, const std::string& topology,
                         const std::string& host_tier, uint32_t devices) {
  const std::string dir = std::string(TIERFLOW_SOURCE_DIR) + "/configs";
  Scenario x;
  traces::GenOptions o;
  o.phase = traces::Phase::kDecode;
  o.context = 4096;
  o.tokens = tokens;
  o.tp = tp;
  x.w = traces::generate(traces::load_arch(traces::find_arch(model, dir)), o);
  x.topo = hw::load_topology(dir + "/hw/" + topology);
  testing::StreamOptions so;
  so.host_tier = host_tier;
  so.lookahead = 2;
  x.plan = testing::streamed_plan(x.w, testing::PlanShape{devices, "hbm"}, so);
  return x;
}

const Scenario& llama70b_decode() {
  static const Scenario s =
      streamed_decode("llama-3-70b", /*tokens=*/1000, /*tp=*/1, "h100-sxm-8gpu.yaml", "ddr", 1);
  return s;
}

// A 16-way shard per NPU: 384 shards of 84 GB fit the 96 TB pool.
const Scenario& cloudmatrix_decode() {
  static const Scenario s =
      streamed_decode("deepseek-v3", /*tokens=*/1, /*tp=*/16, "cloudmatrix384.yaml", "pool", 384);
  return s;
}

constexpr const char* kTimelinePath = "/tmp/tierflow_bench_timeline.json";

void run_scenario(benchmark::State& state, const Scenario& s, bool timeline) {
  // The file of an earlier run would be unlinked by the rename at commit, inside the
  // timing: for a file of 700 MB that alone takes the kernel about a second.
  if (timeline) std::remove(kTimelinePath);
  size_t steps = 0;
  for (const Program& p : s.plan.programs) steps += p.steps.size();
  const long base = rss_kib("VmRSS:");
  reset_peak();
  sim::SimResult r;
  for (auto _ : state) {
    std::unique_ptr<sim::Timeline> tl;
    if (timeline) tl = std::make_unique<sim::Timeline>(kTimelinePath);
    sim::SimOptions o;
    o.timeline = tl.get();
    o.keep_transfers = false;
    r = sim::simulate(s.plan, s.w, s.topo, o);
    if (tl) tl->finish();
  }
  if (r.error) state.SkipWithError(r.error->message.c_str());
  state.counters["steps"] = static_cast<double>(steps);
  state.counters["events"] = static_cast<double>(r.events);
  state.counters["makespan_ms"] = static_cast<double>(r.makespan) * 1e-9;
  state.counters["peak_extra_MiB"] = static_cast<double>(rss_kib("VmHWM:") - base) / 1024.0;
}

void BM_SimLlama70bDecode(benchmark::State& state) {
  run_scenario(state, llama70b_decode(), false);
}
BENCHMARK(BM_SimLlama70bDecode)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_SimLlama70bDecodeTimeline(benchmark::State& state) {
  run_scenario(state, llama70b_decode(), true);
}
BENCHMARK(BM_SimLlama70bDecodeTimeline)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_SimCloudMatrix384Decode(benchmark::State& state) {
  run_scenario(state, cloudmatrix_decode(), false);
}
BENCHMARK(BM_SimCloudMatrix384Decode)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace scenarios
