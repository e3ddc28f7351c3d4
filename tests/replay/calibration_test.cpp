// tierflow calibrate's pieces: the latency + bandwidth fit, the topology it writes (loaded
// back, its routes carry the measured numbers), and a short CPU calibration run.
#include "tools/replay/calibration.h"

#include <doctest/doctest.h>

#include <cmath>

#include "core/kinds.h"
#include "hw_models/loader.h"

using namespace tierflow;
using namespace tierflow::replay;

namespace {

std::vector<SizeSample> line(double latency, double bandwidth) {
  std::vector<SizeSample> v;
  for (uint64_t b = 4096; b <= (uint64_t{64} << 20); b *= 2) {
    v.push_back(SizeSample{b, latency + static_cast<double>(b) / bandwidth, 0});
  }
  return v;
}

Calibration synthetic(int engines, bool full_duplex) {
  Calibration c;
  c.backend = "cpu";
  c.device_name = "Test CPU \"quoted\"";
  c.date = "2026-11-21T00:00:00Z";
  c.software = {{"cpu", "Test CPU"}, {"kernel", "Linux 6.1"}};
  c.device_capacity = uint64_t{256} << 20;
  c.host_capacity = uint64_t{16} << 30;
  c.host_memory_bandwidth = 20e9;
  CopyDirection h2d{"ddr", "hbm", line(5e-6, 10e9), {}, {}, engines};
  h2d.fit = LinearFit{5e-6, 10e9, 0};
  h2d.concurrent = {10e9, 16e9};
  CopyDirection d2h{"hbm", "ddr", line(8e-6, 8e9), {}, {}, engines};
  d2h.fit = LinearFit{8e-6, 8e9, 0};
  d2h.concurrent = {8e9, 12e9};
  c.directions = {h2d, d2h};
  c.full_duplex = full_duplex;
  c.duplex_ratio = full_duplex ? 1.9 : 1.0;
  c.compute.flops = {{"fp32", 50e9}, {"bf16", 50e9}};
  c.compute.memory_bandwidth = 20e9;
  c.compute.launch_overhead = 2e-6;
  return c;
}

}  // namespace

TEST_CASE("the fit recovers latency and bandwidth of an exact line") {
  const LinearFit f = fit_latency_bandwidth(line(5e-6, 10e9));
  CHECK(f.latency == doctest::Approx(5e-6).epsilon(1e-6));
  CHECK(f.bandwidth == doctest::Approx(10e9).epsilon(1e-6));
  CHECK(f.error < 1e-9);
}

TEST_CASE("the fit takes bandwidth from the large sizes, latency from the small") {
  // Mid sizes copy twice as fast (a cache holds them): the fit keeps the memory's rate
  // and reports the mid sizes as its error.
  std::vector<SizeSample> v = line(4e-6, 5e9);
  for (SizeSample& s : v) {
    if (s.bytes >= 64 * 1024 && s.bytes <= (uint64_t{1} << 20)) {
      s.seconds = 4e-6 + static_cast<double>(s.bytes) / 10e9;
    }
  }
  const LinearFit f = fit_latency_bandwidth(v);
  CHECK(f.bandwidth == doctest::Approx(5e9).epsilon(1e-6));
  CHECK(f.latency == doctest::Approx(4e-6).epsilon(1e-6));
  CHECK(f.error > 0.5);
}

TEST_CASE("the fit survives degenerate samples") {
  CHECK(fit_latency_bandwidth({}).bandwidth == 0);
  const LinearFit one = fit_latency_bandwidth({SizeSample{1000, 1e-6, 0}});
  CHECK(one.bandwidth == doctest::Approx(1e9));
  CHECK(one.latency == 0);
  const LinearFit zeros = fit_latency_bandwidth({SizeSample{1000, 0, 0}, SizeSample{0, 1e-6, 0}});
  CHECK(zeros.bandwidth == 0);
}

TEST_CASE("the written topology loads and its routes carry the measured numbers") {
  for (const bool full : {true, false}) {
    CAPTURE(full);
    const Calibration c = synthetic(1, full);
    const hw::Topology t = hw::load_topology_text(topology_yaml(c), "cal.yaml");
    REQUIRE(t.tiers.size() == 2);
    REQUIRE(t.links.size() == 1);
    const size_t hbm = *t.tier_index("hbm");
    const size_t ddr = *t.tier_index("ddr");
    CHECK(t.tiers[hbm].capacity.value == c.device_capacity);
    CHECK(t.links[0].copy_engines == 1);
    CHECK(t.links[0].duplex == (full ? hw::Duplex::kFull : hw::Duplex::kHalf));
    const hw::Route* in = t.route(ddr, hbm);
    const hw::Route* out = t.route(hbm, ddr);
    REQUIRE(in != nullptr);
    REQUIRE(out != nullptr);
    CHECK(in->bandwidth.bytes_per_s == doctest::Approx(10e9).epsilon(1e-3));
    CHECK(out->bandwidth.bytes_per_s == doctest::Approx(8e9).epsilon(1e-3));
    // Each direction's fitted latency is its route's setup (to the nanosecond written).
    CHECK(std::abs(static_cast<double>(in->setup.ps) - 5e6) <= 1000);
    CHECK(std::abs(static_cast<double>(out->setup.ps) - 8e6) <= 1000);
    CHECK(t.devices[0].launch_overhead.ps == 2'000'000);
  }
}

TEST_CASE("a calibration whose directions slow each other writes the link's duplex_efficiency") {
  // 10 and 8 GB/s alone, 1.5x the faster (15 GB/s) both at once: 15 / 18 of their sum.
  Calibration c = synthetic(1, true);
  c.duplex_ratio = 1.5;
  const hw::Topology t = hw::load_topology_text(topology_yaml(c), "cal.yaml");
  REQUIRE(t.links.size() == 1);
  CHECK(t.links[0].duplex == hw::Duplex::kFull);
  CHECK(t.links[0].duplex_efficiency == doctest::Approx(0.8333));
  CHECK(topology_yaml(c).find("both directions at once 1.50x the faster alone") !=
        std::string::npos);
  // Near 2x the directions are independent: nothing written.
  c.duplex_ratio = 1.9;
  CHECK(hw::load_topology_text(topology_yaml(c), "cal.yaml").links[0].duplex_efficiency == 1.0);
}

TEST_CASE("a measured contended setup is written per direction; one not measured is not") {
  // device->host copies 8.8 us slower beside a host->device one; the other way 0.3 us.
  Calibration c = synthetic(1, true);
  c.directions[0].contended = 0.3e-6;  // host->device
  c.directions[1].contended = 8.8e-6;  // device->host: the link's a->b
  const std::string yaml = topology_yaml(c);
  const hw::Topology t = hw::load_topology_text(yaml, "cal.yaml");
  REQUIRE(t.links.size() == 1);
  CHECK(t.links[0].endpoints[0] == "hbm");
  CHECK(t.links[0].contended_setup.ps == 8'800'000);
  CHECK(t.links[0].contended_setup_reverse.ps == 300'000);
  CHECK(yaml.find("takes 8.80 us more device->host, 0.30 us more host->device") !=
        std::string::npos);
  // Not measured (the CPU backend): nothing written.
  Calibration cpu = synthetic(1, true);
  const hw::Topology none = hw::load_topology_text(topology_yaml(cpu), "cal.yaml");
  CHECK(none.links[0].contended_setup.ps == 0);
  CHECK(topology_yaml(cpu).find("contended_setup") == std::string::npos);
}

TEST_CASE("a CUDA calibration's topology rates every dtype as the GEMM the backend runs") {
  for (const bool bf16 : {true, false}) {
    CAPTURE(bf16);
    Calibration c = synthetic(1, true);
    c.backend = "cuda";
    c.compute.flops = {{"fp16", 700e12}, {"fp32", 50e12}};
    if (bf16) c.compute.flops.emplace_back("bf16", 800e12);
    const hw::Topology t = hw::load_topology_text(topology_yaml(c), "cal.yaml");
    const hw::Device& d = t.devices[0];
    const double as = bf16 ? 800e12 : 700e12;
    for (const std::string_view dtype : kDtypeNames) {
      CAPTURE(dtype);
      const double want = dtype == "fp32" ? 50e12 : dtype == "fp16" ? 700e12 : as;
      CHECK(d.peak[*index_of(kDtypeNames, dtype)].flop_per_s == doctest::Approx(want));
    }
    // Measured rates are cited as such; the others say what stands for them.
    CHECK(topology_yaml(c).find("not measured: the CUDA backend runs int8 ops as " +
                                std::string(bf16 ? "bf16" : "fp16") + " GEMMs") !=
          std::string::npos);
  }
  // The CPU backend's calibration measures one rate for all; nothing is added to it.
  CHECK(topology_yaml(synthetic(1, true)).find("not measured") == std::string::npos);
}

TEST_CASE("with several engines the link carries what they move together") {
  const hw::Topology t = hw::load_topology_text(topology_yaml(synthetic(2, true)), "cal.yaml");
  CHECK(t.links[0].copy_engines == 2);
  const hw::Route* in = t.route(*t.tier_index("ddr"), *t.tier_index("hbm"));
  REQUIRE(in != nullptr);
  CHECK(in->bandwidth.bytes_per_s == doctest::Approx(16e9).epsilon(1e-3));
}

TEST_CASE("a short CPU calibration measures both directions and writes a valid topology") {
  CalibrateOptions o;
  o.min_bytes = 4096;
  o.max_bytes = 256 * 1024;
  o.repeats = 1;
  o.max_concurrent = 2;
  int lines = 0;
  o.progress = [&lines](std::string_view) { ++lines; };
  const Calibration c = calibrate_cpu(o);
  CHECK(c.backend == "cpu");
  REQUIRE(c.directions.size() == 2);
  for (const CopyDirection& d : c.directions) {
    CHECK(d.sweep.size() == 7);  // 4 KiB .. 256 KiB
    CHECK(d.fit.bandwidth > 0);
    CHECK(d.concurrent.size() == 2);
    CHECK(d.engines >= 1);
  }
  CHECK(c.compute.flops.size() == 9);
  CHECK(c.compute.launch_overhead > 0);
  CHECK(c.device_capacity == uint64_t{1} << 30);
  CHECK(lines > 10);
  CHECK_NOTHROW((void)hw::load_topology_text(topology_yaml(c), "cal.yaml"));
}

TEST_CASE("the CUDA backend's default memory limit: GPU and host memory less their reserves") {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  // A host like the first GPU run's H200 (about 139 GiB free on the GPU, 120 GiB of 126
  // available: illustrative figures, not measured there).
  MemoryLimit m = cuda_default_memory_limit(139 * kGiB, kGiB, 120 * kGiB);
  CHECK(m.bytes == 138 * kGiB + 105 * kGiB);  // 120 GiB less an eighth (15 GiB)
  CHECK(m.origin ==
        "default: 139GiB of free GPU memory less 1GiB, and 120GiB of host memory available "
        "less 15GiB");
  // A small host keeps at least 4 GiB; one with less gives none.
  CHECK(cuda_default_memory_limit(10 * kGiB, kGiB, 16 * kGiB).bytes == 9 * kGiB + 12 * kGiB);
  CHECK(cuda_default_memory_limit(10 * kGiB, kGiB, 3 * kGiB).bytes == 9 * kGiB);
  // A GPU with little free memory gives half of it.
  CHECK(cuda_default_memory_limit(kGiB, kGiB, 0).bytes == kGiB / 2);
}

TEST_CASE("bad calibration options are refused") {
  CalibrateOptions o;
  o.min_bytes = 0;
  CHECK_THROWS_AS((void)calibrate_cpu(o), std::invalid_argument);
  o.min_bytes = 8192;
  o.max_bytes = 4096;
  CHECK_THROWS_AS((void)calibrate_cpu(o), std::invalid_argument);
}
