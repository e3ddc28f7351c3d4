#include "tools/replay/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <string_view>
#include <tuple>

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

std::optional<ReplayError> build_layout(const hw::BoundPlan& b, uint64_t memory_limit,
                                        Layout& out, uint32_t max_shift) {
  out = Layout{};
  const Plan& plan = b.plan;
  const Workload& w = b.workload;
  const hw::Topology& t = b.topology;
  const hw::Tier& dev = t.tiers[b.device_tier];
  const size_t np = plan.programs.size();
  out.budget = b.budget;

  // Arenas: one device arena per program, then every host tier instance a program uses.
  const size_t nt = plan.tiers.size();
  uint64_t max_workspace = 0;
  for (const Op& o : w.ops) max_workspace = std::max(max_workspace, o.workspace);
  std::vector<ArenaNeed> needs;
  out.arena_of.assign(np, std::vector<ArenaId>(nt, 0));
  for (size_t p = 0; p < np; ++p) {
    const hw::BoundProgram& bp = b.programs[p];
    const int inst = t.instance_of(hw::Scope::kDevice, bp.device_class, bp.device_index);
    out.arena_of[p][plan.device_tier] = ArenaId(out.setup.arenas.size());
    out.setup.arenas.push_back(ArenaSpec{hw::instance_name(dev.id, t.instances(dev.per), inst),
                                         b.budget, 0, /*device=*/true});
    ArenaNeed need;
    for (const Tensor& x : w.tensors) need.sizes.push_back(x.bytes);
    need.sizes.push_back(max_workspace);
    // Room for fragmentation: the budget counts bytes in use, the arena must also place
    // them. Twice the budget, unless every tensor fits in less.
    need.limit = b.budget > UINT64_MAX / 2 ? UINT64_MAX - 1 : 2 * b.budget;
    needs.push_back(std::move(need));
  }
  std::map<std::pair<size_t, int>, ArenaId> host_arenas;
  for (size_t p = 0; p < np; ++p) {
    for (size_t h = 0; h < nt; ++h) {
      if (h == plan.device_tier) continue;
      const hw::Tier& tier = t.tiers[b.tier_map[h]];
      const int inst =
          t.instance_of(tier.per, b.programs[p].device_class, b.programs[p].device_index);
      auto [it, fresh] =
          host_arenas.try_emplace({b.tier_map[h], inst}, ArenaId(out.setup.arenas.size()));
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
  // Host arenas hold the home copies of their programs, whatever those programs store,
  // and what their host steps make (outputs, the largest workspace).
  for (size_t p = 0; p < np; ++p) {
    std::vector<std::vector<bool>> held(nt, std::vector<bool>(w.tensors.size()));
    for (uint32_t x = 0; x < w.tensors.size(); ++x) {
      if (w.tensors[x].origin == kExternal) held[plan.home[x]][x] = true;
    }
    uint64_t host_workspace = 0;
    for (const Step& s : plan.programs[p].steps) {
      if (s.kind == StepKind::kStore && s.tier < nt && s.target < w.tensors.size()) {
        held[s.tier][s.target] = true;
      } else if (s.kind == StepKind::kPrefetch && s.host && s.target < w.tensors.size()) {
        held[plan.host_tier][s.target] = true;
      } else if (s.kind == StepKind::kCompute && s.host && s.target < w.ops.size()) {
        const Op& op = w.ops[s.target];
        for (uint32_t x : op.outputs) held[plan.host_tier][x] = true;
        host_workspace = std::max(host_workspace, op.workspace);
      }
    }
    for (size_t h = 0; h < nt; ++h) {
      if (h == plan.device_tier) continue;
      for (uint32_t x = 0; x < w.tensors.size(); ++x) {
        if (held[h][x]) needs[out.arena_of[p][h]].sizes.push_back(w.tensors[x].bytes);
      }
    }
    if (host_workspace > 0) needs[out.arena_of[p][plan.host_tier]].sizes.push_back(host_workspace);
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
                            "backend's {}; this backend copies real sizes only (raise "
                            "--memory-limit (Python: memory_limit), or replay with paced "
                            "copies, which divide the sizes)",
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
    const hw::FabricPath* fp = b.fabric.path(from, to, b.programs[p].device);
    if (fp == nullptr) return std::nullopt;
    ReplayPath path;
    path.route = fp->route;
    for (const uint32_t g : fp->engines) {
      const auto [it, fresh] = groups.try_emplace(g, uint32_t(out.setup.engine_groups.size()));
      if (fresh) {
        const hw::EngineGroup& e = b.fabric.engines()[g];
        out.setup.engine_groups.push_back(EngineGroupSpec{e.name, e.capacity});
      }
      path.engines.push_back(it->second);
    }
    for (const uint32_t r : fp->resources) {
      const auto [it, fresh] = resources.try_emplace(r, uint32_t(out.setup.resources.size()));
      if (fresh) out.setup.resources.push_back(b.fabric.resources()[r].capacity);
      path.resources.push_back(it->second);
    }
    return path;
  };
  out.fetch.assign(np, std::vector<std::optional<ReplayPath>>(nt));
  out.store.assign(np, std::vector<std::optional<ReplayPath>>(nt));
  out.host_fetch.assign(np, std::vector<std::optional<ReplayPath>>(nt));
  for (size_t p = 0; p < np; ++p) {
    for (const Step& s : plan.programs[p].steps) {
      if (s.tier >= nt) continue;
      if (s.kind == StepKind::kPrefetch && s.host) {
        if (!out.host_fetch[p][s.tier]) {
          out.host_fetch[p][s.tier] = make_path(p, b.tier_map[s.tier], b.tier_map[plan.host_tier]);
        }
      } else if (s.kind == StepKind::kPrefetch && !out.fetch[p][s.tier]) {
        out.fetch[p][s.tier] = make_path(p, b.tier_map[s.tier], b.device_tier);
      } else if (s.kind == StepKind::kStore && !out.store[p][s.tier]) {
        out.store[p][s.tier] = make_path(p, b.device_tier, b.tier_map[s.tier]);
      }
    }
  }
  // Each group's contended setup, and its link's other direction among the plan's groups
  // (the fabric makes a link instance's two groups one after the other).
  for (const auto& [g, local] : groups) {
    const hw::EngineGroup& e = b.fabric.engines()[g];
    EngineGroupSpec& spec = out.setup.engine_groups[local];
    spec.contended_ps = t.links[e.link].contended(e.forward).ps;
    if (const auto it = groups.find(g ^ 1U); it != groups.end()) spec.reverse = it->second;
  }
  out.setup.programs = uint32_t(np);
  out.setup.host = computes_on_host(plan);

  out.op_time.assign(t.devices.size(), {});
  if (out.setup.host) out.host_time.assign(t.devices.size(), {});
  for (size_t p = 0; p < np; ++p) {
    const size_t cls = b.programs[p].device_class;
    auto& times = out.op_time[cls];
    if (!times.empty()) continue;
    for (uint32_t o = 0; o < w.ops.size(); ++o) {
      const auto d = hw::op_time(t, cls, b.device_tier, w, o);
      times.push_back(d ? std::optional<Time>(d->ps) : std::nullopt);
      if (!out.setup.host) continue;
      const auto h = hw::host_op_time(t, cls, w, o);
      out.host_time[cls].push_back(h ? std::optional<Time>(h->ps) : std::nullopt);
    }
  }

  // One of each kind of compute step, for the backend's warm-up.
  // Keyed by the names' views (no copy per step); a work is made for the first of a kind.
  std::map<std::tuple<std::string_view, std::string_view, double>, ComputeWork> kinds;
  for (size_t p = 0; p < np; ++p) {
    const size_t cls = b.programs[p].device_class;
    for (const Step& s : plan.programs[p].steps) {
      // A cache step's target is a tensor; a host step runs on the host, not the device.
      if (s.kind != StepKind::kCompute || s.host) continue;
      const auto& d = out.op_time[cls][s.target];
      if (!d) continue;
      const Op& op = w.ops[s.target];
      const auto [it, fresh] =
          kinds.try_emplace({name_of(op.dtype), name_of(op.kind), op.flops}, ComputeWork{});
      if (fresh) it->second = work_of(t, cls, op, *d);
    }
  }
  for (auto& [key, x] : kinds) out.setup.work.push_back(std::move(x));
  return std::nullopt;
}

ComputeWork work_of(const hw::Topology& t, size_t device, const Op& op, Time duration) {
  ComputeWork x;
  x.duration = duration;
  x.launch = std::min(duration, t.devices[device].launch_overhead.ps);
  x.flops = op.flops;
  x.bytes = op.bytes;
  x.dtype = std::string(name_of(op.dtype));
  x.kind = std::string(name_of(op.kind));
  return x;
}

}  // namespace tierflow::replay
