// insert: materializes the runs as plan steps (planner/emit.h): a store and detach after
// the last use before each gap, a prefetch before the next use, the consumer waiting on
// the prefetch's event.
#include "planner/emit.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class Insert : public Pass {
 public:
  [[nodiscard]] std::string_view name() const override { return "insert"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    s.ensure_costs();
    s.ensure_liveness();
    rematerialize(s, ctx);
    size_t steps = 0;
    if (!ctx.plan->programs.empty()) {
      for (const Step& st : ctx.plan->programs.front().steps) {
        if (st.kind != StepKind::kCompute) ++steps;
      }
    }
    s.stat(name(), "cache steps per program", static_cast<double>(steps));
    return PassResult::kChanged;
  }
};

}  // namespace

void rematerialize(PlanState& s, PassContext& ctx) {
  Emitted e = emit_plan(s, s.policy);
  ctx.plan = std::move(e.plan);
  ctx.event_run = std::move(e.event_run);
  ctx.events_per_program = e.events_per_program;
}

std::unique_ptr<Pass> make_insert(PassOptions&) { return std::make_unique<Insert>(); }

}  // namespace tierflow::planner
