// Cost functions on a topology: raw facts (bytes, FLOPs, bandwidths) turned into time.
//
//   transfer alone:  setup + bytes / bottleneck
//                    |-- setup --|========= bytes / bandwidth =========|
//   roofline op:     max(flops / (peak[dtype] * compute_eff[kind] * dequant_eff[w]),
//                        bytes / (local.read_bandwidth * memory_eff[kind])) + launch_overhead
//                    where w is the dtype the op dequantizes its weights from (weight-only
//                    quantization; core/workload.h dequantized_dtype), dequant_eff 1 without;
//                    at least dispatch_compute (a runtime whose host issues ops slower).
//
// A fused weight-only kernel streams the quantized bytes (its memory term shrinks with them)
// and pays the dequantization in the math: a decode GEMV stays memory-bound and gains by the
// bytes ratio, a prefill GEMM stays compute-bound and runs at dequant_eff of the plain rate.
#pragma once

#include <optional>

#include "core/kinds.h"
#include "core/units.h"
#include "core/workload.h"
#include "hw_models/topology.h"

namespace tierflow::hw {

/// Time to move `bytes` over `route` with nothing else on it, rounded up to 1 ps.
Duration transfer_time_alone(const Route& route, Bytes bytes);

/// Roofline time of one op on device class `device`; nullopt when the op has FLOPs and the
/// device has no peak rate for `dtype` (an unsupported dtype is the caller's input error to
/// report). An op without FLOPs is timed by its bytes whatever its dtype. `dequant`: the
/// dtype of the weights the op dequantizes on the fly, if any.
std::optional<Duration> roofline_time(const Topology& t, size_t device, OpKind kind, Dtype dtype,
                                      double flops, Bytes bytes,
                                      std::optional<Dtype> dequant = std::nullopt);

/// How a tensor-parallel group's collectives cross the fabric. By default (one domain) the
/// device tier's peer route alone. A group over several scale-up domains (sets of devices
/// the peer route joins: hosts whose switch is their own) that a wider peer route joins (a
/// scale-out network) all-reduces as NCCL's rings do: through each domain's ranks over the
/// peer route and from domain to domain over the wider one, a ring (channel) per rank of a
/// domain, each crossing on that rank's own path. A ring's every link carries the bytes a
/// rank sends over the rings, `sent`, over the ranks of a domain, and a domain has one
/// crossing out per ring: the crossings out of a domain carry `sent` together, while each
/// rank sends its share of `sent` over the peer route. The slower decides: the peer route's
/// bandwidth, or what the crossings out of one domain get together (`out`: the sum over the
/// domain's ranks of each one's path, at its share of what the ranks' paths share). A
/// message crosses a domain's peer route and then the network before it is reduced: both
/// setups are paid.
///
///   collective:  peer.setup + setup + sent / min(peer.bandwidth, out)
///                (one rank a domain: setup + sent / out)
struct CollectiveFabric {
  int domains = 1;
  int ranks_per_domain = 1;
  Duration setup;  ///< the crossings' route setup (the slowest pair of neighbours)
  Bandwidth out;   ///< out of one domain over the crossings, all its ranks together
  bool operator==(const CollectiveFabric&) const = default;
};

/// Time of `sent` collective bytes per rank (no launch overhead) over the device tier's peer
/// route, or over `c` where it spans several domains; nullopt when the tier has no peer
/// route and `c` is one domain.
std::optional<Duration> collective_time(const Topology& t, size_t device_tier,
                                        const CollectiveFabric& c, Bytes sent);

/// Time of one op on device class `device` computing from `device_tier`: the roofline, or
/// for a collective at least its `collective_bytes` over `fabric` (default: the device tier's
/// peer route alone), plus launch overhead. nullopt as for roofline_time.
std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier, OpKind kind,
                                Dtype dtype, double flops, Bytes bytes, Bytes collective,
                                std::optional<Dtype> dequant, const CollectiveFabric& fabric = {});

/// op_time of op `op` of workload `w` (its dequantized weights found by dequantized_dtype).
std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier,
                                const Workload& w, uint32_t op,
                                const CollectiveFabric& fabric = {});

/// Time of op `op` of workload `w` on the host CPU serving a device of class `device`
/// (HostCpu): the roofline with the socket's peak and its tier's read bandwidth,
/// each shared evenly by the devices of that socket (of that tier instance), plus the CPU's
/// launch overhead. nullopt when the topology describes no host CPU, or the op has FLOPs
/// in a dtype the CPU has no peak rate for.
std::optional<Duration> host_op_time(const Topology& t, size_t device, const Workload& w,
                                     uint32_t op);

}  // namespace tierflow::hw
