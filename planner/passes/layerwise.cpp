// layerwise (baseline, DeepSpeed ZeRO-style parameter offload): when the resident plan
// does not fit, every weight is homed on its offload tier and fetched for each visit of
// its layer, at the start of the layer visit `ahead` visits earlier; it is released after
// its last use in the visit. Everything else stays on the device.
//
//   layer visits: | L0 | L1 | L2 | ...      weights of L2 fetched when L1 starts (ahead 1)
#include <fmt/format.h>

#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class Layerwise : public Pass {
 public:
  explicit Layerwise(uint32_t ahead) : ahead_(ahead) {}
  [[nodiscard]] std::string_view name() const override { return "layerwise"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    Fitting f = begin_fitting(s);
    const Liveness& l = f.liveness;
    ProfileTree& tree = f.tree;
    // Weights pinned off the device are streamed whether or not the rest fits; the others
    // only when the resident plan does not fit.
    const bool stream_all = !f.fits();
    auto pinned_off = [&](uint32_t t) {
      return s.tensors[t].pinned && s.tensors[t].home_off_device;
    };

    const uint32_t n = s.positions();
    std::vector<uint32_t> visit(n, 0), visit_start;
    for (uint32_t i = 0; i < n; ++i) {
      const bool fresh = i == 0 || s.w.ops[s.order[i]].layer != s.w.ops[s.order[i - 1]].layer;
      if (fresh) visit_start.push_back(i);
      visit[i] = static_cast<uint32_t>(visit_start.size() - 1);
    }
    uint64_t moved = 0;
    for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
      Residency& r = s.tensors[t];
      // A weight pinned off the device is streamed from its pinned tier; one pinned to the
      // device stays there.
      if (s.w.tensors[t].kind != TensorKind::kWeight || l.born[t] != kNone ||
          r.tier == kNone || !(pinned_off(t) || (stream_all && !r.pinned))) {
        continue;
      }
      const auto& u = l.uses[t];
      std::vector<uint32_t> gaps;
      for (uint32_t g = 0; g + 1 < u.size(); ++g) {
        if (visit[u[g]] != visit[u[g + 1]]) gaps.push_back(g);
      }
      SplitOptions o{.home_off_device = true, .tier = r.tier, .lead_ops = 0};
      std::vector<Run> runs = split_runs(s, t, gaps, o);
      uint32_t floor = 0;
      for (Run& run : runs) {
        const uint32_t v = visit[run.first];
        run.alloc = std::max(floor, visit_start[v >= ahead_ ? v - ahead_ : 0]);
        floor = run.release == kNone ? n : run.release;
      }
      for (const auto& [span, d] : delta_of(s, t, runs)) tree.add(span.from, span.to, d);
      r.runs = std::move(runs);
      r.home_off_device = true;
      ++moved;
    }
    ctx.report.stat(name(), "weights streamed", static_cast<double>(moved));
    return end_fitting(s, ctx, tree, moved > 0 ? PassResult::kChanged : PassResult::kUnchanged,
                       "does not fit with every weight streamed");
  }

 private:
  uint32_t ahead_ = 1;
};

}  // namespace

std::unique_ptr<Pass> make_layerwise(PassOptions& o) {
  return std::make_unique<Layerwise>(o.count("ahead", 1));
}

}  // namespace tierflow::planner
