#include "sim/models/flows.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/diagnostics.h"

namespace tierflow::sim {

uint32_t FlowNetwork::add_resource(double capacity) {
  TF_ASSERT(capacity > 0 && std::isfinite(capacity), "resource capacity {} is not positive",
            capacity);
  res_.push_back(Resource{.capacity = capacity});
  return static_cast<uint32_t>(res_.size() - 1);
}

void FlowNetwork::touch(uint32_t r, Time now) {
  Resource& x = res_[r];
  const Time dt = now - x.last_change;
  if (!x.flows.empty() && dt > 0) {
    x.stats.busy_ps += dt;
    x.stats.flow_ps += static_cast<double>(x.flows.size()) * static_cast<double>(dt);
  }
  x.last_change = now;
  if (x.mark != epoch_ + 1) {
    // Marked with the next epoch so one solve() lists it once.
    x.mark = epoch_ + 1;
    dirty_.push_back(r);
  }
}

uint32_t FlowNetwork::start(std::span<const uint32_t> resources, double bytes, Time now) {
  TF_ASSERT(bytes > 0 && !resources.empty(), "a flow needs bytes and resources");
  uint32_t id;
  if (free_flows_.empty()) {
    id = static_cast<uint32_t>(flows_.size());
    flows_.emplace_back();
  } else {
    id = free_flows_.back();
    free_flows_.pop_back();
  }
  Flow& f = flows_[id];
  f.res.assign(resources.begin(), resources.end());
  f.remaining = bytes;
  f.rate = 0;
  f.updated = now;
  f.live = true;
  for (uint32_t r : f.res) {
    touch(r, now);
    res_[r].flows.push_back(id);
    res_[r].stats.bytes += bytes;
  }
  return id;
}

void FlowNetwork::finish(uint32_t flow, Time now) {
  Flow& f = flows_[flow];
  TF_ASSERT(f.live, "finish of flow {} that is not running", flow);
  for (uint32_t r : f.res) {
    touch(r, now);
    auto& list = res_[r].flows;
    list.erase(std::find(list.begin(), list.end(), flow));
  }
  f.live = false;
  f.rate = 0;
  f.remaining = 0;
  free_flows_.push_back(flow);
}

void FlowNetwork::drain(Flow& f, Time now) {
  if (now > f.updated && f.rate > 0) {
    f.remaining = std::max(0.0, f.remaining - f.rate * static_cast<double>(now - f.updated) * 1e-12);
  }
  f.updated = now;
}

void FlowNetwork::solve(Time now) {
  comp_res_.clear();
  comp_flows_.clear();
  changed_flows_.clear();
  ++epoch_;  // dirty resources already carry this mark
  comp_res_.swap(dirty_);
  // Grow the component: resources -> their flows -> those flows' resources.
  for (size_t i = 0; i < comp_res_.size(); ++i) {
    for (uint32_t fi : res_[comp_res_[i]].flows) {
      Flow& f = flows_[fi];
      if (f.mark == epoch_) continue;
      f.mark = epoch_;
      comp_flows_.push_back(fi);
      for (uint32_t q : f.res) {
        if (res_[q].mark == epoch_) continue;
        res_[q].mark = epoch_;
        comp_res_.push_back(q);
      }
    }
  }
  old_rate_.resize(comp_flows_.size());
  for (size_t i = 0; i < comp_flows_.size(); ++i) {
    Flow& f = flows_[comp_flows_[i]];
    drain(f, now);
    old_rate_[i] = f.rate;
    f.rate = -1;  // unfrozen
  }
  // Progressive filling: the resource with the smallest fair share saturates first.
  // Freezing a flow at the smallest share never lowers another resource's share, so a
  // heap entry whose resource changed since it was pushed is simply pushed again with
  // the new share when it surfaces.
  heap_.clear();
  for (uint32_t r : comp_res_) {
    Resource& x = res_[r];
    x.left = x.capacity;
    x.unfrozen = static_cast<uint32_t>(x.flows.size());
    x.version = 0;
    if (x.unfrozen > 0) heap_.push_back(Share{x.left / x.unfrozen, r, 0});
  }
  std::make_heap(heap_.begin(), heap_.end(), Share::later);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), Share::later);
    const Share top = heap_.back();
    heap_.pop_back();
    Resource& x = res_[top.resource];
    if (x.unfrozen == 0) continue;
    if (top.version != x.version) {
      heap_.push_back(Share{x.left / x.unfrozen, top.resource, x.version});
      std::push_heap(heap_.begin(), heap_.end(), Share::later);
      continue;
    }
    // Rounding can leave a hair below zero; a flow always gets some bandwidth.
    const double share = std::max(top.share, x.capacity * 1e-12);
    for (uint32_t fi : x.flows) {
      Flow& f = flows_[fi];
      if (f.rate >= 0) continue;
      f.rate = share;
      for (uint32_t q : f.res) {
        Resource& y = res_[q];
        y.left -= share;
        --y.unfrozen;
        ++y.version;
      }
    }
  }
  for (size_t i = 0; i < comp_flows_.size(); ++i) {
    if (flows_[comp_flows_[i]].rate != old_rate_[i]) changed_flows_.push_back(comp_flows_[i]);
  }
  for (uint32_t r : comp_res_) {
    Resource& x = res_[r];
    x.stats.peak_rate = std::max(x.stats.peak_rate, load(r));
  }
}

Time FlowNetwork::completion(uint32_t flow) const {
  const Flow& f = flows_[flow];
  TF_ASSERT(f.live && f.rate > 0, "flow {} has no rate", flow);
  // remaining * 1e12 first: 64 B at 1e9 B/s is exactly 64000 ps this way, not 64000.00000000001.
  const double ps = std::ceil(f.remaining * 1e12 / f.rate);
  TF_ASSERT(ps < 9.2e18, "flow {} would take {} ps", flow, ps);
  return f.updated + static_cast<Time>(ps);
}

double FlowNetwork::load(uint32_t r) const {
  double sum = 0;
  for (uint32_t f : res_[r].flows) sum += std::max(0.0, flows_[f].rate);
  return sum;
}

ResourceStats FlowNetwork::stats(uint32_t r, Time now) const {
  const Resource& x = res_[r];
  ResourceStats s = x.stats;
  const Time dt = now - x.last_change;
  if (!x.flows.empty() && dt > 0) {
    s.busy_ps += dt;
    s.flow_ps += static_cast<double>(x.flows.size()) * static_cast<double>(dt);
  }
  return s;
}

}  // namespace tierflow::sim
