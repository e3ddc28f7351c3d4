#include "hw_models/bind.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

#include "core/diagnostics.h"
#include "core/units.h"
#include "hw_models/routes.h"

namespace tierflow::hw {
namespace {

/// The scope a peer route's turn is one per, by name ("host" for a direct link's mesh).
std::string_view turn_scope_name(const Topology& t, const Route& peer) {
  return kScopeNames[size_t(peer_turn_scope(t, peer).value_or(Scope::kHost))];
}

/// The devices peer route `peer` joins, as a message says them: "the devices one 'nvswitch'
/// joins", or of a direct link "the devices of one host, which its 'xgmi' links join".
std::string joined_group(const Topology& t, const Route& peer) {
  const Step& at = peer.steps[peer_turn(t, peer)];
  if (at.to.is_switch) return fmt::format("the devices one '{}' joins", peer_turn_id(t, peer));
  return fmt::format("the devices of one {}, which its '{}' links join", turn_scope_name(t, peer),
                     peer_turn_id(t, peer));
}

Binding refuse(int program, std::string message) {
  return Binding{std::nullopt,
                 RunError{RunError::Kind::kTopology, program, -1, -1, -1, std::move(message)}};
}

}  // namespace

int64_t workload_tp(const Workload& w) {
  const auto it = w.meta.find("tp");
  if (it == w.meta.end()) return 1;
  int64_t tp = 0;
  const char* first = it->second.data();
  const char* last = first + it->second.size();
  const auto [end, ec] = std::from_chars(first, last, tp);
  return ec == std::errc() && end == last && tp > 1 ? tp : 1;
}

Binding bind(const Plan& plan, const Workload& w, const Topology& t) {
  Binding out;
  BoundPlan& b = out.bound.emplace(plan, w, t);
  for (const std::string& id : plan.tiers) {
    const auto ti = t.tier_index(id);
    if (!ti) {
      std::vector<std::string> ids;
      for (const Tier& x : t.tiers) ids.push_back(x.id);
      return refuse(-1, fmt::format("the plan's tier '{}' is not in topology '{}'{}", id, t.name,
                                    did_you_mean(id, ids)));
    }
    b.tier_map.push_back(*ti);
  }
  if (plan.device_tier >= b.tier_map.size()) {
    return refuse(-1, fmt::format("the plan's device tier is tier {}, but it lists {} tiers",
                                  plan.device_tier, b.tier_map.size()));
  }
  b.device_tier = b.tier_map[plan.device_tier];
  if (t.tiers[b.device_tier].per != Scope::kDevice) {
    return refuse(-1, fmt::format("the plan's device tier '{}' is not a per-device tier in '{}'",
                                  t.tiers[b.device_tier].id, t.name));
  }
  if (plan.host_tier != kNoTier && plan.host_tier < b.tier_map.size()) {
    const HostCpu& cpu = t.system.cpu;
    if (!cpu.present()) {
      return refuse(-1, fmt::format("the plan computes on the host, but '{}' describes no host "
                                    "CPU (system.cpu)",
                                    t.name));
    }
    const Tier& host = t.tiers[b.tier_map[plan.host_tier]];
    if (host.id != cpu.tier) {
      return refuse(-1, fmt::format("the plan's host tier '{}' is not the tier the host CPU of "
                                    "'{}' computes next to ('{}')",
                                    host.id, t.name, cpu.tier));
    }
  }
  const int devices = b.fabric.devices();
  std::vector<bool> used(size_t(std::max(devices, 0)));
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    const uint32_t d = plan.programs[p].device;
    if (d >= used.size()) {
      return refuse(int(p), fmt::format("program {} runs on device {}, but '{}' has {} devices", p,
                                        d, t.name, devices));
    }
    if (used[d]) {
      return refuse(int(p), fmt::format("program {} runs on device {}, which another program "
                                        "already uses",
                                        p, d));
    }
    used[d] = true;
    b.programs.push_back(BoundProgram{int(d), b.fabric.device_class(int(d)),
                                      b.fabric.device_index(int(d)),
                                      b.fabric.tier_slot(b.device_tier, int(d))});
  }
  if (const int64_t tp = workload_tp(w); tp > 1) {
    for (size_t p = 0; p < b.programs.size(); ++p) {
      if (auto why = tp_group_problem(b.fabric, b.device_tier, b.programs[p].device, tp)) {
        return refuse(int(p), fmt::format("the workload is one shard of tensor parallelism {}: {}",
                                          tp, *why));
      }
    }
  } else if (auto why = collective_problem(t, b.device_tier, w)) {
    return refuse(-1, *why);
  }
  const uint64_t usable = t.usable(b.device_tier);
  b.budget = plan.budget == 0 ? usable : std::min(plan.budget, usable);
  return out;
}

std::optional<std::string> tp_group_problem(const Fabric& f, size_t device_tier, int device,
                                            int64_t tp) {
  const Topology& t = f.topology();
  const size_t cls = f.device_class(device);
  const Device& c = t.devices[cls];
  const int64_t first = f.device_index(device) - f.device_index(device) % tp;
  if (first + tp > c.count) {
    return fmt::format("its group needs {} devices of class '{}', and '{}' has {}", tp, c.id,
                       t.name, c.count);
  }
  std::vector<int> group;
  for (int d = 0; d < f.devices(); ++d) {
    if (f.device_class(d) != cls) continue;
    const int64_t i = f.device_index(d);
    if (i >= first && i < first + tp) group.push_back(d);
  }
  return peer_group_problem(f, device_tier, group);
}

std::optional<std::string> collective_problem(const Topology& t, size_t device_tier,
                                              const Workload& w) {
  if (t.route(device_tier, device_tier) != nullptr) return std::nullopt;
  for (const Op& op : w.ops) {
    if (op.collective_bytes == 0) continue;
    return fmt::format(
        "op '{}' is a collective ({} over its tensor-parallel group), and '{}' "
        "has no peer route of '{}' to time it over",
        op.name, to_string_approx(Bytes{op.collective_bytes}), t.name, t.tiers[device_tier].id);
  }
  return std::nullopt;
}

std::optional<std::string> peer_group_problem(const Fabric& f, size_t device_tier,
                                              std::span<const int> devices) {
  const Topology& t = f.topology();
  const std::string& tier = t.tiers[device_tier].id;
  if (devices.size() < 2) return std::nullopt;
  if (t.route(device_tier, device_tier) == nullptr) {
    return fmt::format("its collectives cross the peer route of '{}', and '{}' has none: TP 1",
                       tier, t.name);
  }
  for (size_t k = 1; k < devices.size(); ++k) {
    const int a = devices.front(), b = devices[k];
    if (f.peer_path(device_tier, a, b, /*wider=*/false) != nullptr) continue;
    // A wider route (the scale-out network) joins them, but collectives are timed over the
    // peer route alone: refused rather than timed at the wrong speed.
    const Route& peer = *t.route(device_tier, device_tier);
    if (const FabricPath* p = f.peer_path(device_tier, a, b)) {
      return fmt::format(
          "on devices {} to {}, its collectives would cross '{}' from device {} to device {}, "
          "and collectives are timed over the peer route of '{}' alone: a group must stay "
          "among {}",
          a, devices.back(), peer_turn_id(t, *p->route), a, b, tier, joined_group(t, peer));
    }
    // A direct link's mesh ends at the host; a switch at its own scope.
    const bool direct = !peer.steps[peer_turn(t, peer)].to.is_switch;
    return fmt::format(
        "on devices {} to {}, its collectives cross the peer route of '{}', and '{}' has none "
        "from device {} to device {} ({}); a narrower tensor parallelism keeps each group "
        "among {}",
        a, devices.back(), tier, t.name, a, b, peer_apart_reason(t, device_tier),
        direct ? fmt::format("the devices of one {}", turn_scope_name(t, peer))
               : "the devices one switch joins");
  }
  return std::nullopt;
}

GroupFabric group_fabric(const Fabric& f, size_t device_tier, std::span<const int> devices,
                         bool across) {
  GroupFabric out;
  out.problem = peer_group_problem(f, device_tier, devices);
  const Topology& t = f.topology();
  if (!out.problem || !across || t.route(device_tier, device_tier) == nullptr) return out;
  // The domains: each device with the first one the peer route joins it to.
  std::vector<std::vector<int>> domains;
  for (const int d : devices) {
    const auto in = std::find_if(domains.begin(), domains.end(), [&](const std::vector<int>& x) {
      return f.peer_path(device_tier, x.front(), d, /*wider=*/false) != nullptr;
    });
    if (in == domains.end()) {
      domains.push_back({d});
    } else {
      in->push_back(d);
    }
  }
  const size_t ranks = domains.front().size();
  for (const std::vector<int>& x : domains) {
    if (x.size() == ranks) continue;
    const Route& peer = *t.route(device_tier, device_tier);
    out.problem = fmt::format(
        "on devices {} to {}, {} of its ranks are among {} and {} among another: a group over "
        "several must have as many ranks in each, its collectives crossing from each to the "
        "next rank to rank",
        devices.front(), devices.back(), ranks, joined_group(t, peer), x.size());
    return out;
  }
  // Each rank to the same rank of the next domain; the crossings out of a domain share what
  // their paths share. The slowest pair of neighbours decides.
  CollectiveFabric c{static_cast<int>(domains.size()), static_cast<int>(ranks), Duration{0},
                     Bandwidth{std::numeric_limits<double>::infinity()}};
  std::vector<const FabricPath*> paths(ranks);
  std::map<uint32_t, int> uses;
  for (size_t i = 0; i < domains.size(); ++i) {
    const std::vector<int>& next = domains[(i + 1) % domains.size()];
    uses.clear();
    for (size_t k = 0; k < ranks; ++k) {
      paths[k] = f.peer_path(device_tier, domains[i][k], next[k]);
      if (paths[k] == nullptr) return out;  // peer_group_problem's: no route joins them
      for (const uint32_t r : paths[k]->resources) ++uses[r];
    }
    double sum = 0;
    for (size_t k = 0; k < ranks; ++k) {
      double share = paths[k]->route->bandwidth.bytes_per_s;
      for (const uint32_t r : paths[k]->resources) {
        share = std::min(share, f.resources()[r].capacity / uses[r]);
      }
      sum += share;
      c.setup = std::max(c.setup, paths[k]->route->setup);
    }
    c.out.bytes_per_s = std::min(c.out.bytes_per_s, sum);
  }
  out.fabric = c;
  out.problem.reset();
  return out;
}

std::string peer_apart_reason(const Topology& t, size_t device_tier) {
  const Route* peer = t.route(device_tier, device_tier);
  if (peer == nullptr || peer->steps.empty()) return "there is no peer route";
  if (peer->steps[peer_turn(t, *peer)].to.is_switch) return "they reach no switch in common";
  return fmt::format("they are on different {}s, and its '{}' links join the devices of one",
                     turn_scope_name(t, *peer), peer_turn_id(t, *peer));
}

}  // namespace tierflow::hw
