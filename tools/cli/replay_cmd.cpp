#include "tools/cli/replay_cmd.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <queue>

#include "core/io.h"
#include "core/json_tree.h"
#include "core/plan_json.h"
#include "hw_models/loader.h"
#include "sim/simulator.h"
#include "sim/timeline.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/replay/calibration.h"
#include "tools/replay/cpu_backend.h"
#include "tools/replay/executor.h"
#include "tools/study/study.h"
#ifdef TIERFLOW_HAVE_CUDA
#include "tools/replay/cuda_backend.h"
#endif

namespace tierflow::cli {
namespace {

using replay::ReplayError;
using replay::ReplayResult;
using replay::Time;

struct ReplayCliOptions {
  std::string backend = "cpu";
  std::string hw;
  std::string plan;
  std::vector<std::string> sets;
  std::string timeline;
  std::string output = "-";
  std::string time_scale = "auto";
  std::string memory_limit;       ///< empty: the backend's default (1GiB on cpu)
  std::string copy = "paced";     ///< cpu: paced or native
  std::string compute = "timed";  ///< cuda: timed or gemm
  int device = 0;                 ///< cuda: device ordinal
  bool json = false;
  // Parsed and checked by the command's callback.
  double scale = 0;           ///< --time-scale; 0: auto
  uint64_t memory_bytes = 0;  ///< --memory-limit, or the CPU backend's default
};

/// The CPU backend's memory limit when --memory-limit is not given.
constexpr const char* kCpuMemoryLimit = "1GiB";

/// Real time the automatic time scale aims a replay at: long enough that thread hand-offs
/// (tens of microseconds) are small next to the plan, short enough for a shell.
constexpr double kAutoRealPs = 1.0 * double(kPsPerS);

struct WaitRow {
  uint32_t program = 0;
  uint32_t step = 0;
  uint32_t op = 0;
  Time waited = 0;
};

struct PeakRow {
  std::string arena;
  uint64_t measured = 0;    ///< logical bytes, by the backend's allocator
  uint64_t predicted = 0;   ///< the simulator's peak of the same tier instance
  uint64_t arena_peak = 0;  ///< size-shifted bytes in the arena
  uint64_t high_water = 0;  ///< highest end of a block in the arena (size-shifted)
};

/// Measured against simulated, on the same plan and topology.
struct Comparison {
  Time measured = 0;
  Time simulated = 0;
  size_t transfers = 0;
  double error_median = 0;  ///< measured / simulated - 1 per transfer
  double error_p90 = 0;     ///< of |measured / simulated - 1|
  Time waited_total = 0;
  Time simulated_stall = 0;
  size_t compute_steps = 0;
  std::vector<WaitRow> worst;
  std::vector<PeakRow> peaks;
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

Comparison compare(const Plan& plan, const ReplayResult& r, const sim::SimResult& s) {
  Comparison c;
  c.measured = r.makespan;
  c.simulated = s.makespan;
  std::map<std::pair<uint32_t, uint32_t>, Time> sim_duration;
  for (const sim::TransferRecord& x : s.transfers) {
    sim_duration[{x.program, x.step}] = x.end - x.start;
  }
  std::vector<double> errors, abs_errors;
  std::vector<WaitRow> waits;
  for (uint32_t p = 0; p < r.programs.size(); ++p) {
    const auto& steps = plan.programs[p].steps;
    for (uint32_t i = 0; i < r.programs[p].steps.size(); ++i) {
      const replay::StepRecord& rec = r.programs[p].steps[i];
      if (!rec.ran) continue;
      const Step& st = steps[i];
      if (st.kind == StepKind::kCompute) {
        ++c.compute_steps;
        c.waited_total += rec.waited;
        if (rec.waited > 0) waits.push_back(WaitRow{p, i, st.target, rec.waited});
        continue;
      }
      if (st.kind == StepKind::kDetach || rec.end < 0) continue;
      ++c.transfers;
      const auto it = sim_duration.find({p, i});
      if (it == sim_duration.end() || it->second <= 0) continue;
      const double e = double(rec.end - rec.start) / double(it->second) - 1.0;
      errors.push_back(e);
      abs_errors.push_back(std::abs(e));
    }
  }
  c.error_median = quantile(errors, 0.5);
  c.error_p90 = quantile(abs_errors, 0.9);
  std::stable_sort(waits.begin(), waits.end(),
                   [](const WaitRow& a, const WaitRow& b) { return a.waited > b.waited; });
  if (waits.size() > 5) waits.resize(5);
  c.worst = std::move(waits);
  for (const sim::DeviceResult& d : s.devices) c.simulated_stall += d.stall_transfer_ps;
  for (const replay::ArenaRecord& a : r.arenas) {
    if (!a.spec.device) continue;
    PeakRow row{a.spec.name, a.stats.logical_peak, 0, a.stats.peak, a.stats.high_water};
    for (const sim::TierResult& t : s.tiers) {
      if (t.name == a.spec.name) row.predicted = t.peak;
    }
    c.peaks.push_back(row);
  }
  return c;
}

std::string signed_percent(double x) {
  return fmt::format("{:+.1f}%", 100.0 * x);
}

std::string report_table(const LoadedPlan& lp, const hw::Topology& topo, const ReplayResult& r,
                         const sim::SimResult& s, const Comparison& c, double scale) {
  std::string out;
  out += fmt::format("replay {} on {}: backend {}, time scale {:g}x, sizes {}\n", lp.plan.name,
                     topo.name, r.backend, scale,
                     r.shift == 0 ? std::string("1:1")
                                  : fmt::format("1:{} (every size divided by 2^{})",
                                                uint64_t{1} << r.shift, r.shift));
  out += fmt::format("steps executed       {}\n", r.steps);
  const double err = c.simulated > 0 ? double(c.measured) / double(c.simulated) - 1.0 : 0.0;
  out += fmt::format("makespan             measured {}  simulated {}  error {}\n",
                     to_string_approx(Duration{c.measured}),
                     s.error ? std::string("-") : to_string_approx(Duration{c.simulated}),
                     s.error ? std::string("-") : signed_percent(err));
  out += fmt::format("transfers            {}: duration error median {}, p90 |error| {:.1f}%\n",
                     c.transfers, signed_percent(c.error_median), 100.0 * c.error_p90);
  out += fmt::format("exposed wait         {} over {} compute steps (simulated {})\n",
                     to_string_approx(Duration{c.waited_total}), c.compute_steps,
                     to_string_approx(Duration{c.simulated_stall}));
  for (const WaitRow& w : c.worst) {
    out += fmt::format("  program {} step {} op '{}': {}\n", w.program, w.step,
                       lp.workload.ops[w.op].name, to_string_approx(Duration{w.waited}));
  }
  for (const PeakRow& p : c.peaks) {
    out += fmt::format("peak device memory   {}: measured {} B  predicted {} B  {}", p.arena,
                       p.measured, p.predicted, p.measured == p.predicted ? "equal" : "differ");
    out += fmt::format("; arena peak {} B, high water {} B{}\n", p.arena_peak, p.high_water,
                       r.shift > 0 ? fmt::format(" at 1:{}", uint64_t{1} << r.shift) : "");
  }
  return out;
}

std::string report_json(const LoadedPlan& lp, const hw::Topology& topo, const ReplayResult& r,
                        const sim::SimResult& s, const Comparison& c, double scale) {
  nlohmann::ordered_json j;
  j["format"] = "tierflow.replay/1";
  j["plan"] = lp.plan.name;
  j["topology"] = topo.name;
  j["backend"] = r.backend;
  j["time_scale"] = scale;
  j["size_shift"] = r.shift;
  j["steps"] = r.steps;
  j["makespan_ps"] = {{"measured", c.measured}, {"simulated", c.simulated}};
  j["transfers"] = {{"count", c.transfers},
                    {"duration_error_median", c.error_median},
                    {"duration_error_p90_abs", c.error_p90}};
  auto worst = nlohmann::ordered_json::array();
  for (const WaitRow& w : c.worst) {
    worst.push_back({{"program", w.program},
                     {"step", w.step},
                     {"op", lp.workload.ops[w.op].name},
                     {"waited_ps", w.waited}});
  }
  j["exposed_wait"] = {{"total_ps", c.waited_total},
                       {"simulated_ps", c.simulated_stall},
                       {"compute_steps", c.compute_steps},
                       {"worst", worst}};
  auto peaks = nlohmann::ordered_json::array();
  for (const PeakRow& p : c.peaks) {
    peaks.push_back({{"arena", p.arena},
                     {"measured", p.measured},
                     {"predicted", p.predicted},
                     {"equal", p.measured == p.predicted},
                     {"arena_peak", p.arena_peak},
                     {"arena_high_water", p.high_water}});
  }
  j["peak_device_memory"] = peaks;
  auto steps = nlohmann::ordered_json::array();
  for (uint32_t p = 0; p < r.programs.size(); ++p) {
    for (uint32_t i = 0; i < r.programs[p].steps.size(); ++i) {
      const replay::StepRecord& rec = r.programs[p].steps[i];
      if (!rec.ran) continue;
      steps.push_back({{"program", p},
                       {"step", i},
                       {"kind", kStepKindNames[size_t(lp.plan.programs[p].steps[i].kind)]},
                       {"issue_ps", rec.issue},
                       {"start_ps", rec.start},
                       {"end_ps", rec.end},
                       {"waited_ps", rec.waited}});
    }
  }
  j["measured_steps"] = steps;
  if (s.error) j["simulation_error"] = s.error->message;
  if (r.error) j["error"] = r.error->message;
  return json_text(j);
}

/// The measured timeline in the simulator's trace format: a process per device with a
/// compute track and transfer lanes.
void write_timeline(const std::string& path, const LoadedPlan& lp, const ReplayResult& r) {
  sim::Timeline tl(path);
  for (uint32_t p = 0; p < r.programs.size(); ++p) {
    const int dev = r.programs[p].device;
    const sim::ProcessId pid = tl.process(fmt::format("device {} (measured)", dev), dev);
    const sim::TrackId compute = tl.track(pid, "compute", 0);
    struct Interval {
      Time start, end;
      uint32_t step;
    };
    std::vector<Interval> copies;
    const auto& steps = lp.plan.programs[p].steps;
    for (uint32_t i = 0; i < steps.size(); ++i) {
      const replay::StepRecord& rec = r.programs[p].steps[i];
      if (!rec.ran || rec.start < 0 || rec.end < rec.start) continue;
      if (steps[i].kind == StepKind::kCompute) {
        const Op& op = lp.workload.ops[steps[i].target];
        const sim::Arg args[] = {{"step", uint64_t{i}}, {"waited_ps", int64_t{rec.waited}}};
        tl.slice(compute, rec.start, rec.end, op.name, "compute", args);
      } else if (steps[i].kind != StepKind::kDetach) {
        copies.push_back(Interval{rec.start, rec.end, i});
      }
    }
    std::stable_sort(copies.begin(), copies.end(),
                     [](const Interval& a, const Interval& b) { return a.start < b.start; });
    sim::Lanes lanes;
    std::vector<sim::TrackId> tracks;
    using Busy = std::pair<Time, uint32_t>;  // (end, lane)
    std::priority_queue<Busy, std::vector<Busy>, std::greater<>> busy;
    for (const Interval& x : copies) {
      while (!busy.empty() && busy.top().first <= x.start) {
        lanes.release(busy.top().second);
        busy.pop();
      }
      const uint32_t lane = lanes.acquire();
      busy.emplace(x.end, lane);
      while (tracks.size() <= lane) {
        tracks.push_back(tl.track(pid, fmt::format("transfers {}", tracks.size()),
                                  1 + static_cast<int>(tracks.size())));
      }
      const Step& s = steps[x.step];
      const sim::Arg args[] = {{"step", uint64_t{x.step}},
                               {"bytes", lp.workload.tensors[s.target].bytes}};
      tl.slice(
          tracks[lane], x.start, x.end,
          fmt::format("{} {}", kStepKindNames[size_t(s.kind)], lp.workload.tensors[s.target].name),
          "transfer", args);
    }
  }
  tl.finish();
}

int run_replay(const ReplayCliOptions& o) {
  const LoadedPlan lp = read_plan(o.plan, /*verify=*/false);
  const hw::Topology topo = study::plan_topology(lp.plan, o.plan, o.hw, o.sets);

  sim::SimOptions so;
  const sim::SimResult s = sim::simulate(lp.plan, lp.workload, topo, so);

  double scale = 0;
  if (o.backend == "cuda") {
    scale = 1;  // the GPU runs in real time; the callback refused any other scale
  } else if (o.copy == "native") {
    scale = 1;  // native copies run in real time; the callback refused any other scale
  } else if (o.scale == 0) {
    const double ps = s.error || s.makespan <= 0 ? double(kPsPerUs) : double(s.makespan);
    scale = std::clamp(kAutoRealPs / ps, 1.0, 1e6);
    scale = std::exp2(std::round(std::log2(scale)));  // a round number to read
  } else {
    scale = o.scale;
  }
  std::unique_ptr<replay::Backend> backend;
  if (o.backend == "cuda") {
#ifdef TIERFLOW_HAVE_CUDA
    replay::CudaBackendOptions co;
    co.device = o.device;
    co.memory_limit = o.memory_limit.empty() ? 0 : o.memory_bytes;
    co.compute =
        o.compute == "gemm" ? replay::CudaComputeKind::kGemm : replay::CudaComputeKind::kTimed;
    backend = std::make_unique<replay::CudaBackend>(co);
#endif
  } else {
    replay::CpuBackendOptions bo;
    bo.time_scale = scale;
    bo.memory_limit = o.memory_bytes;
    bo.copy = o.copy == "native" ? replay::CopyMode::kNative : replay::CopyMode::kPaced;
    backend = std::make_unique<replay::CpuBackend>(bo);
  }
  TF_ASSERT(backend != nullptr, "backend '{}' was accepted but is not built", o.backend);
  const ReplayResult r = replay::replay(lp.plan, lp.workload, topo, *backend);

  const Comparison c = compare(lp.plan, r, s);
  if (!r.error || r.error->kind != ReplayError::Kind::kPlanRule) {
    write_file_atomic(o.output, o.json ? report_json(lp, topo, r, s, c, scale)
                                       : report_table(lp, topo, r, s, c, scale));
    if (!o.timeline.empty()) write_timeline(o.timeline, lp, r);
  }
  if (s.error && !r.error) {
    std::fflush(stdout);
    fmt::print(stderr, "warning: {}: the simulation stopped: {}\n", o.plan, s.error->message);
  }
  if (!r.error) return static_cast<int>(ExitCode::kOk);
  const ReplayError& e = *r.error;
  if (e.kind == ReplayError::Kind::kPlanRule) {
    // The verifier's message at the step's JSON position, as `sim` and `plan verify` say it.
    try {
      (void)read_plan(o.plan, /*verify=*/true);
    } catch (const InputError& positioned) {
      print_error(positioned);
      return static_cast<int>(ExitCode::kBadInput);
    }
  }
  std::string where;
  if (e.program >= 0) where += fmt::format("program {}", e.program);
  if (e.step >= 0) where += fmt::format(" step {}", e.step);
  const std::string when =
      e.time >= 0 ? fmt::format(" (at {} measured)", to_string_approx(Duration{e.time})) : "";
  std::fflush(stdout);
  fmt::print(stderr, "error: {}: {}{}{}{}\n", o.plan, where, where.empty() ? "" : ": ", e.message,
             when);
  return static_cast<int>(e.kind == ReplayError::Kind::kCapacity ? ExitCode::kInfeasible
                                                                 : ExitCode::kBadInput);
}

}  // namespace

void add_replay_command(CLI::App& app) {
  auto o = std::make_shared<ReplayCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "run a plan for real on a backend and compare with the simulator");
  cmd->add_option("--backend", o->backend,
                  "where to run: cpu (arenas in RAM, memcpy threads) or cuda (GPU memory, "
                  "pinned host memory, cudaMemcpyAsync; only in a binary built with CUDA)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--copy", o->copy,
                  "cpu copies: paced (at the topology's rates; any time scale and size) or "
                  "native (memcpy as fast as this machine goes, time scale 1, real sizes: "
                  "measures the machine; plan on a `tierflow calibrate` topology)")
      ->check(CLI::IsMember({"paced", "native"}));
  cmd->add_option("--plan", o->plan, "plan JSON (tierflow.plan/2)")->required();
  add_plan_topology_flags(cmd, o->hw, o->sets);
  cmd->add_option("--timeline", o->timeline, "write the measured timeline as a Chrome trace");
  cmd->add_option("--time-scale", o->time_scale,
                  "real seconds per plan second, or auto (the run takes about 1 s, at least "
                  "1x); cuda: 1 only");
  cmd->add_option("--memory-limit", o->memory_limit,
                  "most memory the arenas may take; larger plans replay with sizes divided by "
                  "a power of two (default cpu: 1GiB; cuda: the GPU's free memory less 1 GiB, "
                  "2 GiB with --compute gemm, and at most half the RAM)");
  cmd->add_option("--compute", o->compute,
                  "cuda: what a compute step runs: timed (a kernel that lasts the op's time) "
                  "or gemm (cuBLAS GEMMs of the op's FLOPs)")
      ->check(CLI::IsMember({"timed", "gemm"}));
  cmd->add_option("--device", o->device, "cuda: the GPU to run on (CUDA device ordinal)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", o->json, "print the comparison as JSON, every measured step included");
  cmd->add_option("-o,--output", o->output, "write the report to FILE instead of stdout");
  cmd->callback([o, cmd] {
#ifndef TIERFLOW_HAVE_CUDA
    if (o->backend == "cuda") {
      throw CLI::ValidationError("--backend",
                                 "cuda: this binary was built without the CUDA backend "
                                 "(configure with a CUDA toolkit and -DTIERFLOW_CUDA=ON)");
    }
#endif
    double scale = 0;  // 0: auto
    if (o->time_scale != "auto") {
      double v = 0;
      try {
        size_t used = 0;
        v = std::stod(o->time_scale, &used);
        if (used != o->time_scale.size()) v = 0;
      } catch (const std::exception&) {
        v = 0;
      }
      if (!(v > 0) || !std::isfinite(v)) {
        throw CLI::ValidationError(
            "--time-scale", "expected a positive number or auto, got '" + o->time_scale + "'");
      }
      scale = v;
    }
    if (o->backend != "cuda" && (o->compute != "timed" || cmd->count("--device") > 0)) {
      throw CLI::ValidationError(cmd->count("--device") > 0 ? "--device" : "--compute",
                                 "only the cuda backend takes it");
    }
    if (o->backend != "cpu" && o->copy != "paced") {
      throw CLI::ValidationError("--copy", "only the cpu backend takes it");
    }
    if (o->copy == "native" && scale != 0 && scale != 1) {
      throw CLI::ValidationError("--time-scale", "native copies run in real time: give 1 or "
                                                 "auto, not '" + o->time_scale + "'");
    }
    const auto limit = parse_bytes(o->memory_limit.empty() ? kCpuMemoryLimit : o->memory_limit);
    if (!limit.ok() || limit.value.value == 0) {
      throw CLI::ValidationError("--memory-limit",
                                 "expected a size such as 512MiB, got '" + o->memory_limit + "'");
    }
    // The cpu backend allocates its arenas in RAM up to the limit: a limit above what the
    // machine can give would fail in the allocator, after the plan was laid out.
    if (const uint64_t have = replay::usable_host_memory();
        o->backend == "cpu" && have > 0 && limit.value.value > have) {
      throw CLI::ValidationError(
          "--memory-limit", fmt::format("{} is more than the {} this machine can give (MemAvailable, "
                                        "ulimit -v); give a smaller limit (the plan's sizes are then "
                                        "divided by a power of two)",
                                        to_string(Bytes{limit.value.value}), to_string(Bytes{have})));
    }
    o->scale = scale;
    o->memory_bytes = limit.value.value;
#ifdef TIERFLOW_HAVE_CUDA
    if (o->backend == "cuda") {
      if (scale != 0 && scale != 1) {
        throw CLI::ValidationError(
            "--time-scale",
            "the cuda backend runs in real time: give 1 or auto, not '" + o->time_scale + "'");
      }
      if (const std::string why = replay::cuda_device_problem(o->device); !why.empty()) {
        throw CLI::ValidationError("--backend", "cuda: " + why);
      }
    }
    int code = 0;
    try {
      code = run_replay(*o);
    } catch (const replay::CudaError& e) {
      // A GPU that fails during the run (memory taken by another process, a fault) says so
      // in CUDA's words; it is not reported as a bug in tierflow.
      std::fflush(stdout);
      fmt::print(stderr, "error: {}: the CUDA backend failed: {}\n", o->plan, e.what());
      code = static_cast<int>(ExitCode::kInternal);
    }
    throw CommandResult(code);
#else
    throw CommandResult(run_replay(*o));
#endif
  });
}

}  // namespace tierflow::cli
