// A Study turns scenarios into trials: it loads topologies and generates workloads once
// (cached by their inputs, shared by every trial that needs them), plans each phase with
// the simulator in the loop and simulates the plan (ARCHITECTURE §9).
//
// Glossary
//   trial      one scenario planned and simulated: one phase for a workload step, two
//              (prefill, decode) for a request, with the request metrics.
//   phase      one planned workload of a trial: "step", "prefill" or "decode".
//   window     decode of a long request is simulated on windows of kDecodeWindow tokens
//              at the first and last contexts when its per-token time is shown steady
//              (periodic) in both; the tokens between are extrapolated linearly in
//              context. Otherwise every decode token is simulated.
//   binding    what limits a plan: the device tier's capacity when it does not fit, the
//              busiest link or tier port when transfers are exposed, else compute.
//
// TTFT is the prefill's makespan; TPOT the decode time per generated token after the
// first; decode tokens/s = batch x (G - 1) / decode time; generation throughput
// (FlexGen, ZeRO-Inference) = batch x G / (prefill + decode time).
#pragma once

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/io.h"
#include "core/plan_json.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/planner.h"
#include "planner/realize.h"
#include "sim/simulator.h"
#include "tools/study/scenario.h"

namespace tierflow::study {

inline constexpr int64_t kDecodeWindow = 8;
/// Decode steps simulated whole up to this many; windows beyond, when steady.
inline constexpr int64_t kDecodeWhole = 16;
/// Steady: the per-token times after a window's first token spread by at most this.
inline constexpr double kSteadySpread = 0.02;

/// What one planned and simulated workload gives.
/// What moving ops to the host did (move_to_host()).
struct HostMove {
  uint64_t moved = 0;  ///< ops per program now run by the host CPU
  uint64_t kept = 0;   ///< ops of the asked kinds that stay on the device
  std::string why_kept;
};

struct PhaseResult {
  std::string phase;  ///< "step", "prefill" or "decode"
  std::shared_ptr<const Workload> workload;
  planner::PlanOutcome outcome;
  std::optional<sim::SimResult> sim;  ///< when the plan was made
  int64_t tokens = 0;                 ///< decode steps this phase simulated

  // Derived from the simulation (zero when it did not run).
  int64_t makespan_ps = 0;
  int64_t exposed_ps = 0;
  uint64_t device_peak = 0;
  double moved_bytes = 0;
  std::string busiest_link;  ///< link direction with the most bytes, instances apart
  double busiest_link_bytes = 0;
  double busiest_link_busy = 0;               ///< its busy fraction of the makespan
  std::map<std::string, uint64_t> tier_peak;  ///< per tier id, the largest instance
  std::map<std::string, double> link_bytes;   ///< per link direction, instances summed
  std::array<uint64_t, hw::kTierKindNames.size()> peak_by_tier_kind{};  ///< largest instance
  std::array<double, hw::kLinkKindNames.size()> bytes_by_link_kind{};   ///< both directions
  std::string binding;                                                  ///< see the glossary
  std::vector<int64_t> token_end_ps;  ///< decode: end of each token's last op
  /// Realistic routing: planned on the expected routing, run on `workload` (seeded).
  bool realized = false;
  planner::RoutingStats routing;  ///< when `realized`
  int64_t miss_exposed_ps = 0;    ///< time compute waited on demand prefetches
  /// Realized plans: time copies waited for room on the device (summed over devices).
  int64_t memory_stall_ps = 0;
  HostMove host;  ///< Scenario::on_host: what moved to the host CPU

  /// The plan was made and its simulation ran without error.
  [[nodiscard]] bool ok() const { return outcome.ok && sim && !sim->error; }
  /// Why not ok(): the planner's reason or the simulator's error.
  [[nodiscard]] std::string why() const;
};

/// Moves the ops of `kinds` in `out`'s plan (over `w`, made for `req`) to the host CPU of
/// `topo` where they can go (planner/host_steps.h): the plan, its bounds
/// (planner::host_plan_bounds), its meta `on_host`. A moved plan's evaluation is dropped:
/// it is another plan. InputError at `--on-host` when `topo` describes no host CPU.
HostMove move_to_host(planner::PlanOutcome& out, const Workload& w, const hw::Topology& topo,
                      const planner::PlanRequest& req, const std::vector<OpKind>& kinds);
/// planner::make_plan of `w` for `req`; with ops of `kinds` to go to the host, of the
/// workload the policy plans for that (planner::host_planned: the KV cache those ops read
/// where it lives is no input of theirs), its candidates simulated on it. The plan is then
/// one of `w` once move_to_host() has moved those ops.
planner::PlanOutcome plan_for(const Workload& w, const hw::Topology& topo, planner::PlanRequest req,
                              const std::vector<OpKind>& kinds);
/// `--on-host KINDS` read (planner::parse_host_ops); refused on a topology without a host
/// CPU, before planning.
std::vector<OpKind> host_ops(const hw::Topology& topo, std::string_view text,
                             std::string_view source = "--on-host");
/// Before planning: a shard of tensor parallelism `tp` (the workload `file`'s, or a
/// generated one's when `file` is null) must run beside its peers on `target`'s devices, and
/// a file's collectives need a peer route (what bind refuses later). InputError at `source`
/// (the file, or the tp flag).
void check_tp_group(const hw::Topology& topo, const planner::Target& target, int64_t tp,
                    const Workload* file, const std::string& source);
/// check_tp_group of workload file `w` at `path`, at the tp its meta says.
void check_tp_group(const hw::Topology& topo, const planner::Target& target, const Workload& w,
                    const std::string& path);

/// Request-level metrics (scenario.request).
struct RequestMetrics {
  int64_t ttft_ps = 0;
  int64_t decode_ps = 0;  ///< G - 1 decode steps, extrapolated when `extrapolated`
  double tpot_ms = 0;     ///< 0 when G == 1
  double decode_tokens_per_s = 0;
  double throughput_tokens_per_s = 0;  ///< batch x G / (TTFT + decode)
  bool extrapolated = false;
  std::string decode_note;  ///< how decode was simulated
};

struct Trial {
  Scenario scenario;
  std::string topology;  ///< its name
  std::string device_tier;
  uint64_t budget = 0;  ///< as planned
  std::vector<PhaseResult> phases;
  std::optional<RequestMetrics> request;
  bool ok = false;
  bool infeasible = false;  ///< a phase does not fit (exit 1), as opposed to a failure
  std::string reason;
  /// What the answer should be read with: the model's warnings (model_warnings: a context
  /// past its max_context, weights wider than its checkpoint). Empty for a workload file.
  std::vector<std::string> notes;

  /// The makespan of a step, or TTFT + decode time of a request.
  [[nodiscard]] int64_t latency_ps() const;
  /// Over the whole trial, as latency_ps() is: the step's, or a request's prefill and decode
  /// (the largest peak of its phases; the time compute waited and the bytes moved of the
  /// prefill plus the decode's, scaled to every decode step when the decode was
  /// extrapolated from a window). Of an ok trial.
  [[nodiscard]] uint64_t device_peak() const;
  [[nodiscard]] uint64_t residency_bound() const;  ///< the largest over the phases
  [[nodiscard]] int64_t exposed_ps() const;
  [[nodiscard]] double moved_bytes() const;
  /// How much phase `i` counts in those totals: 1 for a step and a request's prefill, the
  /// decode's scale to every step for its (first) decode window, 0 for the last window.
  [[nodiscard]] double phase_weight(size_t i) const;
  /// The phase whose plan a trial reports: the step, or a request's (first) decode.
  [[nodiscard]] const PhaseResult& main() const {
    return phases.size() > 1 ? phases[1] : phases[0];
  }
};

class Study {
 public:
  /// The topology of `s` (file + overrides), loaded once per distinct input.
  std::shared_ptr<const hw::Topology> topology(const Scenario& s);
  /// The workload of `s` with `g` as its generator options, generated or read once;
  /// `without_experts`: planner::without_routed_experts() of it, also made once.
  std::shared_ptr<const Workload> workload(const Scenario& s, const traces::GenOptions& g,
                                           bool without_experts = false);
  /// The model of a generated workload (a shipped name, a model YAML or an HF config with
  /// their overrides), read once per distinct source.
  std::shared_ptr<const traces::Arch> model(const WorkloadSource& src);
  /// Keeps at most `n` workloads cached (0, the default: all), dropping the oldest; a
  /// trial still running keeps its own alive. Sweeps bound their memory with it.
  void limit_workloads(size_t n);

  /// Each tierflow-policy plan from now on is searched with a probe
  /// (planner::PlanRequest::hint): the pipeline that won the last plan of the same workload,
  /// or else the last one of any: neighbouring points of a sweep mostly share their winner.
  /// The plans are the same; the portfolio's reasons for skipping an entry then depend on
  /// the points before (so a single plan's --explain never uses it).
  void probe_with_last_winner() { probe_ = true; }

  /// Plans and simulates `s`. Bad input throws InputError; "does not fit" is a result.
  Trial run(const Scenario& s);

  /// Plans and simulates one workload under `s`'s target on `topo`. With `planned` (the
  /// same step with expected routing), plans on it for the budget less
  /// planner::demand_reserve() and runs the realized plan on `w` (planner/realize.h).
  PhaseResult run_phase(const Scenario& s, const hw::Topology& topo,
                        std::shared_ptr<const Workload> w, std::string phase,
                        std::shared_ptr<const Workload> planned = nullptr);

  /// The makespan of the resident plan on a device with unlimited memory (no transfers):
  /// the fastest any plan can be; per phase for a request, summed as latency_ps() is. 0
  /// when even that plan cannot run (e.g. an op the device has no rate for).
  int64_t unlimited_latency(const Scenario& s);
  /// That resident trial on unlimited memory (its peaks say what everything needs).
  Trial unlimited_trial(const Scenario& s);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const hw::Topology>> topologies_;
  std::map<std::string, std::shared_ptr<const Workload>> workloads_;
  std::map<std::string, std::shared_ptr<const traces::Arch>> models_;
  std::deque<std::string> workload_order_;  ///< cached keys, oldest first
  size_t workload_limit_ = 0;
  /// What the study remembers of a workload while it is alive.
  struct Memo {
    std::weak_ptr<const Workload> alive;
    std::shared_ptr<planner::TrafficMemo> traffic;  ///< made when first asked
    std::string winner;  ///< the portfolio entry its last tierflow-policy plan kept
    /// Per topology (topologies_ keeps each alive): its plans' start states.
    std::map<const hw::Topology*, std::shared_ptr<planner::StartMemo>> starts;
  };
  /// `w`'s memo (a fresh one when `w` is new). Call with mu_ held.
  Memo& memo_of(const std::shared_ptr<const Workload>& w);
  /// The traffic memo of workload `w`, made when first asked (planner/bounds.h).
  std::shared_ptr<planner::TrafficMemo> traffic_memo(const std::shared_ptr<const Workload>& w);
  /// The start states of workload `w`'s plans on `topo` (planner/outcome.h), made when
  /// first asked.
  std::shared_ptr<planner::StartMemo> start_memo(const std::shared_ptr<const Workload>& w,
                                                 const hw::Topology& topo);
  std::map<const Workload*, Memo> memos_;
  bool probe_ = false;
  std::string last_winner_;  ///< the portfolio entry the last tierflow-policy plan kept
};

/// A phase's plan as written to `path`: refer_inputs() with the scenario's topology and
/// overrides, record_outcome(). The workload is left to the writer (inline).
Plan plan_for_file(const Trial& t, const PhaseResult& p, const std::string& path);

/// Names in `plan` the files it was made from, relative to the folder of `path` (where the
/// plan is written), with the SHA-256 of the bytes that were read: the topology `hw` and
/// its overrides (so that `sim` and `replay` rebuild it), and the workload file unless
/// `workload` is empty (then the writer puts it inline).
void refer_inputs(Plan& plan, const std::string& path, const std::string& hw, std::string hw_sha256,
                  const std::vector<std::string>& sets, const std::string& workload = "",
                  std::string workload_sha256 = "");

/// Records in the plan what planning it said: the pipeline and the budget (plan fields)
/// and the lower bounds (makespan, compute, residency, traffic; meta) that `report` shows
/// beside the result.
void record_outcome(Plan& plan, const planner::PlanOutcome& o);

/// Simulates `plan` (over `w`) on `topo` and writes its timeline into `out` (a Chrome trace,
/// sim/timeline.h), which the caller publishes with the command's other outputs (an
/// OutputSet's; null, as OutputSet::open gives for no path: nothing).
void write_plan_timeline(AtomicOutput* out, const Plan& plan, const Workload& w,
                         const hw::Topology& topo);

/// The topology a plan file runs on: `hw` if given, else the file the plan names (relative
/// to the folder of `plan_path`); the overrides recorded in the plan, then `sets`. The
/// inverse of plan_for_file(), for `sim`, `replay` and the Python API.
hw::Topology plan_topology(const Plan& plan, const std::string& plan_path, const std::string& hw,
                           const std::vector<std::string>& sets);

/// Why the plan of `plan_path` cannot run on the topology it names (a device it lacks, a
/// tier it lacks, ...), for `plan verify`; empty when it binds. A topology that cannot be
/// read is reported as such.
std::string plan_binding_error(const LoadedPlan& lp, const std::string& plan_path);

/// Metrics of a phase from its simulation (the derived fields of PhaseResult).
void summarize(PhaseResult& p, const hw::Topology& topo);

/// "gpu-pcie[3] rc->hbm" -> "gpu-pcie rc->hbm": instances summed.
std::string without_instance(const std::string& name);

}  // namespace tierflow::study
