// A plan: where each tensor's durable copy lives (its home tier) and, per device, a
// program of compute and cache steps. On disk: JSON `tierflow.plan/2`, or
// `tierflow.plan/3` when it computes on the host (docs/formats.md; `tierflow.plan/1` files
// still load).
// The rules below (ARCHITECTURE §6) are written once, in verify_plan(); the simulator and
// the replayer enforce the same ones.
//
// Glossary
//   device tier  the per-device tier programs compute from (e.g. hbm).
//   anchor       the compute step before a cache step in program order: the cache step
//                is issued when its anchor finishes.
//   event        completes when a prefetch's or store's last byte lands; steps `wait` on
//                events.
//   resident     a tensor with an allocated copy on the device tier.
//   modified     a tensor whose device copy is newer than every other copy.
//   host step    a compute step that runs its op on the host CPU serving the device, next
//                to the plan's host tier (FlexGen's attention beside a host-resident KV
//                cache). Host steps run one at a time in program order on the program's
//                host engine, beside its device engine: reached like a cache step (once the
//                device compute step before it has finished), one does not hold back the
//                steps after it. It starts when the host step before it has finished, its
//                waits have completed and every input has a current copy on the host tier;
//                its outputs are allocated there and homed there, and are current there
//                once its event completes.
//   host copy    a prefetch or detach on the host (FlexGen's --cpu with the KV cache on
//                disk): a host prefetch copies a tensor from another host-side tier to the
//                host tier, allocating it there when it issues and current there once its
//                event completes, for host steps to read; a host detach frees that copy. The
//                device holds neither.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/workload.h"

namespace tierflow {

enum class StepKind : uint8_t { kCompute, kPrefetch, kStore, kDetach };
inline constexpr std::array<std::string_view, 4> kStepKindNames = {"compute", "prefetch", "store",
                                                                   "detach"};

inline constexpr uint32_t kNoEvent = UINT32_MAX;
inline constexpr uint32_t kNoTier = UINT32_MAX;

struct Step {
  // (The flags beside the kind: a plan holds hundreds of thousands of steps, 40 bytes each.)
  StepKind kind = StepKind::kCompute;
  /// Prefetch only: an on-demand fetch of a tensor the plan did not foresee (an MoE
  /// expert the realized routing picked, planner/realize.h); counted as a miss.
  bool demand = false;
  /// Compute: a host step (see the glossary); it completes `event`. Prefetch: a host
  /// prefetch from `tier` to Plan::host_tier; detach: a host detach of the host tier's copy.
  bool host = false;
  uint32_t target = 0;  ///< op id (compute) or tensor id
  uint32_t tier = 0;    ///< prefetch: source tier; store: destination tier (index into Plan::tiers)
  uint32_t event = kNoEvent;  ///< event this prefetch/store completes
  std::vector<uint32_t> wait;

  Step() = default;
  /// A step that is not on demand and not on the host (set those after).
  Step(StepKind k, uint32_t target_id, uint32_t tier_index, uint32_t event_id,
       std::vector<uint32_t> waits = {})
      : kind(k), target(target_id), tier(tier_index), event(event_id), wait(std::move(waits)) {}
};
static_assert(sizeof(Step) <= 40, "a step is kept small: plans hold many");

/// A host step (a compute step on the host), not a host copy.
inline bool is_host_step(const Step& s) {
  return s.host && s.kind == StepKind::kCompute;
}

struct Program {
  uint32_t device = 0;
  std::vector<Step> steps;
};

/// Where the plan's workload or topology came from.
struct Reference {
  std::string file;    ///< as written in the plan (relative to the plan's folder)
  std::string sha256;  ///< of the referenced file's bytes; empty = not checked
  /// Topology only: the `--set PATH=VALUE` overrides the plan was made with, applied in
  /// order after loading the file (sim and replay apply them before their own).
  std::vector<std::string> sets;
};

struct Plan {
  std::string name;
  Meta meta;
  Reference workload_ref;  ///< empty file = the workload is inline
  Reference topology_ref;
  /// Bytes of the device tier the plan may hold per program (its budget); 0: the tier's
  /// usable capacity. Never more than that capacity where the plan runs (hw::bind).
  uint64_t budget = 0;
  std::string pipeline;  ///< the planner pipeline that made it; empty: not recorded
  /// MoE routing the plan runs on: "realistic" (planned on the expected routing, run on
  /// the seeded one with misses fetched on demand, planner/realize.h); empty: the
  /// workload's own routing, known to the plan.
  std::string routing;
  std::vector<std::string> tiers;  ///< tier ids used by the plan, in first-use order
  uint32_t device_tier = 0;        ///< index into tiers
  /// Index into tiers of the tier host steps compute next to (the topology's
  /// system.cpu.tier); kNoTier: the plan has no host steps.
  uint32_t host_tier = kNoTier;
  std::vector<uint32_t> home;      ///< per tensor: index into tiers
  std::vector<Program> programs;
};

/// A broken plan rule: where (program and step, or a tensor's home) and why.
struct PlanIssue {
  int program = -1;  ///< -1: not about a step
  int step = -1;
  int tensor = -1;  ///< for home issues
  std::string message;
};

/// Whether any program of `p` has a host step.
bool computes_on_host(const Plan& p);

/// Checks the plan against its workload: references, the §6 residency rules per program
/// in program order (a step may rely on an event only after something waited on it),
/// event uniqueness and every op computed exactly once per program. Returns the first
/// issue in document order.
std::optional<PlanIssue> verify_plan(const Plan& p, const Workload& w);

/// Programs that wait on each other forever: a step waiting on an event that a step of
/// another program completes, which cannot be reached before the first step (through
/// program order and other waits). The issue names the waiting step the cycle blocks first
/// in document order; nullopt when every step can run. Events no step completes are
/// verify_plan's to report.
std::optional<PlanIssue> find_wait_cycle(const Plan& p);

/// The same rules, with the first issue of every program: what the simulator needs to
/// run each program up to the step that breaks a rule.
struct PlanCheck {
  std::optional<PlanIssue> global;  ///< tiers, homes, events: nothing can run
  std::vector<std::optional<PlanIssue>> programs;  ///< empty when `global` is set
};
PlanCheck verify_plan_programs(const Plan& p, const Workload& w);

/// Why running a plan (simulated or replayed) stopped: a broken §6 rule (found by
/// verify_plan_programs), a tier over capacity, programs that wait on each other forever,
/// a plan that does not match the topology, or a run that would pass the latest simulated
/// time (kMaxSimTimePs: sizes no real machine would take weeks over). The simulator and the
/// replayer report the same errors in the same terms.
struct RunError {
  enum class Kind { kPlanRule, kCapacity, kDeadlock, kTopology, kTimeLimit };
  Kind kind = Kind::kPlanRule;
  int program = -1;
  int step = -1;
  int tensor = -1;
  int64_t time = -1;  ///< picoseconds; -1: before the run starts
  std::string message;
};

}  // namespace tierflow
