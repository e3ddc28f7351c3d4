#include "hw_models/cost.h"

#include <algorithm>

#include "core/checked.h"
#include "core/diagnostics.h"

namespace tierflow::hw {

Duration transfer_time_alone(const Route& route, Bytes bytes) {
  if (bytes.value == 0) return route.setup;
  // Saturates rather than overflows for absurd sizes.
  return Duration{saturating_add_ps(route.setup.ps, transfer_time(bytes, route.bandwidth).ps)};
}

std::optional<Duration> roofline_time(const Topology& t, size_t device, OpKind kind, Dtype dtype,
                                      double flops, Bytes bytes, std::optional<Dtype> dequant) {
  TF_ASSERT(device < t.devices.size(), "device index {} out of range", device);
  const Device& d = t.devices[device];
  const FlopRate peak = d.peak[static_cast<size_t>(dtype)];
  // An op with no FLOPs (an index range, a comparison making a mask) is timed by its bytes
  // alone: its dtype needs no peak rate.
  if (peak.flop_per_s <= 0.0 && flops > 0.0) return std::nullopt;
  const Tier& local = t.tiers[*t.tier_index(d.local_tier)];
  Duration compute{0};
  if (flops > 0.0) {
    const double dequant_eff = dequant ? d.dequant_efficiency(*dequant) : 1.0;
    compute =
        compute_time(flops, FlopRate{peak.flop_per_s * d.compute_efficiency(kind) * dequant_eff});
  }
  Duration memory{0};
  if (bytes.value > 0) {
    memory = transfer_time(bytes,
                           Bandwidth{local.read_bandwidth.bytes_per_s * d.memory_efficiency(kind)});
  }
  // A runtime whose host issues ops slower than the device runs them is bound by the host.
  return Duration{std::max(saturating_add_ps(std::max(compute.ps, memory.ps), d.launch_overhead.ps),
                           d.dispatch_compute.ps)};
}

std::optional<Duration> collective_time(const Topology& t, size_t device_tier,
                                        const CollectiveFabric& c, Bytes sent) {
  const Route* peer = t.route(device_tier, device_tier);
  if (c.domains <= 1) {
    if (peer == nullptr) return std::nullopt;
    return transfer_time_alone(*peer, sent);
  }
  Duration setup = c.setup;
  double bandwidth = c.out.bytes_per_s;
  if (c.ranks_per_domain > 1 && peer != nullptr) {
    setup = Duration{saturating_add_ps(setup.ps, peer->setup.ps)};
    bandwidth = std::min(bandwidth, peer->bandwidth.bytes_per_s);
  }
  if (sent.value == 0) return setup;
  return Duration{saturating_add_ps(setup.ps, transfer_time(sent, Bandwidth{bandwidth}).ps)};
}

std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier, OpKind kind,
                                Dtype dtype, double flops, Bytes bytes, Bytes collective,
                                std::optional<Dtype> dequant, const CollectiveFabric& fabric) {
  auto d = roofline_time(t, device, kind, dtype, flops, bytes, dequant);
  if (!d || collective.value == 0) return d;
  // Collectives cross the scale-up fabric (the device tier's peer route) alone, and, for a
  // group over several domains, the scale-out network between them.
  if (const auto c = collective_time(t, device_tier, fabric, collective)) {
    d->ps = std::max(d->ps, saturating_add_ps(c->ps, t.devices[device].launch_overhead.ps));
  }
  return d;
}

std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier,
                                const Workload& w, uint32_t op, const CollectiveFabric& fabric) {
  const Op& o = w.ops[op];
  return op_time(t, device, device_tier, o.kind, o.dtype, o.flops, Bytes{o.bytes},
                 Bytes{o.collective_bytes}, dequantized_dtype(w, o), fabric);
}

namespace {

/// Devices of class `device` that share one instance of a `scope` resource (a socket's CPU,
/// a tier): those of the busiest instance when the class does not divide evenly over them.
/// Only the plan's device class counts: its programs are the ones that place host steps
/// (the devices computing from the plan's device tier); other classes run no program of
/// the plan.
double devices_sharing(const Topology& t, size_t device, Scope scope) {
  const int count = t.devices[device].count;
  const int instances = std::max(1, t.instances(scope));
  return static_cast<double>(std::max(1, (count + instances - 1) / instances));
}

}  // namespace

// The host CPU's roofline. Each socket's CPU serves the devices of that socket, and each
// instance of its tier the devices of that instance, all running the same program at once:
// each gets an even share of the peak and of the tier's read bandwidth.
//
//   host op:  max(flops / (peak[dtype] / socket_share * compute_efficiency),
//                 bytes / (tier.read_bandwidth / tier_share * memory_efficiency))
//             + launch_overhead
//
// An op that dequantizes weights on the fly is timed like any other: its bytes are already
// the quantized ones, and the CPU's compute_efficiency covers the unpacking (the host's ops
// are attention over the KV cache, which reads no quantized weights).
std::optional<Duration> host_op_time(const Topology& t, size_t device, const Workload& w,
                                     uint32_t op) {
  TF_ASSERT(device < t.devices.size(), "device index {} out of range", device);
  const HostCpu& cpu = t.system.cpu;
  if (!cpu.present()) return std::nullopt;
  const Op& o = w.ops[op];
  const FlopRate peak = cpu.peak[static_cast<size_t>(o.dtype)];
  // As on a device, an op with no FLOPs is timed by its bytes alone.
  if (peak.flop_per_s <= 0.0 && o.flops > 0.0) return std::nullopt;
  const auto tier_index = t.tier_index(cpu.tier);
  TF_ASSERT(tier_index.has_value(), "host cpu tier '{}' is not a tier", cpu.tier);
  const Tier& tier = t.tiers[*tier_index];
  Duration compute{0};
  if (o.flops > 0.0) {
    const double share = devices_sharing(t, device, Scope::kSocket);
    compute = compute_time(o.flops, FlopRate{peak.flop_per_s / share * cpu.compute_efficiency});
  }
  Duration memory{0};
  if (o.bytes > 0) {
    const double share = devices_sharing(t, device, tier.per);
    memory = transfer_time(
        Bytes{o.bytes}, Bandwidth{tier.read_bandwidth.bytes_per_s / share * cpu.memory_efficiency});
  }
  return Duration{saturating_add_ps(std::max(compute.ps, memory.ps), cpu.launch_overhead.ps)};
}

}  // namespace tierflow::hw
