// liveness (analysis): each tensor's uses in execution order and the idle gaps between
// them, in ops and in estimated time. Changes nothing; reports counters.
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class LivenessPass : public Pass {
 public:
  [[nodiscard]] std::string_view name() const override { return "liveness"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    const Costs& c = s.ensure_costs();
    const Liveness& l = s.ensure_liveness();
    double gaps = 0;
    double hideable = 0;
    for (uint32_t t = 0; t < l.uses.size(); ++t) {
      const auto& u = l.uses[t];
      const uint32_t tier = s.tensors[t].tier;
      for (size_t g = 0; g + 1 < u.size(); ++g) {
        if (u[g + 1] == u[g] + 1) continue;
        gaps += 1;
        if (tier != kNone &&
            c.span_ps(u[g] + 1, u[g + 1]) >= c.fetch_ps(tier, s.w.tensors[t].bytes)) {
          hideable += 1;
        }
      }
    }
    ctx.report.stat(name(), "idle gaps", gaps);
    ctx.report.stat(name(), "gaps longer than a fetch", hideable);
    ctx.report.stat(name(), "estimated compute ms", static_cast<double>(c.start_ps.back()) / 1e9);
    return PassResult::kUnchanged;
  }
};

}  // namespace

std::unique_ptr<Pass> make_liveness(PassOptions&) { return std::make_unique<LivenessPass>(); }

}  // namespace tierflow::planner
