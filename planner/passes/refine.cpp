// refine: the simulator in the loop. Scores the plan through the PlanEvaluator (or takes the
// score the context already holds for it), then moves each prefetch whose consumer waited
// on it earlier by `margin` times the exposed time (in estimated time), as far as the
// budget and the tensor's previous release allow, and scores again; keeps the better plan,
// for up to `iterations` rounds, and leaves its score in the context.
#include <fmt/format.h>

#include <algorithm>

#include "planner/offload.h"
#include "planner/outcome.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct RefineOptions {
  uint32_t iterations = 3;
  double margin = 1.5;
};

class Refine : public Pass {
 public:
  explicit Refine(RefineOptions o) : o_(o) {}
  [[nodiscard]] std::string_view name() const override { return "refine"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    if (ctx.evaluator == nullptr || !s.emitted.started()) {
      ctx.report.stat(name(), "skipped: no evaluator", 1);
      return PassResult::kUnchanged;
    }
    const Costs& c = s.ensure_costs();
    Evaluation best =
        s.emitted.evaluation() ? *s.emitted.evaluation() : evaluate(*ctx.evaluator, s);
    ctx.report.stat(name(), "evaluations", 1);
    s.emitted.set_evaluation(best);
    if (!best.ok) return PassResult::kUnchanged;
    bool changed = false;
    for (uint32_t round = 0; round < o_.iterations; ++round) {
      std::vector<std::vector<Run>> saved(s.tensors.size());
      for (size_t t = 0; t < s.tensors.size(); ++t) saved[t] = s.tensors[t].runs;
      ProfileTree tree(memory_profile(s));
      uint64_t moved = 0;
      const uint32_t per = std::max<uint32_t>(1, s.emitted.events_per_program());
      const auto& event_run = s.emitted.event_run();
      for (size_t e = 0; e < best.exposed_by_event.size(); ++e) {
        const int64_t exposed = best.exposed_by_event[e];
        if (exposed <= 0 || e % per >= event_run.size()) continue;
        const auto [t, k] = event_run[e % per];
        Run& run = s.tensors[t].runs[k];
        if (!run.fetched) continue;
        const uint32_t floor = k == 0 ? 0 : s.tensors[t].runs[k - 1].release;
        const auto need = static_cast<int64_t>(static_cast<double>(exposed) * o_.margin);
        uint32_t want = slot_ahead(c, run.alloc, need, floor);
        const uint64_t bytes = s.w.tensors[t].bytes;
        // The earliest slot from `want` on the budget allows.
        want = tree.earliest_room(want, run.alloc, bytes, s.target.budget);
        if (want >= run.alloc) continue;
        tree.add(want, run.alloc - 1, static_cast<int64_t>(bytes));
        run.alloc = want;
        ++moved;
      }
      if (moved == 0) break;
      const Evaluation next = ctx.evaluator->evaluate(s.emitted.emit(s), /*verified=*/false);
      ctx.report.stat(name(), "evaluations", 1);
      if (!next.ok || next.makespan_ps >= best.makespan_ps) {
        for (size_t t = 0; t < s.tensors.size(); ++t) s.tensors[t].runs = std::move(saved[t]);
        s.emitted.emit(s);
        s.emitted.set_evaluation(best);
        break;
      }
      ctx.report.stat(name(), "prefetches moved earlier", static_cast<double>(moved));
      best = next;
      s.emitted.set_evaluation(best);
      changed = true;
    }
    ctx.report.stat(name(), "simulated makespan ms", static_cast<double>(best.makespan_ps) / 1e9);
    return changed ? PassResult::kChanged : PassResult::kUnchanged;
  }

 private:
  RefineOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_refine(PassOptions& o) {
  RefineOptions r;
  r.iterations = o.count("iterations", 3);
  r.margin = o.number("margin", 1.5);
  return std::make_unique<Refine>(r);
}

}  // namespace tierflow::planner
