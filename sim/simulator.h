// Runs a plan on a topology and scores it (ARCHITECTURE §6, §7).
//
// Glossary
//   program    the steps of one device. Compute steps run one at a time in program
//              order; each starts when the previous one has finished, every event it
//              waits on has completed and its outputs and workspace fit.
//   cache step a prefetch, store or detach. It may issue once the compute step before it
//              (its anchor) has finished, its events have completed and, for a prefetch
//              or store, its bytes fit. One that cannot issue yet stays pending without
//              holding back the steps after it, except steps on the same tensor, which
//              issue in program order; this is what lets a detach free the memory an
//              earlier prefetch waits for (--on-full wait).
//   transfer   a prefetch or store once issued: it queues on the copy engines of every
//              link it crosses (FIFO), pays the route's setup latency, then shares
//              bandwidth as a flow; its event completes when the last byte lands.
//   stall      time the compute engine is idle while its program has work left: waiting
//              for a transfer's event, or for memory.
//   exposed    the part of a transfer's time that a step waited for it.
//
//   issue      start (engines held)   active (setup paid)          end (event)
//     |--queue--|-------setup-----------|====== bytes / shared rate ======|
//
// Allocation: a prefetch allocates its device copy when issued; a store allocates its
// destination copy when issued unless that tier already holds one; a compute step
// allocates its outputs and workspace when it starts; detach frees the device copy;
// workspace is freed when the op ends. Home copies of external tensors exist from time 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/bind.h"
#include "hw_models/fabric.h"
#include "hw_models/topology.h"
#include "sim/kernel/event_queue.h"

namespace tierflow::sim {

using hw::ResourceKind;

class Timeline;
struct SimSeries;

enum class OnFull { kFail, kWait };

/// When one plan step ran, in picoseconds; -1 where it did not run (see SimOptions).
struct StepTime {
  Time start = -1;
  Time end = -1;
};

struct SimOptions {
  OnFull on_full = OnFull::kFail;
  Timeline* timeline = nullptr;  ///< streamed while simulating when set
  /// Filled while simulating when set: memory by kind, link rates, compute and stall
  /// intervals over time (sim/series.h), e.g. for `tierflow report`. Pass it empty.
  SimSeries* series = nullptr;
  bool keep_transfers = true;  ///< fill SimResult::transfers
  size_t live_top = 10;        ///< largest live tensors listed per tier at its peak
  /// When set, sized to the workload's ops by simulate(): the end of each op's compute
  /// step in program 0 (-1 where it did not run), e.g. for per-token decode times.
  std::vector<Time>* op_end = nullptr;
  /// When set, sized per program and step by simulate(): a compute step's start and end;
  /// a cache step's issue (start) and, for a prefetch or store, when its last byte landed
  /// (end; a detach ends when it issues). Exporters join it with SimResult::transfers.
  std::vector<std::vector<StepTime>>* step_times = nullptr;
  /// The plan already passed verify_plan() against this workload (the planner's verify
  /// pass checked it): setup does not check the plan rules again.
  bool verified = false;
  /// When above 0: stop as soon as the run surely ends after this time (SimResult::
  /// stopped), by the bound `now + bytes program 0 has yet to begin prefetching onto the
  /// device / ingress`, with `ingress` an upper bound on the bytes per second the device
  /// tier receives (planner::Bounds::ingress). A search uses it to rule out a plan against
  /// a better one without running it to its end.
  Time stop_after = 0;
  double ingress = 0;
};

/// Why a plan cannot run (core/plan.h), shared with the replayer.
using SimError = RunError;

struct TransferRecord {
  uint32_t program = 0;
  uint32_t step = 0;
  StepKind kind = StepKind::kPrefetch;
  uint32_t tensor = 0;
  uint32_t event = 0;  ///< the plan's event id
  uint64_t bytes = 0;
  uint32_t from = 0;  ///< topology tier indices
  uint32_t to = 0;
  Time issue = 0, start = 0, active = 0, end = 0;
  Time exposed = 0;  ///< time steps spent waiting for this transfer
};

struct DeviceResult {
  int device = 0;       ///< global device number
  Time compute_ps = 0;  ///< sum of op times
  Time stall_transfer_ps = 0;
  Time stall_memory_ps = 0;
  Time compute_end = 0;  ///< the last compute step's end
  Time host_compute_ps = 0;  ///< sum of host steps' op times (core/plan.h)
  uint64_t host_ops = 0;
  Time end = 0;          ///< the last step's end, transfers included
  uint64_t ops = 0;
  uint64_t transfers = 0;
  uint64_t bytes_in = 0;   ///< prefetched
  uint64_t bytes_out = 0;  ///< stored
};

struct LiveTensor {
  uint32_t program = 0;
  uint32_t what = 0;  ///< tensor id, or op id | kWorkspaceBit
  uint64_t bytes = 0;
  bool is_static = false;  ///< a home copy present from time zero
};

struct TierResult {
  std::string name;  ///< "hbm[3]"
  size_t tier = 0;
  int instance = 0;
  uint64_t capacity = 0;
  uint64_t peak = 0;
  Time peak_time = 0;
  double average = 0;
  uint64_t final_level = 0;
  std::vector<uint64_t> peak_by_kind;  ///< bytes at the peak per kind slot (sim/series.h)
  std::vector<LiveTensor> largest;     ///< largest live allocations at the peak
  size_t live_count = 0;
};

struct LinkResult {
  std::string name;  ///< "pcie[3] hbm->rc", "ddr[0] read"
  ResourceKind kind = ResourceKind::kLink;
  size_t index = 0;  ///< link or tier index in the topology
  int instance = 0;
  bool forward = true;
  double capacity = 0;  ///< bytes/s achievable
  double bytes = 0;
  Time busy_ps = 0;
  double mean_concurrency = 0;  ///< flows on it, averaged over its busy time
  double peak_rate = 0;
  uint64_t transfers = 0;
  Time queue_ps = 0;  ///< summed copy-engine queueing delay of its transfers
  Time max_queue_ps = 0;
};

struct SimResult {
  std::optional<SimError> error;
  Time makespan = 0;
  /// Topology tier the programs computed from (the bound plan's device tier); SIZE_MAX
  /// when the plan did not bind.
  size_t device_tier = SIZE_MAX;
  std::vector<DeviceResult> devices;
  std::vector<TierResult> tiers;  ///< every tier instance the plan touched
  std::vector<LinkResult> links;  ///< every link direction and tier port that carried bytes
  std::vector<TransferRecord> transfers;
  uint64_t events = 0;  ///< kernel events processed
  uint64_t steps = 0;   ///< plan steps executed
  uint64_t solves = 0;  ///< max-min re-solves
  /// The run stopped at `makespan` because it surely ends after SimOptions::stop_after;
  /// only `makespan` and the counts above are then filled.
  bool stopped = false;
};

/// Simulates a bound plan. Plan-rule violations are found by core's verify_plan and
/// reported with the time the offending step was reached.
SimResult simulate(const hw::BoundPlan& plan, const SimOptions& options = {});
/// The result of a plan that does not bind (hw::bind's `error`): that error alone, unless a
/// broken plan rule that stops every program comes first (as a bound plan reports it).
SimResult unbound_result(const Plan& plan, const Workload& w, const RunError& bind_error);
/// Binds `plan` (over `w`) to `t` (hw::bind), then simulates it; a plan that cannot bind
/// gives unbound_result().
SimResult simulate(const Plan& plan, const Workload& w, const hw::Topology& t,
                   const SimOptions& options = {});

}  // namespace tierflow::sim
