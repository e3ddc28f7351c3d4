// Turns residency runs into a plan (ARCHITECTURE §6): the steps of one program, copied to
// every device of the target with its events renumbered.
//
// Per slot j, in this order:
//   [store t (event s),] detach t [wait s]  runs released in slot j (stays that end there,
//                                           produced tensors past their last use), tensor order
//   prefetch t (event p) [wait ...]         runs allocated in slot j, first use first, then
//                                           tensor order
//   compute order[j] [wait p ...]           waits on its runs' prefetches
// A store's bytes are counted on the device until it lands (`Run::hold`); the compute and
// the prefetches of slot release+hold wait on it, so the device never holds more than
// memory_profile() says, whatever the store's real speed.
//
// The plan a state's runs emit is kept with the state (PlanState::emitted, an EmittedPlan),
// emitted again only when read after the runs changed. The protocol, whole:
//   before `insert`  passes change the runs freely and do not say so; the plan is emitted
//                    only when read (a pipeline without `insert` is emitted at its end).
//   `insert`         calls start(): from then on the plan follows the runs.
//   a pass that changes runs after `insert` calls runs_changed(): the plan and its score
//                    are dropped, and emitted again when next read.
//   plan(s)          the plan as the runs now stand (emitted when stale); emit(s) emits
//                    now (refine, which changes runs and scores the result at once).
//   a score          of the current plan, kept with it (set_evaluation) so that it is not
//                    simulated twice, and dropped with it.
//   shed()           frees a scored plan whose runs stay as they are; it is emitted again,
//                    score kept, when next read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/plan.h"

namespace tierflow::planner {

struct PlanState;

/// What scoring a plan says: the makespan, the device peak, and per plan event how long
/// compute waited for it (the exposed time of that transfer; events past the end of the
/// list had none).
struct Evaluation {
  bool ok = true;
  std::string error;
  /// What kind of error `error` is (a simulator's run error); unset when ok or stopped.
  std::optional<RunError::Kind> error_kind;
  int64_t makespan_ps = 0;
  uint64_t device_peak = 0;  ///< largest over the programs' device tiers
  std::vector<int64_t> exposed_by_event;
  /// The evaluation stopped early (PlanEvaluator::evaluate_until): the plan surely ends
  /// after the limit it was given; `ok` is false and `makespan_ps` is where it stopped.
  bool stopped = false;
  /// What the evaluator kept of the run behind this score, opaque to the planner (the
  /// simulation itself, for a caller that would otherwise run it again); may be null.
  std::shared_ptr<const void> run;
};

struct Emitted {
  Plan plan;
  /// Per event of program 0: the tensor and run index it moves (events of program k are
  /// these plus k x events_per_program).
  std::vector<std::pair<uint32_t, uint32_t>> event_run;
  uint32_t events_per_program = 0;
};

Emitted emit_plan(const PlanState& s, std::string_view policy);

/// The plan emitted from a state's runs, and its score when known (the protocol above).
class EmittedPlan {
 public:
  /// `insert` has run: the plan follows the runs.
  [[nodiscard]] bool started() const { return started_; }
  void start();
  /// The runs changed: once started, the plan is emitted again when next read.
  void runs_changed();
  /// The plan as the runs of `s` now stand (emitted when stale or never emitted).
  const Plan& plan(const PlanState& s);
  /// Emits the plan of `s` now.
  const Plan& emit(const PlanState& s);
  /// The plan as last emitted, or none when stale or never emitted (what --print-after
  /// shows).
  [[nodiscard]] const std::optional<Plan>& last() const { return plan_; }
  /// Moves the plan out (a finished pipeline's outcome takes it).
  std::optional<Plan> take() { return std::move(plan_); }
  /// Frees the plan and keeps its score: the runs have not changed, so plan() emits the
  /// same plan again when next read (a search holding many scored trials, planner/search.h).
  void shed();

  /// Per event of program 0 of the plan: the tensor and run it moves.
  [[nodiscard]] const std::vector<std::pair<uint32_t, uint32_t>>& event_run() const {
    return event_run_;
  }
  [[nodiscard]] uint32_t events_per_program() const { return events_per_program_; }

  /// The evaluator's score of the current plan, when known.
  [[nodiscard]] const std::optional<Evaluation>& evaluation() const { return evaluation_; }
  void set_evaluation(Evaluation e) { evaluation_ = std::move(e); }
  /// The current plan passed verify_plan() (the verify pass says so); false once the runs
  /// change or the plan is emitted again from changed runs.
  [[nodiscard]] bool verified() const { return verified_; }
  /// The verify pass checked the current plan, whose estimated profile peaks at `peak`.
  void set_verified(uint64_t peak) {
    verified_ = plan_.has_value();
    peak_ = peak;
  }
  /// The estimated peak the verify pass found, while the plan it checked stands.
  [[nodiscard]] std::optional<uint64_t> verified_peak() const {
    return verified_ ? std::optional(peak_) : std::nullopt;
  }

 private:
  bool started_ = false;
  std::optional<Plan> plan_;
  std::vector<std::pair<uint32_t, uint32_t>> event_run_;
  uint32_t events_per_program_ = 0;
  std::optional<Evaluation> evaluation_;
  bool shed_ = false;  ///< the plan was freed by shed(): its score still holds
  bool verified_ = false;
  uint64_t peak_ = 0;  ///< with verified_
};

}  // namespace tierflow::planner
