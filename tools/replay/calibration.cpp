#include "tools/replay/calibration.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "core/kinds.h"
#include "core/units.h"
#include "hw_models/writer.h"
#include "tools/replay/cpu_backend.h"

namespace tierflow::replay {

LinearFit fit_latency_bandwidth(const std::vector<SizeSample>& samples) {
  LinearFit f;
  std::vector<SizeSample> v;
  for (const SizeSample& s : samples) {
    if (s.seconds > 0 && s.bytes > 0) v.push_back(s);
  }
  if (v.empty()) return f;
  std::sort(v.begin(), v.end(),
            [](const SizeSample& a, const SizeSample& b) { return a.bytes < b.bytes; });
  // Bandwidth: least-squares slope of time over bytes on the largest quarter of the sizes
  // (at least three), where the fixed cost is small and caches no longer hold the data.
  const size_t n = v.size();
  const size_t big = n <= 3 ? n : std::max<size_t>(3, n / 4);
  double mx = 0, my = 0;
  for (size_t i = n - big; i < n; ++i) {
    mx += static_cast<double>(v[i].bytes);
    my += v[i].seconds;
  }
  mx /= static_cast<double>(big);
  my /= static_cast<double>(big);
  double sxx = 0, sxy = 0;
  for (size_t i = n - big; i < n; ++i) {
    const double dx = static_cast<double>(v[i].bytes) - mx;
    sxx += dx * dx;
    sxy += dx * (v[i].seconds - my);
  }
  double slope = sxx > 0 ? sxy / sxx : 0;
  if (!(slope > 0)) slope = my / mx;  // one size, or noise: through the origin
  // Latency: what the smallest sizes (up to three) take beyond their bytes at that rate.
  std::vector<double> fixed;
  for (size_t i = 0; i < std::min<size_t>(3, n); ++i) {
    fixed.push_back(std::max(0.0, v[i].seconds - slope * static_cast<double>(v[i].bytes)));
  }
  std::sort(fixed.begin(), fixed.end());
  f.latency = fixed[fixed.size() / 2];
  f.bandwidth = 1.0 / slope;
  for (const SizeSample& s : v) {
    const double fit = f.latency + slope * static_cast<double>(s.bytes);
    f.error = std::max(f.error, std::abs(fit / s.seconds - 1.0));
  }
  return f;
}

SizeSample summarize(uint64_t bytes, std::vector<double> seconds) {
  SizeSample s{bytes, 0, 0};
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  s.seconds = n % 2 == 1 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  s.spread = s.seconds > 0 ? (seconds.back() - seconds.front()) / s.seconds : 0;
  return s;
}

SizeSample measure(uint64_t bytes, int repeats, const std::function<double()>& run) {
  (void)run();
  std::vector<double> t;
  t.reserve(size_t(std::max(0, repeats)));
  for (int i = 0; i < repeats; ++i) t.push_back(run());
  return summarize(bytes, std::move(t));
}

int engines_of(const std::vector<double>& concurrent) {
  int engines = 1;
  for (size_t k = 1; k < concurrent.size(); ++k) {
    if (concurrent[k] < 1.10 * concurrent[k - 1]) break;
    engines = int(k) + 1;
  }
  return engines;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  (void)std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown CPU";
}

uint64_t physical_ram() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

uint64_t usable_host_memory() {
  uint64_t limit = 0;
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") {
      limit = kib * 1024;
      break;
    }
  }
  if (limit == 0) limit = physical_ram();
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    limit = limit == 0 ? uint64_t(as.rlim_cur) : std::min<uint64_t>(limit, uint64_t(as.rlim_cur));
  }
  return limit;
}

namespace {

/// The median of `v`.
double median_of(std::vector<double> v) { return summarize(0, std::move(v)).seconds; }

}  // namespace

MemoryLimit cuda_default_memory_limit(uint64_t gpu_free, uint64_t reserve,
                                      uint64_t host_usable) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  const uint64_t device = gpu_free > 2 * reserve ? gpu_free - reserve : gpu_free / 2;
  const uint64_t keep = std::max(4 * kGiB, host_usable / 8);
  const uint64_t host = host_usable > keep ? host_usable - keep : 0;
  MemoryLimit m;
  m.bytes = device + host;
  m.origin = fmt::format(
      "default: {} of free GPU memory less {}, and {} of host memory available less {}",
      to_string_approx(Bytes{gpu_free}), to_string_approx(Bytes{gpu_free - device}),
      to_string_approx(Bytes{host_usable}), to_string_approx(Bytes{host_usable - host}));
  return m;
}

double step_round_trip(Backend& b) {
  std::mutex m;
  std::condition_variable cv;
  bool landed = false;
  const auto one = [&] {
    {
      const std::lock_guard lock(m);
      landed = false;
    }
    const Time t0 = b.now();
    b.compute(0, ComputeWork{}, [&](Time, Time) {
      const std::lock_guard lock(m);  // notified under the lock: cv outlives the wait
      landed = true;
      cv.notify_all();
    });
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return landed; });
    return static_cast<double>(b.now() - t0) / double(kPsPerS);
  };
  for (int r = 0; r < 20; ++r) (void)one();
  std::vector<double> t;
  for (int r = 0; r < 200; ++r) t.push_back(one());
  return median_of(std::move(t));
}

namespace {

/// Runs copies and compute steps on a CpuBackend and waits for them.
class CpuProbe {
 public:
  static constexpr ArenaId kDevice = 0;
  static constexpr ArenaId kHost = 1;
  static constexpr uint32_t kToDevice = 0;  // engine group host -> device
  static constexpr uint32_t kToHost = 1;    // device -> host

  CpuProbe(uint64_t block_bytes, int blocks, int engines)
      : backend_(options(block_bytes, blocks)), block_(block_bytes) {
    BackendSetup setup;
    const uint64_t arena = block_bytes * uint64_t(blocks);
    setup.arenas.push_back(ArenaSpec{"hbm", arena, arena, true});
    setup.arenas.push_back(ArenaSpec{"ddr", arena, arena, false});
    setup.engine_groups.push_back(EngineGroupSpec{"host->device", engines});
    setup.engine_groups.push_back(EngineGroupSpec{"device->host", engines});
    setup.programs = 1;
    backend_.start(setup);
    for (int i = 0; i < blocks; ++i) {
      dev_.push_back(backend_.allocate(kDevice, block_bytes, block_bytes).value());
      host_.push_back(backend_.allocate(kHost, block_bytes, block_bytes).value());
    }
  }
  ~CpuProbe() { backend_.stop(); }
  CpuProbe(const CpuProbe&) = delete;
  CpuProbe& operator=(const CpuProbe&) = delete;

  /// Copies of `bytes` each, in the given directions, all issued at once; returns the
  /// seconds from the first issue to the last byte landed.
  double copies(uint64_t bytes, const std::vector<uint32_t>& groups) {
    std::vector<CopyRequest> reqs;
    for (size_t i = 0; i < groups.size(); ++i) {
      const bool to_device = groups[i] == kToDevice;
      Block src = to_device ? host_[i] : dev_[i];
      Block dst = to_device ? dev_[i] : host_[i];
      src.bytes = dst.bytes = bytes;
      CopyRequest r;
      r.src = src;
      r.dst = dst;
      r.logical_bytes = bytes;
      r.engines = {groups[i]};
      reqs.push_back(r);
    }
    {
      const std::lock_guard lock(m_);
      pending_ = reqs.size();
      last_end_ = 0;
    }
    const Time t0 = backend_.now();
    for (const CopyRequest& r : reqs) backend_.copy(r, [this](Time, Time end) { landed(end); });
    std::unique_lock lock(m_);
    cv_.wait(lock, [this] { return pending_ == 0; });
    return static_cast<double>(last_end_ - t0) / double(kPsPerS);
  }

  [[nodiscard]] uint64_t block() const { return block_; }
  [[nodiscard]] CpuBackend& backend() { return backend_; }

 private:
  static CpuBackendOptions options(uint64_t block_bytes, int blocks) {
    CpuBackendOptions o;
    o.copy = CopyMode::kNative;
    o.memory_limit = 2 * block_bytes * uint64_t(blocks) + (uint64_t{64} << 20);
    return o;
  }
  void landed(Time end) {
    {
      const std::lock_guard lock(m_);
      last_end_ = std::max(last_end_, end);
      --pending_;
    }
    cv_.notify_all();
  }

  CpuBackend backend_;
  uint64_t block_;
  std::vector<Block> dev_, host_;
  std::mutex m_;
  std::condition_variable cv_;
  size_t pending_ = 0;
  Time last_end_ = 0;
};

/// Single-thread FP32 GEMM rate of this CPU: a cache-blocked C += A * B.
double cpu_gemm_flops() {
  constexpr int kN = 384;
  constexpr int kBlock = 64;
  std::vector<float> a(size_t(kN) * kN), b(size_t(kN) * kN), c(size_t(kN) * kN, 0.0F);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25F;
    b[i] = static_cast<float>(i % 5) * 0.5F;
  }
  const auto gemm = [&] {
    for (int ii = 0; ii < kN; ii += kBlock) {
      for (int kk = 0; kk < kN; kk += kBlock) {
        for (int i = ii; i < ii + kBlock; ++i) {
          for (int k = kk; k < kk + kBlock; ++k) {
            const float x = a[size_t(i) * kN + size_t(k)];
            float* crow = &c[size_t(i) * kN];
            const float* brow = &b[size_t(k) * kN];
            for (int j = 0; j < kN; ++j) crow[j] += x * brow[j];
          }
        }
      }
    }
  };
  gemm();  // warm-up
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * kN * kN * kN / s);
  }
  // Keep the result observable so the loops are not removed.
  volatile float sink = c[size_t(kN) * kN / 2];
  (void)sink;
  return median_of(rates);
}

/// Single-thread memcpy bandwidth between two buffers of `bytes` (bytes copied per second).
double memcpy_bandwidth(uint64_t bytes) {
  std::vector<std::byte> src(size_t(bytes), std::byte{1}), dst(size_t(bytes), std::byte{0});
  std::memcpy(dst.data(), src.data(), src.size());  // warm-up, pages faulted in
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) / s);
  }
  return median_of(rates);
}

Duration seconds_to(double s) { return Duration{std::llround(s * double(kPsPerS))}; }

void say(const CalibrateOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

}  // namespace

Calibration calibrate_cpu(const CalibrateOptions& o) {
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes) {
    throw std::invalid_argument("calibrate: the size sweep needs 0 < min <= max");
  }
  if (o.repeats < 1 || o.max_concurrent < 1) {
    throw std::invalid_argument("calibrate: repeats and concurrency must be at least 1");
  }
  Calibration c;
  c.backend = "cpu";
  c.date = utc_now();
  c.device_name = cpu_model();
  c.software.emplace_back("cpu", c.device_name);
  c.software.emplace_back("cores", std::to_string(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))));
  utsname u{};
  if (uname(&u) == 0) c.software.emplace_back("kernel", fmt::format("{} {}", u.sysname, u.release));
#if defined(__clang__)
  c.software.emplace_back("compiler", fmt::format("clang {}", __clang_version__));
#elif defined(__GNUC__)
  c.software.emplace_back("compiler", fmt::format("gcc {}", __VERSION__));
#endif
  c.software.emplace_back("copy", "memcpy threads of the CPU replay backend (native copies)");
  c.host_capacity = physical_ram();
  c.device_capacity = o.device_capacity > 0 ? o.device_capacity : uint64_t{1} << 30;

  // Sizes of the concurrency and duplex runs: the largest of the sweep, at most 64 MiB
  // per copy so that max_concurrent of them fit in a few hundred MiB.
  const uint64_t big = std::min<uint64_t>(o.max_bytes, uint64_t{64} << 20);
  const int blocks = std::max(2, o.max_concurrent);
  CpuProbe probe(std::max(o.max_bytes, big), blocks, o.max_concurrent);

  const std::vector<std::pair<uint32_t, std::pair<const char*, const char*>>> dirs = {
      {CpuProbe::kToDevice, {"ddr", "hbm"}}, {CpuProbe::kToHost, {"hbm", "ddr"}}};
  for (const auto& dir : dirs) {
    const uint32_t group = dir.first;  // a plain name: lambdas below capture it
    const auto& ends = dir.second;
    CopyDirection d;
    d.from = ends.first;
    d.to = ends.second;
    for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
      const SizeSample s =
          measure(bytes, o.repeats, [&] { return probe.copies(bytes, {group}); });
      d.sweep.push_back(s);
      say(o, fmt::format("{} -> {}: {} in {} ({:.2f} GB/s)", d.from, d.to,
                         to_string_approx(Bytes{bytes}), to_string_approx(seconds_to(s.seconds)),
                         static_cast<double>(bytes) / s.seconds / 1e9));
      if (bytes > o.max_bytes / 2) break;  // no overflow past the top
    }
    d.fit = fit_latency_bandwidth(d.sweep);
    for (int k = 1; k <= o.max_concurrent; ++k) {
      std::vector<double> rates;
      for (int r = 0; r < o.repeats; ++r) {
        const double s = probe.copies(big, std::vector<uint32_t>(size_t(k), group));
        rates.push_back(static_cast<double>(big) * k / s);
      }
      d.concurrent.push_back(median_of(rates));
      say(o, fmt::format("{} -> {}: {} copies at once: {:.2f} GB/s in all", d.from, d.to, k,
                         d.concurrent.back() / 1e9));
    }
    d.engines = engines_of(d.concurrent);
    c.directions.push_back(std::move(d));
  }

  // Duplex: one copy each way at once against one direction alone.
  {
    std::vector<double> both, one;
    for (int r = 0; r < o.repeats; ++r) {
      both.push_back(2.0 * static_cast<double>(big) /
                     probe.copies(big, {CpuProbe::kToDevice, CpuProbe::kToHost}));
      one.push_back(static_cast<double>(big) / probe.copies(big, {CpuProbe::kToDevice}));
    }
    c.duplex_ratio = median_of(both) / median_of(one);
    c.full_duplex = c.duplex_ratio >= 1.5;
    say(o, fmt::format("both directions at once: {:.2f}x one direction ({} duplex)",
                       c.duplex_ratio, c.full_duplex ? "full" : "half"));
  }

  // Compute: the busy-wait engine's cost per step, and this CPU's own rates for the
  // roofline the simulator applies to every op.
  {
    c.compute.launch_overhead = step_round_trip(probe.backend());
    const double flops = cpu_gemm_flops();
    // The CPU backend's compute steps are timed waits: one rate, the FP32 GEMM's, stands
    // for every element type a workload may compute in.
    for (const char* dtype : {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4"}) {
      c.compute.flops.emplace_back(dtype, flops);
    }
    // A copy of n bytes reads n and writes n: the tier's bandwidth counts both, as an
    // op's bytes do.
    c.host_memory_bandwidth = memcpy_bandwidth(big);
    c.compute.memory_bandwidth = 2.0 * c.host_memory_bandwidth;
    say(o, fmt::format("compute: {:.1f} GFLOP/s fp32 GEMM, memory {:.2f} GB/s, {} per step",
                       flops / 1e9, c.compute.memory_bandwidth / 1e9,
                       to_string_approx(seconds_to(c.compute.launch_overhead))));
  }
  return c;
}

namespace {

/// Seconds as whole nanoseconds (never negative): the precision the fit has.
Duration whole_ns(double seconds) {
  return Duration{std::llround(std::max(0.0, seconds * 1e9)) * kPsPerNs};
}

}  // namespace

std::string_view gemm_dtype(std::string_view dtype, bool has_bf16) {
  if (dtype == "fp32") return "fp32";
  if (dtype == "fp16" || !has_bf16) return "fp16";
  return "bf16";
}

hw::Topology calibrated_topology(const Calibration& c) {
  if (c.directions.size() != 2) {
    throw std::invalid_argument("a calibration needs both copy directions");
  }
  const CopyDirection& h2d = c.directions[0];
  const CopyDirection& d2h = c.directions[1];
  const bool cuda = c.backend == "cuda";
  // A link direction's bandwidth: one copy's, or all engines' together when several run
  // at once (the simulator shares a link's bandwidth among its transfers).
  const auto link_bw = [](const CopyDirection& d) {
    return d.engines > 1 && size_t(d.engines) <= d.concurrent.size()
               ? d.concurrent[size_t(d.engines) - 1]
               : d.fit.bandwidth;
  };
  const double dma = std::min(h2d.fit.latency, d2h.fit.latency);
  using hw::cite;

  hw::Topology t;
  t.name = fmt::format("calibrated-{}", c.backend);
  t.description =
      fmt::format("{} as measured by tierflow calibrate ({} backend)", c.device_name, c.backend);
  std::string stack;
  for (const auto& [k, v] : c.software) stack += fmt::format("; {} {}", k, v);
  t.sources["M1"] = fmt::format("tierflow calibrate --backend {}, {}{}", c.backend, c.date, stack);
  t.sources["M2"] = fmt::format(
      "copy sweeps fitted as latency + bytes/bandwidth (largest fit error {:.1f}% "
      "host->device, {:.1f}% device->host); concurrent copies {:.3g}/{:.3g} GB/s in all with "
      "1..{} copies; both directions at once {:.2f}x one",
      100 * h2d.fit.error, 100 * d2h.fit.error,
      h2d.concurrent.empty() ? 0.0 : h2d.concurrent.front() / 1e9,
      h2d.concurrent.empty() ? 0.0 : h2d.concurrent.back() / 1e9, h2d.concurrent.size(),
      c.duplex_ratio);
  if (d2h.contended >= 0 && h2d.contended >= 0 && !d2h.sweep.empty()) {
    t.sources["M2"] += fmt::format(
        "; a {} copy while a large one runs the other way takes {:.2f} us more device->host, "
        "{:.2f} us more host->device",
        to_string_approx(Bytes{d2h.sweep.front().bytes}), d2h.contended * 1e6, h2d.contended * 1e6);
  }
  t.sources["M3"] = cuda ? "device and host tiers are one GPU's memory and pinned host memory; "
                           "copy latency is charged once per transfer as DMA setup on the "
                           "link, host-side extra latency on the host tier"
                         : "device and host tiers are two RAM arenas of the CPU replay "
                           "backend; copy latency is charged once per transfer as DMA setup "
                           "on the link, the extra of each direction on the host tier";

  hw::System& sys = t.system;
  sys.source = "M1";
  cite(sys.origins, "hosts", "M1");
  cite(sys.origins, "sockets_per_host", "M1");

  hw::Device& dev = t.devices.emplace_back();
  dev.id = "dev";
  dev.description = c.device_name;
  dev.source = "M1";
  dev.count = 1;
  cite(dev.origins, "count", "M1");
  dev.local_tier = "hbm";
  for (const auto& [dtype, f] : c.compute.flops) {
    const std::optional<size_t> i = index_of(kDtypeNames, dtype);
    if (!i) throw std::invalid_argument(fmt::format("a calibrated rate for unknown dtype '{}'", dtype));
    dev.peak[*i] = FlopRate{f};
    cite(dev.origins, "peak." + dtype, "M1", "achieved GEMM rate");
  }
  // Every dtype a workload may compute in (the exporter writes int8 mask ops, for one)
  // gets the rate of the GEMM the CUDA backend runs for it, so that a calibrated topology
  // plans every workload.
  if (cuda) {
    const auto measured = [&](std::string_view dtype) {
      return std::any_of(c.compute.flops.begin(), c.compute.flops.end(),
                         [&](const auto& r) { return r.first == dtype; });
    };
    const bool has_bf16 = measured("bf16");
    for (size_t i = 0; i < kDtypeNames.size(); ++i) {
      const std::string_view dtype = kDtypeNames[i];
      const std::string_view as = gemm_dtype(dtype, has_bf16);
      if (measured(dtype) || !measured(as)) continue;
      dev.peak[i] = dev.peak[*index_of(kDtypeNames, as)];
      cite(dev.origins, "peak." + std::string(dtype), "M1",
           fmt::format("not measured: the CUDA backend runs {} ops as {} GEMMs", dtype, as));
    }
  }
  cite(dev.origins, "compute_efficiency.default", "M1", "the peaks are achieved rates");
  cite(dev.origins, "memory_efficiency.default", "M1", "the bandwidth is an achieved rate");
  dev.launch_overhead = whole_ns(c.compute.launch_overhead);
  cite(dev.origins, "launch_overhead", "M1", "one empty step");

  hw::Tier& hbm = t.tiers.emplace_back();
  hbm.id = "hbm";
  hbm.description = cuda ? "GPU device memory" : "device arena in RAM (CPU backend)";
  hbm.kind = hw::TierKind::kHbm;
  hbm.per = hw::Scope::kDevice;
  hbm.capacity = Bytes{c.device_capacity};
  hbm.read_bandwidth = hbm.write_bandwidth = Bandwidth{c.compute.memory_bandwidth};
  for (const char* key : {"capacity", "read_bandwidth", "write_bandwidth"}) {
    cite(hbm.origins, key, "M1");
  }
  cite(hbm.origins, "latency", "M3");

  hw::Tier& ddr = t.tiers.emplace_back();
  ddr.id = "ddr";
  ddr.description = cuda ? "pinned host memory" : "host arena in RAM (CPU backend)";
  ddr.kind = hw::TierKind::kDdr;
  ddr.per = hw::Scope::kSocket;
  ddr.capacity = Bytes{c.host_capacity};
  // Ports at least as fast as the link, so that the link is what the copies share.
  ddr.read_bandwidth = ddr.write_bandwidth =
      Bandwidth{std::max({c.host_memory_bandwidth, link_bw(h2d), link_bw(d2h)})};
  for (const char* key : {"capacity", "read_bandwidth", "write_bandwidth"}) {
    cite(ddr.origins, key, "M1");
  }
  ddr.latency = whole_ns(h2d.fit.latency - dma);
  cite(ddr.origins, "latency", "M3", "host->device latency above the DMA setup");
  ddr.write_latency = whole_ns(d2h.fit.latency - dma);
  cite(ddr.origins, "write_latency", "M3", "device->host latency above the DMA setup");

  hw::Link& link = t.links.emplace_back();
  link.id = "copy";
  link.description = cuda ? "cudaMemcpyAsync between device and pinned host memory "
                            "(a->b = device->host, b->a = host->device)"
                          : "memcpy threads between the arenas (a->b = device->host, b->a = "
                            "host->device)";
  link.kind = cuda ? hw::LinkKind::kPcie : hw::LinkKind::kMemcpy;
  link.endpoints = {"hbm", "ddr"};
  link.per = hw::Scope::kDevice;
  // One peak for both directions, the faster one's; each direction's own rate is its
  // efficiency (a half-duplex link has one capacity, so no separate reverse bandwidth).
  const double peak = std::max(link_bw(d2h), link_bw(h2d));
  const auto fraction = [&](double bw) { return std::round(bw / peak * 1e4) / 1e4; };
  link.bandwidth = Bandwidth{peak};
  cite(link.origins, "bandwidth", "M2", "the faster direction");
  link.efficiency = fraction(link_bw(d2h));
  cite(link.origins, "efficiency", "M2",
       fmt::format("device->host {}", to_string(Bandwidth{link_bw(d2h)})));
  link.efficiency_reverse = fraction(link_bw(h2d));
  cite(link.origins, "efficiency_reverse", "M2",
       fmt::format("host->device {}", to_string(Bandwidth{link_bw(h2d)})));
  cite(link.origins, "latency", "M3");
  link.duplex = c.full_duplex ? hw::Duplex::kFull : hw::Duplex::kHalf;
  cite(link.origins, "duplex", "");
  if (c.full_duplex) {
    // Both directions at once moved duplex_ratio times the faster one alone: what is left
    // of the two directions' sum is the link's shared capacity.
    const double both = c.duplex_ratio * peak / (link_bw(d2h) + link_bw(h2d));
    if (both < 0.995) {
      link.duplex_efficiency = std::round(both * 1e4) / 1e4;
      cite(link.origins, "duplex_efficiency", "M2",
           fmt::format("both directions at once {:.2f}x the faster alone", c.duplex_ratio));
    }
  }
  link.copy_engines = std::min(h2d.engines, d2h.engines);
  cite(link.origins, "copy_engines", "M2");
  link.dma_setup = whole_ns(dma);
  cite(link.origins, "dma_setup", "M2", "fitted intercept");
  // a->b is device->host: its copies pay contended_setup beside a host->device one.
  if (d2h.contended >= 0 && h2d.contended >= 0) {
    link.contended_setup = whole_ns(d2h.contended);
    cite(link.origins, "contended_setup", "M2",
         "a small device->host copy beside a large host->device one, less its time alone");
    link.contended_setup_reverse = whole_ns(h2d.contended);
    cite(link.origins, "contended_setup_reverse", "M2",
         "a small host->device copy beside a large device->host one, less its time alone");
  }
  return t;
}

std::string topology_yaml(const Calibration& c) {
  return hw::topology_yaml(
      calibrated_topology(c),
      {fmt::format("Measured by `tierflow calibrate --backend {}` on {} ({}).", c.backend,
                   c.device_name, c.date),
       "Every number below comes from that run (source M1) unless it says otherwise."});
}

}  // namespace tierflow::replay
