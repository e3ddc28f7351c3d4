#include "sim/models/flows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/diagnostics.h"

namespace tierflow::sim {
namespace {

// Bits of a double that compare as unsigned integers the way the doubles compare (for
// the non-NaN values a share takes), and back.
uint64_t ordered_bits(double x) {
  const auto u = std::bit_cast<uint64_t>(x);
  return (u >> 63) != 0 ? ~u : u | (uint64_t{1} << 63);
}
double from_ordered_bits(uint64_t u) {
  return std::bit_cast<double>((u >> 63) != 0 ? u & ~(uint64_t{1} << 63) : ~u);
}

// A binary min-heap over plain integer keys. replace_top() lets an out-of-date top entry
// take its new key in one sift-down instead of a pop and a push.
template <typename Key>
void sift_down(std::vector<Key>& h, size_t i) {
  const size_t n = h.size();
  const Key x = h[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && h[c + 1] < h[c]) ++c;
    if (!(h[c] < x)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

template <typename Key>
void make_min_heap(std::vector<Key>& h) {
  for (size_t i = h.size() / 2; i-- > 0;) sift_down(h, i);
}

template <typename Key>
void replace_top(std::vector<Key>& h, Key k) {
  h[0] = k;
  sift_down(h, 0);
}

template <typename Key>
void pop_top(std::vector<Key>& h) {
  h[0] = h.back();
  h.pop_back();
  if (!h.empty()) sift_down(h, 0);
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

void FlowNetwork::solve(Time now) {
  comp_res_.clear();
  comp_flows_.clear();
  changed_flows_.clear();
  const uint64_t epoch = ++epoch_;  // dirty resources already carry this mark
  comp_res_.swap(dirty_);
  // Grow the component: resources -> their flows -> those flows' resources.
  for (size_t i = 0; i < comp_res_.size(); ++i) {
    for (uint32_t f : res_flows_[comp_res_[i]]) {
      if (flow_mark_[f] == epoch) continue;
      flow_mark_[f] = epoch;
      comp_flows_.push_back(f);
      for (uint32_t q : route(f)) {
        if (res_mark_[q] == epoch) continue;
        res_mark_[q] = epoch;
        comp_res_.push_back(q);
      }
    }
  }
  old_rate_.resize(comp_flows_.size());
  for (size_t i = 0; i < comp_flows_.size(); ++i) {
    const uint32_t f = comp_flows_[i];
    drain(f, now);
    old_rate_[i] = rate_[f];
    rate_[f] = -1;  // unfrozen
  }
  // Progressive filling: the resource with the smallest fair share saturates first.
  // Freezing a flow at the smallest share never lowers another resource's share, so a
  // heap entry whose share is out of date is simply pushed again with the current one
  // when it surfaces. (An entry whose share is current is the same as one pushed again:
  // nothing else changed, so it would surface next.)
  const auto entry = [](double share, uint32_t r) {
    return Share{ordered_bits(share)} << 64 | Share{r};
  };
  heap_.clear();
  for (uint32_t r : comp_res_) {
    left_[r] = capacity_[r];
    unfrozen_[r] = static_cast<uint32_t>(res_flows_[r].size());
    if (unfrozen_[r] > 0) heap_.push_back(entry(left_[r] / unfrozen_[r], r));
  }
  make_min_heap(heap_);
  while (!heap_.empty()) {
    const Share top = heap_.front();
    const auto r = static_cast<uint32_t>(top);
    if (unfrozen_[r] == 0) {
      pop_top(heap_);
      continue;
    }
    const double current = left_[r] / unfrozen_[r];
    if (current != from_ordered_bits(static_cast<uint64_t>(top >> 64))) {
      replace_top(heap_, entry(current, r));
      continue;
    }
    pop_top(heap_);
    // Rounding can leave a hair below zero; a flow always gets some bandwidth.
    const double share = std::max(current, capacity_[r] * 1e-12);
    for (uint32_t f : res_flows_[r]) {
      if (rate_[f] >= 0) continue;
      rate_[f] = share;
      for (uint32_t q : route(f)) {
        left_[q] -= share;
        --unfrozen_[q];
      }
    }
  }
  for (size_t i = 0; i < comp_flows_.size(); ++i) {
    if (rate_[comp_flows_[i]] != old_rate_[i]) changed_flows_.push_back(comp_flows_[i]);
  }
  for (uint32_t r : comp_res_) stats_[r].peak_rate = std::max(stats_[r].peak_rate, load(r));
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
