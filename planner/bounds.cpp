#include "planner/bounds.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "core/checked.h"
#include "core/diagnostics.h"

namespace tierflow::planner {
namespace {

/// Sum over the windows starting at `cuts` (ascending, the first 0) of max(0, bytes used
/// and not produced in the window - budget).
uint64_t window_traffic(const PlanState& s, const std::vector<uint32_t>& cuts, uint64_t budget,
                        std::vector<uint32_t>& seen) {
  const uint32_t n = s.positions();
  std::fill(seen.begin(), seen.end(), 0);
  uint64_t total = 0;
  for (size_t k = 0; k < cuts.size(); ++k) {
    const auto stamp = static_cast<uint32_t>(k + 1);
    const uint32_t end = k + 1 < cuts.size() ? cuts[k + 1] : n;
    uint64_t used = 0;
    for (uint32_t i = cuts[k]; i < end; ++i) {
      const Op& op = s.w.ops[s.order[i]];
      for (uint32_t t : op.outputs) seen[t] = stamp;  // produced here: no fetch needed
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) {
          if (seen[t] == stamp) continue;
          seen[t] = stamp;
          used += s.w.tensors[t].bytes;
        }
      }
    }
    if (used > budget) total += used - budget;
  }
  return total;
}

/// Every `group`-th of `cuts`.
std::vector<uint32_t> coarser(const std::vector<uint32_t>& cuts, size_t group) {
  std::vector<uint32_t> out;
  for (size_t k = 0; k < cuts.size(); k += group) out.push_back(cuts[k]);
  return out;
}

/// Per tensor: whether the user's pins home it on a tier other than the device tier. Such a
/// tensor starts off the device in every plan that honours the pins.
std::vector<bool> pinned_off_device(const PlanState& s) {
  const std::vector<uint32_t> tier =
      s.pin_tier.size() == s.w.tensors.size() ? s.pin_tier : pinned_tiers(s.w, s.pins);
  std::vector<bool> off(s.w.tensors.size(), false);
  for (uint32_t t = 0; t < off.size(); ++t) {
    off[t] = tier[t] != kNone && tier[t] != s.target.device_tier;
  }
  return off;
}

/// Bytes fetched by Belady's MIN paging of the external tensors, relaxed so that it is a
/// lower bound for any plan: every byte is a page (tensors partly evictable), a cache of
/// the whole budget (other tensors take no room), and the best warm start
/// (the bytes used soonest already on the device) among the tensors that may start there:
/// those pinned off the device start on their home tier, so each is fetched at least once.
/// An op's tensors are all on the device while it runs. Evicting the bytes used furthest
/// in the future is optimal for same-size pages from any start, and the soonest-used bytes
/// are the best start among those allowed, so no plan, which moves whole tensors, fetches
/// fewer bytes.
uint64_t paging_traffic(const PlanState& s, uint64_t budget, const std::vector<bool>& cold) {
  const Liveness& l = *s.liveness;
  const size_t nt = s.w.tensors.size();
  auto paged = [&](uint32_t t) { return l.born[t] == kNone && !l.uses[t].empty(); };
  uint64_t total = 0, cold_total = 0;
  for (uint32_t t = 0; t < nt; ++t) {
    if (!paged(t)) continue;
    total += s.w.tensors[t].bytes;
    if (cold[t]) cold_total += s.w.tensors[t].bytes;
  }
  // All fit: nothing is evicted, so only the cold tensors are fetched, once each.
  if (total <= budget) return cold_total;
  std::vector<uint64_t> resident(nt, 0);
  std::vector<size_t> next(nt, 0);  // index into uses of the next use
  auto next_use = [&](uint32_t t) -> uint32_t {
    return next[t] < l.uses[t].size() ? l.uses[t][next[t]] : kNone;
  };
  // Resident tensors (but those of the op running) by next use, furthest first.
  std::set<std::pair<uint32_t, uint32_t>, std::greater<>> cache;
  uint64_t used = 0;
  // Warm start: the tensors used soonest, in order of first use, but the cold ones.
  std::vector<uint32_t> first;
  for (uint32_t t = 0; t < nt; ++t) {
    if (paged(t) && !cold[t]) first.push_back(t);
  }
  std::stable_sort(first.begin(), first.end(),
                   [&](uint32_t a, uint32_t b) { return l.uses[a].front() < l.uses[b].front(); });
  for (uint32_t t : first) {
    const uint64_t take = std::min(s.w.tensors[t].bytes, budget - used);
    if (take == 0) break;
    resident[t] = take;
    used += take;
    cache.emplace(next_use(t), t);
  }
  uint64_t faults = 0;
  std::vector<uint32_t> mine;
  for (uint32_t i = 0; i < s.positions(); ++i) {
    const Op& op = s.w.ops[s.order[i]];
    mine.clear();
    for (const auto* list : {&op.inputs, &op.updates}) {
      for (uint32_t t : *list) {
        if (paged(t) && std::find(mine.begin(), mine.end(), t) == mine.end()) mine.push_back(t);
      }
    }
    for (uint32_t t : mine) {
      if (resident[t] > 0) cache.erase({next_use(t), t});
      const uint64_t missing = s.w.tensors[t].bytes - resident[t];
      faults += missing;
      used += missing;
      resident[t] = s.w.tensors[t].bytes;
      while (next_use(t) == i) ++next[t];
    }
    // Evict from the tensors used furthest in the future, partly if that is enough.
    while (used > budget && !cache.empty()) {
      const auto [when, victim] = *cache.begin();
      const uint64_t drop = std::min(resident[victim], used - budget);
      resident[victim] -= drop;
      used -= drop;
      if (resident[victim] == 0) cache.erase(cache.begin());
    }
    // An op that needs more than the device holds: what does not fit leaves again.
    for (uint32_t t : mine) {
      const uint64_t drop = std::min(resident[t], used > budget ? used - budget : 0);
      resident[t] -= drop;
      used -= drop;
      if (resident[t] > 0) cache.emplace(next_use(t), t);
    }
  }
  return faults;
}

}  // namespace

Bounds lower_bounds(PlanState& s) {
  const Costs& c = s.ensure_costs();
  const std::vector<bool> cold = pinned_off_device(s);
  Bounds b;
  for (uint32_t o = 0; o < s.w.ops.size(); ++o) {
    const Op& op = s.w.ops[o];
    uint64_t need = op.workspace;
    for (const auto* list : {&op.inputs, &op.updates, &op.outputs}) {
      for (uint32_t t : *list) need += s.w.tensors[t].bytes;
    }
    if (need > b.residency) {
      b.residency = need;
      b.residency_op = o;
    }
    b.compute_ps += c.op_ps[o];
  }

  // Ingress: per last hop, min(hop bandwidth, sum of route bandwidths through it).
  struct Group {
    double routes = 0;
    double hop = 0;
  };
  std::map<uint64_t, Group> groups;
  for (uint32_t tier = 0; tier < s.tier_room.size(); ++tier) {
    if (s.tier_room[tier] == 0) continue;
    const hw::Route* r = c.routes[tier].in;
    uint64_t key = (uint64_t{1} << 40) + tier;
    double hop = r->bandwidth.bytes_per_s;
    if (!r->hops.empty()) {
      const hw::Hop& h = r->hops.back();
      key = uint64_t{h.link} * 2 + (h.forward ? 1 : 0);
      hop = s.topo.links[h.link].effective(h.forward).bytes_per_s;
    }
    Group& g = groups[key];
    g.routes += r->bandwidth.bytes_per_s;
    g.hop = std::max(g.hop, hop);
  }
  for (const auto& [key, g] : groups) b.ingress += std::min(g.routes, g.hop);
  const double write = s.topo.tiers[s.target.device_tier].write_bandwidth.bytes_per_s;
  if (write > 0) b.ingress = std::min(b.ingress, write);

  // Shared resources: programs that share a tier instance or a link instance split its
  // bandwidth. Per offload tier, this program's share of the narrowest of its read port
  // and the links of its route; tiers whose routes share a link count once (the larger).
  {
    // The most programs mapped to one instance of a scope (devices are spread over hosts,
    // then sockets, as the simulator places them).
    auto crowd = [&](hw::Scope per) {
      std::map<int, uint32_t> count;
      uint32_t most = 1;
      for (uint32_t d = 0; d < s.target.devices; ++d) {
        const int inst = s.topo.instance_of(per, s.target.device_class, static_cast<int>(d));
        most = std::max(most, ++count[inst]);
      }
      return static_cast<double>(most);
    };
    auto share = [&](double bw, hw::Scope per) { return bw / crowd(per); };
    std::map<uint64_t, double> by_hop;  // first hop of the route -> largest share
    for (uint32_t tier = 0; tier < s.tier_room.size(); ++tier) {
      if (s.tier_room[tier] == 0) continue;
      const hw::Tier& x = s.topo.tiers[tier];
      const hw::Route* r = c.routes[tier].in;
      double t_share = share(x.read_bandwidth.bytes_per_s, x.per);
      for (const hw::Hop& h : r->hops) {
        const hw::Link& link = s.topo.links[h.link];
        t_share = std::min(t_share, share(link.effective(h.forward).bytes_per_s, link.per));
      }
      // A staged route's buffers (each device's own) move at most its chained rate.
      if (r->buffers > 0) t_share = std::min(t_share, r->bandwidth.bytes_per_s);
      const uint64_t key =
          r->hops.empty() ? (uint64_t{1} << 40) + tier
                          : uint64_t{r->hops.front().link} * 2 + (r->hops.front().forward ? 1 : 0);
      double& v = by_hop[key];
      v = std::max(v, t_share);
    }
    double total = 0;
    for (const auto& [key, v] : by_hop) total += v;
    if (total > 0) b.ingress = std::min(b.ingress, total);

    // Pinned off the device: each used tensor crosses its tier's path at least once.
    const std::vector<uint32_t> home =
        s.pin_tier.size() == s.w.tensors.size() ? s.pin_tier : pinned_tiers(s.w, s.pins);
    s.ensure_liveness();
    std::vector<uint64_t> cold_bytes(s.topo.tiers.size(), 0);
    for (uint32_t t = 0; t < cold.size(); ++t) {
      if (cold[t] && !s.liveness->uses[t].empty() && s.liveness->born[t] == kNone) {
        cold_bytes[home[t]] += s.w.tensors[t].bytes;
      }
    }
    for (uint32_t tier = 0; tier < cold_bytes.size(); ++tier) {
      if (cold_bytes[tier] == 0 || c.routes[tier].in == nullptr) continue;
      double rate = share(s.topo.tiers[tier].read_bandwidth.bytes_per_s, s.topo.tiers[tier].per);
      for (const hw::Hop& h : c.routes[tier].in->hops) {
        const hw::Link& link = s.topo.links[h.link];
        rate = std::min(rate, share(link.effective(h.forward).bytes_per_s, link.per));
      }
      if (c.routes[tier].in->buffers > 0) {
        rate = std::min(rate, c.routes[tier].in->bandwidth.bytes_per_s);
      }
      if (rate <= 0) continue;
      const int64_t ps = saturating_floor_ps(static_cast<double>(cold_bytes[tier]) / rate * 1e12);
      if (ps > b.pinned_ps) {
        b.pinned_ps = ps;
        b.pinned_bytes = cold_bytes[tier];
        b.pinned_tier = tier;
        b.pinned_rate = rate;
      }
    }
  }

  auto traffic = [&s, &cold] {
    uint64_t bytes = 0;
    if (s.positions() > 0) {
      // Windows: halvings of the whole order, and passes through the layers (a cut where
      // the layer index drops: each decode token, forward and backward) grouped by powers
      // of two.
      const uint32_t n = s.positions();
      std::vector<uint32_t> seen(s.w.tensors.size(), 0);
      for (uint32_t size = n;; size = (size + 1) / 2) {
        std::vector<uint32_t> cuts;
        for (uint32_t i = 0; i < n; i += size) cuts.push_back(i);
        bytes = std::max(bytes, window_traffic(s, cuts, s.target.budget, seen));
        if (size <= 1) break;
      }
      std::vector<uint32_t> passes = {0};
      for (uint32_t i = 1; i < n; ++i) {
        if (s.w.ops[s.order[i]].layer < s.w.ops[s.order[i - 1]].layer) passes.push_back(i);
      }
      for (size_t group = 1; group < passes.size(); group *= 2) {
        bytes = std::max(bytes, window_traffic(s, coarser(passes, group), s.target.budget, seen));
      }
      // Where everything fits, only the tensors pinned off the device must move.
      s.ensure_liveness();
      bytes = std::max(bytes, paging_traffic(s, s.target.budget, cold));
    }
    return bytes;
  };
  b.traffic_bytes = s.traffic_memo ? s.traffic_memo->get(s, cold, traffic) : traffic();
  if (b.traffic_bytes > 0 && b.ingress > 0) {
    b.traffic_ps = saturating_floor_ps(static_cast<double>(b.traffic_bytes) / b.ingress * 1e12);
  }
  b.makespan_ps = std::max({b.compute_ps, b.traffic_ps, b.pinned_ps});
  return b;
}

uint64_t TrafficMemo::get(const PlanState& s, const std::vector<bool>& cold,
                          const std::function<uint64_t()>& compute) {
  TF_ASSERT(&s.w == w_, "a traffic memo asked about another workload");
  auto find = [&](size_t& order) -> const Entry* {
    order = order_index(s.order);
    for (const Entry& e : entries_) {
      if (e.order == order && e.budget == s.target.budget && e.cold == cold) return &e;
    }
    return nullptr;
  };
  size_t order = 0;
  {
    const std::lock_guard lock(mu_);
    if (const Entry* e = find(order)) return e->bytes;
  }
  const uint64_t bytes = compute();
  const std::lock_guard lock(mu_);
  if (find(order) == nullptr) entries_.push_back(Entry{order, s.target.budget, cold, bytes});
  return bytes;
}

size_t TrafficMemo::order_index(const std::vector<uint32_t>& order) {
  size_t i = 0;
  while (i < orders_.size() && orders_[i] != order) ++i;
  if (i == orders_.size()) orders_.push_back(order);
  return i;
}

std::shared_ptr<const Liveness> TrafficMemo::liveness(
    const Workload& w, const std::vector<uint32_t>& order,
    const std::function<std::shared_ptr<const Liveness>()>& compute) {
  TF_ASSERT(&w == w_, "a traffic memo asked about another workload");
  {
    const std::lock_guard lock(mu_);
    const size_t i = order_index(order);
    if (i < liveness_.size() && liveness_[i]) return liveness_[i];
  }
  std::shared_ptr<const Liveness> l = compute();
  const std::lock_guard lock(mu_);
  const size_t i = order_index(order);
  if (liveness_.size() <= i) liveness_.resize(i + 1);
  if (!liveness_[i]) liveness_[i] = std::move(l);
  return liveness_[i];
}

std::shared_ptr<const Reordering> TrafficMemo::reordering(
    const Workload& w, const std::vector<uint32_t>& order, int options,
    const std::function<Reordering()>& compute) {
  TF_ASSERT(&w == w_, "a traffic memo asked about another workload");
  // (The index of the order it starts from, taken first: `order` may be the state's own,
  // which compute() moves on.)
  std::pair<size_t, int> key;
  {
    const std::lock_guard lock(mu_);
    key = {order_index(order), options};
    const auto it = reorderings_.find(key);
    if (it != reorderings_.end()) return it->second;
  }
  auto r = std::make_shared<const Reordering>(compute());
  const std::lock_guard lock(mu_);
  return reorderings_.try_emplace(key, std::move(r)).first->second;
}

size_t TrafficMemo::size() {
  const std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace tierflow::planner
