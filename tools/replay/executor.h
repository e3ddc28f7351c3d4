// The replayer's executor: runs a plan's programs on a backend by the rules of
// ARCHITECTURE §6, the same rules and allocation points as the simulator
// (sim/simulator.h), and records what happened when.
//
// Glossary
//   program thread  one per program: it issues that program's steps in an order the rules
//                   allow and sleeps on a condition variable until a completion arrives.
//   reached         a compute step is reached when the compute step before it has ended
//                   (or the program starts); it starts once its waited events completed.
//   waited          start - reached of a compute step: the time it stood waiting for
//                   events (the simulator's transfer stall).
//   host step       (core/plan.h) runs on the program's host engine beside its device;
//                   it is issued when it first stands at the head of the host queue with
//                   the engine free, and starts once its events completed.
//   pending         a cache step whose anchor ended but whose events have not completed;
//                   it does not hold back later steps, except those on the same tensor.
//   issue           when the executor handed a step to the backend (a cache step) or
//                   reached it (a compute step).
//
//   compute k-1 end   compute k reached      events done   compute k start     end
//        |----------------|···· waited ·········|-----------|======= op =========|
//
// Allocation points (as in the simulator): a prefetch allocates its device copy when
// issued, a store its destination copy when issued unless that tier holds one, a compute
// step its outputs and workspace when it starts; the workspace is freed when it ends and
// detach frees the device copy. Home copies of external tensors exist from time 0.
// Capacities are checked in logical bytes, strictly: an allocation that does not fit is a
// capacity error (the simulator's --on-full fail).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "tools/replay/backend.h"
#include "tools/replay/layout.h"

namespace tierflow::replay {

struct StepRecord {
  bool ran = false;  ///< issued (cache step) or started (compute step)
  Time issue = -1;   ///< see the glossary
  Time start = -1;   ///< transfer: holds its engines; compute: begins; detach: = issue
  Time end = -1;     ///< transfer: last byte landed; compute: ended; detach: = issue
  Time waited = 0;   ///< compute steps: start - issue
  uint64_t seq = 0;  ///< order in which the program issued or started its steps, from 1
};

struct ProgramRecord {
  int device = 0;
  std::vector<StepRecord> steps;  ///< one per plan step
  Time end = 0;                   ///< the last step's end, transfers included
  Time compute_ps = 0;            ///< sum of op times as measured
  Time waited_ps = 0;             ///< sum of compute steps' waited time
  uint64_t transfers = 0;
  Time host_ps = 0;       ///< sum of host steps' op times as measured
  uint64_t host_ops = 0;  ///< host steps run
};

struct ArenaRecord {
  ArenaSpec spec;
  ArenaStats stats;  ///< measured by the backend's allocator
};

struct ReplayResult {
  std::optional<ReplayError> error;
  std::string backend;
  Time makespan = 0;
  uint32_t shift = 0;   ///< size shift of the arenas (layout.h)
  uint64_t budget = 0;  ///< logical capacity of each device arena
  uint64_t memory_limit = 0;         ///< the backend's, for all arenas together
  std::string memory_limit_origin;   ///< Backend::memory_limit_origin()
  std::vector<ProgramRecord> programs;
  std::vector<ArenaRecord> arenas;  ///< device arenas first, one per program
  uint64_t steps = 0;               ///< steps executed
};

/// The first broken §6 rule, by the verifier the simulator uses: the simulator runs a
/// program up to its first broken step and reports it there, the replayer refuses to start.
std::optional<ReplayError> broken_rule(const Plan& plan, const Workload& w);

/// Replays a bound plan on `backend`, with op and transfer times from its topology. A plan
/// that breaks a §6 rule is rejected before anything runs, with the program, step, tensor
/// and message the simulator reports. Starts and stops the backend.
ReplayResult replay(const hw::BoundPlan& plan, Backend& backend);
/// Binds `plan` (over `w`) to `t` (hw::bind), then replays it; a broken rule is reported
/// before the topology's objection.
ReplayResult replay(const Plan& plan, const Workload& w, const hw::Topology& t, Backend& backend);

}  // namespace tierflow::replay
