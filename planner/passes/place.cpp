// place: the offload tier of every tensor and the user's pins; starts from the resident
// runs (every tensor on the device for its whole life).
//
// Offload tiers are those with a route to and from the device tier and room for this
// program (capacity over the programs sharing an instance). This is a preference: the
// passes that offload charge the tier when they do, and move a tensor to the next tier
// when its own is full. Single-tier mode prefers the fastest tier (bandwidth into the
// device tier) that can hold the tensor. Multi-tier mode spreads over channels: tiers
// whose routes into the device share a link direction form one channel (spreading over
// them gains no bandwidth); taking external tensors first, then produced ones, each
// largest first, each goes to the channel where the bytes already preferred there would
// take the least time to fetch, to its fastest tier.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <numeric>

#include "core/diagnostics.h"
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
    std::vector<uint32_t> tiers = s.offload_tiers;
    if (!o_.tier.empty()) {
      const auto forced = s.topo.tier_index(o_.tier);
      if (!forced || s.tier_room[*forced] == 0) {
        // The user's option names a tier the topology lacks: bad input, not a failed pass.
        std::vector<std::string> ids;
        for (uint32_t t : s.offload_tiers) ids.push_back(s.topo.tiers[t].id);
        throw InputError::at(SourcePos{"--pipeline"},
                             "option 'tier' of pass 'place': '{}' is not an offload tier of '{}' "
                             "(one with routes to and from the device tier; offload tiers: {}){}",
                             o_.tier, s.topo.name, ids.empty() ? "none" : fmt::format("{}", fmt::join(ids, ", ")),
                             did_you_mean(o_.tier, ids));
      }
      tiers = {static_cast<uint32_t>(*forced)};
    }
    const Costs& c = *s.costs;
    const Liveness& l = *s.liveness;
    auto bandwidth = [&](uint32_t tier) { return c.routes[tier].in->bandwidth.bytes_per_s; };
    std::stable_sort(tiers.begin(), tiers.end(),
                     [&](uint32_t a, uint32_t b) { return bandwidth(a) > bandwidth(b); });

    // Channels: tiers whose routes into the device share a link direction (or a port)
    // share bandwidth, so spreading over them gains nothing; spreading is across channels.
    std::vector<uint32_t> channel(s.topo.tiers.size(), kNone);
    std::vector<std::vector<uint64_t>> hops(s.topo.tiers.size());
    for (uint32_t tier : tiers) {
      for (const hw::Hop& h : c.routes[tier].in->hops) {
        hops[tier].push_back(uint64_t{h.link} * 2 + (h.forward ? 1 : 0));
      }
      std::sort(hops[tier].begin(), hops[tier].end());
    }
    uint32_t channels = 0;
    for (uint32_t tier : tiers) {
      for (uint32_t other : tiers) {
        if (channel[other] == kNone || other == tier) continue;
        std::vector<uint64_t> shared;
        std::set_intersection(hops[tier].begin(), hops[tier].end(), hops[other].begin(),
                              hops[other].end(), std::back_inserter(shared));
        if (!shared.empty()) channel[tier] = channel[other];
      }
      if (channel[tier] == kNone) channel[tier] = channels++;
    }
    std::vector<double> channel_bw(channels, 0);
    for (uint32_t tier : tiers) {
      channel_bw[channel[tier]] = std::max(channel_bw[channel[tier]], bandwidth(tier));
    }

    // External tensors first (their home copies must live somewhere), then produced ones;
    // each largest first.
    std::vector<uint32_t> order(s.w.tensors.size());
    std::iota(order.begin(), order.end(), 0U);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const bool ea = l.born[a] == kNone, eb = l.born[b] == kNone;
      if (ea != eb) return ea;
      return s.w.tensors[a].bytes > s.w.tensors[b].bytes;
    });
    std::vector<uint64_t> used(s.topo.tiers.size(), 0);
    std::vector<uint64_t> channel_used(channels, 0);
    for (uint32_t t : order) {
      const uint64_t bytes = s.w.tensors[t].bytes;
      uint32_t best = kNone;
      double best_time = 0;
      for (uint32_t tier : tiers) {  // fastest first
        if (bytes > s.tier_room[tier]) continue;
        if (!o_.multi) {
          best = tier;
          break;
        }
        const uint32_t ch = channel[tier];
        const double time = static_cast<double>(channel_used[ch] + bytes) / channel_bw[ch];
        if (best == kNone || time < best_time) {
          best = tier;
          best_time = time;
        }
      }
      if (best == kNone) continue;  // no room anywhere: it stays on the device
      used[best] += bytes;
      channel_used[channel[best]] += bytes;
      s.tensors[t].tier = best;
    }
    for (uint32_t tier : tiers) {
      if (used[tier] > 0) {
        ctx.report.stat(name(), fmt::format("bytes preferring {}", s.topo.tiers[tier].id),
                        static_cast<double>(used[tier]));
      }
    }
    apply_pins(s, ctx.report);
    return PassResult::kChanged;
  }

 private:
  static void apply_pins(PlanState& s, PassReport& report) {
    if (s.pin_tier.size() != s.w.tensors.size()) s.pin_tier = pinned_tiers(s.w, s.pins);
    for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
      const uint32_t tier = s.pin_tier[t];
      if (tier == kNone) continue;
      Residency& r = s.tensors[t];
      r.pinned = true;
      if (tier == s.target.device_tier) continue;
      r.tier = tier;
      // Homed off the device: externals are fetched for each use that is far enough
      // from the previous one; produced tensors leave at every gap that hides a copy, and
      // one that persists (a KV block, an output) is stored to its home after its last
      // use rather than kept on the device to the end.
      // Each prefetch starts with no lead (allocated at its first use): how far ahead it
      // may start depends on the budget the other tensors leave, which the policy's own
      // passes decide (schedule, layerwise, distance). A lead of a copy time here would,
      // on a slow tier, keep many tensors on the device at once before any pass runs.
      const auto& uses = s.liveness->uses[t];
      const bool external = s.liveness->born[t] == kNone;
      std::vector<uint32_t> gaps;
      for (uint32_t g = 0; g + 1 < uses.size(); ++g) {
        if (uses[g + 1] > uses[g] + 1) gaps.push_back(g);
      }
      const bool spill = !external && s.liveness->persists[t];
      if (!external && gaps.empty() && !spill) continue;
      r.home_off_device = external;
      r.runs = split_runs(s, t, gaps,
                          SplitOptions{.home_off_device = external, .tier = tier, .lead_ops = 0,
                                       .spill_at_end = spill});
      s.tier_used[tier] += s.w.tensors[t].bytes;
      report.stat("place", "pinned tensors offloaded", 1);
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
