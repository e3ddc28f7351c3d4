#include "hw_models/fabric.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/diagnostics.h"
#include "hw_models/routes.h"

namespace tierflow::hw {

std::string instance_name(const std::string& id, int count, int instance) {
  return count == 1 ? id : fmt::format("{}[{}]", id, instance);
}

Fabric::Fabric(const Topology& t) : t_(t) {
  for (size_t c = 0; c < t.devices.size(); ++c) {
    for (int i = 0; i < t.devices[c].count; ++i) {
      dev_class_.push_back(c);
      dev_index_.push_back(i);
    }
  }
  uint32_t slots = 0;
  for (const Tier& tier : t.tiers) {
    tier_base_.push_back(slots);
    slots += static_cast<uint32_t>(t.instances(tier.per));
  }
  tier_base_.push_back(slots);

  for (size_t ti = 0; ti < t.tiers.size(); ++ti) {
    const Tier& tier = t.tiers[ti];
    const int n = t.instances(tier.per);
    port_base_.push_back(static_cast<uint32_t>(info_.size()));
    for (int i = 0; i < n; ++i) {
      const std::string base = instance_name(tier.id, n, i);
      for (bool write : {false, true}) {
        const double bw =
            write ? tier.write_bandwidth.bytes_per_s : tier.read_bandwidth.bytes_per_s;
        info_.push_back(ResourceInfo{write ? ResourceKind::kTierWrite : ResourceKind::kTierRead, ti,
                                     i, true, base + (write ? " write" : " read"), bw});
      }
    }
  }
  for (size_t li = 0; li < t.links.size(); ++li) {
    const Link& l = t.links[li];
    const int n = t.instances(l.per);
    link_base_.push_back(static_cast<uint32_t>(info_.size()));
    engine_base_.push_back(static_cast<uint32_t>(engines_.size()));
    for (int i = 0; i < n; ++i) {
      const std::string base = instance_name(l.id, n, i);
      const uint32_t fwd = static_cast<uint32_t>(info_.size());
      const auto direction = [&](bool forward) {
        return fmt::format("{} {}->{}", base, l.endpoints[forward ? 0 : 1],
                           l.endpoints[forward ? 1 : 0]);
      };
      if (l.duplex == Duplex::kHalf) {
        // Both directions share one capacity: one resource.
        info_.push_back(
            ResourceInfo{ResourceKind::kLink, li, i, true,
                         fmt::format("{} {}<->{}", base, l.endpoints[0], l.endpoints[1]),
                         l.effective(true).bytes_per_s});
      } else {
        for (bool forward : {true, false}) {
          info_.push_back(ResourceInfo{ResourceKind::kLink, li, i, forward, direction(forward),
                                       l.effective(forward).bytes_per_s});
        }
        if (link_stride(l) == 3) {
          info_.push_back(ResourceInfo{
              ResourceKind::kLink, li, i, true,
              fmt::format("{} {}<->{}", base, l.endpoints[0], l.endpoints[1]),
              l.duplex_efficiency *
                  (l.effective(true).bytes_per_s + l.effective(false).bytes_per_s)});
        }
      }
      for (bool forward : {true, false}) {
        const uint32_t res = l.duplex == Duplex::kHalf ? fwd : fwd + (forward ? 0U : 1U);
        engines_.push_back(EngineGroup{l.copy_engines, li, i, forward, res, direction(forward)});
      }
    }
  }
  // A staged route's buffers: one resource per route and device (each device has its own
  // buffers), capped at the route's chained rate, which every transfer over it shares.
  staged_base_.assign(t.routes.size(), kNoStaging);
  for (size_t ri = 0; ri < t.routes.size(); ++ri) {
    const auto& r = t.routes[ri];
    if (!r || r->buffers == 0) continue;
    staged_base_[ri] = static_cast<uint32_t>(info_.size());
    for (int d = 0; d < devices(); ++d) {
      const size_t stage = r->staging_tiers.front();
      const int inst = tier_instance(stage, d);
      info_.push_back(ResourceInfo{
          ResourceKind::kTierWrite, stage, inst, true,
          fmt::format("{} staging {}->{} of device {} ({} x {})",
                      instance_name(t.tiers[stage].id, t.instances(t.tiers[stage].per), inst),
                      t.tiers[r->from].id, t.tiers[r->to].id, d, r->buffers,
                      to_string(r->buffer)),
          r->bandwidth.bytes_per_s});
    }
  }
  path_index_.assign(dev_class_.size() * t.tiers.size() * t.tiers.size(), -1);
}

int Fabric::tier_instance(size_t tier, int device) const {
  return t_.instance_of(t_.tiers[tier].per, dev_class_[size_t(device)], dev_index_[size_t(device)]);
}

std::pair<size_t, int> Fabric::slot_tier(uint32_t slot) const {
  const auto it = std::upper_bound(tier_base_.begin(), tier_base_.end(), slot);
  const size_t tier = static_cast<size_t>(it - tier_base_.begin()) - 1;
  return {tier, static_cast<int>(slot - tier_base_[tier])};
}

std::string Fabric::slot_name(uint32_t slot) const {
  const auto [tier, instance] = slot_tier(slot);
  return instance_name(t_.tiers[tier].id, t_.instances(t_.tiers[tier].per), instance);
}

const FabricPath* Fabric::path(size_t from, size_t to, int device) const {
  const size_t nt = t_.tiers.size();
  int32_t& slot = path_index_[(size_t(device) * nt + from) * nt + to];
  if (slot == -2) return nullptr;
  if (slot >= 0) return &paths_[size_t(slot)];
  const Route* r = t_.route(from, to);
  if (r == nullptr) {
    slot = -2;
    return nullptr;
  }
  const size_t cls = dev_class_[size_t(device)];
  const int idx = dev_index_[size_t(device)];
  FabricPath p;
  p.route = r;
  p.resources.push_back(port(from, tier_instance(from, device), /*write=*/false));
  for (const Hop& h : r->hops) add_hop(p, h, t_.instance_of(t_.links[h.link].per, cls, idx));
  for (size_t s : r->staging_tiers) {
    p.resources.push_back(port(s, tier_instance(s, device), /*write=*/true));
    p.resources.push_back(port(s, tier_instance(s, device), /*write=*/false));
  }
  if (r->buffers > 0) {
    p.resources.push_back(staged_base_[from * t_.tiers.size() + to] +
                          static_cast<uint32_t>(device));
  }
  p.resources.push_back(port(to, tier_instance(to, device), /*write=*/true));
  paths_.push_back(std::move(p));
  slot = static_cast<int32_t>(paths_.size() - 1);
  return &paths_.back();
}

void Fabric::add_hop(FabricPath& p, const Hop& h, int inst) const {
  const Link& l = t_.links[h.link];
  const bool half = l.duplex == Duplex::kHalf;
  const uint32_t stride = link_stride(l);
  const uint32_t first = link_base_[h.link] + static_cast<uint32_t>(inst) * stride;
  const uint32_t res = first + (half || h.forward ? 0U : 1U);
  p.resources.push_back(res);
  p.links.push_back(res);
  if (stride == 3) p.resources.push_back(first + 2);  // both directions together
  p.engines.push_back(engine_base_[h.link] + static_cast<uint32_t>(inst) * 2 +
                      (h.forward ? 0U : 1U));
}

const FabricPath* Fabric::peer_path(size_t tier, int src, int dst, bool wider) const {
  // The peer route, else (`wider`) the first wider one that joins the two devices.
  if (wider) {
    if (const FabricPath* p = peer_path(tier, src, dst, false)) return p;
  }
  const auto key = std::tuple{tier, src, dst, wider};
  if (const auto it = peer_index_.find(key); it != peer_index_.end()) {
    return it->second < 0 ? nullptr : &paths_[size_t(it->second)];
  }
  peer_index_[key] = -2;
  const Route* r = t_.route(tier, tier);
  if (r == nullptr || src == dst || r->steps.empty()) return nullptr;
  const Route* joined = nullptr;
  if (!wider) {
    if (joins(*r, src, dst)) joined = r;
  } else {
    for (const Route& w : t_.wider_peer_routes(tier)) {
      if (joins(w, src, dst)) {
        joined = &w;
        break;
      }
    }
  }
  if (joined == nullptr) return nullptr;
  const size_t turn = peer_turn(t_, *joined);
  const auto instance = [&](Scope scope, int device) {
    return t_.instance_of(scope, dev_class_[size_t(device)], dev_index_[size_t(device)]);
  };
  FabricPath p;
  p.route = joined;
  p.resources.push_back(port(tier, tier_instance(tier, src), /*write=*/false));
  for (size_t i = 0; i < joined->steps.size(); ++i) {
    const Step& s = joined->steps[i];
    const int side = i <= turn ? src : dst;
    if (s.link >= 0)
      add_hop(p, Hop{size_t(s.link), s.forward}, instance(t_.links[size_t(s.link)].per, side));
    if (!s.to.is_switch && i + 1 < joined->steps.size()) {
      p.resources.push_back(port(s.to.index, tier_instance(s.to.index, side), /*write=*/true));
      p.resources.push_back(port(s.to.index, tier_instance(s.to.index, side), /*write=*/false));
    }
  }
  if (joined == r && r->buffers > 0) {
    p.resources.push_back(staged_base_[tier * t_.tiers.size() + tier] + static_cast<uint32_t>(src));
  }
  p.resources.push_back(port(tier, tier_instance(tier, dst), /*write=*/true));
  paths_.push_back(std::move(p));
  const auto slot = static_cast<int32_t>(paths_.size() - 1);
  peer_index_[key] = slot;
  return &paths_.back();
}

bool Fabric::joins(const Route& r, int src, int dst) const {
  // Both devices must reach the same instance of what it turns at (a switch, or a direct
  // link the devices share; each device's own link to every peer joins those of its host).
  const std::optional<Scope> scope = peer_turn_scope(t_, r);
  if (!scope) return true;
  return t_.instance_of(*scope, dev_class_[size_t(src)], dev_index_[size_t(src)]) ==
         t_.instance_of(*scope, dev_class_[size_t(dst)], dev_index_[size_t(dst)]);
}

}  // namespace tierflow::hw
