// distance (baseline, MindSpore's op-count offload strategy): tensors whose idle gap spans
// at least `select` ops are candidates, the longest gap (in ops) first; an offloaded
// tensor is released `release` ops after its last use before the gap and fetched
// `prefetch` ops before the next use, with no estimate of time or link load. Candidates
// are taken until the profile fits the budget.
#include <fmt/format.h>

#include <algorithm>

#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct DistanceOptions {
  uint32_t select = 16;
  uint32_t prefetch = 4;
  uint32_t release = 0;
};

class Distance : public Pass {
 public:
  explicit Distance(DistanceOptions o) : o_(o) {}
  [[nodiscard]] std::string_view name() const override { return "distance"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    s.ensure_costs();
    s.ensure_liveness();
    // Pinned tensors homed off the device are fetched `prefetch` ops ahead, as the
    // strategy fetches the tensors it offloads itself.
    const uint32_t n = s.positions();
    bool led = false;
    for (Residency& r : s.tensors) {
      if (!r.pinned) continue;
      uint32_t floor = 0;
      for (Run& run : r.runs) {
        if (run.fetched) {
          const uint32_t alloc =
              std::max(floor, run.first > o_.prefetch ? run.first - o_.prefetch : 0);
          led |= alloc != run.alloc;
          run.alloc = alloc;
        }
        floor = run.release == kNone ? n : run.release;
      }
    }
    const PassResult unchanged = led ? PassResult::kChanged : PassResult::kUnchanged;
    Fitting f = begin_fitting(s);
    if (f.fits()) return unchanged;
    const Liveness& l = f.liveness;
    ProfileTree& tree = f.tree;
    const uint64_t budget = f.budget;

    std::vector<std::pair<uint32_t, Candidate>> pool;  // (longest gap in ops, candidate)
    for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
      const Residency& r = s.tensors[t];
      if (r.tier == kNone || r.pinned) continue;
      const auto& u = l.uses[t];
      const bool external = l.born[t] == kNone;
      std::vector<uint32_t> gaps;
      uint32_t longest = 0;
      for (uint32_t g = 0; g + 1 < u.size(); ++g) {
        const uint32_t ops = u[g + 1] - u[g] - 1;
        if (ops >= o_.select) {
          gaps.push_back(g);
          longest = std::max(longest, ops);
        }
      }
      if (external && !u.empty()) {
        longest = std::max({longest, u.front(), s.positions() - 1 - u.back()});
      }
      if (longest < o_.select || (!external && gaps.empty())) continue;
      SplitOptions so{.home_off_device = external, .tier = r.tier, .lead_ops = o_.prefetch,
                      .release_delay = o_.release};
      auto runs = split_runs(s, t, gaps, so);
      pool.emplace_back(longest, make_candidate(s, t, std::move(runs), external));
    }
    std::stable_sort(pool.begin(), pool.end(), [&](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first > b.first;
      return s.w.tensors[a.second.tensor].bytes > s.w.tensors[b.second.tensor].bytes;
    });
    size_t applied = 0;
    for (auto& [longest, c] : pool) {
      if (tree.max() <= budget) break;
      if (try_apply(s, ctx.report, tree, c, budget, name()) == Applied::kYes) ++applied;
    }
    ctx.report.stat(name(), "candidates", static_cast<double>(pool.size()));
    return end_fitting(s, ctx, tree, applied > 0 ? PassResult::kChanged : unchanged);
  }

 private:
  DistanceOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_distance(PassOptions& o) {
  DistanceOptions d;
  d.select = o.count("select", 16);
  d.prefetch = o.count("prefetch", 4);
  d.release = o.count("release", 0);
  return std::make_unique<Distance>(d);
}

}  // namespace tierflow::planner
