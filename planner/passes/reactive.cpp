// reactive (baseline): what a runtime does that fetches on a miss and evicts the least
// recently used tensor when the device is full, with no look-ahead.
//
// When everything fits, nothing moves. Otherwise every external tensor starts on its
// offload tier. Before each op: its missing inputs are fetched in the slot right before
// it (the op waits); while its inputs, outputs and workspace do not fit, the resident
// tensor used longest ago (not by this op; ties by tensor id) is evicted in the same slot:
// stored first when the device copy is the only current one and it is needed later, and
// the fetches and the op wait for that store (hold 0) as a runtime reusing the memory
// would. Produced tensors are freed after their last use, as a caching allocator does.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

class Reactive : public Pass {
 public:
  [[nodiscard]] std::string_view name() const override { return "reactive"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    s.ensure_costs();
    const Liveness& l = s.ensure_liveness();
    const uint64_t budget = s.target.budget;
    if (budget == 0) return PassResult::kUnchanged;
    {
      const ProfileTree tree(memory_profile(s));
      if (tree.max() <= budget) return PassResult::kUnchanged;
    }
    const uint32_t n = s.positions();
    struct Live {
      bool resident = false;
      bool dirty = false;
      uint32_t used = 0;  ///< position of the last use so far
      size_t next = 0;    ///< index of the next use in l.uses
    };
    std::vector<Live> st(s.w.tensors.size());
    for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
      Residency& r = s.tensors[t];
      if (r.pinned) continue;
      if (l.born[t] == kNone && r.tier == kNone && !l.uses[t].empty()) {
        ctx.failure = fmt::format("tensor '{}' has no offload tier with room",
                                  s.w.tensors[t].name);
        s.infeasible = true;
        return PassResult::kFailed;
      }
      if (l.born[t] == kNone && r.tier != kNone) {
        r.home_off_device = true;
        r.runs.clear();
      }
    }
    // Pinned and produced tensors keep their runs; their bytes are tracked here too.
    std::set<std::pair<uint32_t, uint32_t>> lru;  // (last use, tensor) of evictable tensors
    uint64_t used = 0;
    auto managed = [&](uint32_t t) {
      return !s.tensors[t].pinned && (s.tensors[t].home_off_device || l.born[t] != kNone);
    };
    std::vector<uint64_t> fixed(n + 1, 0);  // bytes of runs this pass does not manage
    {
      std::vector<int64_t> diff(n + 2, 0);
      for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
        if (managed(t)) continue;
        for (const Span& sp : occupancy(s.tensors[t].runs, n)) {
          diff[sp.from] += static_cast<int64_t>(s.w.tensors[t].bytes);
          diff[sp.to + 1] -= static_cast<int64_t>(s.w.tensors[t].bytes);
        }
      }
      int64_t level = 0;
      for (uint32_t i = 0; i <= n; ++i) fixed[i] = static_cast<uint64_t>(level += diff[i]);
    }
    uint64_t fetches = 0, evictions = 0;
    for (uint32_t j = 0; j < n; ++j) {
      const Op& op = s.w.ops[s.order[j]];
      std::vector<uint32_t> mine;
      for (const auto* list : {&op.inputs, &op.updates}) mine.insert(mine.end(), list->begin(), list->end());
      uint64_t need = op.workspace;
      for (uint32_t t : op.outputs) {
        if (managed(t)) need += s.w.tensors[t].bytes;
      }
      for (uint32_t t : mine) {
        if (managed(t) && !st[t].resident) need += s.w.tensors[t].bytes;
      }
      while (used + need + fixed[j] > budget && !lru.empty()) {
        auto victim = lru.begin();
        while (victim != lru.end() &&
               std::find(mine.begin(), mine.end(), victim->second) != mine.end()) {
          ++victim;
        }
        if (victim == lru.end()) break;
        const uint32_t t = victim->second;
        lru.erase(victim);
        evict(s, st[t].dirty, t, j, l);
        st[t].resident = false;
        st[t].dirty = false;
        used -= s.w.tensors[t].bytes;
        ++evictions;
      }
      if (used + need + fixed[j] > budget) {
        ctx.failure = fmt::format(
            "does not fit: op {} '{}' needs {} bytes with {} bytes it cannot evict, budget {}",
            s.order[j], op.name, need, used + fixed[j], budget);
        s.infeasible = true;
        return PassResult::kFailed;
      }
      for (uint32_t t : mine) {
        if (!managed(t)) continue;
        if (!st[t].resident) {
          Run r;
          r.alloc = j;
          r.first = j;
          r.last = j;
          r.fetched = true;
          s.tensors[t].runs.push_back(r);
          st[t].resident = true;
          used += s.w.tensors[t].bytes;
          ++fetches;
        } else {
          lru.erase({st[t].used, t});
        }
        st[t].used = j;
        s.tensors[t].runs.back().last = j;
        ++st[t].next;
      }
      for (uint32_t t : op.updates) st[t].dirty = true;
      for (uint32_t t : op.outputs) {
        if (!managed(t)) continue;
        Run r;
        r.alloc = j;
        r.first = j;
        r.last = j;
        s.tensors[t].runs = {r};
        st[t] = Live{true, true, j, 0};
        used += s.w.tensors[t].bytes;
      }
      // Free what is dead; the rest becomes evictable.
      std::vector<uint32_t> touched = mine;
      touched.insert(touched.end(), op.outputs.begin(), op.outputs.end());
      for (uint32_t t : touched) {
        if (!managed(t) || !st[t].resident) continue;
        const bool dead = st[t].next >= l.uses[t].size();
        const bool produced = l.born[t] != kNone;
        if (dead && l.persists[t]) {
          s.tensors[t].runs.back().release = kNone;
          continue;
        }
        if (dead && (produced || !st[t].dirty)) {
          s.tensors[t].runs.back().release = j + 1;
          st[t].resident = false;
          used -= s.w.tensors[t].bytes;
          continue;
        }
        if (s.tensors[t].tier != kNone) lru.emplace(j, t);
      }
    }
    // External tensors still resident at the end are released; modified ones stored home.
    for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
      if (!managed(t) || !st[t].resident) continue;
      Run& r = s.tensors[t].runs.back();
      if (r.release != kNone) continue;
      if (l.persists[t]) continue;
      r.release = n;
      r.store = st[t].dirty && l.born[t] == kNone;
    }
    s.stat(name(), "fetches", static_cast<double>(fetches));
    s.stat(name(), "evictions", static_cast<double>(evictions));
    return PassResult::kChanged;
  }

 private:
  static void evict(PlanState& s, bool dirty, uint32_t t, uint32_t j, const Liveness& l) {
    Run& r = s.tensors[t].runs.back();
    r.release = j;
    const bool needed_later = !l.uses[t].empty() && l.uses[t].back() >= j;
    r.store = dirty && (needed_later || l.born[t] == kNone || l.persists[t]);
    r.hold = 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_reactive(PassOptions&) { return std::make_unique<Reactive>(); }

}  // namespace tierflow::planner
