// select: what leaves the device so that the estimated profile fits the budget.
//
// A candidate is one tensor: an external tensor homed on its offload tier (fetched before
// its uses, its pre-first and post-last idle time freed; in phase 1 only when the ops
// before its first use hide that fetch and, if it is modified, the ops after its last use
// hide the write-back) and split at its idle gaps, or a
// produced tensor stored and fetched back across its gaps. Phase 1 takes only gaps whose
// estimated time hides the round trip (store if needed, then fetch) `preferred` times
// over, best score first: bytes x freed time / added copy time, the score scaled down
// once the tier's route is loaded past the estimated step time (link load). Phase 2, when
// the profile still does not fit, splits at every gap, exposed or not, with each fetch right
// before its use (the least memory per offload), best score first.
// A tensor is offloaded only if it lowers some position that is over the target.
// Weights the user pinned off the device arrive from `place` fetched for every use; select
// first merges each one's runs into one (fetched once, kept to its last use) and then
// treats its gaps like any other candidate's, so that pinned weights stay on the device
// across tokens where the budget has room instead of being read again from their tier.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/checked.h"
#include "planner/offload.h"
#include "planner/pass.h"
#include "planner/rescored_queue.h"

namespace tierflow::planner {
namespace {

struct SelectOptions {
  uint64_t min_bytes = 0;
  double preferred = 1.0;
  double headroom = 0.0;  ///< fraction of the budget left free for the schedule
  /// Prefetch lead assumed while selecting, in transfer times (0: fetched right before the
  /// use, the least memory per offload; schedule moves anchors earlier where room allows).
  double lead = 1.0;
  bool exposed = true;    ///< phase 2
};

class Select : public Pass {
 public:
  explicit Select(SelectOptions o) : o_(o) {}
  [[nodiscard]] std::string_view name() const override { return "select"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    s.ensure_costs();
    s.ensure_liveness();
    const size_t kept = keep_pinned(s);
    if (kept > 0) ctx.report.stat(name(), "pinned tensors fetched once", static_cast<double>(kept));
    Fitting f = begin_fitting(s);
    const Costs& c = f.costs;
    ProfileTree& tree = f.tree;
    const auto target = static_cast<uint64_t>(static_cast<double>(s.target.budget) *
                                              std::max(0.0, 1.0 - o_.headroom));
    ctx.report.stat(name(), "resident peak bytes", static_cast<double>(tree.max()));
    if (tree.max() <= target) return kept > 0 ? PassResult::kChanged : PassResult::kUnchanged;

    // Phase 1: hideable gaps, score scaled by link load (lazy re-scoring).
    const int64_t horizon = std::max<int64_t>(1, c.start_ps.back());
    std::vector<int64_t> load(s.topo.tiers.size(), 0);
    std::vector<Candidate> pool;
    for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
      if (!eligible(s, t)) continue;
      auto k = candidate(s, t, /*all_gaps=*/false, o_.lead);
      if (k && k->freed_ps > 0) pool.push_back(std::move(*k));
    }
    // Best effective score first, re-scored as the links get busier (planner/rescored_queue.h).
    // Candidates on one tier with the same score and copy time always score alike: one group.
    struct Group {
      uint32_t tier;
      double score;
      int64_t transfer_ps;
      auto operator<=>(const Group&) const = default;
    };
    std::vector<Group> groups;
    std::vector<uint32_t> group(pool.size());
    std::vector<double> score(pool.size());
    {
      std::map<Group, uint32_t> index;
      for (uint32_t i = 0; i < pool.size(); ++i) {
        const Group g{s.tensors[pool[i].tensor].tier, pool[i].score, pool[i].transfer_ps};
        const auto [it, fresh] = index.try_emplace(g, static_cast<uint32_t>(groups.size()));
        if (fresh) groups.push_back(g);
        group[i] = it->second;
        score[i] = pool[i].score;
      }
    }
    RescoredQueue queue(group, score);
    auto now = [&](uint32_t g) {
      const Group& k = groups[g];
      const int64_t after = load[k.tier] + k.transfer_ps;
      return after <= horizon ? k.score
                              : k.score * static_cast<double>(horizon) / static_cast<double>(after);
    };
    while (!queue.empty() && tree.max() > target) {
      const uint32_t i = queue.pop(now);
      const uint32_t t = pool[i].tensor;
      Applied a = try_apply(s, ctx.report, tree, pool[i], target, name());
      // Its tier is full: the next tier with room, candidate rebuilt for that route.
      for (size_t k = 0;
           a == Applied::kNoRoom && !s.tensors[t].pinned && k < s.offload_tiers.size(); ++k) {
        const uint32_t other = s.offload_tiers[k];
        if (other == s.tensors[t].tier ||
            s.tier_used[other] + s.w.tensors[t].bytes > s.tier_room[other]) {
          continue;
        }
        s.tensors[t].tier = other;
        auto again = candidate(s, t, /*all_gaps=*/false, o_.lead);
        if (!again) break;
        pool[i] = std::move(*again);
        a = try_apply(s, ctx.report, tree, pool[i], target, name());
      }
      if (a == Applied::kYes) load[s.tensors[t].tier] += pool[i].transfer_ps;
    }

    // Phase 2: every gap, hidden or not.
    if (tree.max() > target && o_.exposed) {
      std::vector<Candidate> rest;
      for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
        if (!eligible(s, t, /*again=*/true)) continue;
        auto k = candidate(s, t, /*all_gaps=*/true, /*lead=*/0.0);
        if (k && k->freed_ps > 0) rest.push_back(std::move(*k));
      }
      std::stable_sort(rest.begin(), rest.end(), [](const Candidate& a, const Candidate& b) {
        return a.score > b.score;
      });
      const size_t n = apply_until_fits(s, ctx.report, tree, rest, target, name());
      ctx.report.stat(name(), "offloads with exposed copies", static_cast<double>(n));
    }
    ctx.report.stat(name(), "estimated peak bytes", static_cast<double>(tree.max()));
    return end_fitting(s, ctx, tree, PassResult::kChanged);
  }

 private:
  /// Merges the runs of every external tensor pinned off the device into one. Returns how
  /// many were merged.
  size_t keep_pinned(PlanState& s) const {
    size_t n = 0;
    for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
      Residency& r = s.tensors[t];
      if (!r.pinned || !r.home_off_device || r.runs.size() < 2 || s.liveness->born[t] != kNone) {
        continue;
      }
      r.runs = split_runs(
          s, t, {}, SplitOptions{.home_off_device = true, .tier = r.tier, .preferred = o_.lead});
      r.pin_kept = true;
      ++n;
    }
    return n;
  }

  [[nodiscard]] bool eligible(const PlanState& s, uint32_t t, bool again = false) const {
    const Residency& r = s.tensors[t];
    if (r.tier == kNone || (r.pinned && !r.pin_kept) || s.w.tensors[t].bytes < o_.min_bytes) {
      return false;
    }
    return again || (r.runs.size() <= 1 && (!r.home_off_device || r.pin_kept));
  }

  /// Offloading t at its hideable gaps (or every gap that has ops in it).
  [[nodiscard]] std::optional<Candidate> candidate(const PlanState& s, uint32_t t, bool all_gaps,
                                                   double lead) const {
    const Costs& c = *s.costs;
    const Liveness& l = *s.liveness;
    const auto& u = l.uses[t];
    const auto& m = l.modifies[t];
    const bool external = l.born[t] == kNone;
    const uint32_t tier = s.tensors[t].tier;
    const uint64_t bytes = s.w.tensors[t].bytes;
    const int64_t fetch = c.fetch_ps(tier, bytes);
    const int64_t store = c.store_ps(tier, bytes);
    std::vector<uint32_t> gaps;
    gaps.reserve(u.size());
    bool dirty = !external;
    for (uint32_t g = 0; g + 1 < u.size(); ++g) {
      dirty |= m[g];
      if (u[g + 1] == u[g] + 1) continue;
      const int64_t trip = saturating_add_ps(fetch, dirty ? store : 0);
      const int64_t gap = c.span_ps(u[g] + 1, u[g + 1]);
      if (all_gaps || static_cast<double>(gap) >= static_cast<double>(trip) * o_.preferred) {
        gaps.push_back(g);
        dirty = false;
      }
    }
    // A persisting produced tensor may also leave after its last use, stored: in phase 1
    // when the rest of the step hides the store.
    const bool spill = l.persists[t] && !external &&
                       (all_gaps || static_cast<double>(c.span_ps(u.empty() ? l.born[t] : u.back(),
                                                                  s.positions())) >=
                                        static_cast<double>(store) * o_.preferred);
    if (!external && gaps.empty() && !spill) return std::nullopt;
    // An external tensor's first fetch happens before its first use, and a modified one
    // is written back after its last: in phase 1 only when the ops before (after) hide it.
    if (external && !all_gaps && !u.empty() && !s.tensors[t].pin_kept) {
      if (static_cast<double>(c.span_ps(0, u.front())) <
          static_cast<double>(fetch) * o_.preferred) {
        return std::nullopt;
      }
      const bool modified = std::find(m.begin(), m.end(), true) != m.end();
      if (modified && static_cast<double>(c.span_ps(std::min(u.back() + 1, s.positions()),
                                                    s.positions())) <
                          static_cast<double>(store) * o_.preferred) {
        return std::nullopt;
      }
    }
    SplitOptions so{external, tier, lead};
    so.spill_at_end = spill;
    auto runs = split_runs(s, t, gaps, so);
    return make_candidate(s, t, std::move(runs), external);
  }

  SelectOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_select(PassOptions& o) {
  SelectOptions s;
  s.min_bytes = o.bytes("min-bytes", 0);
  s.preferred = o.number("preferred", 1.0);
  s.headroom = o.share("headroom", 0.0);
  s.exposed = o.flag("exposed", true);
  s.lead = o.number("lead", 1.0);
  return std::make_unique<Select>(s);
}

}  // namespace tierflow::planner
