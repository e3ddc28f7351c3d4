// insert: materializes the runs as plan steps (planner/emit.h): a store and detach after
// the last use before each gap, a prefetch before the next use, the consumer waiting on
// the prefetch's event. From here on the plan follows the runs; it is emitted when read
// (EmittedPlan in planner/emit.h), so passes that move steps after this one do not emit
// it each time.
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class Insert : public Pass {
 public:
  [[nodiscard]] std::string_view name() const override { return "insert"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    s.ensure_costs();
    s.ensure_liveness();
    s.emitted.start();
    // The steps emit_plan makes per program: a prefetch per fetched run, a detach per
    // release, and a store before it when the run stores.
    size_t steps = 0;
    for (const Residency& r : s.tensors) {
      for (const Run& run : r.runs) {
        if (run.fetched) ++steps;
        if (run.release != kNone) steps += run.store ? 2 : 1;
      }
    }
    if (s.target.devices == 0) steps = 0;
    ctx.report.stat(name(), "cache steps per program", static_cast<double>(steps));
    return PassResult::kChanged;
  }
};

}  // namespace

std::unique_ptr<Pass> make_insert(PassOptions&) { return std::make_unique<Insert>(); }

}  // namespace tierflow::planner
