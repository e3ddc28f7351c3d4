#include "sim/models/flows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/diagnostics.h"

namespace tierflow::sim {
namespace {

/// Routes of up to this many hops are walked without a loop.
constexpr uint32_t kShortRoute = 4;

// Bits of a double that compare as unsigned integers the way the doubles compare (for
// the non-NaN values a share takes), and back.
uint64_t ordered_bits(double x) {
  const auto u = std::bit_cast<uint64_t>(x);
  return (u >> 63) != 0 ? ~u : u | (uint64_t{1} << 63);
}
double from_ordered_bits(uint64_t u) {
  return std::bit_cast<double>((u >> 63) != 0 ? u & ~(uint64_t{1} << 63) : ~u);
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
  left_.push_back(0);
  unfrozen_.push_back(0);
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
  if (res_mark_[r] != epoch_ + 1) {
    // Marked with the next epoch so one solve() lists it once.
    res_mark_[r] = epoch_ + 1;
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
  } else {
    id = free_flows_.back();
    free_flows_.pop_back();
  }
  Route& rt = routes_[id];
  const auto hops = static_cast<uint32_t>(resources.size());
  if (hops > rt.room) {
    rt.begin = static_cast<uint32_t>(route_.size());
    rt.room = hops;
    route_.resize(route_.size() + hops);
  }
  rt.hops = hops;
  std::copy(resources.begin(), resources.end(), route_.begin() + rt.begin);
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

void FlowNetwork::set_leaf(uint32_t leaf, Share key) {
  // Walk to the root keeping the lesser of each pair; no branch depends on the keys.
  size_t i = leaf_base_ + leaf;
  Share v = key;
  tree_[i] = v;
  while (i > 1) {
    const Share sibling = tree_[i ^ 1];
    v = sibling < v ? sibling : v;
    i >>= 1;
    tree_[i] = v;
  }
}

void FlowNetwork::solve(Time now) {
  const uint64_t epoch = ++epoch_;  // dirty resources already carry this mark
  // Grow the component: resources -> their flows -> those flows' resources, in the order
  // they are first reached. Appends are unconditional writes into scratch with room for
  // everything that advance the count only for a new item: the branches they replace
  // would go either way at random.
  if (res_scratch_.size() < capacity_.size() + 1) res_scratch_.resize(capacity_.size() + 1);
  if (flow_scratch_.size() < routes_.size() + 1) flow_scratch_.resize(routes_.size() + 1);
  if (old_rate_.size() < routes_.size()) old_rate_.resize(routes_.size());
  uint32_t* const cres = res_scratch_.data();
  uint32_t* const cflows = flow_scratch_.data();
  size_t n_res = dirty_.size();
  std::copy(dirty_.begin(), dirty_.end(), cres);
  dirty_.clear();
  double* const old_rate = old_rate_.data();
  uint64_t* const flow_mark = flow_mark_.data();
  uint64_t* const res_mark = res_mark_.data();
  double* const rate = rate_.data();
  size_t n_flows = 0;
  const uint32_t* const route_base = route_.data();
  for (size_t ri = 0, fi = 0; ri < n_res; ++ri) {
    for (uint32_t f : res_flows_[cres[ri]]) {
      const bool fresh = flow_mark[f] != epoch;
      flow_mark[f] = epoch;
      cflows[n_flows] = f;
      n_flows += fresh ? 1 : 0;
    }
    for (; fi < n_flows; ++fi) {
      const Route rt = routes_[cflows[fi]];
      const uint32_t* hop = route_base + rt.begin;
      if (rt.hops <= kShortRoute) {
        // Repeating the last hop is harmless (it is marked by then), so short routes
        // take the same four steps and no loop branch.
        const uint32_t last = rt.hops - 1;
        for (uint32_t j = 0; j < kShortRoute; ++j) {
          const uint32_t q = hop[std::min(j, last)];
          const bool fresh = res_mark[q] != epoch;
          res_mark[q] = epoch;
          cres[n_res] = q;
          n_res += fresh ? 1 : 0;
        }
      } else {
        for (uint32_t j = 0; j < rt.hops; ++j) {
          const uint32_t q = hop[j];
          const bool fresh = res_mark[q] != epoch;
          res_mark[q] = epoch;
          cres[n_res] = q;
          n_res += fresh ? 1 : 0;
        }
      }
    }
  }
  comp_res_.assign(cres, cres + n_res);
  comp_flows_.assign(cflows, cflows + n_flows);
  // Each flow is drained to now and unfrozen.
  for (size_t i = 0; i < n_flows; ++i) {
    const uint32_t f = cflows[i];
    drain(f, now);
    old_rate[i] = rate[f];
    rate[f] = -1;  // unfrozen
  }
  // Progressive filling: the resource with the smallest fair share saturates first.
  // Freezing a flow at the smallest share never lowers another resource's share, so an
  // entry whose share is out of date simply takes the current one when it surfaces.
  // (An entry whose share is current is the same as one set again: nothing else changed,
  // so it would surface next.) The entries sit in the leaves of a winner tree, which
  // gives the least in the same order as any priority queue would (keys are unique), at
  // a fixed cost per update.
  const auto entry = [](double share, uint32_t r, uint32_t leaf) {
    return Share{ordered_bits(share)} << 64 | Share{r} << 32 | Share{leaf};
  };
  double* const left = left_.data();
  uint32_t* const unfrozen = unfrozen_.data();
  uint32_t leaves = 0;
  for (size_t i = 0; i < n_res; ++i) {
    const uint32_t r = cres[i];
    left[r] = capacity_[r];
    unfrozen[r] = static_cast<uint32_t>(res_flows_[r].size());
    leaves += unfrozen[r] > 0 ? 1U : 0U;
  }
  leaf_base_ = std::bit_ceil(std::max(leaves, 1U));
  tree_.resize(2 * leaf_base_);
  Share* const tree = tree_.data();
  uint32_t leaf = 0;
  for (size_t i = 0; i < n_res; ++i) {
    const uint32_t r = cres[i];
    if (unfrozen[r] > 0) {
      tree[leaf_base_ + leaf] = entry(left[r] / unfrozen[r], r, leaf);
      ++leaf;
    }
  }
  std::fill(tree + leaf_base_ + leaf, tree + 2 * leaf_base_, kDone);
  for (size_t i = leaf_base_; i-- > 1;) tree[i] = std::min(tree[2 * i], tree[2 * i + 1]);
  // Once every flow is frozen the entries left could only be dropped.
  size_t unfrozen_flows = n_flows;
  while (unfrozen_flows > 0) {
    const Share top = tree[1];
    // A resource with an unfrozen flow keeps its entry until it saturates.
    TF_ASSERT(top != kDone, "{} flows left unfrozen", unfrozen_flows);
    const auto r = static_cast<uint32_t>(top >> 32);
    const auto at = static_cast<uint32_t>(top);
    if (unfrozen[r] == 0) {
      set_leaf(at, kDone);
      continue;
    }
    const double current = left[r] / unfrozen[r];
    if (current != from_ordered_bits(static_cast<uint64_t>(top >> 64))) {
      set_leaf(at, entry(current, r, at));
      continue;
    }
    set_leaf(at, kDone);
    // Rounding can leave a hair below zero; a flow always gets some bandwidth.
    const double share = std::max(current, capacity_[r] * 1e-12);
    for (uint32_t f : res_flows_[r]) {
      if (rate[f] >= 0) continue;
      rate[f] = share;
      --unfrozen_flows;
      for (uint32_t q : route(f)) {
        left[q] -= share;
        --unfrozen[q];
      }
    }
  }
  changed_flows_.resize(n_flows + 1);
  uint32_t* const changed = changed_flows_.data();
  size_t n_changed = 0;
  for (size_t i = 0; i < n_flows; ++i) {
    const uint32_t f = cflows[i];
    changed[n_changed] = f;
    n_changed += rate[f] != old_rate[i] ? 1 : 0;
  }
  changed_flows_.resize(n_changed);
  for (size_t i = 0; i < n_res; ++i) {
    const uint32_t r = cres[i];
    stats_[r].peak_rate = std::max(stats_[r].peak_rate, load(r));
  }
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
