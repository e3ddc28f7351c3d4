#include "tools/replay/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "core/diagnostics.h"
#include "hw_models/cost.h"
#include "hw_models/fabric.h"
#include "tools/replay/arena_allocator.h"

namespace tierflow::replay {
namespace {

ReplayError topology_error(int program, std::string message) {
  return ReplayError{ReplayError::Kind::kTopology, program, -1, -1, -1, std::move(message)};
}

/// What one arena must be able to hold, before the size shift is chosen.
struct ArenaNeed {
  std::vector<uint64_t> sizes;  ///< every block that may be live in it at once (an upper
                                ///< bound on the set): logical bytes
  uint64_t limit = UINT64_MAX;  ///< no more than this many logical bytes live at once
};

/// Arena bytes for `need` at `shift`: the shifted sizes (each rounded up and aligned) of
/// the blocks that can be live at once, capped by the shifted limit plus the rounding
/// every block may add.
uint64_t physical_bytes(const ArenaNeed& need, uint32_t shift) {
  const auto shifted = [shift](uint64_t b) {
    return shift == 0 ? b : ((b - 1) >> shift) + (b > 0 ? 1 : 0);
  };
  uint64_t all = 0;
  for (uint64_t b : need.sizes) all += ArenaAllocator::footprint(shifted(b));
  if (need.limit == UINT64_MAX) return all;
  const uint64_t slack = need.sizes.size() * (ArenaAllocator::kAlignment + 1);
  return std::min(all, shifted(need.limit) + slack);
}

}  // namespace

std::optional<uint64_t> plan_budget(const Plan& plan) {
  const auto it = plan.meta.find("budget");
  if (it == plan.meta.end()) return std::nullopt;
  uint64_t v = 0;
  const std::string& s = it->second;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == 0) return std::nullopt;
  return v;
}

std::optional<ReplayError> build_layout(const Plan& plan, const Workload& w, const hw::Topology& t,
                                        uint64_t memory_limit, Layout& out,
                                        uint32_t max_shift) {
  out = Layout{};
  for (const std::string& id : plan.tiers) {
    const auto ti = t.tier_index(id);
    if (!ti) {
      std::vector<std::string> ids;
      for (const hw::Tier& x : t.tiers) ids.push_back(x.id);
      return topology_error(-1, fmt::format("the plan's tier '{}' is not in topology '{}'{}", id,
                                            t.name, did_you_mean(id, ids)));
    }
    out.tier_map.push_back(*ti);
  }
  out.dev_tier = out.tier_map[plan.device_tier];
  const hw::Tier& dev = t.tiers[out.dev_tier];
  if (dev.per != hw::Scope::kDevice) {
    return topology_error(-1, fmt::format("the plan's device tier '{}' is not a per-device tier "
                                          "in '{}'",
                                          dev.id, t.name));
  }
  hw::Fabric fabric(t);
  const size_t np = plan.programs.size();
  std::vector<bool> used(size_t(fabric.devices()));
  for (size_t p = 0; p < np; ++p) {
    const uint32_t d = plan.programs[p].device;
    if (d >= used.size()) {
      return topology_error(int(p), fmt::format("program {} runs on device {}, but '{}' has {} "
                                                "devices",
                                                p, d, t.name, used.size()));
    }
    if (used[d]) {
      return topology_error(int(p), fmt::format("program {} runs on device {}, which another "
                                                "program already uses",
                                                p, d));
    }
    used[d] = true;
    out.device_class.push_back(fabric.device_class(int(d)));
    out.device_index.push_back(fabric.device_index(int(d)));
  }

  // Arenas: one device arena per program, then every host tier instance a program uses.
  const size_t nt = plan.tiers.size();
  const uint64_t tier_capacity = t.usable(out.dev_tier);
  out.budget = std::min(plan_budget(plan).value_or(tier_capacity), tier_capacity);
  uint64_t max_workspace = 0;
  for (const Op& o : w.ops) max_workspace = std::max(max_workspace, o.workspace);
  std::vector<ArenaNeed> needs;
  out.arena_of.assign(np, std::vector<ArenaId>(nt, 0));
  for (size_t p = 0; p < np; ++p) {
    const int inst = t.instance_of(hw::Scope::kDevice, out.device_class[p], out.device_index[p]);
    out.arena_of[p][plan.device_tier] = ArenaId(out.setup.arenas.size());
    out.setup.arenas.push_back(ArenaSpec{hw::instance_name(dev.id, t.instances(dev.per), inst),
                                         out.budget, 0, /*device=*/true});
    ArenaNeed need;
    for (const Tensor& x : w.tensors) need.sizes.push_back(x.bytes);
    need.sizes.push_back(max_workspace);
    // Room for fragmentation: the budget counts bytes in use, the arena must also place
    // them. Twice the budget, unless every tensor fits in less.
    need.limit = out.budget > UINT64_MAX / 2 ? UINT64_MAX - 1 : 2 * out.budget;
    needs.push_back(std::move(need));
  }
  std::map<std::pair<size_t, int>, ArenaId> host_arenas;
  for (size_t p = 0; p < np; ++p) {
    for (size_t h = 0; h < nt; ++h) {
      if (h == plan.device_tier) continue;
      const hw::Tier& tier = t.tiers[out.tier_map[h]];
      const int inst = t.instance_of(tier.per, out.device_class[p], out.device_index[p]);
      auto [it, fresh] =
          host_arenas.try_emplace({out.tier_map[h], inst}, ArenaId(out.setup.arenas.size()));
      if (fresh) {
        out.setup.arenas.push_back(
            ArenaSpec{hw::instance_name(tier.id, t.instances(tier.per), inst), tier.capacity.value,
                      0, /*device=*/false});
        needs.emplace_back();
        needs.back().limit = tier.capacity.value;
      }
      out.arena_of[p][h] = it->second;
    }
  }
  // Host arenas hold the home copies of their programs and whatever those programs store.
  for (size_t p = 0; p < np; ++p) {
    std::vector<std::vector<bool>> held(nt, std::vector<bool>(w.tensors.size()));
    for (uint32_t x = 0; x < w.tensors.size(); ++x) {
      if (w.tensors[x].origin == kExternal) held[plan.home[x]][x] = true;
    }
    for (const Step& s : plan.programs[p].steps) {
      if (s.kind == StepKind::kStore && s.tier < nt && s.target < w.tensors.size()) {
        held[s.tier][s.target] = true;
      }
    }
    for (size_t h = 0; h < nt; ++h) {
      if (h == plan.device_tier) continue;
      for (uint32_t x = 0; x < w.tensors.size(); ++x) {
        if (held[h][x]) needs[out.arena_of[p][h]].sizes.push_back(w.tensors[x].bytes);
      }
    }
  }
  // The smallest shift that fits the backend.
  for (uint32_t shift = 0;; ++shift) {
    uint64_t total = 0;
    for (const ArenaNeed& n : needs) total += physical_bytes(n, shift);
    if (total <= memory_limit) {
      out.shift = shift;
      for (size_t a = 0; a < needs.size(); ++a) {
        out.setup.arenas[a].physical = physical_bytes(needs[a], shift);
      }
      break;
    }
    if (shift >= max_shift) {
      if (max_shift == 0) {
        return topology_error(
            -1, fmt::format("the plan's arenas need {} at their real sizes, more than the "
                            "backend's {}; this backend copies real sizes only (raise the "
                            "memory limit)",
                            to_string_approx(Bytes{total}), to_string_approx(Bytes{memory_limit})));
      }
      return topology_error(-1, fmt::format("the plan's arenas do not fit the backend's {} "
                                            "even with every size divided by 2^{}",
                                            to_string_approx(Bytes{memory_limit}), max_shift));
    }
  }

  // Paths of the transfers the programs issue, over the simulator's fabric: engine groups
  // and shared resources only for those some transfer crosses, numbered as first met.
  std::map<uint32_t, uint32_t> groups, resources;  // the fabric's -> the setup's
  const auto make_path = [&](size_t p, size_t from, size_t to) -> std::optional<ReplayPath> {
    const hw::FabricPath* fp = fabric.path(from, to, int(plan.programs[p].device));
    if (fp == nullptr) return std::nullopt;
    ReplayPath path;
    path.route = fp->route;
    for (const uint32_t g : fp->engines) {
      const auto [it, fresh] = groups.try_emplace(g, uint32_t(out.setup.engine_groups.size()));
      if (fresh) {
        const hw::EngineGroup& e = fabric.engines()[g];
        out.setup.engine_groups.push_back(EngineGroupSpec{e.name, e.capacity});
      }
      path.engines.push_back(it->second);
    }
    for (const uint32_t r : fp->resources) {
      const auto [it, fresh] = resources.try_emplace(r, uint32_t(out.setup.resources.size()));
      if (fresh) out.setup.resources.push_back(fabric.resources()[r].capacity);
      path.resources.push_back(it->second);
    }
    return path;
  };
  out.fetch.assign(np, std::vector<std::optional<ReplayPath>>(nt));
  out.store.assign(np, std::vector<std::optional<ReplayPath>>(nt));
  for (size_t p = 0; p < np; ++p) {
    for (const Step& s : plan.programs[p].steps) {
      if (s.tier >= nt) continue;
      if (s.kind == StepKind::kPrefetch && !out.fetch[p][s.tier]) {
        out.fetch[p][s.tier] = make_path(p, out.tier_map[s.tier], out.dev_tier);
      } else if (s.kind == StepKind::kStore && !out.store[p][s.tier]) {
        out.store[p][s.tier] = make_path(p, out.dev_tier, out.tier_map[s.tier]);
      }
    }
  }
  out.setup.programs = uint32_t(np);

  out.op_time.assign(t.devices.size(), {});
  for (size_t p = 0; p < np; ++p) {
    auto& times = out.op_time[out.device_class[p]];
    if (!times.empty()) continue;
    for (uint32_t o = 0; o < w.ops.size(); ++o) {
      const auto d = hw::op_time(t, out.device_class[p], out.dev_tier, w, o);
      times.push_back(d ? std::optional<Time>(d->ps) : std::nullopt);
    }
  }
  return std::nullopt;
}

}  // namespace tierflow::replay
