// `tierflow calibrate` (ARCHITECTURE §10): measures the machine a backend runs on and
// writes a topology that `tierflow plan`, `sim` and `replay` accept, so plans are made on
// measured numbers and the simulator's error can be measured against the same machine.
//
// Glossary
//   direction   one copy direction between the backend's device memory and host memory
//               ("host->device", "device->host"); on the CPU backend both are RAM arenas.
//   sweep       copy times over sizes from `min_bytes` to `max_bytes`, doubling; each
//               point is the median of `repeats` runs after one warm-up.
//   fit         time(bytes) = latency + bytes / bandwidth: the bandwidth is the
//               least-squares slope over the largest quarter of the sizes (at least three),
//               where caches no longer hold the data and the fixed cost is small; the
//               latency is the median of what the three smallest sizes take beyond their
//               bytes at that bandwidth. The fit's error is the largest |fit / measured - 1|
//               over the sweep (mid sizes that fit in a cache copy faster than the fit).
//   concurrent  aggregate bandwidth with k copies of the largest size in flight at once in
//               one direction (k = 1 .. max_concurrent); `engines` is the largest k that
//               still gains at least 10% over k - 1 (more copies only share bandwidth).
//   duplex      full when both directions at once move at least 1.5x the bytes one
//               direction moves alone; half otherwise.
//   compute     the achieved rate of the backend's compute engine: a GEMM's FLOP/s per
//               dtype, the device memory's copy bandwidth, and the cost of one empty step
//               (launch overhead).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hw_models/topology.h"

namespace tierflow::replay {

class Backend;

struct SizeSample {
  uint64_t bytes = 0;
  double seconds = 0;  ///< median of the repeats
  double spread = 0;   ///< (max - min) / median of the repeats
};

struct LinearFit {
  double latency = 0;    ///< seconds
  double bandwidth = 0;  ///< bytes per second
  double error = 0;      ///< largest |fit / measured - 1| over the samples
};

/// The fit of the glossary; samples with no time or no bytes are ignored.
LinearFit fit_latency_bandwidth(const std::vector<SizeSample>& samples);

struct CopyDirection {
  std::string from;  ///< tier id in the written topology ("ddr")
  std::string to;    ///< ("hbm")
  std::vector<SizeSample> sweep;
  LinearFit fit;
  std::vector<double> concurrent;  ///< aggregate bytes/s with k = 1.. copies in flight
  int engines = 1;                 ///< see the glossary
  /// Seconds a copy of the sweep's smallest size this way takes beyond its time alone while
  /// a large copy runs the other way (the link's contended setup); negative: not measured
  /// (the CPU backend's copies are memcpy threads, with no DMA to set up).
  double contended = -1;
};

struct ComputeRate {
  std::vector<std::pair<std::string, double>> flops;  ///< dtype -> achieved FLOP/s
  double memory_bandwidth = 0;                        ///< device memory copy, bytes/s
  double launch_overhead = 0;                         ///< seconds per empty step
};

struct Calibration {
  std::string backend;      ///< "cpu" or "cuda"
  std::string device_name;  ///< "NVIDIA H100 80GB HBM3", or the CPU model
  std::string date;         ///< UTC, ISO 8601, when the run started
  /// What ran it, as recorded in the topology: ("gpu", ...), ("driver", "580.65"),
  /// ("cuda_runtime", "13.0"), ("cpu", ...), ("kernel", ...), ("compiler", ...).
  std::vector<std::pair<std::string, std::string>> software;
  uint64_t device_capacity = 0;  ///< bytes of the device tier written
  uint64_t host_capacity = 0;    ///< bytes of the host tier written
  double host_memory_bandwidth = 0;
  std::vector<CopyDirection> directions;  ///< host->device first, then device->host
  bool full_duplex = true;
  double duplex_ratio = 0;  ///< both directions at once / one direction alone
  ComputeRate compute;
};

struct CalibrateOptions {
  uint64_t min_bytes = uint64_t{4} << 10;
  uint64_t max_bytes = uint64_t{256} << 20;
  int repeats = 5;
  int max_concurrent = 4;
  /// Device tier capacity to write; 0: the backend's (the GPU's free memory, or 1 GiB of
  /// RAM on the CPU backend).
  uint64_t device_capacity = 0;
  int device = 0;  ///< CUDA device ordinal
  /// Called with one line per measurement finished, for progress on a terminal.
  std::function<void(std::string_view)> progress;
};

// Pieces every backend's calibration shares.

/// The median of `seconds` (at least one) and its spread, as a sample of `bytes`.
SizeSample summarize(uint64_t bytes, std::vector<double> seconds);
/// One warm-up, then summarize() of `repeats` runs of `run` (seconds each).
SizeSample measure(uint64_t bytes, int repeats, const std::function<double()>& run);
/// `engines` of the glossary: the largest k whose aggregate still gains 10% over k - 1.
int engines_of(const std::vector<double>& concurrent);
/// Seconds from handing an empty compute step to program 0 of the started backend `b` to
/// the moment a thread waiting for its completion wakes (the median of 200 after 20
/// warm-ups): what each compute step of a replay costs beyond its work, the device's
/// launch overhead in a calibrated topology.
double step_round_trip(Backend& b);
/// Now, UTC, ISO 8601.
std::string utc_now();
/// The CPU's model name from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model();
/// Bytes of physical RAM, 0 when unknown.
uint64_t physical_ram();

/// The most host memory this process can expect to allocate: the kernel's MemAvailable,
/// lowered to the address-space limit (ulimit -v) when one is set; physical_ram() when
/// neither is known.
uint64_t usable_host_memory();

/// A backend's memory limit for all its arenas together, and how it was reached.
struct MemoryLimit {
  uint64_t bytes = 0;
  std::string origin;  ///< "given", or the default's reasoning
};

/// The CUDA backend's default limit: the GPU's free memory less `reserve` (the CUDA
/// context, cuBLAS; half the free memory when that leaves less than `reserve`), plus the
/// host memory the process can get (`host_usable`, usable_host_memory()) less an eighth,
/// at least 4 GiB, for the system: host arenas are pinned and cannot be paged out.
MemoryLimit cuda_default_memory_limit(uint64_t gpu_free, uint64_t reserve, uint64_t host_usable);

/// Measures this machine's RAM as the CPU backend uses it: memcpy threads between two RAM
/// arenas, and the busy-wait compute engine.
Calibration calibrate_cpu(const CalibrateOptions& o);

/// Measures a GPU through the CUDA backend's mechanisms: cudaMemcpyAsync between pinned
/// host memory and device memory, one stream per copy, GEMMs for the compute rate. Only
/// defined when the CUDA backend is built (TIERFLOW_HAVE_CUDA).
Calibration calibrate_cuda(const CalibrateOptions& o);

/// The dtype whose GEMM the CUDA backend runs for an op of `dtype` in gemm mode: fp32 and
/// fp16 as themselves; bf16, and every dtype without a plain cuBLAS GEMM (int8, fp8, ...),
/// as bf16, or as fp16 on GPUs before compute capability 8.0, which have no bf16 GEMM.
std::string_view gemm_dtype(std::string_view dtype, bool has_bf16);

/// The topology of a calibration: one device with its device tier, a host tier, and one
/// link between them whose bandwidth, efficiency, latency, DMA setup, copy engines and
/// duplex are the measured ones, every number cited to the run.
hw::Topology calibrated_topology(const Calibration& c);
/// That topology as a file (tierflow: hw/1), written by hw_models (hw::topology_yaml).
std::string topology_yaml(const Calibration& c);

/// What `tierflow calibrate` reports of a calibration whose topology was written to
/// `file`: per direction the fitted latency and bandwidth, the size sweep, concurrent
/// copies and engines; duplex; compute rates. As text, and as `tierflow.calibration/1`.
std::string calibration_table(const Calibration& c, const std::string& file);
std::string calibration_json(const Calibration& c, const std::string& file);

}  // namespace tierflow::replay
