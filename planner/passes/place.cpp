// place: the offload tier of every tensor and the user's pins; starts from the resident
// runs (every tensor on the device for its whole life).
//
// Offload tiers are those with a route to and from the device tier and room for this
// program (capacity over the programs sharing an instance). Tensors are taken largest
// first. Single-tier mode fills the fastest tier (bandwidth into the device tier) and
// spills to the next when full; multi-tier mode puts each tensor where the bytes already
// assigned would take the least time to fetch, so that tiers on separate links share the
// traffic in proportion to their bandwidth.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct PlaceOptions {
  std::string tier;  ///< force this offload tier (id); empty = choose
  bool multi = false;
};

class Place : public Pass {
 public:
  explicit Place(PlaceOptions o) : o_(std::move(o)) {}
  [[nodiscard]] std::string_view name() const override { return "place"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    s.ensure_costs();
    reset_resident(s);
    std::vector<uint32_t> tiers;
    for (uint32_t i = 0; i < s.tier_room.size(); ++i) {
      if (s.tier_room[i] > 0) tiers.push_back(i);
    }
    if (!o_.tier.empty()) {
      const auto forced = s.topo.tier_index(o_.tier);
      if (!forced || s.tier_room[*forced] == 0) {
        ctx.failure = fmt::format("'{}' is not an offload tier of this topology (one with routes "
                                  "to and from the device tier)",
                                  o_.tier);
        return PassResult::kFailed;
      }
      tiers = {static_cast<uint32_t>(*forced)};
    }
    const Costs& c = *s.costs;
    auto bandwidth = [&](uint32_t tier) { return c.routes[tier].in->bandwidth.bytes_per_s; };
    std::stable_sort(tiers.begin(), tiers.end(),
                     [&](uint32_t a, uint32_t b) { return bandwidth(a) > bandwidth(b); });

    std::vector<uint32_t> by_size(s.w.tensors.size());
    std::iota(by_size.begin(), by_size.end(), 0U);
    std::stable_sort(by_size.begin(), by_size.end(), [&](uint32_t a, uint32_t b) {
      return s.w.tensors[a].bytes > s.w.tensors[b].bytes;
    });
    std::vector<uint64_t> used(s.topo.tiers.size(), 0);
    for (uint32_t t : by_size) {
      const uint64_t bytes = s.w.tensors[t].bytes;
      uint32_t best = kNone;
      double best_time = 0;
      for (uint32_t tier : tiers) {
        if (used[tier] + bytes > s.tier_room[tier]) continue;
        if (!o_.multi) {
          best = tier;
          break;
        }
        const double time = static_cast<double>(used[tier] + bytes) / bandwidth(tier);
        if (best == kNone || time < best_time) {
          best = tier;
          best_time = time;
        }
      }
      if (best == kNone) continue;  // no room anywhere: it stays on the device
      used[best] += bytes;
      s.tensors[t].tier = best;
    }
    for (uint32_t tier : tiers) {
      if (used[tier] > 0) {
        s.stat(name(), fmt::format("bytes assigned to {}", s.topo.tiers[tier].id),
               static_cast<double>(used[tier]));
      }
    }
    apply_pins(s);
    return PassResult::kChanged;
  }

 private:
  static void apply_pins(PlanState& s) {
    for (const auto& [kind, tier] : s.pins) {
      for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
        if (s.w.tensors[t].kind != kind) continue;
        Residency& r = s.tensors[t];
        r.pinned = true;
        if (tier == s.target.device_tier) continue;
        r.tier = tier;
        // Homed off the device: externals are fetched for each use that is far enough
        // from the previous one; produced tensors leave at every gap that hides a copy.
        const auto& uses = s.liveness->uses[t];
        const bool external = s.liveness->born[t] == kNone;
        std::vector<uint32_t> gaps;
        for (uint32_t g = 0; g + 1 < uses.size(); ++g) {
          if (uses[g + 1] > uses[g] + 1) gaps.push_back(g);
        }
        if (!external && gaps.empty()) continue;
        r.home_off_device = external;
        r.runs = split_runs(s, t, gaps, SplitOptions{external, tier});
        s.stat("place", "pinned tensors offloaded", 1);
      }
    }
  }

  PlaceOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_place(PassOptions& o) {
  PlaceOptions p;
  p.tier = o.text("tier", "");
  p.multi = o.flag("multi", false);
  return std::make_unique<Place>(p);
}

}  // namespace tierflow::planner
