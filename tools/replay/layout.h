// A plan mapped onto a topology for replay: which arena each program's copies live in,
// which copy engines each transfer needs, how long each op and transfer takes on the
// topology, and the size shift that makes the arenas fit the backend's memory.
//
// Glossary
//   arena       a program's device tier (its own instance of it) or one instance of a
//               host tier, shared by the programs whose devices map to that instance.
//   budget      the device arena's logical capacity: the bound plan's budget (hw/bind.h).
//               The arena itself reserves up to twice that, so that fragmentation shows
//               as a high-water mark above the peak rather than as a failure.
//   size shift  every size is divided by 2^shift (rounded up) in the arenas; the smallest
//               shift that brings the arenas under the backend's memory limit.
//   path        what a prefetch or store of one program between the device tier and one
//               plan tier needs: the engine groups of every link it crosses, the resources
//               it shares (tier ports, link directions: the simulator's, hw_models/fabric.h),
//               the route's setup latency and bandwidth.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/bind.h"
#include "hw_models/topology.h"
#include "tools/replay/backend.h"

namespace tierflow::replay {

/// Why a plan cannot be replayed: the simulator's errors, in the same terms (core/plan.h).
using ReplayError = RunError;

struct ReplayPath {
  std::vector<uint32_t> engines;    ///< engine groups, in route order
  std::vector<uint32_t> resources;  ///< the setup's resources, in route order
  const hw::Route* route = nullptr;
};

struct Layout {
  /// [program][plan tier] -> arena holding that program's copies on that tier.
  std::vector<std::vector<ArenaId>> arena_of;
  BackendSetup setup;
  uint32_t shift = 0;
  uint64_t budget = 0;  ///< logical device-arena capacity (the bound plan's budget)
  /// [program][plan tier]: prefetch path (tier -> device) and store path (device -> tier);
  /// nullopt where the topology has no route or no step needs it.
  std::vector<std::vector<std::optional<ReplayPath>>> fetch, store;
  /// [program][plan tier]: a host prefetch's path (tier -> the plan's host tier).
  std::vector<std::vector<std::optional<ReplayPath>>> host_fetch;
  /// [device class][op]: the simulator's op time; nullopt when the device has no peak rate
  /// for the op's dtype.
  std::vector<std::vector<std::optional<Time>>> op_time;
  /// [device class][op]: the simulator's time of the op on the host CPU of that device's
  /// socket (hw::host_op_time); empty unless the plan has host steps.
  std::vector<std::vector<std::optional<Time>>> host_time;

  /// Arena bytes of `logical` plan bytes.
  [[nodiscard]] uint64_t scaled(uint64_t logical) const {
    return shift == 0 ? logical : ((logical - 1) >> shift) + (logical > 0 ? 1 : 0);
  }
};

/// What a backend runs for op `op` of the workload on device class `device`, which the
/// simulator times at `duration`.
ComputeWork work_of(const hw::Topology& t, size_t device, const Op& op, Time duration);

/// Lays a bound plan out for a backend that may reserve `memory_limit` bytes at a size
/// shift of at most `max_shift`. Returns the reason (kTopology) when the arenas cannot fit
/// the limit at any allowed shift.
std::optional<ReplayError> build_layout(const hw::BoundPlan& plan, uint64_t memory_limit,
                                        Layout& out, uint32_t max_shift = 48);

}  // namespace tierflow::replay
