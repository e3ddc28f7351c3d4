#include "sim/models/flows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/diagnostics.h"

namespace tierflow::sim {
namespace {

/// Routes of up to this many hops are stored padded to this many and walked in this many
/// steps, without a loop that would end at a random point.
constexpr uint32_t kShortRoute = 4;
/// Short routes are padded with kPadHop - f % kSpares for flow f: entry() wraps that to one
/// of the spare entries at the start of the per-resource solve arrays. Flows that freeze
/// together take from different spares, so updates of one spare do not form a long chain,
/// each waiting for the one before.
constexpr uint32_t kPadHop = UINT32_MAX;

// Bits of a double that compare as unsigned integers the way the doubles compare (for
// the non-NaN values a share takes), with -0 below +0.
uint64_t ordered_bits(double x) {
  const auto u = std::bit_cast<uint64_t>(x);
  return (u >> 63) != 0 ? ~u : u | (uint64_t{1} << 63);
}

// All ones if `c`, else zero. The compiler does not see through the result, so a select
// built on it stays a select instead of becoming a branch that would go either way at
// random.
uint64_t mask_if(bool c) {
  uint64_t m = uint64_t{0} - uint64_t{c};
#if defined(__GNUC__)
  asm("" : "+r"(m));
#endif
  return m;
}

// Whether two ordered_bits values both stand for a zero (-0 and +0, adjacent there).
bool both_zero(uint64_t a, uint64_t b) {
  constexpr uint64_t kMinusZero = ~(uint64_t{1} << 63);
  return a - kMinusZero <= 1 && b - kMinusZero <= 1;
}

}  // namespace

uint32_t FlowNetwork::add_resource(double capacity) {
  TF_ASSERT(capacity > 0 && std::isfinite(capacity), "resource capacity {} is not positive",
            capacity);
  capacity_.push_back(capacity);
  res_flows_.emplace_back();
  last_change_.push_back(0);
  stats_.emplace_back();
  res_mark_.push_back(0);
  filling_.emplace_back();
  res_scratch_.resize(capacity_.size() + 1);
  settled_.resize(capacity_.size() + 1);
  return static_cast<uint32_t>(capacity_.size() - 1);
}

void FlowNetwork::touch(uint32_t r, Time now) {
  const Time dt = now - last_change_[r];
  const size_t n = res_flows_[r].size();
  if (n > 0 && dt > 0) {
    stats_[r].busy_ps += dt;
    stats_[r].flow_ps += static_cast<double>(n) * static_cast<double>(dt);
  }
  last_change_[r] = now;
  if (res_mark_[entry(r)] != epoch_ + 1) {
    // Marked with the next epoch so one solve() lists it once.
    res_mark_[entry(r)] = epoch_ + 1;
    dirty_.push_back(r);
  }
}

uint32_t FlowNetwork::start(std::span<const uint32_t> resources, double bytes, Time now) {
  TF_ASSERT(bytes > 0 && !resources.empty(), "a flow needs bytes and resources");
  uint32_t id;
  if (free_flows_.empty()) {
    id = static_cast<uint32_t>(routes_.size());
    routes_.emplace_back();
    remaining_.push_back(0);
    rate_.push_back(0);
    updated_.push_back(0);
    flow_mark_.push_back(0);
    live_.push_back(0);
    flow_scratch_.resize(routes_.size() + 1);
    frozen_.resize(routes_.size() + 1);
    old_rate_.resize(routes_.size());
  } else {
    id = free_flows_.back();
    free_flows_.pop_back();
  }
  Route& rt = routes_[id];
  const auto hops = static_cast<uint32_t>(resources.size());
  const uint32_t room = std::max(hops, kShortRoute);
  if (room > rt.room) {
    rt.begin = static_cast<uint32_t>(route_.size());
    rt.room = room;
    route_.resize(route_.size() + room);
  }
  rt.hops = hops;
  std::copy(resources.begin(), resources.end(), route_.begin() + rt.begin);
  std::fill(route_.begin() + rt.begin + hops, route_.begin() + rt.begin + room,
            kPadHop - id % kSpares);
  remaining_[id] = bytes;
  rate_[id] = 0;
  updated_[id] = now;
  live_[id] = 1;
  for (uint32_t r : resources) {
    touch(r, now);
    res_flows_[r].push_back(id);
    stats_[r].bytes += bytes;
  }
  return id;
}

void FlowNetwork::finish(uint32_t flow, Time now) {
  TF_ASSERT(live_[flow] != 0, "finish of flow {} that is not running", flow);
  for (uint32_t r : route(flow)) {
    touch(r, now);
    auto& list = res_flows_[r];
    list.erase(std::find(list.begin(), list.end(), flow));
  }
  live_[flow] = 0;
  rate_[flow] = 0;
  remaining_[flow] = 0;
  free_flows_.push_back(flow);
}

void FlowNetwork::drain(uint32_t f, Time now) {
  if (now > updated_[f] && rate_[f] > 0) {
    remaining_[f] = std::max(
        0.0, remaining_[f] - rate_[f] * static_cast<double>(now - updated_[f]) * 1e-12);
  }
  updated_[f] = now;
}

FlowNetwork::Component FlowNetwork::grow_component(Time now) {
  const uint64_t epoch = ++epoch_;  // dirty resources already carry this mark
  // Resources -> their flows -> those flows' resources, in the order they are first
  // reached. The resources reached and the flows reached are each taken in that order,
  // whichever list is advanced first, so both are walked in turn, each to its end, until
  // neither grows. Appends are unconditional writes into scratch with room for everything
  // that advance the count only for a new item: the branches they replace would go either
  // way at random. Short routes take their padding too (spares, marked as listed).
  uint32_t* const cres = res_scratch_.data();
  uint32_t* const cflows = flow_scratch_.data();
  size_t n_res = dirty_.size();
  std::copy(dirty_.begin(), dirty_.end(), cres);
  dirty_.clear();
  double* const old_rate = old_rate_.data();
  uint64_t* const flow_mark = flow_mark_.data();
  uint64_t* const res_mark = res_mark_.data();
  std::fill(res_mark, res_mark + kSpares, epoch);
  double* const rate = rate_.data();
  const uint32_t* const route_base = route_.data();
  size_t n_flows = 0;
  // Marks never exceed the epoch, so an item is new when its mark is below it.
  const auto add_flow = [&](uint32_t f) {
    const bool fresh = flow_mark[f] < epoch;
    flow_mark[f] = epoch;
    cflows[n_flows] = f;
    n_flows += fresh ? 1 : 0;
  };
  const auto add_res = [&](uint32_t q) {
    const bool fresh = res_mark[entry(q)] < epoch;
    res_mark[entry(q)] = epoch;
    cres[n_res] = q;
    n_res += fresh ? 1 : 0;
  };
  size_t busy = 0;
  size_t ri = 0;
  size_t fi = 0;
  while (ri < n_res) {
    for (; ri < n_res; ++ri) {
      const std::vector<uint32_t>& list = res_flows_[cres[ri]];
      if (list.empty()) continue;
      ++busy;
      for (uint32_t f : list) add_flow(f);
    }
    for (; fi < n_flows; ++fi) {
      const uint32_t f = cflows[fi];
      drain(f, now);
      old_rate[fi] = rate[f];
      rate[f] = -1;  // unfrozen
      const Route rt = routes_[f];
      const uint32_t* const hop = route_base + rt.begin;
      if (rt.hops <= kShortRoute) {
        for (uint32_t j = 0; j < kShortRoute; ++j) add_res(hop[j]);
      } else {
        for (uint32_t j = 0; j < rt.hops; ++j) add_res(hop[j]);
      }
    }
  }
  return {n_res, n_flows, busy};
}

void FlowNetwork::set_leaf(uint32_t leaf, Share key) {
  // Walk to the root keeping the lesser of each pair; no branch depends on the keys.
  size_t i = leaf_base_ + leaf;
  Share v = key;
  Share* const tree = tree_.data();
  tree[i] = v;
  while (i > 1) {
    const Share sibling = tree[i ^ 1];
    v = sibling < v ? sibling : v;
    i >>= 1;
    tree[i] = v;
  }
}

void FlowNetwork::fill(const Component& c) {
  // Progressive filling: the resource with the smallest fair share saturates first.
  // Freezing a flow at the smallest share never lowers another resource's share, so an
  // entry whose share is out of date simply takes the current one when it surfaces.
  // (An entry whose share is current is the same as one set again: nothing else changed,
  // so it would surface next.) The entries sit in the leaves of a winner tree, which
  // gives the least in the same order as any priority queue would (keys are unique), at
  // a fixed cost per update.
  const uint32_t* const cres = res_scratch_.data();
  Filling* const st = filling_.data();
  leaf_base_ = std::bit_ceil(std::max(c.busy, size_t{1}));
  tree_.resize(2 * leaf_base_);
  Share* const tree = tree_.data();
  uint32_t leaf = 0;
  for (size_t i = 0; i < c.resources; ++i) {
    const uint32_t r = cres[i];
    const size_t n = res_flows_[r].size();
    Filling& x = st[entry(r)];
    x.left = capacity_[r];
    x.unfrozen = static_cast<double>(n);
    if (n > 0) {
      tree[leaf_base_ + leaf] =
          Share{ordered_bits(x.left / x.unfrozen)} << 64 | (uint64_t{r} << 32 | leaf);
      ++leaf;
    }
  }
  std::fill(tree + leaf_base_ + leaf, tree + 2 * leaf_base_, kDone);
  for (size_t i = leaf_base_; i-- > 1;) tree[i] = std::min(tree[2 * i], tree[2 * i + 1]);
  uint32_t* const frozen = frozen_.data();
  uint32_t* const settled = settled_.data();
  double* const rate = rate_.data();
  const uint32_t* const route_base = route_.data();
  size_t n_settled = 0;
  // Once every flow is frozen the entries left could only be dropped.
  size_t unfrozen_flows = c.flows;
  while (unfrozen_flows > 0) {
    const Share top = tree[1];
    // A resource with an unfrozen flow keeps its entry until it saturates.
    TF_ASSERT(top != kDone, "{} flows left unfrozen", unfrozen_flows);
    const auto r = static_cast<uint32_t>(top >> 32);
    const auto at = static_cast<uint32_t>(top);
    const Filling& x = st[entry(r)];
    if (x.unfrozen == 0) {
      // Its flows all froze elsewhere, so its load is final (summed after the loop).
      set_leaf(at, kDone);
      settled[n_settled++] = r;
      continue;
    }
    const double current = x.left / x.unfrozen;
    const uint64_t key = ordered_bits(current);
    const auto queued = static_cast<uint64_t>(top >> 64);
    if (key != queued && !both_zero(key, queued)) {
      // Out of date (the doubles differ): it takes its current share.
      set_leaf(at, Share{key} << 64 | (top & ~uint64_t{0}));
      continue;
    }
    set_leaf(at, kDone);
    // Rounding can leave a hair below zero; a flow always gets some bandwidth.
    const double share = std::max(current, capacity_[r] * 1e-12);
    // Its unfrozen flows freeze at the share (listed once each, also when a route crosses
    // the resource twice). Then every flow on it has its rate, so its load is final: the
    // sum load() takes, term by term in the same order (no frozen rate is below zero, so
    // its max(0, rate) adds the same).
    size_t n_frozen = 0;
    double sum = 0;
    for (uint32_t f : res_flows_[r]) {
      const double before = rate[f];
      const uint64_t open = mask_if(before < 0);
      const double after = std::bit_cast<double>((std::bit_cast<uint64_t>(share) & open) |
                                                 (std::bit_cast<uint64_t>(before) & ~open));
      rate[f] = after;
      sum += after;
      frozen[n_frozen] = f;
      n_frozen += open & 1;
    }
    stats_[r].peak_rate = std::max(stats_[r].peak_rate, sum);
    unfrozen_flows -= n_frozen;
    if (unfrozen_flows == 0) break;  // nothing reads what their resources have left
    // They take the share from their resources; the padding of a short route takes it
    // from a spare.
    const auto take = [&](uint32_t q) {
      Filling& y = st[entry(q)];
      y.left -= share;
      y.unfrozen -= 1;
    };
    for (size_t i = 0; i < n_frozen; ++i) {
      const Route rt = routes_[frozen[i]];
      const uint32_t* const hop = route_base + rt.begin;
      if (rt.hops <= kShortRoute) {
        for (uint32_t j = 0; j < kShortRoute; ++j) take(hop[j]);
      } else {
        for (uint32_t j = 0; j < rt.hops; ++j) take(hop[j]);
      }
    }
  }
  // The entries never surfaced have every flow frozen too. Resources without flows keep
  // their peak (a load of 0 never raises it).
  for (size_t i = 0; i < c.busy; ++i) {
    const Share key = tree[leaf_base_ + i];
    settled[n_settled] = static_cast<uint32_t>(key >> 32);
    n_settled += key != kDone ? 1 : 0;
  }
  for (size_t i = 0; i < n_settled; ++i) {
    const uint32_t q = settled[i];
    stats_[q].peak_rate = std::max(stats_[q].peak_rate, load(q));
  }
}

void FlowNetwork::solve(Time now) {
  const Component c = grow_component(now);
  const uint32_t* const cres = res_scratch_.data();
  const uint32_t* const cflows = flow_scratch_.data();
  comp_res_.assign(cres, cres + c.resources);
  double* const rate = rate_.data();
  if (c.flows == 1) {
    // A flow alone: filling saturates first the resource that offers it the least share
    // (capacity over the times its route crosses the resource), and the flow takes that
    // share (far above the floor of capacity * 1e-12).
    double least = std::numeric_limits<double>::infinity();
    for (uint32_t q : route(cflows[0])) {
      least = std::min(least, capacity_[q] / static_cast<double>(res_flows_[q].size()));
    }
    rate[cflows[0]] = least;
  } else if (c.flows > 1) {
    fill(c);
  }
  if (c.flows <= 1) {
    // With two or more flows, filling has set the peak rates.
    for (size_t i = 0; i < c.resources; ++i) {
      const uint32_t r = cres[i];
      stats_[r].peak_rate = std::max(stats_[r].peak_rate, load(r));
    }
  }
  const double* const old_rate = old_rate_.data();
  changed_flows_.resize(c.flows + 1);
  uint32_t* const changed = changed_flows_.data();
  size_t n_changed = 0;
  for (size_t i = 0; i < c.flows; ++i) {
    const uint32_t f = cflows[i];
    changed[n_changed] = f;
    n_changed += rate[f] != old_rate[i] ? 1 : 0;
  }
  changed_flows_.resize(n_changed);
}

Time FlowNetwork::completion(uint32_t flow) const {
  TF_ASSERT(live_[flow] != 0 && rate_[flow] > 0, "flow {} has no rate", flow);
  // remaining * 1e12 first: 64 B at 1e9 B/s is exactly 64000 ps this way, not 64000.00000000001.
  const double ps = std::ceil(remaining_[flow] * 1e12 / rate_[flow]);
  TF_ASSERT(ps < 9.2e18, "flow {} would take {} ps", flow, ps);
  return updated_[flow] + static_cast<Time>(ps);
}

double FlowNetwork::load(uint32_t r) const {
  double sum = 0;
  for (uint32_t f : res_flows_[r]) sum += std::max(0.0, rate_[f]);
  return sum;
}

ResourceStats FlowNetwork::stats(uint32_t r, Time now) const {
  ResourceStats s = stats_[r];
  const Time dt = now - last_change_[r];
  if (!res_flows_[r].empty() && dt > 0) {
    s.busy_ps += dt;
    s.flow_ps += static_cast<double>(res_flows_[r].size()) * static_cast<double>(dt);
  }
  return s;
}

}  // namespace tierflow::sim
