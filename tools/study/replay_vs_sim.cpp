#include "tools/study/replay_vs_sim.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <span>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/json_reader.h"
#include "core/json_tree.h"
#include "core/units.h"
#include "sim/timeline.h"
#include "tools/replay/calibration.h"
#include "tools/replay/cpu_backend.h"
#ifdef TIERFLOW_HAVE_CUDA
#include "tools/replay/cuda_backend.h"
#endif

namespace tierflow::study {
namespace {

using replay::Time;

/// Real time the automatic time scale aims a replay at: long enough that thread hand-offs
/// (tens of microseconds) are small next to the plan, short enough for a shell.
constexpr double kAutoRealPs = 1.0 * double(kPsPerS);
/// The time scales a replay takes (docs/cli.md, "replay").
constexpr double kMinTimeScale = 1e-3;
constexpr double kMaxTimeScale = 1e9;

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

/// The smallest x of (x, weight) pairs below or at which q of the whole weight lies.
double weighted_quantile(std::vector<std::pair<double, double>> v, double q) {
  double total = 0;
  for (const auto& [x, w] : v) total += w;
  if (v.empty() || total <= 0) return 0;
  std::sort(v.begin(), v.end());
  double below = 0;
  for (const auto& [x, w] : v) {
    below += w;
    if (below >= q * total) return x;
  }
  return v.back().first;
}

std::string signed_percent(double x) {
  return fmt::format("{:+.1f}%", 100.0 * x);
}

}  // namespace

bool have_cuda_backend() {
#ifdef TIERFLOW_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

CheckedReplay check_replay_settings(const ReplaySettings& s) {
  const auto refuse = [&s](std::string flag, const std::string& why) {
    if (!s.cli) {
      flag = flag.substr(2);
      std::replace(flag.begin(), flag.end(), '-', '_');
    }
    return InputError::at(SourcePos{flag}, "{}", why);
  };
  CheckedReplay c;
  if (s.backend != "cpu" && s.backend != "cuda") {
    throw refuse("--backend", "expected cpu or cuda, got '" + s.backend + "'");
  }
  if (s.copy != "paced" && s.copy != "native") {
    throw refuse("--copy", "expected paced or native, got '" + s.copy + "'");
  }
  if (s.compute != "timed" && s.compute != "gemm") {
    throw refuse("--compute", "expected timed or gemm, got '" + s.compute + "'");
  }
  if (s.backend == "cuda" && !have_cuda_backend()) {
    throw refuse("--backend",
                 "cuda: this binary was built without the CUDA backend (configure with a CUDA "
                 "toolkit and -DTIERFLOW_CUDA=ON)");
  }
  if (s.device < 0) throw refuse("--device", fmt::format("{} is not a device ordinal", s.device));
  if (s.time_scale != "auto") {
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(s.time_scale, &used);
      if (used != s.time_scale.size()) v = 0;
    } catch (const std::exception&) {
      v = 0;
    }
    if (!(v > 0) || !std::isfinite(v)) {
      throw refuse("--time-scale",
                   "expected a positive number or auto, got '" + s.time_scale + "'");
    }
    // Below a thousandth a plan's nanosecond is a picosecond of real time, which no host
    // clock keeps; above 1e9 a microsecond is a quarter of an hour.
    if (v < kMinTimeScale || v > kMaxTimeScale) {
      throw refuse("--time-scale", fmt::format("{} is outside [{:g}, {:g}]: the real seconds per "
                                               "plan second a replay can keep",
                                               s.time_scale, kMinTimeScale, kMaxTimeScale));
    }
    c.scale = v;
  }
  if (s.backend != "cuda" && (s.compute != "timed" || s.device_given)) {
    throw refuse(s.device_given ? "--device" : "--compute", "only the cuda backend takes it");
  }
  if (s.backend != "cpu" && s.copy != "paced")
    throw refuse("--copy", "only the cpu backend takes it");
  if (s.copy == "native" && c.scale != 0 && c.scale != 1) {
    throw refuse("--time-scale",
                 "native copies run in real time: give 1 or auto, not '" + s.time_scale + "'");
  }
  if (s.backend == "cuda" && c.scale != 0 && c.scale != 1) {
    throw refuse("--time-scale",
                 "the cuda backend runs in real time: give 1 or auto, not '" + s.time_scale + "'");
  }
  const auto limit = parse_bytes(s.memory_limit.empty() ? kCpuMemoryLimit : s.memory_limit);
  if (!limit.ok() || limit.value.value == 0) {
    throw refuse("--memory-limit", "expected a size such as 512MiB, got '" + s.memory_limit + "'");
  }
  // The cpu backend allocates its arenas in RAM up to the limit: a limit above what the
  // machine can give would fail in the allocator, after the plan was laid out.
  if (const uint64_t have = replay::usable_host_memory();
      s.backend == "cpu" && have > 0 && limit.value.value > have) {
    throw refuse("--memory-limit",
                 fmt::format("{} is more than the {} this machine can give (MemAvailable, "
                             "ulimit -v); give a smaller limit (the plan's sizes are then "
                             "divided by a power of two)",
                             to_string(Bytes{limit.value.value}), to_string(Bytes{have})));
  }
  c.memory_bytes = limit.value.value;
#ifdef TIERFLOW_HAVE_CUDA
  if (s.backend == "cuda") {
    if (const std::string why = replay::cuda_device_problem(s.device); !why.empty()) {
      throw refuse("--backend", "cuda: " + why);
    }
  }
#endif
  return c;
}

std::unique_ptr<replay::Backend> make_replay_backend(const ReplaySettings& s,
                                                     const CheckedReplay& c, double scale) {
  if (s.backend == "cuda") {
#ifdef TIERFLOW_HAVE_CUDA
    replay::CudaBackendOptions co;
    co.device = s.device;
    co.memory_limit = s.memory_limit.empty() ? 0 : c.memory_bytes;
    co.compute =
        s.compute == "gemm" ? replay::CudaComputeKind::kGemm : replay::CudaComputeKind::kTimed;
    return std::make_unique<replay::CudaBackend>(co);
#else
    TF_ASSERT(false, "backend 'cuda' was accepted but is not built");
#endif
  }
  replay::CpuBackendOptions bo;
  bo.time_scale = scale;
  bo.memory_limit = c.memory_bytes;
  if (s.memory_limit.empty()) bo.memory_limit_origin = "default";
  bo.copy = s.copy == "native" ? replay::CopyMode::kNative : replay::CopyMode::kPaced;
  return std::make_unique<replay::CpuBackend>(bo);
}

namespace {

/// The plan bound to the topology; when it does not bind, why it cannot run in
/// `out.refused` (a broken rule of the plan before the topology's objection, as
/// replay::replay reports it).
hw::Binding bind_or_refuse(const LoadedPlan& lp, const hw::Topology& topo, ReplayOutcome& out) {
  hw::Binding b = hw::bind(lp.plan, lp.workload, topo);
  if (!b.bound) out.refused = replay::broken_rule(lp.plan, lp.workload).value_or(*b.error);
  return b;
}

}  // namespace

ReplayOutcome replay_plan(const LoadedPlan& lp, const hw::Topology& topo,
                          const ReplaySettings& s, const CheckedReplay& c) {
  ReplayOutcome out;
  const hw::Binding b = bind_or_refuse(lp, topo, out);
  if (!b.bound) return out;
  ReplayVsSim x;
  x.sim = sim::simulate(*b.bound);
  x.scale = replay_time_scale(s, c.scale, x.sim);
  if (x.sim.error && x.sim.error->kind == RunError::Kind::kTimeLimit) {
    out.refused = *x.sim.error;
    out.refused->time = -1;
    out.refused->message += fmt::format(" (reached at {} simulated); a replay would run as long",
                                        to_string_approx(Duration{x.sim.error->time}));
    return out;
  }
  if (const double real = double(x.sim.makespan) * x.scale; real > double(kMaxReplayRealPs)) {
    out.refused = RunError{
        RunError::Kind::kTimeLimit,
        -1,
        -1,
        -1,
        -1,
        fmt::format("the replay would take {} of real time (simulated makespan {} at time "
                    "scale {:g}), more than the {} a replay may take{}",
                    to_string_approx(Duration{int64_t(std::min(real, 9e18))}),
                    to_string_approx(Duration{x.sim.makespan}), x.scale,
                    to_string_approx(Duration{kMaxReplayRealPs}),
                    s.backend == "cpu" && s.copy == "paced"
                        ? fmt::format("; give a smaller {}", s.cli ? "--time-scale" : "time_scale")
                        : std::string())};
    return out;
  }
  const auto backend = make_replay_backend(s, c, x.scale);
  x.replay = replay::replay(*b.bound, *backend);
  x.comparison = compare_runs(b.bound->plan, x.replay, x.sim);
  out.runs = std::move(x);
  return out;
}

namespace {

constexpr std::string_view kRecordedKeys[] = {"format",
                                              "plan",
                                              "topology",
                                              "backend",
                                              "time_scale",
                                              "size_shift",
                                              "memory_limit",
                                              "steps",
                                              "makespan_ps",
                                              "transfers",
                                              "exposed_wait",
                                              "host_compute",
                                              "peak_device_memory",
                                              "measured_steps",
                                              "simulation_error",
                                              "error"};

/// The next key of an object of the recorded replay: one of `known`, else an error naming
/// the nearest.
bool recorded_key(JsonReader& in, std::string& key, std::span<const std::string_view> known,
                  std::string_view where) {
  if (!in.next_key(key)) return false;
  if (std::find(known.begin(), known.end(), key) == known.end()) {
    in.fail_at(in.key_offset(), "unknown key '{}' in {}{}", key, where, did_you_mean(key, known));
  }
  return true;
}

void read_measured_steps(JsonReader& in, const Plan& plan, replay::ReplayResult& r) {
  constexpr std::string_view kKeys[] = {"program",  "step",   "kind",     "issue_ps",
                                        "start_ps", "end_ps", "waited_ps"};
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  in.begin_array("measured_steps");
  while (in.next_item()) {
    const size_t at = in.offset();
    in.begin_object("a measured step");
    int64_t program = -1, step = -1;
    std::string kind, key;
    replay::StepRecord rec;
    rec.ran = true;
    while (recorded_key(in, key, kKeys, "a measured step")) {
      if (key == "program")
        program = in.read_int("program", 0, kMax);
      else if (key == "step")
        step = in.read_int("step", 0, kMax);
      else if (key == "kind")
        kind = in.read_string("kind");
      else if (key == "issue_ps")
        rec.issue = in.read_int("issue_ps", -1, kMax);
      else if (key == "start_ps")
        rec.start = in.read_int("start_ps", -1, kMax);
      else if (key == "end_ps")
        rec.end = in.read_int("end_ps", -1, kMax);
      else
        rec.waited = in.read_int("waited_ps", 0, kMax);
    }
    if (program < 0 || step < 0 || kind.empty()) {
      in.fail_at(at, "a measured step needs program, step and kind");
    }
    if (size_t(program) >= plan.programs.size() ||
        size_t(step) >= plan.programs[size_t(program)].steps.size()) {
      in.fail_at(at, "program {} step {}: the plan '{}' has no such step: not a replay of it",
                 program, step, plan.name);
    }
    const StepKind planned = plan.programs[size_t(program)].steps[size_t(step)].kind;
    if (kind != kStepKindNames[size_t(planned)]) {
      in.fail_at(at,
                 "program {} step {} is a {} here and a {} in the plan '{}': not a replay of it",
                 program, step, kind, kStepKindNames[size_t(planned)], plan.name);
    }
    replay::StepRecord& slot = r.programs[size_t(program)].steps[size_t(step)];
    if (slot.ran) in.fail_at(at, "program {} step {} is measured twice", program, step);
    slot = rec;
  }
}

}  // namespace

RecordedReplay read_recorded_replay(const std::string& path, const Plan& plan) {
  const FileText text(path);
  JsonReader in(text.view(), path);
  RecordedReplay recorded;
  replay::ReplayResult& r = recorded.result;
  r.programs.resize(plan.programs.size());
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    r.programs[p].device = static_cast<int>(plan.programs[p].device);
    r.programs[p].steps.resize(plan.programs[p].steps.size());
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  bool format = false, measured = false, steps = false;
  std::string key;
  in.begin_object("a recorded replay");
  while (recorded_key(in, key, kRecordedKeys, "a recorded replay (tierflow.replay/1)")) {
    const size_t at = in.offset();
    if (key == "format") {
      if (in.read_string("format") != "tierflow.replay/1") {
        in.fail_at(at,
                   "not a recorded replay: format must be tierflow.replay/1 (tierflow "
                   "replay --json writes it)");
      }
      format = true;
    } else if (key == "plan") {
      const std::string name = in.read_string("plan");
      if (name != plan.name) {
        in.fail_at(at, "a replay of plan '{}', not of '{}'", name, plan.name);
      }
    } else if (key == "backend") {
      r.backend = in.read_string("backend");
    } else if (key == "time_scale") {
      recorded.time_scale = in.read_number("time_scale");
      if (!(recorded.time_scale > 0)) in.fail_at(at, "time_scale must be above 0");
    } else if (key == "size_shift") {
      r.shift = uint32_t(in.read_int("size_shift", 0, 63));
    } else if (key == "memory_limit") {
      constexpr std::string_view kKeys[] = {"bytes", "origin"};
      in.begin_object("memory_limit");
      std::string k;
      while (recorded_key(in, k, kKeys, "memory_limit")) {
        if (k == "bytes")
          r.memory_limit = in.read_uint("memory_limit bytes", UINT64_MAX);
        else
          r.memory_limit_origin = in.read_string("memory_limit origin");
      }
    } else if (key == "steps") {
      r.steps = in.read_uint("steps", UINT64_MAX);
    } else if (key == "makespan_ps") {
      constexpr std::string_view kKeys[] = {"measured", "simulated"};
      in.begin_object("makespan_ps");
      std::string k;
      while (recorded_key(in, k, kKeys, "makespan_ps")) {
        if (k == "measured") {
          r.makespan = in.read_int("makespan_ps measured", 0, kMax);
          measured = true;
        } else {
          in.skip_value();  // the simulation of then; this one is run again
        }
      }
    } else if (key == "peak_device_memory") {
      constexpr std::string_view kKeys[] = {"arena", "measured",   "predicted",
                                            "equal", "arena_peak", "arena_high_water"};
      in.begin_array("peak_device_memory");
      while (in.next_item()) {
        replay::ArenaRecord a;
        in.begin_object("a peak");
        std::string k;
        while (recorded_key(in, k, kKeys, "a peak of peak_device_memory")) {
          if (k == "arena")
            a.spec.name = in.read_string("arena");
          else if (k == "measured")
            a.stats.logical_peak = in.read_uint("measured", UINT64_MAX);
          else if (k == "arena_peak")
            a.stats.peak = in.read_uint("arena_peak", UINT64_MAX);
          else if (k == "arena_high_water")
            a.stats.high_water = in.read_uint("arena_high_water", UINT64_MAX);
          else
            in.skip_value();  // predicted then
        }
        r.arenas.push_back(std::move(a));
      }
    } else if (key == "measured_steps") {
      read_measured_steps(in, plan, r);
      steps = true;
    } else if (key == "error") {
      r.error = RunError{RunError::Kind::kPlanRule, -1, -1, -1, -1, in.read_string("error")};
      r.error->time = 0;  // it ran: what it measured is compared
    } else {
      in.skip_value();  // the comparison of then: scored again here
    }
  }
  in.expect_end();
  if (!format || !measured || !steps) {
    throw InputError::at(SourcePos{path},
                         "not a recorded replay: it needs format, makespan_ps.measured and "
                         "measured_steps (tierflow replay --json writes them)");
  }
  return recorded;
}

ReplayOutcome rescore_replay(const LoadedPlan& lp, const hw::Topology& topo,
                             const std::string& path) {
  ReplayOutcome out;
  const hw::Binding b = bind_or_refuse(lp, topo, out);
  if (!b.bound) return out;
  ReplayVsSim x;
  RecordedReplay recorded = read_recorded_replay(path, lp.plan);
  x.replay = std::move(recorded.result);
  x.scale = recorded.time_scale;
  x.sim = sim::simulate(*b.bound);
  x.comparison = compare_runs(b.bound->plan, x.replay, x.sim);
  out.runs = std::move(x);
  return out;
}

double replay_time_scale(const ReplaySettings& s, double asked, const sim::SimResult& sim) {
  if (s.backend == "cuda" || s.copy == "native") return 1;  // real time; others refused
  if (asked != 0) return asked;
  const double ps = sim.error || sim.makespan <= 0 ? double(kPsPerUs) : double(sim.makespan);
  const double scale = std::clamp(kAutoRealPs / ps, 1.0, 1e6);
  return std::exp2(std::round(std::log2(scale)));  // a round number to read
}

bool replay_ran(const replay::ReplayResult& r) {
  return !r.error || r.error->time >= 0;
}

ReplayComparison compare_runs(const Plan& plan, const replay::ReplayResult& r,
                              const sim::SimResult& s) {
  ReplayComparison c;
  c.measured = r.makespan;
  c.simulated = s.makespan;
  std::map<std::pair<uint32_t, uint32_t>, Time> sim_duration;
  for (const sim::TransferRecord& x : s.transfers) {
    sim_duration[{x.program, x.step}] = x.end - x.start;
  }
  std::vector<double> errors, abs_errors;
  std::vector<std::pair<double, double>> by_time;  // |error|, simulated duration
  std::vector<WaitRow> waits;
  for (uint32_t p = 0; p < r.programs.size(); ++p) {
    const auto& steps = plan.programs[p].steps;
    for (uint32_t i = 0; i < r.programs[p].steps.size(); ++i) {
      const replay::StepRecord& rec = r.programs[p].steps[i];
      if (!rec.ran) continue;
      const Step& st = steps[i];
      if (is_host_step(st)) {
        ++c.host_steps;
        c.host_measured += rec.end - rec.start;
        continue;
      }
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
      by_time.emplace_back(std::abs(e), double(it->second));
    }
  }
  c.error_median = quantile(errors, 0.5);
  c.error_p90 = quantile(abs_errors, 0.9);
  c.error_p90_by_time = weighted_quantile(std::move(by_time), 0.9);
  std::stable_sort(waits.begin(), waits.end(),
                   [](const WaitRow& a, const WaitRow& b) { return a.waited > b.waited; });
  if (waits.size() > 5) waits.resize(5);
  c.worst = std::move(waits);
  for (const sim::DeviceResult& d : s.devices) {
    c.simulated_stall += d.stall_transfer_ps;
    c.host_simulated += d.host_compute_ps;
  }
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

std::string replay_table(const LoadedPlan& lp, const hw::Topology& topo, const ReplayVsSim& x) {
  const replay::ReplayResult& r = x.replay;
  const sim::SimResult& s = x.sim;
  const ReplayComparison& c = x.comparison;
  std::string out;
  out += fmt::format("replay {} on {}: backend {}, time scale {:g}x, sizes {}\n", lp.plan.name,
                     topo.name, r.backend, x.scale,
                     r.shift == 0 ? std::string("1:1")
                                  : fmt::format("1:{} (every size divided by 2^{})",
                                                uint64_t{1} << r.shift, r.shift));
  out += fmt::format("memory limit         {} ({})\n", to_string_approx(Bytes{r.memory_limit}),
                     r.memory_limit_origin);
  out += fmt::format("steps executed       {}\n", r.steps);
  const double err = c.simulated > 0 ? double(c.measured) / double(c.simulated) - 1.0 : 0.0;
  out += fmt::format("makespan             measured {}  simulated {}  error {}\n",
                     to_string_approx(Duration{c.measured}),
                     s.error ? std::string("-") : to_string_approx(Duration{c.simulated}),
                     s.error ? std::string("-") : signed_percent(err));
  out += fmt::format(
      "transfers            {}: duration error median {}, p90 |error| {:.1f}% ({:.1f}% by copy "
      "time)\n",
      c.transfers, signed_percent(c.error_median), 100.0 * c.error_p90,
      100.0 * c.error_p90_by_time);
  out += fmt::format("exposed wait         {} over {} compute steps (simulated {})\n",
                     to_string_approx(Duration{c.waited_total}), c.compute_steps,
                     to_string_approx(Duration{c.simulated_stall}));
  for (const WaitRow& w : c.worst) {
    out += fmt::format("  program {} step {} op '{}': {}\n", w.program, w.step,
                       lp.workload.ops[w.op].name, to_string_approx(Duration{w.waited}));
  }
  if (c.host_steps > 0) {
    out += fmt::format("host CPU             {} host step{}: measured {}  simulated {}\n",
                       c.host_steps, c.host_steps == 1 ? "" : "s",
                       to_string_approx(Duration{c.host_measured}),
                       to_string_approx(Duration{c.host_simulated}));
  }
  for (const PeakRow& p : c.peaks) {
    out += fmt::format("peak device memory   {}: measured {} B  predicted {} B  {}", p.arena,
                       p.measured, p.predicted, p.measured == p.predicted ? "equal" : "differ");
    out += fmt::format("; arena peak {} B, high water {} B{}\n", p.arena_peak, p.high_water,
                       r.shift > 0 ? fmt::format(" at 1:{}", uint64_t{1} << r.shift) : "");
  }
  return out;
}

std::string replay_json(const LoadedPlan& lp, const hw::Topology& topo, const ReplayVsSim& x) {
  const replay::ReplayResult& r = x.replay;
  const sim::SimResult& s = x.sim;
  const ReplayComparison& c = x.comparison;
  nlohmann::ordered_json j;
  j["format"] = "tierflow.replay/1";
  j["plan"] = lp.plan.name;
  j["topology"] = topo.name;
  j["backend"] = r.backend;
  j["time_scale"] = x.scale;
  j["size_shift"] = r.shift;
  j["memory_limit"] = {{"bytes", r.memory_limit}, {"origin", r.memory_limit_origin}};
  j["steps"] = r.steps;
  j["makespan_ps"] = {{"measured", c.measured}, {"simulated", c.simulated}};
  j["transfers"] = {{"count", c.transfers},
                    {"duration_error_median", c.error_median},
                    {"duration_error_p90_abs", c.error_p90},
                    {"duration_error_p90_abs_by_time", c.error_p90_by_time}};
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
  if (c.host_steps > 0) {
    j["host_compute"] = {{"steps", c.host_steps},
                         {"measured_ps", c.host_measured},
                         {"simulated_ps", c.host_simulated}};
  }
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

void write_replay_timeline(AtomicOutput& out, const LoadedPlan& lp, const replay::ReplayResult& r) {
  sim::Timeline tl(out);
  for (uint32_t p = 0; p < r.programs.size(); ++p) {
    const int dev = r.programs[p].device;
    const sim::ProcessId pid = tl.process(fmt::format("device {} (measured)", dev), dev);
    const sim::TrackId compute = tl.track(pid, "compute", 0);
    sim::TrackId host = 0;  // made for the first host step
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
        if (steps[i].host && host == 0) host = tl.track(pid, "host CPU", 0);
        tl.slice(steps[i].host ? host : compute, rec.start, rec.end, op.name,
                 steps[i].host ? "host compute" : "compute", args);
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

}  // namespace tierflow::study
