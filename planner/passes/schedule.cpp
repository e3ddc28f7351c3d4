// schedule (execution-order refinement): each prefetch's anchor inside its feasible
// window, with the copy bandwidth of every link accounted over time.
//
// Prefetches are placed as late as possible, latest deadline first (a backward list
// schedule): each must land `preferred` copy times before its use, and no earlier than
// the copies already placed after it on any link of its route let it (they hold the link
// from their start). The anchor is the last compute that ends before that start. Moving an
// anchor earlier keeps the tensor longer on the device: the earliest start the memory
// budget allows bounds it. The budget's room goes to the prefetches in the same order,
// latest deadline first (`room=latest`, the default), or to the one needed soonest first
// (`room=soonest`), so that where room is short a prefetch needed later does not take it
// from one needed sooner.
//
//   link:    ....[copy a][copy b][copy c]|      a's deadline <= b's start, ...
//   compute: [..][..][..][..][use a][use b][use c]
//
// Stores stay as early as possible (right after the last use). Each is given an estimate
// of its landing with the other stores on its links (they share the bandwidth, so it lands
// once every store issued before then has drained), and its hold (the positions its bytes
// stay counted, after which the compute waits for it to land) grows to cover that estimate
// as far as the budget allows.
//
//   link out: [store a + b ][c]       c issued while a and b are in flight: all land at the end
//   compute:  [adamw][op][op][op][op]  the hold of a, b and c covers them all
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct ScheduleOptions {
  double preferred = 1.0;
  bool soonest = false;  ///< room=soonest: the budget's room goes to the soonest deadline first
};

class Schedule : public Pass {
 public:
  explicit Schedule(ScheduleOptions o) : o_(o) {}
  [[nodiscard]] std::string_view name() const override { return "schedule"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    const Costs& c = s.ensure_costs();
    s.ensure_liveness();
    struct Fetch {
      int64_t deadline;
      uint32_t tensor;
      uint32_t run;
    };
    // Latest deadline first, then the highest tensor and run: a counting sort over the
    // positions, those that start at the same time (ops of no duration) in one bucket.
    const uint32_t n = s.positions();
    std::vector<uint32_t> bucket(n + 1, 0);  // position -> first position of its start time
    for (uint32_t i = 1; i <= n; ++i) {
      bucket[i] = c.start_ps[i] == c.start_ps[i - 1] ? bucket[i - 1] : i;
    }
    std::vector<uint32_t> at(n + 2, 0);  // by n - bucket: latest first
    for (const Residency& r : s.tensors) {
      for (const Run& run : r.runs) {
        if (run.fetched) ++at[n - bucket[run.first] + 1];
      }
    }
    for (uint32_t i = 0; i <= n; ++i) at[i + 1] += at[i];
    std::vector<Fetch> fetches(at[n + 1]);
    for (uint32_t t = static_cast<uint32_t>(s.tensors.size()); t-- > 0;) {
      const auto& runs = s.tensors[t].runs;
      for (uint32_t k = static_cast<uint32_t>(runs.size()); k-- > 0;) {
        if (runs[k].fetched) {
          fetches[at[n - bucket[runs[k].first]]++] = {c.start_ps[runs[k].first], t, k};
        }
      }
    }
    ProfileTree tree(memory_profile(s));
    const uint64_t budget = s.target.budget;
    const uint64_t held = hold_stores(s, tree);
    ctx.report.stat(name(), "store holds lengthened", static_cast<double>(held));
    if (fetches.empty()) {
      if (held == 0) return PassResult::kUnchanged;
      s.emitted.runs_changed();
      return PassResult::kChanged;
    }

    // Per link direction (or the tier's read port when the route has no link): the start
    // of the earliest copy placed on it so far, once one is. Each gets a dense index.
    std::map<uint64_t, uint32_t> index;
    std::vector<int64_t> frontier;
    std::vector<bool> placed_on;
    // Per tier, the indices of its route's links (and read port) into the device.
    std::vector<std::vector<uint32_t>> keys(s.topo.tiers.size());
    auto key_index = [&](uint64_t k) {
      const auto [it, fresh] = index.try_emplace(k, static_cast<uint32_t>(frontier.size()));
      if (fresh) {
        frontier.push_back(0);
        placed_on.push_back(false);
      }
      return it->second;
    };
    for (const Fetch& f : fetches) {
      const uint32_t tier = s.tensors[f.tensor].tier;
      if (!keys[tier].empty()) continue;
      for (const hw::Hop& h : c.routes[tier].in->hops) {
        keys[tier].push_back(key_index(uint64_t{h.link} * 2 + (h.forward ? 1 : 0)));
      }
      keys[tier].push_back(key_index((uint64_t{1} << 40) + tier));
    }
    // The slot each prefetch wants from the link, latest deadline first.
    std::vector<uint32_t> wanted(fetches.size());
    for (size_t i = 0; i < fetches.size(); ++i) {
      const Fetch& f = fetches[i];
      const Residency& r = s.tensors[f.tensor];
      const Run& run = r.runs[f.run];
      const auto dur = static_cast<int64_t>(
          static_cast<double>(c.fetch_ps(r.tier, s.w.tensors[f.tensor].bytes)) * o_.preferred);
      int64_t end = f.deadline;
      const std::vector<uint32_t>& route = keys[r.tier];
      for (const uint32_t k : route) {
        if (placed_on[k]) end = std::min(end, frontier[k]);
      }
      const int64_t start = end - dur;
      const uint32_t floor = f.run == 0 ? 0 : r.runs[f.run - 1].release;
      // The latest slot whose start is at or before `start`.
      auto it =
          std::upper_bound(c.start_ps.begin() + floor, c.start_ps.begin() + run.first + 1, start);
      const uint32_t want = it == c.start_ps.begin() + floor
                                ? floor
                                : static_cast<uint32_t>(it - c.start_ps.begin()) - 1;
      wanted[i] = std::clamp(want, floor, run.first);
      // It holds the link from `start` (issued at its slot's start or earlier, it is done by
      // the deadline if the link serves the copies in deadline order). One that cannot start
      // that early (its previous run is still on the device) holds it from its first possible
      // slot and shares it with the ones placed after it, rather than pushing every earlier
      // one before a start it never has.
      const int64_t placed = std::max(start, c.start_ps[wanted[i]]);
      for (const uint32_t k : route) {
        frontier[k] = placed_on[k] ? std::min(frontier[k], placed) : placed;
        placed_on[k] = true;
      }
    }
    // Then the memory: each prefetch moves to its slot, an earlier one only as far as the
    // budget allows.
    uint64_t moved = 0, earlier = 0, capped = 0;
    auto place = [&](size_t i) {
      Run& run = s.tensors[fetches[i].tensor].runs[fetches[i].run];
      const uint64_t bytes = s.w.tensors[fetches[i].tensor].bytes;
      const uint32_t was = run.alloc;
      uint32_t want = wanted[i];
      if (want < was) {
        // The earliest slot in [want, was] the budget allows.
        const uint32_t lo = tree.earliest_room(want, was, bytes, budget);
        if (lo > want) ++capped;
        want = lo;
      }
      if (want == was) return;
      ++moved;
      if (want < was) {
        ++earlier;
        tree.add(want, was - 1, static_cast<int64_t>(bytes));
      } else {
        tree.add(was, want - 1, -static_cast<int64_t>(bytes));
      }
      run.alloc = want;
    };
    if (!o_.soonest) {
      for (size_t i = 0; i < fetches.size(); ++i) place(i);
    } else {
      // Moves later first (they only free room), then the prefetch needed soonest first, so
      // that one needed later never takes the room of one needed sooner.
      for (size_t i = 0; i < fetches.size(); ++i) {
        const Run& run = s.tensors[fetches[i].tensor].runs[fetches[i].run];
        if (wanted[i] > run.alloc) place(i);
      }
      for (size_t i = fetches.size(); i-- > 0;) place(i);
    }
    ctx.report.stat(name(), "prefetches", static_cast<double>(fetches.size()));
    ctx.report.stat(name(), "anchors moved", static_cast<double>(moved));
    ctx.report.stat(name(), "anchors moved earlier", static_cast<double>(earlier));
    ctx.report.stat(name(), "anchors held back by the budget", static_cast<double>(capped));
    if (moved == 0 && held == 0) return PassResult::kUnchanged;
    s.emitted.runs_changed();
    return PassResult::kChanged;
  }

 private:
  /// Lengthens each store's hold to its estimated landing, within the budget and before
  /// the tensor's next prefetch. Returns the holds lengthened.
  ///
  /// Stores share each link direction and tier write port of their route (copy engines
  /// split its bandwidth, so a store issued while an earlier one is in flight slows it
  /// down). A store therefore lands no later than the time the resource has drained every
  /// store issued before that time: starting from the stores of its own slot, the stores
  /// of the following slots are added while they are issued before the drain time so far.
  static uint64_t hold_stores(PlanState& s, ProfileTree& tree) {
    const Costs& c = *s.costs;
    const uint32_t n = s.positions();
    struct Store {
      uint32_t release;
      uint32_t tensor;
      uint32_t run;
      std::vector<std::pair<uint64_t, size_t>> at;  ///< (resource, index of its slot group)
    };
    std::vector<Store> stores;
    for (uint32_t t = 0; t < s.tensors.size(); ++t) {
      const auto& runs = s.tensors[t].runs;
      for (uint32_t k = 0; k < runs.size(); ++k) {
        if (runs[k].store && runs[k].release < n) stores.push_back({runs[k].release, t, k, {}});
      }
    }
    if (stores.empty()) return 0;
    std::sort(stores.begin(), stores.end(), [](const Store& a, const Store& b) {
      return a.release != b.release ? a.release < b.release : a.tensor < b.tensor;
    });
    // Per resource, one group per release slot: (issue, copy time of its stores).
    struct Group {
      int64_t issue = 0;
      int64_t copy = 0;
      int64_t drained = 0;  ///< when the groups so far have all landed
      int64_t land = 0;     ///< when this group has landed, later groups sharing included
    };
    std::map<uint64_t, std::vector<Group>> groups;
    for (Store& st : stores) {
      const uint32_t tier = s.tensors[st.tensor].tier;
      const int64_t copy = c.store_ps(tier, s.w.tensors[st.tensor].bytes);
      std::vector<uint64_t> keys;
      for (const hw::Hop& h : c.routes[tier].out->hops) {
        keys.push_back(uint64_t{h.link} * 2 + (h.forward ? 1 : 0));
      }
      keys.push_back((uint64_t{1} << 40) + tier);
      for (uint64_t k : keys) {
        auto& list = groups[k];
        const int64_t issue = c.start_ps[st.release];
        if (list.empty() || list.back().issue != issue) list.push_back({issue, 0, 0, 0});
        list.back().copy += copy;
        st.at.emplace_back(k, list.size() - 1);
      }
    }
    for (auto& [key, list] : groups) {
      int64_t drained = 0;
      for (Group& g : list) g.drained = drained = std::max(drained, g.issue) + g.copy;
      size_t k = 0;
      for (size_t e = 0; e < list.size(); ++e) {
        k = std::max(k, e);
        while (k + 1 < list.size() && list[k + 1].issue < list[k].drained) ++k;
        list[e].land = list[k].drained;
      }
    }
    const uint64_t budget = s.target.budget;
    uint64_t lengthened = 0;
    for (const Store& st : stores) {
      auto& runs = s.tensors[st.tensor].runs;
      Run& run = runs[st.run];
      const uint64_t bytes = s.w.tensors[st.tensor].bytes;
      int64_t land = 0;
      for (const auto& [k, e] : st.at) land = std::max(land, groups[k][e].land);
      // The first slot whose estimated start is at or after the landing.
      const auto it = std::lower_bound(c.start_ps.begin() + st.release, c.start_ps.end(), land);
      uint32_t want = static_cast<uint32_t>(
          std::min<ptrdiff_t>(it - c.start_ps.begin(), static_cast<ptrdiff_t>(n)) - st.release);
      // The next prefetch of the tensor waits for the store: it may not start earlier.
      if (st.run + 1 < runs.size()) want = std::min(want, runs[st.run + 1].alloc - st.release);
      if (want <= run.hold) continue;
      // Positions release+hold .. release+want-1 newly hold the bytes: up to the first one
      // without room for them.
      const uint32_t from = st.release + run.hold;
      uint32_t to = st.release + want - 1;
      if (tree.max(from, to) + bytes > budget) {
        uint32_t x = from;
        while (x <= to && tree.max(x, x) + bytes <= budget) ++x;
        if (x == from) continue;
        to = x - 1;
      }
      tree.add(from, to, static_cast<int64_t>(bytes));
      run.hold = to + 1 - st.release;
      ++lengthened;
    }
    return lengthened;
  }

  ScheduleOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_schedule(PassOptions& o) {
  ScheduleOptions s;
  s.preferred = o.number("preferred", 1.0);
  s.soonest = o.choice("room", {"latest", "soonest"}) == "soonest";
  return std::make_unique<Schedule>(s);
}

}  // namespace tierflow::planner
