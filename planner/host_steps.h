// Ops run by the host CPU next to the data they read: FlexGen's `--cpu`, decode attention
// beside a KV cache held in host memory. A plan made with every op on the device becomes
// one where the ops of the chosen kinds that can move are host steps (core/plan.h), and the
// KV cache they read never crosses the link: only their queries and the keys and values
// of the new tokens go to the host, and their outputs come back.
//
// Glossary
//   host tier  the tier the topology's CPU computes next to (system.cpu.tier).
//   movable    an op of a chosen kind that updates nothing in place and is no collective,
//              whose external inputs are each updated by no op and homed on the host tier
//              or on a tier the host fetches from (a host-side tier other than the device
//              tier with a route to the host tier: FlexGen's KV cache on disk), and whose
//              outputs no op updates.
//   host-only  an external tensor that only moved ops read: the plan's cache steps of it
//              are dropped (it is read where it lives, or staged).
//   staged     an external tensor a moved op reads, homed off the host tier: a host prefetch
//              copies it to the host tier (core/plan.h host copy) when the host step before
//              that op is reached (for the first host step: at the start), the host step
//              waits for it, and a host detach frees it after the last of a run of
//              consecutive host steps reading it. The host tier then holds at most two host
//              steps' staged inputs at once.
//   sent       a tensor made on the device that only moved ops read and no op updates (a
//              query): stored to the host tier right after the compute step that makes it,
//              and detached once that store has landed; homed on the host tier. The plan's
//              own cache steps of it are dropped.
//   synced     a tensor made on the device that moved ops read and device ops use too (the
//              KV block a decode step appends to: its qkv op updates it, its attention reads
//              it): after each device op that makes or updates it, while a host step is to
//              read it, it is stored to the host tier (waiting on the host steps that read
//              the value it replaces); the device's next update waits for that store. The
//              plan's own cache steps of it stay (after that store), but a store of it to the
//              host tier that would copy the value the host already holds is dropped.
//   returned   an output of a moved op: homed on the host tier, where the host step makes
//              it. When device ops read it, it is prefetched right after the host step
//              (waiting on the host step's event), each device op reading it waits on that
//              prefetch, and it is detached after the last of them; the plan's own cache
//              steps of it are dropped.
//
// A moved op's host step takes its compute step's place and waits on the stores of its
// sent and synced inputs and the host steps of its returned inputs; waits on dropped steps'
// events are dropped everywhere (those on a dropped store of a synced tensor wait on the
// store that made it redundant). The device holds less than the plan did (the KV cache is
// no longer fetched; a sent tensor leaves as soon as its store lands), except that a
// returned tensor stays from its prefetch to its last device reader even where the plan had
// offloaded it in between (activations: small).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/kinds.h"
#include "core/plan.h"
#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/bounds.h"

namespace tierflow::planner {

/// Op kinds in `text` ("attention", or several comma-separated); InputError at `source`
/// naming an unknown kind.
std::vector<OpKind> parse_host_ops(std::string_view text, std::string_view source);
/// The kinds as parse_host_ops() reads them ("" when none).
std::string host_ops_text(const std::vector<OpKind>& kinds);

struct HostPlan {
  Plan plan;                    ///< verifies; tierflow.plan/3 when an op moved
  std::vector<bool> moved_ops;  ///< per op of the workload: run on the host
  uint64_t moved = 0;           ///< ops moved to the host, per program
  uint64_t kept = 0;            ///< ops of the chosen kinds that stay on the device (not movable)
  std::string why_kept;         ///< why the first of those stays ("op 't0.L0.attention' reads ...")
  /// The least time the host prefetches of staged tensors take (glossary: staged): each
  /// crossing once from its home, alone on its route, those from one home one after another.
  int64_t staged_ps = 0;
};

/// InputError at `source` when `t` describes no host CPU (system.cpu).
void require_host_cpu(const hw::Topology& t, std::string_view source);

/// `plan` over `w` with the movable ops of `kinds` run by the host CPU of `t` (see the
/// glossary). InputError at `source` when `t` describes no host CPU. A plan in which no op
/// can move is returned as it is (moved = 0).
HostPlan move_to_host(const Plan& plan, const Workload& w, const hw::Topology& t,
                      const std::vector<OpKind>& kinds, std::string_view source);

/// What the policy plans when the ops of `kinds` are to run on the host: `w` with every op
/// of those kinds that is movable under the pins (`pinned`, planner::pinned_tiers: an
/// external input counts as homed where a pin homes it: on the CPU's tier, or on a tier
/// other than `device_tier` (topology tiers) the host fetches from) reading none of the
/// external tensors only such ops read (the KV cache they read where it lives), so
/// that the plan never brings those to the device nor counts them in its working set.
/// Tensors and ops keep their ids: a plan of it is one of `w` once move_to_host() has made
/// those ops host steps. nullopt when no op can move before planning (its inputs are homed
/// by the policy, not by pins).
std::optional<Workload> host_planned(const Workload& w, const hw::Topology& t, size_t device_tier,
                                     const std::vector<uint32_t>& pinned,
                                     const std::vector<OpKind>& kinds);

/// `w` without its `moved` ops: the device's share of the step, its ops in the same order
/// (`op_of`: each one's op in `w`); what the moved ops make becomes external (the device
/// receives it), what only they read goes unused.
Workload device_share(const Workload& w, const std::vector<bool>& moved,
                      std::vector<uint32_t>& op_of);

/// Lower bounds of a plan over `w` whose `moved` ops run on the host CPU serving device
/// class `device_class`, from `device`, the bounds of its device_share() (the device runs
/// those ops with the same budget and pins; its residency op is mapped back through
/// `op_of`): the makespan is no shorter than either engine's compute, each running one op at
/// a time, nor than `staged_ps` (HostPlan::staged_ps).
Bounds host_plan_bounds(Bounds device, const std::vector<uint32_t>& op_of, const Workload& w,
                        const hw::Topology& t, size_t device_class, const std::vector<bool>& moved,
                        int64_t staged_ps = 0);

}  // namespace tierflow::planner
