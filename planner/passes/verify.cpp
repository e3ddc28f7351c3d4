// verify: the plan rules of ARCHITECTURE §6 (core's verifier, the one place they are
// written), the device budget on the estimated profile, and the room on offload tiers.
#include <fmt/format.h>

#include <vector>

#include "core/units.h"
#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class Verify : public Pass {
 public:
  [[nodiscard]] std::string_view name() const override { return "verify"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    s.ensure_costs();
    s.ensure_liveness();
    if (auto issue = verify_plan(s.plan(), s.w)) {
      ctx.failure = fmt::format("program {} step {}: {}", issue->program, issue->step,
                                issue->message);
      return PassResult::kFailed;
    }
    const std::vector<uint64_t> profile = memory_profile(s);
    const uint64_t peak = profile_peak(profile);
    s.emitted.set_verified(peak);
    if (peak > s.target.budget) {
      // Over the budget: the tree finds what is live at the peak, for the message.
      return end_fitting(s, ctx, ProfileTree(profile), PassResult::kFailed);
    }
    std::vector<uint64_t> held(s.topo.tiers.size(), 0);
    for (uint32_t t = 0; t < s.tensors.size(); ++t) {
      const Residency& r = s.tensors[t];
      bool there = r.home_off_device;
      for (const Run& run : r.runs) there |= run.store;
      if (there) held[r.tier] += s.w.tensors[t].bytes;
    }
    for (size_t i = 0; i < held.size(); ++i) {
      if (held[i] > s.tier_room[i] && held[i] > 0) {
        ctx.failure = fmt::format(
            "does not fit: {} of tensors kept on '{}', which has room for {} per program",
            to_string_approx(Bytes{held[i]}), s.topo.tiers[i].id,
            to_string_approx(Bytes{s.tier_room[i]}));
        ctx.report.infeasible = true;
        return PassResult::kFailed;
      }
    }
    return PassResult::kUnchanged;
  }
};

}  // namespace

std::unique_ptr<Pass> make_verify(PassOptions&) { return std::make_unique<Verify>(); }

}  // namespace tierflow::planner
