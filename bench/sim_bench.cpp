// Simulator kernel and flow solver: the event queue under the hold model and one max-min
// re-solve of a large connected component.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "sim/kernel/event_queue.h"
#include "sim/models/flows.h"

namespace {

using namespace tierflow::sim;

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
  std::mt19937_64 rng(7);
  FlowNetwork net;
  for (int r = 0; r < kResources; ++r) net.add_resource(1e9 * static_cast<double>(1 + r % 4));
  auto route = [&] {
    std::vector<uint32_t> res;
    const size_t hops = 2 + rng() % 3;
    while (res.size() < hops) {
      const auto r = static_cast<uint32_t>(rng() % kResources);
      if (std::find(res.begin(), res.end(), r) == res.end()) res.push_back(r);
    }
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
