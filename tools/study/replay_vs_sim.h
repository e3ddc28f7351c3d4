// A plan run for real and by the simulator, compared: what `tierflow replay` reports. The
// front end builds the backend (which backends a binary has is its business); this layer
// checks the settings, picks the time scale, binds the plan once for both runs, and writes
// the comparison as a table, as JSON (`tierflow.replay/1`) and as a measured timeline.
//
// Glossary
//   time scale  real seconds per plan second of a paced replay: "auto" aims the run at
//               about one real second (at least 1x, rounded to a power of two).
//   error       measured / simulated - 1, of the makespan and of each transfer's duration.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/io.h"
#include "core/plan_json.h"
#include "hw_models/bind.h"
#include "sim/simulator.h"
#include "tools/replay/executor.h"

namespace tierflow::study {

/// What a user asks of a replay (`tierflow replay` flags, `tierflow.replay()` arguments),
/// as given.
struct ReplaySettings {
  std::string backend = "cpu";    ///< cpu or cuda
  std::string copy = "paced";     ///< cpu: paced or native
  std::string compute = "timed";  ///< cuda: timed or gemm
  int device = 0;                 ///< cuda: the device ordinal
  bool device_given = false;      ///< cuda: a device ordinal was named
  std::string time_scale = "auto";
  std::string memory_limit;  ///< empty: the backend's default (1GiB on cpu)
  /// Errors name the CLI's flags ("--time-scale"); else the Python arguments ("time_scale").
  bool cli = true;
};

/// The CPU backend's memory limit when none is given.
inline constexpr const char* kCpuMemoryLimit = "1GiB";

/// The settings, checked: the time scale (0: auto) and the memory limit in bytes (the cpu
/// default when none is given); the cuda backend only where this build has it and the
/// device is usable. Throws InputError naming the flag (`--time-scale`, ...).
struct CheckedReplay {
  double scale = 0;
  uint64_t memory_bytes = 0;
};
CheckedReplay check_replay_settings(const ReplaySettings& s);

/// Whether this build has the CUDA replay backend.
bool have_cuda_backend();

/// The backend checked settings ask for, at time scale `scale`.
std::unique_ptr<replay::Backend> make_replay_backend(const ReplaySettings& s,
                                                     const CheckedReplay& c, double scale);

/// The time scale a replay runs at: 1 for the cuda backend and native copies, `asked`
/// when given, else auto from the simulated makespan.
double replay_time_scale(const ReplaySettings& s, double asked, const sim::SimResult& sim);

struct WaitRow {
  uint32_t program = 0;
  uint32_t step = 0;
  uint32_t op = 0;
  replay::Time waited = 0;
};

struct PeakRow {
  std::string arena;
  uint64_t measured = 0;    ///< logical bytes, by the backend's allocator
  uint64_t predicted = 0;   ///< the simulator's peak of the same tier instance
  uint64_t arena_peak = 0;  ///< size-shifted bytes in the arena
  uint64_t high_water = 0;  ///< most arena bytes outside its largest free range (size-shifted)
};

/// Measured against simulated, on the same plan and topology.
struct ReplayComparison {
  replay::Time measured = 0;
  replay::Time simulated = 0;
  size_t transfers = 0;
  double error_median = 0;  ///< measured / simulated - 1 per transfer
  double error_p90 = 0;     ///< of |measured / simulated - 1|
  /// The same, each transfer counted by its simulated duration: the error below which
  /// 90% of the simulated copy time lies (a few-microsecond copy, whose error is mostly
  /// the timing events' own jitter, weighs what it costs).
  double error_p90_by_time = 0;
  replay::Time waited_total = 0;
  replay::Time simulated_stall = 0;
  size_t compute_steps = 0;  ///< on the devices
  /// Host steps (core/plan.h): how many ran, their op times measured and simulated.
  size_t host_steps = 0;
  replay::Time host_measured = 0;
  replay::Time host_simulated = 0;
  std::vector<WaitRow> worst;
  std::vector<PeakRow> peaks;
};

/// Both runs of one plan and their comparison.
struct ReplayVsSim {
  sim::SimResult sim;
  replay::ReplayResult replay;
  ReplayComparison comparison;
  double scale = 1;
};

/// What replaying a plan gives: both runs, or why the plan cannot run on the topology
/// (not bound; a broken rule of the plan is reported before the topology's objection, as
/// replay::replay does).
struct ReplayOutcome {
  std::optional<ReplayVsSim> runs;
  std::optional<RunError> refused;
};

/// Longest a replay may be expected to take in real time (the simulated makespan times the
/// time scale); a longer one is refused before it starts.
inline constexpr int64_t kMaxReplayRealPs = int64_t{3600} * kPsPerS;

/// `tierflow replay` and `tierflow.replay()`: binds the plan once, simulates it, replays it
/// on the backend the settings (checked first, by check_replay_settings) ask for and
/// compares the two. Refused (kTimeLimit) when the simulation stopped at its time limit or
/// the replay would take longer than kMaxReplayRealPs. A GPU that fails during the run throws
/// replay::CudaError (a std::runtime_error).
ReplayOutcome replay_plan(const LoadedPlan& lp, const hw::Topology& topo,
                          const ReplaySettings& s, const CheckedReplay& c);

ReplayComparison compare_runs(const Plan& plan, const replay::ReplayResult& r,
                              const sim::SimResult& s);

/// A replay recorded earlier (`tierflow replay --json`: its measured steps, makespan and
/// peaks) as a ReplayResult of `plan`. Throws InputError at FILE:LINE:COL for another
/// format, another plan's replay (its name, or a step that is not the plan's), an unknown
/// key (naming the nearest) or a bad value.
struct RecordedReplay {
  replay::ReplayResult result;
  double time_scale = 1;  ///< real seconds per plan second of that run
};
RecordedReplay read_recorded_replay(const std::string& path, const Plan& plan);

/// `tierflow replay --measured`: the recorded replay at `path` against this simulation of
/// the plan on `topo` (a model or a topology changed since the run is scored again, no
/// backend needed). Refused as replay_plan is when the plan does not bind.
ReplayOutcome rescore_replay(const LoadedPlan& lp, const hw::Topology& topo,
                             const std::string& path);

/// Whether the replay ran (so that its report means something): not refused before its
/// first step (a broken rule, arenas over the memory limit, a plan off the topology).
bool replay_ran(const replay::ReplayResult& r);

/// The comparison as the text table `tierflow replay` prints, and as `tierflow.replay/1`.
std::string replay_table(const LoadedPlan& lp, const hw::Topology& topo, const ReplayVsSim& x);
std::string replay_json(const LoadedPlan& lp, const hw::Topology& topo, const ReplayVsSim& x);

/// The measured timeline in the simulator's trace format (a process per device with a
/// compute track and transfer lanes), written into `out` (published by the caller).
void write_replay_timeline(AtomicOutput& out, const LoadedPlan& lp, const replay::ReplayResult& r);

}  // namespace tierflow::study
