// schedule (execution-order refinement): each prefetch's anchor inside its feasible
// window, with the copy bandwidth of every link accounted over time.
//
// Prefetches are placed as late as possible, latest deadline first (a backward list
// schedule): each must land `preferred` copy times before its use, and no earlier than
// the copies already placed after it on any link of its route let it (they hold the link
// from their start). The anchor is the last compute that ends before that start. Moving an
// anchor earlier keeps the tensor longer on the device: the earliest start the memory
// budget allows bounds it. Stores stay as early as possible (right after the last use).
//
//   link:    ....[copy a][copy b][copy c]|      a's deadline <= b's start, ...
//   compute: [..][..][..][..][use a][use b][use c]
#include <fmt/format.h>

#include <algorithm>

#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct ScheduleOptions {
  double preferred = 1.0;
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
    std::vector<Fetch> fetches;
    for (uint32_t t = 0; t < s.tensors.size(); ++t) {
      const auto& runs = s.tensors[t].runs;
      for (uint32_t k = 0; k < runs.size(); ++k) {
        if (runs[k].fetched) fetches.push_back({c.start_ps[runs[k].first], t, k});
      }
    }
    if (fetches.empty()) return PassResult::kUnchanged;
    std::sort(fetches.begin(), fetches.end(), [](const Fetch& a, const Fetch& b) {
      if (a.deadline != b.deadline) return a.deadline > b.deadline;
      return a.tensor > b.tensor;
    });

    ProfileTree tree(memory_profile(s));
    const uint64_t budget = s.target.budget;
    // Per link direction (or the tier's read port when the route has no link): the start
    // of the earliest copy placed on it so far (few of them: a flat list).
    std::vector<std::pair<uint64_t, int64_t>> frontier;
    auto find = [&](uint64_t key) {
      return std::find_if(frontier.begin(), frontier.end(),
                          [&](const auto& f) { return f.first == key; });
    };
    // Per tier, the keys of its route into the device.
    std::vector<std::vector<uint64_t>> keys(s.topo.tiers.size());
    for (const Fetch& f : fetches) {
      const uint32_t tier = s.tensors[f.tensor].tier;
      if (!keys[tier].empty()) continue;
      for (const hw::Hop& h : c.routes[tier].in->hops) {
        keys[tier].push_back(uint64_t{h.link} * 2 + (h.forward ? 1 : 0));
      }
      keys[tier].push_back((uint64_t{1} << 40) + tier);
    }
    uint64_t moved = 0, earlier = 0, capped = 0;
    for (const Fetch& f : fetches) {
      Residency& r = s.tensors[f.tensor];
      Run& run = r.runs[f.run];
      const uint64_t bytes = s.w.tensors[f.tensor].bytes;
      const auto dur = static_cast<int64_t>(
          static_cast<double>(c.fetch_ps(r.tier, bytes)) * o_.preferred);
      int64_t end = f.deadline;
      const std::vector<uint64_t>& route = keys[r.tier];
      for (uint64_t k : route) {
        const auto slot = find(k);
        if (slot != frontier.end()) end = std::min(end, slot->second);
      }
      const int64_t start = end - dur;
      const uint32_t floor = f.run == 0 ? 0 : r.runs[f.run - 1].release;
      // The latest slot whose start is at or before `start`.
      auto it = std::upper_bound(c.start_ps.begin() + floor, c.start_ps.begin() + run.first + 1,
                                 start);
      uint32_t want = it == c.start_ps.begin() + floor
                          ? floor
                          : static_cast<uint32_t>(it - c.start_ps.begin()) - 1;
      want = std::clamp(want, floor, run.first);
      const uint32_t was = run.alloc;
      if (want < was && budget > 0) {
        // The earliest slot in [want, was] the budget allows: just after the last position
        // in [want, was - 1] that has no room for the tensor.
        const uint32_t full =
            bytes > budget ? was - 1 : tree.last_above(want, was - 1, budget - bytes);
        const uint32_t lo = full == kNone ? want : full + 1;
        if (lo > want) ++capped;
        want = lo;
      }
      if (want != was) {
        ++moved;
        if (want < was) {
          ++earlier;
          tree.add(want, was - 1, static_cast<int64_t>(bytes));
        } else {
          tree.add(was, want - 1, -static_cast<int64_t>(bytes));
        }
        run.alloc = want;
      }
      const int64_t placed = std::min(start, c.start_ps[run.alloc]);
      for (uint64_t k : route) {
        const auto slot = find(k);
        if (slot == frontier.end()) {
          frontier.emplace_back(k, placed);
        } else {
          slot->second = std::min(slot->second, placed);
        }
      }
    }
    s.stat(name(), "prefetches", static_cast<double>(fetches.size()));
    s.stat(name(), "anchors moved", static_cast<double>(moved));
    s.stat(name(), "anchors moved earlier", static_cast<double>(earlier));
    s.stat(name(), "anchors held back by the budget", static_cast<double>(capped));
    if (moved == 0) return PassResult::kUnchanged;
    runs_changed(ctx);
    return PassResult::kChanged;
  }

 private:
  ScheduleOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_schedule(PassOptions& o) {
  ScheduleOptions s;
  s.preferred = o.number("preferred", 1.0);
  return std::make_unique<Schedule>(s);
}

}  // namespace tierflow::planner
