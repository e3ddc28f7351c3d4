#include "hw_models/topology.h"

#include <algorithm>

#include "core/checked.h"
#include "core/diagnostics.h"

namespace tierflow::hw {

double Device::compute_efficiency(OpKind kind) const {
  const double e = compute_eff[static_cast<size_t>(kind)];
  return e > 0.0 ? e : default_compute_eff;
}

double Device::memory_efficiency(OpKind kind) const {
  const double e = memory_eff[static_cast<size_t>(kind)];
  return e > 0.0 ? e : default_memory_eff;
}

double Device::dequant_efficiency(Dtype weights) const {
  const double e = dequant_eff[static_cast<size_t>(weights)];
  return e > 0.0 ? e : 1.0;
}

namespace {

std::string dtypes_with_peak(const std::array<FlopRate, kDtypeNames.size()>& peak) {
  std::string out;
  for (size_t i = 0; i < peak.size(); ++i) {
    if (peak[i].flop_per_s <= 0.0) continue;
    if (!out.empty()) out += ", ";
    out += kDtypeNames[i];
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string Device::peak_dtypes() const {
  return dtypes_with_peak(peak);
}

std::string HostCpu::peak_dtypes() const {
  return dtypes_with_peak(peak);
}

bool HostCpu::present() const {
  return std::any_of(peak.begin(), peak.end(), [](FlopRate r) { return r.flop_per_s > 0.0; });
}

Bandwidth Link::peak(bool forward) const {
  if (!forward && bandwidth_reverse.bytes_per_s > 0.0) return bandwidth_reverse;
  return bandwidth;
}

Bandwidth Link::effective(bool forward) const {
  const double eff = !forward && efficiency_reverse > 0.0 ? efficiency_reverse : efficiency;
  return Bandwidth{peak(forward).bytes_per_s * eff};
}

int Topology::total_devices() const {
  int n = 0;
  for (const auto& d : devices) n += d.count;
  return n;
}

uint64_t Topology::reserved(size_t tier) const {
  uint64_t most = 0;
  for (const Device& d : devices) {
    if (d.local_tier == tiers[tier].id) most = std::max(most, d.reserved.value);
  }
  return most;
}

uint64_t Topology::staging(size_t tier) const {
  // Each device has its own buffers on each staged route; an instance of the tier holds
  // those of the devices that use it.
  const int instances_of_tier = instances(tiers[tier].per);
  const uint64_t devices_per_instance =
      static_cast<uint64_t>(std::max(1, total_devices() / std::max(1, instances_of_tier)));
  uint64_t bytes = 0;
  for (const auto& r : routes) {
    if (!r || r->buffers == 0) continue;
    for (size_t s : r->staging_tiers) {
      if (s == tier) {
        bytes = saturating_add(bytes, saturating_mul(r->buffer.value,
                                                         static_cast<uint64_t>(r->buffers)));
      }
    }
  }
  return saturating_mul(bytes, devices_per_instance);
}

uint64_t Topology::usable(size_t tier) const {
  const uint64_t capacity = tiers[tier].capacity.value;
  const uint64_t kept = saturating_add(reserved(tier), staging(tier));
  return capacity > kept ? capacity - kept : 0;
}

int Topology::instances(Scope s) const {
  switch (s) {
    case Scope::kDevice:
      return total_devices();
    case Scope::kSocket:
      return sockets();
    case Scope::kHost:
      return system.hosts;
    case Scope::kSupernode:
      return system.supernodes;
    case Scope::kCluster:
      return 1;
  }
  return 1;
}

int Topology::instance_of(Scope scope, size_t device, int index) const {
  TF_ASSERT(device < devices.size() && index >= 0 && index < devices[device].count,
            "device {} #{} out of range", device, index);
  const int per_host = devices[device].count / system.hosts;
  const int host = index / per_host;
  const int socket =
      host * system.sockets_per_host + (index % per_host) * system.sockets_per_host / per_host;
  switch (scope) {
    case Scope::kDevice: {
      int base = 0;
      for (size_t i = 0; i < device; ++i) base += devices[i].count;
      return base + index;
    }
    case Scope::kSocket:
      return socket;
    case Scope::kHost:
      return host;
    case Scope::kSupernode:
      return host / std::max(1, system.hosts / std::max(1, system.supernodes));
    case Scope::kCluster:
      return 0;
  }
  return 0;
}

const Route* Topology::route(size_t from, size_t to) const {
  const size_t n = tiers.size();
  if (from >= n || to >= n || routes.size() != n * n) return nullptr;
  const auto& r = routes[from * n + to];
  return r ? &*r : nullptr;
}

namespace {
template <class Vec>
std::optional<size_t> find_id(const Vec& v, std::string_view id) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].id == id) return i;
  }
  return std::nullopt;
}
}  // namespace

std::optional<size_t> Topology::tier_index(std::string_view id) const {
  return find_id(tiers, id);
}
std::optional<size_t> Topology::device_index(std::string_view id) const {
  return find_id(devices, id);
}
std::optional<size_t> Topology::link_index(std::string_view id) const {
  return find_id(links, id);
}
std::optional<size_t> Topology::switch_index(std::string_view id) const {
  return find_id(switches, id);
}

}  // namespace tierflow::hw
