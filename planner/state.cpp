#include "planner/state.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/checked.h"
#include "core/diagnostics.h"
#include "core/stepper.h"
#include "hw_models/cost.h"
#include "planner/bounds.h"

namespace tierflow::planner {

namespace {

/// Index of `bytes` in `sizes`, or kNone.
uint32_t size_index(const std::vector<uint64_t>& sizes, uint64_t bytes) {
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), bytes);
  return it != sizes.end() && *it == bytes ? static_cast<uint32_t>(it - sizes.begin()) : kNone;
}

}  // namespace

int64_t Costs::fetch_ps(uint32_t tier, uint64_t bytes) const {
  TF_ASSERT(tier < routes.size() && routes[tier].in != nullptr, "no route from tier {}", tier);
  if (tier < fetch_by_size.size() && !fetch_by_size[tier].empty()) {
    const uint32_t i = size_index(sizes, bytes);
    if (i != kNone) return fetch_by_size[tier][i];
  }
  return hw::transfer_time_alone(*routes[tier].in, Bytes{bytes}).ps;
}

int64_t Costs::store_ps(uint32_t tier, uint64_t bytes) const {
  TF_ASSERT(tier < routes.size() && routes[tier].out != nullptr, "no route to tier {}", tier);
  if (tier < store_by_size.size() && !store_by_size[tier].empty()) {
    const uint32_t i = size_index(sizes, bytes);
    if (i != kNone) return store_by_size[tier][i];
  }
  return hw::transfer_time_alone(*routes[tier].out, Bytes{bytes}).ps;
}

Target resolved(const hw::Topology& t, Target target) {
  if (target.budget == 0) target.budget = t.usable(target.device_tier);
  return target;
}

std::vector<uint32_t> offload_tiers(const hw::Topology& t, size_t device_tier) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < t.tiers.size(); ++i) {
    if (i == device_tier) continue;
    if (t.route(i, device_tier) == nullptr || t.route(device_tier, i) == nullptr) continue;
    out.push_back(static_cast<uint32_t>(i));
  }
  std::stable_sort(out.begin(), out.end(), [&](uint32_t a, uint32_t b) {
    return t.route(a, device_tier)->bandwidth.bytes_per_s >
           t.route(b, device_tier)->bandwidth.bytes_per_s;
  });
  return out;
}

PlanState::PlanState(const Workload& work, const hw::Topology& t, Target tgt)
    : w(work), topo(t), target(resolved(t, tgt)) {
  order.resize(w.ops.size());
  std::iota(order.begin(), order.end(), 0U);
  tensors.resize(w.tensors.size());
  tier_room.assign(t.tiers.size(), 0);
  offload_tiers = planner::offload_tiers(t, target.device_tier);
  for (const uint32_t i : offload_tiers) {
    const hw::Tier& tier = t.tiers[i];
    // Programs spread evenly over the instances of a shared tier.
    const auto instances = static_cast<uint64_t>(std::max(1, t.instances(tier.per)));
    const uint64_t sharing = (target.devices + instances - 1) / instances;
    tier_room[i] = tier.capacity.value / std::max<uint64_t>(1, sharing);
  }
  tier_used.assign(t.tiers.size(), 0);
}

namespace {
/// Below these a device's rate is out of any real device's range (a typo of a unit): 1
/// MFLOP/s and 1 MB/s.
constexpr double kLeastPlausibleFlopRate = 1e6;
constexpr double kLeastPlausibleBandwidth = 1e6;
}  // namespace

const Costs& PlanState::ensure_costs() {
  if (costs) return *costs;
  Costs c;
  c.op_ps.resize(w.ops.size());
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    const auto d = hw::op_time(topo, target.device_class, target.device_tier, w, o);
    if (!d) {
      const hw::Device& dev = topo.devices[target.device_class];
      throw InputError::at(SourcePos{"--workload"}, "{}",
                           run_errors::no_peak(w, o, dev.id, dev.peak_dtypes()));
    }
    c.op_ps[o] = d->ps;
  }
  c.start_ps.resize(order.size() + 1);
  c.start_ps[0] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    c.start_ps[i + 1] = saturating_add_ps(c.start_ps[i], c.op_ps[order[i]]);
    if (c.start_ps[i + 1] > kMaxSimTimePs) {
      const uint32_t o = order[i];
      // A device setting far out of any real device's range is the topology's fault, named
      // where it is written.
      const hw::Device& dev = topo.devices[target.device_class];
      const hw::Tier& local = topo.tiers[target.device_tier];
      const std::string peak_key = fmt::format("peak.{}", name_of(w.ops[o].dtype));
      const auto blame = [&](std::string_view what, const SourcePos& at, std::string value) {
        throw InputError::at(at,
                             "{} {} is implausible: the ops alone would run past the "
                             "simulator's time limit of {} on '{}' (op {} '{}' takes {})",
                             what, value, to_string_approx(Duration{kMaxSimTimePs}), dev.id, o,
                             w.ops[o].name, to_string_approx(Duration{c.op_ps[o]}));
      };
      if (dev.launch_overhead.ps > kPsPerS) {
        blame("launch_overhead", dev.origins.pos_of("launch_overhead"),
              to_string_approx(dev.launch_overhead));
      }
      if (w.ops[o].flops > 0 &&
          dev.peak[static_cast<size_t>(w.ops[o].dtype)].flop_per_s < kLeastPlausibleFlopRate) {
        blame(peak_key, dev.origins.pos_of(peak_key),
              to_string(dev.peak[static_cast<size_t>(w.ops[o].dtype)]));
      }
      if (w.ops[o].bytes > 0 && local.read_bandwidth.bytes_per_s < kLeastPlausibleBandwidth) {
        blame(fmt::format("tier '{}' read_bandwidth", local.id),
              local.origins.pos_of("read_bandwidth"), to_string(local.read_bandwidth));
      }
      throw InputError::at(SourcePos{"--workload"},
                           "the ops alone would run past the simulator's time limit of {} on "
                           "'{}' (op {} '{}' takes {}): the workload's FLOPs or bytes are "
                           "implausibly large",
                           to_string_approx(Duration{kMaxSimTimePs}),
                           topo.devices[target.device_class].id, o, w.ops[o].name,
                           to_string_approx(Duration{c.op_ps[o]}));
    }
  }
  c.routes.resize(topo.tiers.size());
  for (size_t i = 0; i < topo.tiers.size(); ++i) {
    if (i == target.device_tier) continue;
    c.routes[i] = {topo.route(i, target.device_tier), topo.route(target.device_tier, i)};
  }
  for (const Tensor& x : w.tensors) c.sizes.push_back(x.bytes);
  std::sort(c.sizes.begin(), c.sizes.end());
  c.sizes.erase(std::unique(c.sizes.begin(), c.sizes.end()), c.sizes.end());
  c.fetch_by_size.resize(topo.tiers.size());
  c.store_by_size.resize(topo.tiers.size());
  for (size_t i = 0; i < topo.tiers.size(); ++i) {
    const Costs::Route& r = c.routes[i];
    if (r.in == nullptr || r.out == nullptr) continue;
    for (uint64_t bytes : c.sizes) {
      c.fetch_by_size[i].push_back(hw::transfer_time_alone(*r.in, Bytes{bytes}).ps);
      c.store_by_size[i].push_back(hw::transfer_time_alone(*r.out, Bytes{bytes}).ps);
    }
    // One copy of the largest tensor each way must fit in the simulator's time: past it,
    // sums of copy times would overflow (a bandwidth of bytes per second, not gigabytes).
    const int64_t slowest =
        c.sizes.empty() ? 0 : std::max(c.fetch_by_size[i].back(), c.store_by_size[i].back());
    if (slowest > kMaxSimTimePs / 4) {
      throw InputError::at(SourcePos{"--hw"},
                           "moving a tensor of {} between '{}' and '{}' would take {:.3g} s, "
                           "past the {} a copy may take (a quarter of the simulator's time "
                           "limit): the route's bandwidth ({} in, {} out) is implausibly low",
                           to_string(Bytes{c.sizes.back()}), topo.tiers[i].id,
                           topo.tiers[target.device_tier].id,
                           static_cast<double>(c.sizes.back()) /
                               std::min(r.in->bandwidth.bytes_per_s, r.out->bandwidth.bytes_per_s),
                           to_string_approx(Duration{kMaxSimTimePs / 4}),
                           to_string(r.in->bandwidth), to_string(r.out->bandwidth));
    }
  }
  costs = std::make_shared<const Costs>(std::move(c));
  return *costs;
}

namespace {

Liveness liveness_in(const Workload& w, const std::vector<uint32_t>& order) {
  Liveness l;
  l.uses.resize(w.tensors.size());
  l.modifies.resize(w.tensors.size());
  l.born.assign(w.tensors.size(), kNone);
  for (uint32_t i = 0; i < order.size(); ++i) {
    const Op& op = w.ops[order[i]];
    for (uint32_t t : op.inputs) {
      l.uses[t].push_back(i);
      l.modifies[t].push_back(false);
    }
    for (uint32_t t : op.updates) {
      l.uses[t].push_back(i);
      l.modifies[t].push_back(true);
    }
    for (uint32_t t : op.outputs) l.born[t] = i;
  }
  l.persists.assign(w.tensors.size(), false);
  for (uint32_t t = 0; t < w.tensors.size(); ++t) {
    const TensorKind k = w.tensors[t].kind;
    l.persists[t] = l.born[t] != kNone && (k == TensorKind::kOutput || k == TensorKind::kKv);
  }
  return l;
}

}  // namespace

const Liveness& PlanState::ensure_liveness() {
  if (liveness) return *liveness;
  auto compute = [&] { return std::make_shared<const Liveness>(liveness_in(w, order)); };
  // The plans of a study's workload share the liveness of each order.
  liveness = traffic_memo ? traffic_memo->liveness(w, order, compute) : compute();
  return *liveness;
}

void PlanState::invalidate() {
  costs.reset();
  liveness.reset();
}

bool holds_copy(const Residency& r) {
  if (r.home_off_device) return true;
  for (const Run& run : r.runs) {
    if (run.store) return true;
  }
  return false;
}

std::vector<uint64_t> memory_profile(const PlanState& s) {
  const uint32_t n = std::max<uint32_t>(1, s.positions());
  // The changes at each position, then their running sum, in the one array: in unsigned
  // arithmetic a decrease wraps around and the sums come out as the levels.
  std::vector<uint64_t> out(n + 1, 0);
  auto add = [&](uint32_t from, uint32_t to, uint64_t bytes) {
    if (from > to || from >= n) return;
    to = std::min(to, n - 1);
    out[from] += bytes;
    out[to + 1] -= bytes;
  };
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    const uint64_t bytes = s.w.tensors[t].bytes;
    for (const Run& r : s.tensors[t].runs) {
      const uint32_t to = r.release == kNone ? n - 1 : r.release - 1 + r.hold;
      add(r.alloc, std::max(to, r.alloc), bytes);
    }
  }
  for (uint32_t i = 0; i < s.positions(); ++i) {
    const uint64_t ws = s.w.ops[s.order[i]].workspace;
    if (ws > 0) add(i, i, ws);
  }
  for (uint32_t i = 1; i < n; ++i) out[i] += out[i - 1];
  out.pop_back();
  return out;
}

uint32_t slot_ahead(const Costs& c, uint32_t before, int64_t need_ps, uint32_t floor) {
  // The largest slot j <= before with start_ps[before] - start_ps[j] >= need_ps.
  const int64_t latest = c.start_ps[before] - need_ps;
  if (latest < c.start_ps[floor]) return floor;
  const auto it = std::upper_bound(c.start_ps.begin() + floor, c.start_ps.begin() + before + 1,
                                   latest);
  const auto j = static_cast<uint32_t>(it - c.start_ps.begin());
  return std::max(floor, j == 0 ? 0 : j - 1);
}

uint32_t store_hold(const PlanState& s, uint32_t tier, uint64_t bytes, uint32_t release) {
  const Costs& c = *s.costs;
  const int64_t need = c.store_ps(tier, bytes);
  const uint32_t n = s.positions();
  if (release >= n) return 0;
  // The first slot at or after `release` whose start is `need` later.
  const int64_t done = c.start_ps[release] + need;
  const auto it = std::lower_bound(c.start_ps.begin() + release, c.start_ps.end(), done);
  const auto j = static_cast<uint32_t>(std::min<ptrdiff_t>(it - c.start_ps.begin(), n));
  return j - release;
}

void reset_resident(PlanState& s) {
  const Liveness& l = s.ensure_liveness();
  std::fill(s.tier_used.begin(), s.tier_used.end(), 0);
  const uint32_t n = s.positions();
  for (uint32_t t = 0; t < s.w.tensors.size(); ++t) {
    Residency& r = s.tensors[t];
    r = Residency{};
    const auto& u = l.uses[t];
    if (l.born[t] == kNone) {
      // External: a home copy on the device from the start, kept to the end.
      r.runs.push_back(Run{0, u.empty() ? 0 : u.front(), u.empty() ? 0 : u.back(), kNone});
      continue;
    }
    const uint32_t born = l.born[t];
    const uint32_t last = u.empty() ? born : u.back();
    const uint32_t release = l.persists[t] ? kNone : std::min(n, last + 1);
    r.runs.push_back(Run{born, u.empty() ? born : u.front(), last, release});
  }
}

std::vector<Run> split_runs(const PlanState& s, uint32_t t, const std::vector<uint32_t>& gaps,
                            const SplitOptions& o) {
  const bool home_off_device = o.home_off_device;
  const uint32_t tier = o.tier;
  const Liveness& l = *s.liveness;
  const Costs& c = *s.costs;
  const Tensor& x = s.w.tensors[t];
  const auto& u = l.uses[t];
  const auto& m = l.modifies[t];
  const uint32_t n = s.positions();
  const bool external = l.born[t] == kNone;
  TF_ASSERT(!external || home_off_device || gaps.empty(),
            "an external tensor kept on the device cannot leave it between uses");
  std::vector<Run> runs;
  runs.reserve(u.empty() ? 1 : gaps.size() + 1);
  if (u.empty()) {
    if (external) {
      if (!home_off_device) runs.push_back(Run{0, 0, 0, kNone});
      return runs;
    }
    const uint32_t b = l.born[t];
    Run r{b, b, b, l.persists[t] ? kNone : std::min(n, b + 1)};
    if (l.persists[t] && o.spill_at_end) {
      r.release = std::min(n, b + 1);
      r.store = true;
      r.hold = store_hold(s, tier, x.bytes, r.release);
    }
    runs.push_back(r);
    return runs;
  }
  const int64_t fetch = home_off_device || !gaps.empty()
                           ? static_cast<int64_t>(static_cast<double>(c.fetch_ps(tier, x.bytes)) *
                                                  o.preferred)
                           : 0;
  bool dirty = !external;  // the device copy is the only current one
  uint32_t floor = 0;      // a prefetch never precedes the previous run's detach
  size_t g = 0;
  for (size_t first = 0; first < u.size();) {
    size_t last = u.size() - 1;
    if (g < gaps.size()) last = gaps[g++];
    Run r;
    r.first = u[first];
    r.last = u[last];
    const bool initial = first == 0;
    r.fetched = !initial || (external && home_off_device);
    if (r.fetched) {
      r.alloc = o.lead_ops != kNone ? std::max(floor, r.first > o.lead_ops ? r.first - o.lead_ops : 0)
                                    : slot_ahead(c, r.first, fetch, floor);
    } else {
      r.alloc = external ? 0 : l.born[t];
    }
    for (size_t k = first; k <= last; ++k) dirty |= m[k];
    const bool final_run = last + 1 == u.size();
    if (final_run && external && !home_off_device) {
      r.release = kNone;
    } else if (final_run && l.persists[t] && !o.spill_at_end && dirty) {
      // Kept at the end: the device holds the only current copy. (A clean one, stored
      // since its last change, leaves after its last use like any other.)
      r.release = kNone;
    } else {
      r.release = std::min(n, r.last + 1 + o.release_delay);
      if (!final_run) r.release = std::min(r.release, u[last + 1]);
      // Store when the device copy is the only current one and it is needed later: by a
      // later run, as the durable copy of an external tensor homed off the device, or as
      // what a persisting tensor leaves behind.
      r.store = dirty && (!final_run || (external && home_off_device) || l.persists[t]);
      if (r.store) {
        r.hold = store_hold(s, tier, x.bytes, r.release);
        dirty = false;
      }
    }
    floor = r.release == kNone ? n : r.release;
    runs.push_back(r);
    first = last + 1;
  }
  return runs;
}

}  // namespace tierflow::planner
