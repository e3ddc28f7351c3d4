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

/// Time of one op on device class `device` computing from `device_tier`: the roofline, or
/// for a collective at least its `collective_bytes` over the device tier's peer route alone
/// (plus launch overhead). nullopt as for roofline_time.
std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier, OpKind kind,
                                Dtype dtype, double flops, Bytes bytes, Bytes collective,
                                std::optional<Dtype> dequant);

/// op_time of op `op` of workload `w` (its dequantized weights found by dequantized_dtype).
std::optional<Duration> op_time(const Topology& t, size_t device, size_t device_tier,
                                const Workload& w, uint32_t op);

/// Time of op `op` of workload `w` on the host CPU serving a device of class `device`
/// (HostCpu): the roofline with the socket's peak and its tier's read bandwidth,
/// each shared evenly by the devices of that socket (of that tier instance), plus the CPU's
/// launch overhead. nullopt when the topology describes no host CPU, or the op has FLOPs
/// in a dtype the CPU has no peak rate for.
std::optional<Duration> host_op_time(const Topology& t, size_t device, const Workload& w,
                                     uint32_t op);

}  // namespace tierflow::hw
