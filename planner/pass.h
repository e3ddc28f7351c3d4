// Pass infrastructure: passes with a name and options, textual pipelines that print back
// as written, the context that carries diagnostics, counters and the evaluator
// (ARCHITECTURE §8).
//
// Glossary
//   pipeline   passes separated by commas, each with options in braces:
//              `place,liveness,select{min-bytes=4MiB},insert,schedule{preferred=1.5},verify`.
//   evaluator  scores a finished plan (the simulator, through tools/); the planner itself
//              never links the simulator.
//   analysis   a pass that computes facts (costs, liveness) without changing the plan.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/plan.h"
#include "planner/state.h"

namespace tierflow::planner {

enum class PassResult { kUnchanged, kChanged, kFailed };

/// Counters a pass reports through `--stats`.
struct Stat {
  std::string pass;
  std::string name;
  double value = 0;
};

/// What the passes of a pipeline report beside the state they change; the planner returns
/// it with the plan (PlanOutcome). A copy of a state that goes on through other passes
/// takes a copy of its report with it.
struct PassReport {
  std::vector<Stat> stats;
  std::vector<std::string> notes;  ///< what the passes decided and why, for --explain
  bool infeasible = false;         ///< a pass found the target cannot be met (not a bug)
  /// Adds `value` to the counter `name` of `pass` (a new counter goes last).
  void stat(std::string_view pass, std::string_view name, double value);
};

class PlanEvaluator {
 public:
  virtual ~PlanEvaluator() = default;
  /// `verified`: the plan passed verify_plan() against the workload (the verify pass
  /// checked it as emitted), so the evaluator need not check the plan rules again.
  virtual Evaluation evaluate(const Plan& plan, bool verified) = 0;
  /// evaluate(), except that it may stop as soon as the plan surely ends after `after_ps`,
  /// given `ingress` (Bounds::ingress of the plan's state): the score then has `stopped`
  /// set. The default runs to the end.
  virtual Evaluation evaluate_until(const Plan& plan, bool verified, int64_t after_ps,
                                    double ingress) {
    (void)after_ps;
    (void)ingress;
    return evaluate(plan, verified);
  }
  /// Whether `evaluate` may be called from several threads at once (the tierflow policy
  /// then scores plans on the threads that make them).
  [[nodiscard]] virtual bool thread_safe() const { return false; }
};

/// Where the tierflow policy's search lets a pass stop early (planner/search.h).
struct SearchLimits {
  /// Bytes of prefetches at which the plan can no longer win (set from the best plan so
  /// far). A pass that only adds prefetches may give up once it has planned this many,
  /// before the next op it plans for (gives_up()): it fails with `gave_up` set.
  uint64_t fetch_bytes = UINT64_MAX;
  bool gave_up = false;  ///< a pass stopped at fetch_bytes (its failure says where)
};

struct PassContext {
  PlanEvaluator* evaluator = nullptr;
  bool verify_each = false;
  /// Called after each pass that ran (for --print-after-all / --print-after=PASS).
  std::function<void(std::string_view pass, const PlanState&)> after_pass;
  std::string failure;  ///< why the pass that failed failed
  SearchLimits limits;
  PassReport report;  ///< counters, notes and infeasibility of the passes run so far
};

/// For a pass that only adds prefetches, before it plans for position i with `fetched`
/// bytes planned: whether it gives up there (ctx.limits); if so ctx.failure says where.
bool gives_up(PassContext& ctx, const PlanState& s, uint32_t i, uint64_t fetched);

/// The `key=value` options of one pass in a pipeline, as written.
class PassOptions {
 public:
  PassOptions(std::string pass, std::vector<std::pair<std::string, std::string>> items,
              int column);

  /// Typed getters: the value of `key`, or `fallback` when absent. A malformed value is
  /// an InputError at the pipeline column.
  double number(std::string_view key, double fallback);
  /// A share of something (the budget): a number (or percentage) in [0, 1).
  double share(std::string_view key, double fallback);
  uint64_t bytes(std::string_view key, uint64_t fallback);
  uint32_t count(std::string_view key, uint32_t fallback);
  bool flag(std::string_view key, bool fallback);
  std::string text(std::string_view key, std::string fallback);
  /// One of `allowed`, the first when absent; anything else is an InputError.
  std::string choice(std::string_view key, std::initializer_list<std::string_view> allowed);
  /// Unknown keys are errors naming the nearest known one.
  void finish();
  /// An InputError at the pipeline column: option `key` does not go with the others.
  [[noreturn]] void reject(std::string_view key, std::string_view why) const { bad(key, why); }

  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& items() const {
    return items_;
  }

 private:
  const std::string* find(std::string_view key);
  [[noreturn]] void bad(std::string_view key, std::string_view why) const;

  std::string pass_;
  std::vector<std::pair<std::string, std::string>> items_;
  std::vector<std::string> known_;
  int column_ = 0;
};

class Pass {
 public:
  virtual ~Pass() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  virtual PassResult run(PlanState& s, PassContext& ctx) = 0;
  /// The options as written in the pipeline (printed back by Pipeline::str()).
  std::vector<std::pair<std::string, std::string>> written;
};

struct PassInfo {
  std::string_view name;
  std::string_view summary;
  std::function<std::unique_ptr<Pass>(PassOptions&)> make;
};

/// Every pass the pipeline syntax knows, by name.
const std::vector<PassInfo>& registered_passes();

class Pipeline {
 public:
  /// Parses `text`; errors are InputErrors at `source` (e.g. "--pipeline"), column of
  /// the fault.
  static Pipeline parse(std::string_view text, std::string_view source = "--pipeline");
  /// Prints back in the form it was written (no spaces).
  [[nodiscard]] std::string str() const { return str(0, passes_.size()); }
  /// Passes [first, last) as they print.
  [[nodiscard]] std::string str(size_t first, size_t last) const;
  /// Runs the passes in order; stops at the first that fails (its reason in ctx.failure,
  /// prefixed with the pass name).
  PassResult run(PlanState& s, PassContext& ctx) const { return run(s, ctx, 0, passes_.size()); }
  /// Runs passes [first, last) only.
  PassResult run(PlanState& s, PassContext& ctx, size_t first, size_t last) const;
  [[nodiscard]] const std::vector<std::unique_ptr<Pass>>& passes() const { return passes_; }

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

// Passes (one per file in planner/passes/).
std::unique_ptr<Pass> make_place(PassOptions& o);
std::unique_ptr<Pass> make_liveness(PassOptions& o);
std::unique_ptr<Pass> make_select(PassOptions& o);
std::unique_ptr<Pass> make_insert(PassOptions& o);
std::unique_ptr<Pass> make_schedule(PassOptions& o);
std::unique_ptr<Pass> make_reorder(PassOptions& o);
std::unique_ptr<Pass> make_refine(PassOptions& o);
std::unique_ptr<Pass> make_verify(PassOptions& o);
std::unique_ptr<Pass> make_page(PassOptions& o);
/// Presets of `page` (planner/passes/page.cpp).
std::unique_ptr<Pass> make_reactive(PassOptions& o);
std::unique_ptr<Pass> make_belady(PassOptions& o);
std::unique_ptr<Pass> make_layerwise(PassOptions& o);
std::unique_ptr<Pass> make_distance(PassOptions& o);

}  // namespace tierflow::planner
