// A plan mapped onto a topology for replay: which arena each program's copies live in,
// which copy engines each transfer needs, how long each op and transfer takes on the
// topology, and the size shift that makes the arenas fit the backend's memory.
//
// Glossary
//   arena       a program's device tier (its own instance of it) or one instance of a
//               host tier, shared by the programs whose devices map to that instance.
//   budget      the device arena's logical capacity: the plan's meta "budget" when given,
//               never more than the device tier's capacity. The arena itself reserves up
//               to twice that, so that fragmentation shows as a high-water mark above the
//               peak rather than as a failure.
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
  std::vector<size_t> tier_map;      ///< plan tier -> topology tier
  size_t dev_tier = 0;               ///< topology tier of the plan's device tier
  std::vector<size_t> device_class;  ///< per program
  std::vector<int> device_index;     ///< per program: index within its class
  /// [program][plan tier] -> arena holding that program's copies on that tier.
  std::vector<std::vector<ArenaId>> arena_of;
  BackendSetup setup;
  uint32_t shift = 0;
  uint64_t budget = 0;  ///< logical device-arena capacity
  /// [program][plan tier]: prefetch path (tier -> device) and store path (device -> tier);
  /// nullopt where the topology has no route or no step needs it.
  std::vector<std::vector<std::optional<ReplayPath>>> fetch, store;
  /// [device class][op]: the simulator's op time; nullopt when the device has no peak rate
  /// for the op's dtype.
  std::vector<std::vector<std::optional<Time>>> op_time;

  /// Arena bytes of `logical` plan bytes.
  [[nodiscard]] uint64_t scaled(uint64_t logical) const {
    return shift == 0 ? logical : ((logical - 1) >> shift) + (logical > 0 ? 1 : 0);
  }
};

/// Maps `plan` onto `t` for a backend that may reserve `memory_limit` bytes at a size shift
/// of at most `max_shift`. Returns the reason when the plan's tiers or devices are not in
/// the topology (kTopology) or the arenas cannot fit the limit at any allowed shift.
std::optional<ReplayError> build_layout(const Plan& plan, const Workload& w, const hw::Topology& t,
                                        uint64_t memory_limit, Layout& out,
                                        uint32_t max_shift = 48);

/// The plan's meta "budget" in bytes, if it has a numeric one.
std::optional<uint64_t> plan_budget(const Plan& plan);

}  // namespace tierflow::replay
