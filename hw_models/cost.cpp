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

std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier, OpKind kind,
                                Dtype dtype, double flops, Bytes bytes, Bytes collective,
                                std::optional<Dtype> dequant) {
  auto d = roofline_time(t, device, kind, dtype, flops, bytes, dequant);
  if (!d || collective.value == 0) return d;
  // Collectives cross the scale-up fabric: the device tier's peer route, alone.
  if (const Route* peer = t.route(device_tier, device_tier)) {
    d->ps = std::max(d->ps, saturating_add_ps(transfer_time_alone(*peer, collective).ps,
                                              t.devices[device].launch_overhead.ps));
  }
  return d;
}

std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier,
                                const Workload& w, uint32_t op) {
  const Op& o = w.ops[op];
  return op_time(t, device, device_tier, o.kind, o.dtype, o.flops, Bytes{o.bytes},
                 Bytes{o.collective_bytes}, dequantized_dtype(w, o));
}

}  // namespace tierflow::hw
