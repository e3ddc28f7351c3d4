// A plan bound to the topology it runs on: each plan tier's topology tier, the device
// tier, each program's device, the Fabric its copies cross and the budget it may hold.
// Written once for everything that runs or reads a plan on hardware: the simulator, the
// replayer, the report, the planner's evaluator and export (ARCHITECTURE §6). The
// references' SHA-256s are checked where the files are read (core/plan_json.h for the
// workload, study::plan_topology for the topology).
//
// Glossary
//   device tier  the per-device tier the programs compute from: the plan's device tier,
//                which must be `per: device` in the topology.
//   budget       bytes of the device tier one program may hold: the plan's own budget,
//                never more than the tier's usable capacity (its capacity when the plan
//                names none).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/cost.h"
#include "hw_models/fabric.h"
#include "hw_models/topology.h"

namespace tierflow::hw {

/// Where one program runs.
struct BoundProgram {
  int device = 0;            ///< global device number
  size_t device_class = 0;   ///< index into Topology::devices
  int device_index = 0;      ///< index within its class
  uint32_t device_slot = 0;  ///< Fabric::tier_slot of its device tier instance
};

struct BoundPlan {
  BoundPlan(const Plan& p, const Workload& w, const Topology& t)
      : plan(p), workload(w), topology(t), fabric(t) {}

  const Plan& plan;
  const Workload& workload;
  const Topology& topology;
  std::vector<size_t> tier_map;  ///< plan tier -> topology tier
  size_t device_tier = 0;        ///< topology tier of the plan's device tier
  std::vector<BoundProgram> programs;
  uint64_t budget = 0;
  /// The resources its copies share. Paths are found on first use: one BoundPlan per
  /// thread.
  Fabric fabric;

  [[nodiscard]] size_t tier(uint32_t plan_tier) const { return tier_map[plan_tier]; }
};

/// `plan` (over `w`) bound to `t`, or why it cannot run there (RunError::Kind::kTopology):
/// a plan tier the topology lacks, a device tier that is not per device, a program on a
/// device the topology lacks or that another program already uses.
struct Binding {
  std::optional<BoundPlan> bound;
  std::optional<RunError> error;
};
Binding bind(const Plan& plan, const Workload& w, const Topology& t);

/// Why a shard of tensor parallelism `tp` on `device` (a global number) cannot run beside its
/// peers: the `tp` devices of its class from its index rounded down to a multiple of `tp`,
/// its collectives crossing the peer route of `device_tier` to them (the devices must exist
/// and that route join them). Nothing when it can. bind() refuses a workload whose `tp`
/// (trace gen's) meets one.
std::optional<std::string> tp_group_problem(const Fabric& f, size_t device_tier, int device,
                                            int64_t tp);
/// Why `devices` (global numbers, at least 2) cannot run as one tensor-parallel group: their
/// collectives cross the peer route of `device_tier`, which must join the first to each
/// other. Nothing when it does (or for one device).
std::optional<std::string> peer_group_problem(const Fabric& f, size_t device_tier,
                                              std::span<const int> devices);
/// How the tensor-parallel group `devices` (global numbers) all-reduces (CollectiveFabric):
/// one domain where the peer route of `device_tier` joins the first to each other; where it
/// does not, and `across` allows, the domains (the sets it joins, in the devices' order),
/// as many ranks in each, each rank reaching the same rank of the next domain (the last:
/// the first) over a wider peer route (Fabric::peer_path). Or why not, as
/// peer_group_problem says it (`across` false: a group must stay within one domain).
struct GroupFabric {
  CollectiveFabric fabric;
  std::optional<std::string> problem;
};
GroupFabric group_fabric(const Fabric& f, size_t device_tier, std::span<const int> devices,
                         bool across);
/// Why the peer route of `device_tier` leaves two devices apart, as messages say it: "they
/// reach no switch in common", or of a direct link's mesh "they are on different hosts, and
/// its 'xgmi' links join the devices of one".
std::string peer_apart_reason(const Topology& t, size_t device_tier);
/// Why `w`'s collective ops cannot be timed on `t`: the device tier has no peer route for
/// them to cross (a workload that names no `tp`, as an import may not). Nothing when it
/// has one, or when no op is a collective. bind() refuses such a workload.
std::optional<std::string> collective_problem(const Topology& t, size_t device_tier,
                                              const Workload& w);
/// The tensor parallelism `w` says it is a shard of (its `tp`, as trace gen writes it); 1
/// when it says none.
int64_t workload_tp(const Workload& w);

}  // namespace tierflow::hw
