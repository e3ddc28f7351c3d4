// `tierflow calibrate --backend cuda`: calibrate_cuda() of calibration.h, measured with the
// CUDA backend's own mechanisms (pinned host memory, cudaMemcpyAsync on non-blocking
// streams timed by events, cuBLAS GEMMs).
//
//   sweep       one stream; per size, a warm-up copy, then `repeats` copies each
//               bracketed by two events; the median of their elapsed times.
//   concurrent  k streams wait on one start event recorded on the first, each copies the
//               largest size from its own buffer to its own buffer, and the first waits on
//               the others' end events before the end event: k * max_bytes / elapsed.
//   duplex      the same with one copy in each direction, against the faster direction
//               alone (k = 1).
//   compute     GEMMs of n^3 (n = 8192, less when GPU memory is short) per dtype; a
//               device-to-device copy of one fp32 operand (far larger than the L2) for the
//               memory bandwidth (read and written bytes); launch overhead = the CUDA
//               backend's empty compute step from hand-over to the waiting thread
//               (step_round_trip of calibration.h), as every replayed step pays it.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <sys/utsname.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "core/units.h"
#include "tools/replay/calibration.h"
#include "tools/replay/cuda_backend.h"
#include "tools/replay/cuda_check.h"
#include "tools/replay/cuda_kernels.h"

namespace tierflow::replay {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kGemmDim = 8192;

/// Every CUDA object calibration makes, released in close() (checked) or, when an error
/// unwinds the stack, by the destructor (unchecked: the error in flight says more).
class Resources {
 public:
  Resources() = default;
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;
  ~Resources() { release(/*checked=*/false); }

  void* device(size_t bytes) {
    void* p = nullptr;
    TF_CUDA(cudaMalloc(&p, bytes));
    device_.push_back(p);
    return p;
  }
  void* host(size_t bytes) {
    void* p = nullptr;
    TF_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    host_.push_back(p);
    return p;
  }
  cudaStream_t stream() {
    cudaStream_t s = nullptr;
    TF_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams_.push_back(s);
    return s;
  }
  cudaEvent_t event() {
    cudaEvent_t e = nullptr;
    TF_CUDA(cudaEventCreateWithFlags(&e, cudaEventDefault));
    events_.push_back(e);
    return e;
  }
  cublasHandle_t blas() {
    TF_CUBLAS(cublasCreate(&blas_));
    return blas_;
  }
  void close() { release(/*checked=*/true); }

 private:
  void release(bool checked) {
    const auto check = [checked](cudaError_t e, const char* call) {
      if (checked) cuda_check(e, call, __FILE__, __LINE__);
    };
    if (blas_ != nullptr) {
      const cublasStatus_t s = cublasDestroy(blas_);
      blas_ = nullptr;
      if (checked) TF_CUBLAS(s);
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize()");
    for (cudaEvent_t e : std::exchange(events_, {})) check(cudaEventDestroy(e), "cudaEventDestroy");
    for (cudaStream_t s : std::exchange(streams_, {})) {
      check(cudaStreamDestroy(s), "cudaStreamDestroy");
    }
    for (void* p : std::exchange(device_, {})) check(cudaFree(p), "cudaFree");
    for (void* p : std::exchange(host_, {})) check(cudaFreeHost(p), "cudaFreeHost");
  }

  std::vector<void*> device_, host_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;
  cublasHandle_t blas_ = nullptr;
};

/// Seconds between two completed events.
double elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  TF_CUDA(cudaEventElapsedTime(&ms, a, b));
  return double(ms) / 1e3;
}

std::string rate(double bytes_per_s) {
  return fmt::format("{:.2f} GB/s", bytes_per_s / 1e9);
}

std::string cuda_version(int v) {
  return fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}

/// The NVIDIA kernel module's version ("580.65.06") from /proc, or empty.
std::string nvidia_driver() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return {};
  std::istringstream words(line);
  std::string w;
  while (words >> w) {
    const bool numeric = !w.empty() && std::isdigit(static_cast<unsigned char>(w[0])) &&
                         w.find('.') != std::string::npos &&
                         w.find_first_not_of("0123456789.") == std::string::npos;
    if (numeric) return w;
  }
  return {};
}

struct Buffers {
  std::vector<void*> host, device;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> start, end;
};

/// Copies `copies[i] = (dst, src)` at once on streams 0..n-1 (see the file comment);
/// seconds from the first start to the last end.
double together(const Buffers& b, const std::vector<std::pair<void*, const void*>>& copies,
                size_t bytes) {
  cudaStream_t first = b.streams[0];
  TF_CUDA(cudaEventRecord(b.start[0], first));
  for (size_t i = 1; i < copies.size(); ++i) {
    TF_CUDA(cudaStreamWaitEvent(b.streams[i], b.start[0], 0));
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    TF_CUDA(
        cudaMemcpyAsync(copies[i].first, copies[i].second, bytes, cudaMemcpyDefault, b.streams[i]));
  }
  for (size_t i = 1; i < copies.size(); ++i) {
    TF_CUDA(cudaEventRecord(b.end[i], b.streams[i]));
    TF_CUDA(cudaStreamWaitEvent(first, b.end[i], 0));
  }
  TF_CUDA(cudaEventRecord(b.end[0], first));
  TF_CUDA(cudaEventSynchronize(b.end[0]));
  return elapsed(b.start[0], b.end[0]);
}

CopyDirection measure_direction(const CalibrateOptions& o, const Buffers& b, bool to_device,
                                const std::function<void(const std::string&)>& say) {
  CopyDirection d;
  d.from = to_device ? "ddr" : "hbm";
  d.to = to_device ? "hbm" : "ddr";
  const std::string name = to_device ? "host->device" : "device->host";
  const auto pair = [&](size_t i) {
    return to_device ? std::pair<void*, const void*>{b.device[i], b.host[i]}
                     : std::pair<void*, const void*>{b.host[i], b.device[i]};
  };
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const SizeSample s =
        measure(bytes, o.repeats, [&] { return together(b, {pair(0)}, size_t(bytes)); });
    d.sweep.push_back(s);
    say(fmt::format("{} {}: {:.2f} us, {} (spread {:.0f}%)", name, to_string_approx(Bytes{bytes}),
                    s.seconds * 1e6, rate(double(bytes) / s.seconds), 100 * s.spread));
    if (bytes > o.max_bytes / 2) break;  // the next doubling would pass max_bytes
  }
  d.fit = fit_latency_bandwidth(d.sweep);
  say(fmt::format("{} fit: latency {:.2f} us, bandwidth {}, error {:.1f}%", name,
                  d.fit.latency * 1e6, rate(d.fit.bandwidth), 100 * d.fit.error));
  for (int k = 1; k <= o.max_concurrent; ++k) {
    std::vector<std::pair<void*, const void*>> copies;
    copies.reserve(size_t(k));
    for (int i = 0; i < k; ++i) copies.push_back(pair(size_t(i)));
    const SizeSample s =
        measure(o.max_bytes, o.repeats, [&] { return together(b, copies, size_t(o.max_bytes)); });
    d.concurrent.push_back(double(k) * double(o.max_bytes) / s.seconds);
    say(fmt::format("{} {} cop{} at once: {}", name, k, k == 1 ? "y" : "ies",
                    rate(d.concurrent.back())));
  }
  d.engines = engines_of(d.concurrent);
  return d;
}

/// Seconds a copy of the sweep's smallest size takes (host->device when `to_device`) beyond
/// `alone`, its time by itself, while a copy of the largest size runs the other way: the
/// link's contended setup. Each round issues the large copy on stream 0 and, from the same
/// moment, kSide small copies one after another on stream 1, each timed by its own events
/// (as a replay times a copy); the first of a round and those that end after the large
/// copy are left out. The median over the rounds after a warm-up round, at least 0; -1 (not
/// measured) when no small copy ended beside the large one (a --max-size too small).
double measure_contended(const CalibrateOptions& o, Resources& r, const Buffers& b, bool to_device,
                         double alone) {
  constexpr int kSide = 8;
  std::vector<cudaEvent_t> begin, end;
  for (int i = 0; i < kSide; ++i) {
    begin.push_back(r.event());
    end.push_back(r.event());
  }
  const size_t small = size_t(o.min_bytes);
  cudaStream_t big = b.streams[0];
  cudaStream_t side = b.streams[1];
  std::vector<double> extra;
  for (int round = 0; round <= o.repeats; ++round) {
    TF_CUDA(cudaEventRecord(b.start[0], big));
    TF_CUDA(cudaStreamWaitEvent(side, b.start[0], 0));
    void* big_dst = to_device ? b.host[0] : b.device[0];
    const void* big_src = to_device ? b.device[0] : b.host[0];
    TF_CUDA(cudaMemcpyAsync(big_dst, big_src, size_t(o.max_bytes), cudaMemcpyDefault, big));
    for (int i = 0; i < kSide; ++i) {
      TF_CUDA(cudaEventRecord(begin[size_t(i)], side));
      void* dst = to_device ? b.device[1] : b.host[1];
      const void* src = to_device ? b.host[1] : b.device[1];
      TF_CUDA(cudaMemcpyAsync(dst, src, small, cudaMemcpyDefault, side));
      TF_CUDA(cudaEventRecord(end[size_t(i)], side));
    }
    TF_CUDA(cudaEventRecord(b.end[0], big));
    TF_CUDA(cudaEventSynchronize(b.end[0]));
    TF_CUDA(cudaEventSynchronize(end.back()));
    if (round == 0) continue;  // warm-up
    const double big_end = elapsed(b.start[0], b.end[0]);
    for (size_t i = 1; i < size_t(kSide); ++i) {
      if (elapsed(b.start[0], end[i]) >= big_end) continue;  // not beside the large copy
      extra.push_back(elapsed(begin[i], end[i]) - alone);
    }
  }
  if (extra.empty()) return -1;
  return std::max(0.0, summarize(0, std::move(extra)).seconds);
}

void measure_compute(const CalibrateOptions& o, Resources& r, Calibration& c, size_t free_bytes,
                     const std::function<void(const std::string&)>& say) {
  // Three fp32 n x n matrices in at most a quarter of the free memory.
  uint32_t n = kGemmDim;
  while (n > 256 && 3 * uint64_t(n) * n * sizeof(float) > free_bytes / 4) n /= 2;
  const size_t operand = size_t(n) * n * sizeof(float);
  void* a = r.device(operand);
  void* b = r.device(operand);
  void* out = r.device(operand);
  cudaStream_t s = r.stream();
  cudaEvent_t e0 = r.event();
  cudaEvent_t e1 = r.event();
  TF_CUDA(cuda_launch_fill(s, a, operand, /*seed=*/1));
  TF_CUDA(cuda_launch_fill(s, b, operand, /*seed=*/2));
  cublasHandle_t h = r.blas();
  TF_CUBLAS(cublasSetStream(h, s));
  TF_CUBLAS(cublasSetWorkspace(h, r.device(kCublasWorkspace), kCublasWorkspace));
  const float alpha = 1.0f, beta = 0.0f;
  const int dim = int(n);
  const std::pair<const char*, cudaDataType> types[] = {
      {"bf16", CUDA_R_16BF}, {"fp16", CUDA_R_16F}, {"fp32", CUDA_R_32F}};
  cudaDeviceProp prop{};
  TF_CUDA(cudaGetDeviceProperties(&prop, o.device));
  for (const auto& entry : types) {
    // Named copies, not structured bindings: lambdas capture them under every compiler.
    const char* dtype = entry.first;
    const cudaDataType type = entry.second;
    if (type == CUDA_R_16BF && prop.major < 8) {
      say(fmt::format("gemm {}: skipped, compute capability {}.{} has no bf16 GEMM", dtype,
                      prop.major, prop.minor));
      continue;
    }
    const SizeSample t = measure(0, o.repeats, [&] {
      TF_CUDA(cudaEventRecord(e0, s));
      TF_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &alpha, a, type, dim, b,
                             type, dim, &beta, out, type, dim, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
      TF_CUDA(cudaEventRecord(e1, s));
      TF_CUDA(cudaEventSynchronize(e1));
      return elapsed(e0, e1);
    });
    const double flops = 2.0 * double(n) * double(n) * double(n) / t.seconds;
    c.compute.flops.emplace_back(dtype, flops);
    say(fmt::format("gemm {} {}^3: {:.3f} ms, {:.1f} TFLOP/s", dtype, n, t.seconds * 1e3,
                    flops / 1e12));
  }
  const SizeSample m = measure(operand, o.repeats, [&] {
    TF_CUDA(cudaEventRecord(e0, s));
    TF_CUDA(cudaMemcpyAsync(out, a, operand, cudaMemcpyDeviceToDevice, s));
    TF_CUDA(cudaEventRecord(e1, s));
    TF_CUDA(cudaEventSynchronize(e1));
    return elapsed(e0, e1);
  });
  // The copy reads the operand and writes it: the tier's bandwidth counts both, as an
  // op's bytes do.
  c.compute.memory_bandwidth = 2.0 * double(operand) / m.seconds;
  say(fmt::format("device memory (a copy of {}, read and written): {}", to_string_approx(Bytes{operand}),
                  rate(c.compute.memory_bandwidth)));
}

/// The CUDA backend's own cost of a compute step: an empty one handed to it, launched,
/// seen to end by its poller and delivered, as a replay's steps are.
double backend_step(int device) {
  CudaBackendOptions bo;
  bo.device = device;
  bo.memory_limit = kMiB;
  CudaBackend backend(bo);
  BackendSetup setup;
  setup.arenas.push_back(ArenaSpec{"hbm", 4096, 4096, true});
  setup.programs = 1;
  backend.start(setup);
  const double s = step_round_trip(backend);
  backend.stop();
  return s;
}

}  // namespace

Calibration calibrate_cuda(const CalibrateOptions& options) {
  CalibrateOptions o = options;
  o.repeats = std::max(1, o.repeats);
  o.max_concurrent = std::max(1, o.max_concurrent);
  o.min_bytes = std::max<uint64_t>(1, o.min_bytes);
  o.max_bytes = std::max(o.min_bytes, o.max_bytes);
  const auto say = [&o](const std::string& line) {
    if (o.progress) o.progress(line);
  };

  Calibration c;
  c.backend = "cuda";
  c.date = utc_now();
  TF_CUDA(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  TF_CUDA(cudaGetDeviceProperties(&prop, o.device));
  c.device_name = prop.name;
  int driver = 0, runtime = 0, blas_major = 0, blas_minor = 0, blas_patch = 0;
  TF_CUDA(cudaDriverGetVersion(&driver));
  TF_CUDA(cudaRuntimeGetVersion(&runtime));
  TF_CUBLAS(cublasGetProperty(MAJOR_VERSION, &blas_major));
  TF_CUBLAS(cublasGetProperty(MINOR_VERSION, &blas_minor));
  TF_CUBLAS(cublasGetProperty(PATCH_LEVEL, &blas_patch));
  c.software.emplace_back("gpu", fmt::format("{}, compute capability {}.{}, {} SMs", prop.name,
                                             prop.major, prop.minor, prop.multiProcessorCount));
  const std::string module = nvidia_driver();
  c.software.emplace_back(
      "driver", module.empty() ? fmt::format("CUDA {}", cuda_version(driver))
                               : fmt::format("{} (CUDA {})", module, cuda_version(driver)));
  c.software.emplace_back("cuda_runtime", cuda_version(runtime));
  c.software.emplace_back("cublas", fmt::format("{}.{}.{}", blas_major, blas_minor, blas_patch));
  c.software.emplace_back("compiler", cuda_compiler_version());
  c.software.emplace_back("cpu", cpu_model());
  utsname u{};
  if (uname(&u) == 0) c.software.emplace_back("kernel", fmt::format("{} {}", u.sysname, u.release));

  size_t free_bytes = 0, total = 0;
  TF_CUDA(cudaMemGetInfo(&free_bytes, &total));
  if (o.device_capacity > 0) {
    c.device_capacity = o.device_capacity;
  } else {
    // The free memory in whole GiB, less 1 GiB for the CUDA context, cuBLAS and the
    // runtime's own allocations; half the free memory (whole MiB) on a GPU with under 2 GiB.
    const uint64_t whole = uint64_t(free_bytes) / kGiB * kGiB;
    c.device_capacity = whole >= 2 * kGiB ? whole - kGiB : uint64_t(free_bytes) / 2 / kMiB * kMiB;
  }
  c.host_capacity = physical_ram();
  say(fmt::format("{}: {} free of {}; device tier {}, host tier {}", c.device_name,
                  to_string_approx(Bytes{free_bytes}), to_string_approx(Bytes{total}),
                  to_string_approx(Bytes{c.device_capacity}),
                  to_string_approx(Bytes{c.host_capacity})));

  const size_t count = size_t(std::max(2, o.max_concurrent));
  const uint64_t need = count * o.max_bytes;
  if (need + kGiB > free_bytes) {
    throw CudaError(fmt::format(
        "calibration needs {} of GPU memory ({} buffers of {}) and 1 GiB to spare, but {} is "
        "free: lower the largest size or the number of concurrent copies",
        to_string_approx(Bytes{need}), count, to_string_approx(Bytes{o.max_bytes}),
        to_string_approx(Bytes{free_bytes})));
  }
  Resources r;
  Buffers b;
  for (size_t i = 0; i < count; ++i) {
    b.host.push_back(r.host(size_t(o.max_bytes)));
    b.device.push_back(r.device(size_t(o.max_bytes)));
    b.streams.push_back(r.stream());
    b.start.push_back(r.event());
    b.end.push_back(r.event());
    // Touch every page once so that no first-use cost lands in a measurement.
    std::memset(b.host.back(), int(i + 1), size_t(o.max_bytes));
    TF_CUDA(cudaMemset(b.device.back(), 0, size_t(o.max_bytes)));
  }
  TF_CUDA(cudaDeviceSynchronize());  // the memsets ran on the default stream

  const SizeSample host = measure(o.max_bytes, o.repeats, [&] {
    const Clock::time_point t0 = Clock::now();
    std::memcpy(b.host[1], b.host[0], size_t(o.max_bytes));
    return std::chrono::duration<double>(Clock::now() - t0).count();
  });
  c.host_memory_bandwidth = double(o.max_bytes) / host.seconds;
  say(fmt::format("host memcpy {}: {}", to_string_approx(Bytes{o.max_bytes}),
                  rate(c.host_memory_bandwidth)));

  c.directions.push_back(measure_direction(o, b, /*to_device=*/true, say));
  c.directions.push_back(measure_direction(o, b, /*to_device=*/false, say));

  const SizeSample both = measure(o.max_bytes, o.repeats, [&] {
    return together(b, {{b.device[0], b.host[0]}, {b.host[1], b.device[1]}}, size_t(o.max_bytes));
  });
  const double alone = std::max(c.directions[0].concurrent[0], c.directions[1].concurrent[0]);
  c.duplex_ratio = 2.0 * double(o.max_bytes) / both.seconds / alone;
  c.full_duplex = c.duplex_ratio >= 1.5;
  say(fmt::format("both directions at once: {:.2f}x the faster one alone ({} duplex)",
                  c.duplex_ratio, c.full_duplex ? "full" : "half"));

  for (size_t k = 0; k < 2; ++k) {
    CopyDirection& d = c.directions[k];
    d.contended = measure_contended(o, r, b, /*to_device=*/k == 0, d.sweep.front().seconds);
    say(d.contended < 0
            ? fmt::format("{} {} beside {} the other way: not measured (the large copy ended "
                          "before any of them)",
                          d.from + "->" + d.to, to_string_approx(Bytes{d.sweep.front().bytes}),
                          to_string_approx(Bytes{o.max_bytes}))
            : fmt::format("{} {} while {} of the other way runs: +{:.2f} us", d.from + "->" + d.to,
                          to_string_approx(Bytes{d.sweep.front().bytes}),
                          to_string_approx(Bytes{o.max_bytes}), d.contended * 1e6));
  }

  measure_compute(o, r, c, free_bytes - need, say);
  r.close();
  c.compute.launch_overhead = backend_step(o.device);
  say(fmt::format("compute step (empty, launched and seen to end by the backend): {:.2f} us",
                  c.compute.launch_overhead * 1e6));
  return c;
}

}  // namespace tierflow::replay
