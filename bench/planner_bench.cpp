// Planner: how long make_plan takes as the workload grows. Llama-3-70B decode from a
// 4,096-token context on one H100 of an 8-GPU server (its ~141 GB of bf16 weights are
// beyond the 80 GB of HBM, so every policy has to offload). The argument is the number
// of decode tokens; each token adds about 800 ops, so 12 / 125 / 1,250 tokens give
// about 10 k / 100 k / 1 M ops (the exact count is the `ops` counter).
//
//   hyperoffload           one pipeline run, no evaluator
//   tierflow (no sim)      one pipeline run (reorder, multi-tier place, ...), no evaluator
//   tierflow               the CLI's setting: the simulator in the loop (the portfolio
//                          search of planner/search.h on one thread per hardware thread,
//                          then refine); the `sims` counter says how many simulations that
//                          took
//
// Counters: rss_base_MiB is resident before planning (the workload above all), rss_peak_MiB
// the process's peak while planning (iterations: 1, so the peak of one plan).
//
// Targets: <= 2 s at 100 k ops; at 1 M ops <= 10 s and <= 2 GB (the hardening issue; the
// search is cut there, planner/search.h).
#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "hw_models/loader.h"
#include "planner/planner.h"
#include "tools/study/sim_evaluator.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

namespace {

using namespace tierflow;

const std::string& config_dir() {
  static const std::string dir = std::string(TIERFLOW_SOURCE_DIR) + "/configs";
  return dir;
}

const hw::Topology& h100() {
  static const hw::Topology t = hw::load_topology(config_dir() + "/hw/h100-sxm-8gpu.yaml");
  return t;
}

/// Llama-3-70B decode of `tokens` tokens from a 4,096-token context, generated once per
/// token count and kept for the rest of the run.
const Workload& llama70b_decode(int64_t tokens) {
  static std::map<int64_t, std::unique_ptr<Workload>> cache;
  auto& slot = cache[tokens];
  if (!slot) {
    static const traces::Arch arch =
        traces::load_arch(traces::find_arch("llama-3-70b", config_dir()));
    traces::GenOptions o;
    o.phase = traces::Phase::kDecode;
    o.context = 4096;
    o.tokens = tokens;
    slot = std::make_unique<Workload>(traces::generate(arch, o));
  }
  return *slot;
}

/// A /proc/self/status field in MiB (VmRSS: resident now; VmHWM: its peak).
double status_mib(const std::string& field) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  }
  return 0;
}

/// Starts the peak-memory count afresh from what is resident now (Linux: writing 5 to
/// /proc/self/clear_refs resets VmHWM).
void reset_peak_memory() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

enum class Mode { kNoEvaluator, kSimulator };

void run_plan(benchmark::State& state, const std::string& policy, Mode mode) {
  const Workload& w = llama70b_decode(state.range(0));
  const hw::Topology& t = h100();
  planner::PlanRequest req;
  req.policy = policy;
  req.target.device_tier = *t.tier_index(t.devices[0].local_tier);
  req.target.devices = 1;
  planner::PlanOutcome out;
  uint64_t sims = 0;
  // Memory: resident before planning (the workload, the topology, the program) and the
  // peak while planning; the planner's own is the difference.
  const double base_mib = status_mib("VmRSS");
  reset_peak_memory();
  for (auto _ : state) {
    study::SimEvaluator eval(w, t);
    planner::PlanRequest r = req;
    if (mode == Mode::kSimulator) r.evaluator = &eval;
    out = planner::make_plan(w, t, r);
    sims += eval.runs();
  }
  if (!out.ok) {
    state.SkipWithError(out.reason.c_str());
    return;
  }
  state.counters["rss_base_MiB"] = base_mib;
  state.counters["rss_peak_MiB"] = status_mib("VmHWM");
  state.counters["ops"] = static_cast<double>(w.ops.size());
  state.counters["tensors"] = static_cast<double>(w.tensors.size());
  state.counters["sims"] =
      benchmark::Counter(static_cast<double>(sims), benchmark::Counter::kAvgIterations);
  state.counters["est_peak_GiB"] = static_cast<double>(out.estimated_peak) / (1 << 30);
  if (out.evaluation && out.evaluation->ok) {
    state.counters["makespan_ms"] = static_cast<double>(out.evaluation->makespan_ps) * 1e-9;
    state.counters["x_bound"] = out.bounds.makespan_ps > 0
                                    ? static_cast<double>(out.evaluation->makespan_ps) /
                                          static_cast<double>(out.bounds.makespan_ps)
                                    : 0.0;
  }
}

void BM_PlanHyperoffload(benchmark::State& state) {
  run_plan(state, "hyperoffload", Mode::kNoEvaluator);
}
BENCHMARK(BM_PlanHyperoffload)
    ->Arg(12)
    ->Arg(125)
    ->Arg(1250)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_PlanTierflowNoSim(benchmark::State& state) {
  run_plan(state, "tierflow", Mode::kNoEvaluator);
}
BENCHMARK(BM_PlanTierflowNoSim)
    ->Arg(12)
    ->Arg(125)
    ->Arg(1250)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_PlanTierflow(benchmark::State& state) { run_plan(state, "tierflow", Mode::kSimulator); }
BENCHMARK(BM_PlanTierflow)
    ->Arg(12)
    ->Arg(125)
    ->Arg(1250)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
