// Routes and transfer costs on tests/fixtures/unit_hw.yaml (see its diagram).
#include "hw_models/routes.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "hw_models/bind.h"
#include "hw_models/cost.h"
#include "hw_models/fabric.h"
#include "hw_models/loader.h"
#include "tests/support/fixtures.h"

using namespace tierflow;
using namespace tierflow::hw;

namespace {

using tierflow::testing::unit_hw;

const Route& route(const Topology& t, std::string_view a, std::string_view b) {
  const Route* r = t.route(*t.tier_index(a), *t.tier_index(b));
  REQUIRE(r != nullptr);
  return *r;
}

constexpr int64_t kNs = 1000;  // ps

/// Two hosts of two devices, a per-host switch; the tests add the links (and switches).

/// A topology named `name` of four devices with an HBM each, the system as `system` says
/// ("{hosts: 2}"); the caller adds its tiers, switches and links.
std::string four_devices(std::string_view name, std::string_view system) {
  return fmt::format(R"(tierflow: hw/1
name: {}
system: {}
devices: [{{id: d, count: 4, local_tier: hbm, peak: {{bf16: 1TFLOP/s}}}}]
tiers:
  - {{id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}}
)",
                     name, system);
}

/// Two hosts of two devices, an NVSwitch per host; the caller adds switches and links.
std::string two_hosts() {
  return four_devices("two-hosts", "{hosts: 2, sockets_per_host: 1}") +
         "switches:\n  - {id: sw, kind: nvswitch, per: host}\n";
}

/// Of four devices, two to a host (or a supernode): devices 0 and 1 copy over the peer
/// route; the path from device 1 to device 2, which it does not join, is returned.
const FabricPath* far_path(const Fabric& f, size_t hbm) {
  const FabricPath* near = f.peer_path(hbm, 0, 1);
  REQUIRE(near != nullptr);
  CHECK(near->route == f.topology().route(hbm, hbm));
  const FabricPath* far = f.peer_path(hbm, 1, 2);
  REQUIRE(far != nullptr);
  return far;
}

}  // namespace

TEST_CASE("route hbm -> ddr crosses the device's PCIe link into the root complex") {
  const Topology t = unit_hw();
  const Route& r = route(t, "hbm", "ddr");
  // bottleneck = min(hbm read 4, ddr write 2, pcie 1) = 1 GB/s
  CHECK(r.bandwidth.bytes_per_s == doctest::Approx(1e9));
  // setup = hbm read 0 + ddr write 100 + pcie 20 + rc 5 + dma 30 = 155 ns
  CHECK(r.setup.ps == 155 * kNs);
  REQUIRE(r.hops.size() == 1);
  CHECK(t.links[r.hops[0].link].id == "pcie");
  CHECK(r.hops[0].forward);
  CHECK(r.switches.size() == 1);
  CHECK(r.staging_tiers.empty());
  CHECK(describe_route(t, r) == "hbm -[pcie]-> rc -> ddr");
  //  0        155ns                283ns
  //  |--setup--|==== 128 B at 1 B/ns ====|
  CHECK(transfer_time_alone(r, Bytes{128}).ps == 283 * kNs);
}

TEST_CASE("route directions use the link's reverse direction on the way back") {
  const Topology t = unit_hw();
  const Route& r = route(t, "ddr", "hbm");
  CHECK(r.setup.ps == 155 * kNs);  // ddr read 100 + hbm write 0 + 20 + 5 + 30
  REQUIRE(r.hops.size() == 1);
  CHECK_FALSE(r.hops[0].forward);
  CHECK(describe_route(t, r) == "ddr -> rc -[pcie]-> hbm");
}

TEST_CASE("a two-link route takes the narrowest port and the largest DMA setup once") {
  const Topology t = unit_hw();
  const Route& w = route(t, "hbm", "ssd");
  // min(hbm 4, ssd write 0.25, pcie 1, nvme 1 x 0.5) = 0.25 GB/s
  CHECK(w.bandwidth.bytes_per_s == doctest::Approx(0.25e9));
  // hbm 0 + ssd write 2000 + pcie 20 + nvme 50 + rc 5 + max(dma 30, 0) = 2105 ns
  CHECK(w.setup.ps == 2105 * kNs);
  // 1000 B at 0.25 B/ns = 4000 ns
  CHECK(transfer_time_alone(w, Bytes{1000}).ps == (2105 + 4000) * kNs);

  const Route& r = route(t, "ssd", "hbm");
  // min(ssd read 0.5, nvme 0.5, pcie 1, hbm 4) = 0.5 GB/s; ssd read latency 1000 ns
  CHECK(r.bandwidth.bytes_per_s == doctest::Approx(0.5e9));
  CHECK(r.setup.ps == 1105 * kNs);
  CHECK(describe_route(t, r) == "ssd -[nvme]-> rc -[pcie]-> hbm");
}

TEST_CASE("the peer route is the widest way out and back: NVLink through the fabric") {
  const Topology t = unit_hw();
  const Route& r = route(t, "hbm", "hbm");
  // nvl 2 GB/s beats pcie 1 GB/s; setup = 10 + 10 + fabric 0 + max dma 40 = 60 ns
  CHECK(r.bandwidth.bytes_per_s == doctest::Approx(2e9));
  CHECK(r.setup.ps == 60 * kNs);
  REQUIRE(r.hops.size() == 2);
  CHECK(r.hops[0].forward);
  CHECK_FALSE(r.hops[1].forward);
  CHECK(describe_route(t, r) == "hbm -[nvl]-> fabric -[nvl]-> hbm");
  CHECK(transfer_time_alone(r, Bytes{1024}).ps == (60 + 512) * kNs);
}

TEST_CASE("tiers reached only through attach moves have unlimited hops between them") {
  const Topology t = unit_hw();
  const Route& r = route(t, "ddr", "ssd");
  // ddr -> rc (attach, free) -> nvme -> ssd: min(ddr read 2, nvme 0.5, ssd write 0.25)
  CHECK(r.bandwidth.bytes_per_s == doctest::Approx(0.25e9));
  // ddr read 100 + ssd write 2000 + nvme 50 + rc 5 = 2155 ns, no DMA setup on nvme
  CHECK(r.setup.ps == 2155 * kNs);
}

TEST_CASE("the widest path wins over a lower-latency narrow one; latency breaks ties") {
  // Two ways from hbm to ddr: `slow` (1 GB/s, 1 ns) and `wide` (3 GB/s, 900 ns), and a
  // third `wide2` (3 GB/s, 100 ns) that ties `wide` on bandwidth with less latency.
  const std::string yaml = R"(tierflow: hw/1
name: widest
devices: [{id: d, count: 1, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}
  - {id: ddr, kind: ddr, per: host, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}
links:
  - {id: slow, kind: pcie, endpoints: [hbm, ddr], per: device, bandwidth: 1GB/s, latency: 1ns}
  - {id: wide, kind: pcie, endpoints: [hbm, ddr], per: device, bandwidth: 3GB/s, latency: 900ns}
  - {id: wide2, kind: pcie, endpoints: [hbm, ddr], per: device, bandwidth: 3GB/s, latency: 100ns}
)";
  const Topology t = load_topology_text(yaml, "widest.yaml");
  const Route& r = route(t, "hbm", "ddr");
  REQUIRE(r.hops.size() == 1);
  CHECK(t.links[r.hops[0].link].id == "wide2");
  CHECK(r.setup.ps == 100 * kNs);
  // No peer route on a single device.
  CHECK(t.route(0, 0) == nullptr);
}

TEST_CASE("bandwidth above the end ports' cap does not matter: latency decides") {
  // The ssd's 1 GB/s port caps both routes, so the lower-latency 2 GB/s link wins over
  // the 8 GB/s one.
  const std::string yaml = R"(tierflow: hw/1
name: capped
devices: [{id: d, count: 1, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}
  - {id: ssd, kind: ssd, per: host, capacity: 1GB, read_bandwidth: 1GB/s, write_bandwidth: 1GB/s, latency: 0ns}
links:
  - {id: fast, kind: pcie, endpoints: [hbm, ssd], per: device, bandwidth: 8GB/s, latency: 500ns}
  - {id: near, kind: pcie, endpoints: [hbm, ssd], per: device, bandwidth: 2GB/s, latency: 50ns}
)";
  const Topology t = load_topology_text(yaml, "capped.yaml");
  const Route& r = route(t, "hbm", "ssd");
  CHECK(t.links[r.hops[0].link].id == "near");
  CHECK(r.bandwidth.bytes_per_s == doctest::Approx(1e9));
}

TEST_CASE("a staging tier caps the bandwidth and adds its write and read latency") {
  // ssd hangs off ddr only: hbm -> ddr -> ssd stages through ddr (a bounce buffer).
  const std::string yaml = R"(tierflow: hw/1
name: staged
devices: [{id: d, count: 1, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}
  - {id: ddr, kind: ddr, per: host, capacity: 1GB, read_bandwidth: 6GB/s, write_bandwidth: 5GB/s, latency: 100ns, write_latency: 200ns}
  - {id: ssd, kind: ssd, per: host, capacity: 1GB, read_bandwidth: 9GB/s, write_bandwidth: 9GB/s, latency: 1us}
links:
  - {id: h2d, kind: pcie, endpoints: [hbm, ddr], per: device, bandwidth: 8GB/s, latency: 10ns}
  - {id: d2s, kind: nvme, endpoints: [ddr, ssd], per: host, bandwidth: 7GB/s, latency: 20ns}
)";
  const Topology t = load_topology_text(yaml, "staged.yaml");
  const Route& r = route(t, "hbm", "ssd");
  REQUIRE(r.staging_tiers.size() == 1);
  CHECK(t.tiers[r.staging_tiers[0]].id == "ddr");
  CHECK(r.bandwidth.bytes_per_s == doctest::Approx(5e9));  // ddr write port
  // hbm 0 + ssd write 1000 + h2d 10 + d2s 20 + ddr write 200 + ddr read 100 = 1330 ns
  CHECK(r.setup.ps == 1330 * kNs);
}

namespace {

// Two GPUs of a box without GPUDirect Storage (tests/support), with one pinned route.
std::string staged_box(const std::string& pin) {
  return tierflow::testing::bounce_box_yaml(2, "  - " + pin + "\n");
}

}  // namespace

TEST_CASE("a staged copy moves bytes / sum(1 / leg) per buffer, up to the bottleneck") {
  SUBCASE("one buffer: the legs one after the other") {
    const Topology t = load_topology_text(
        staged_box("{from: ssd, to: hbm, via: [nvme, pcie], buffer: 64MiB}"), "bounce.yaml");
    const Route& r = route(t, "ssd", "hbm");
    CHECK(r.buffers == 1);
    CHECK(r.buffer.value == uint64_t{64} << 20);
    // 1 / (1/10 + 1/25) GB/s = 7.142857 GB/s, where cut-through would reach 10.
    CHECK(r.bandwidth.bytes_per_s == doctest::Approx(1e9 / (0.1 + 0.04)));
    // Each device's 64 MiB buffer is kept out of the host's DDR.
    const size_t ddr = *t.tier_index("ddr");
    CHECK(t.staging(ddr) == uint64_t{128} << 20);
    CHECK(t.usable(ddr) == 1'000'000'000 - (uint64_t{128} << 20));
    // The unpinned write direction is not staged.
    CHECK(route(t, "hbm", "ssd").buffers == 0);
  }
  SUBCASE("two buffers: twice the chained rate, capped by the drives") {
    const Topology t = load_topology_text(
        staged_box("{from: ssd, to: hbm, via: [nvme, pcie], buffer: 64MiB, buffers: 2}"),
        "bounce.yaml");
    CHECK(route(t, "ssd", "hbm").bandwidth.bytes_per_s == doctest::Approx(10e9));
    CHECK(t.staging(*t.tier_index("ddr")) == uint64_t{256} << 20);
  }
  SUBCASE("buffers that leave nothing of the staging tier are refused at the buffer") {
    // Two devices x 500 MB = the host's 1 GB of DDR.
    try {
      (void)load_topology_text(
          staged_box("{from: ssd, to: hbm, via: [nvme, pcie], buffer: 500MB}"), "bounce.yaml");
      FAIL("no error");
    } catch (const InputError& e) {
      INFO(std::string(e.what()));
      CHECK(std::string(e.what()).starts_with(
          "bounce.yaml:13:53: route ssd -> hbm: the staging buffers in 'ddr' (954MiB on each "
          "instance"));
    }
    CHECK_NOTHROW((void)load_topology_text(
        staged_box("{from: ssd, to: hbm, via: [nvme, pcie], buffer: 499MB}"), "bounce.yaml"));
  }
  SUBCASE("writes: 1 / (1/25 + 1/5)") {
    const Topology t = load_topology_text(
        staged_box("{from: hbm, to: ssd, via: [pcie, nvme], buffer: 8MiB}"), "bounce.yaml");
    CHECK(route(t, "hbm", "ssd").bandwidth.bytes_per_s == doctest::Approx(1e9 / (0.04 + 0.2)));
  }
}

TEST_CASE("pinned routes replace the computed ones and may be peer routes") {
  const std::string yaml = R"(tierflow: hw/1
name: pinned
devices: [{id: d, count: 2, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}
  - {id: ddr, kind: ddr, per: host, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns, attach: rc}
switches:
  - {id: rc, kind: root_complex, per: host, latency: 5ns}
  - {id: sw, kind: nvswitch, per: host}
links:
  - {id: pcie, kind: pcie, endpoints: [hbm, rc], per: device, bandwidth: 1GB/s, latency: 20ns}
  - {id: nvl, kind: nvlink, endpoints: [hbm, sw], per: device, bandwidth: 4GB/s, latency: 10ns}
routes:
  - {from: hbm, to: hbm, via: [pcie, pcie]}
)";
  const Topology t = load_topology_text(yaml, "pinned.yaml");
  const Route& r = route(t, "hbm", "hbm");
  CHECK(r.pinned);
  CHECK(r.bandwidth.bytes_per_s == doctest::Approx(1e9));
  CHECK(r.setup.ps == 45 * kNs);  // 20 + 5 + 20
  CHECK(describe_route(t, r) == "hbm -[pcie]-> rc -[pcie]-> hbm");
  CHECK(route(t, "hbm", "ddr").pinned == false);
}

TEST_CASE("roofline op time: the larger of compute and memory time, plus launch overhead") {
  const Topology t = unit_hw();
  // matmul at efficiency 0.5 of 1 FLOP/ns: 100 FLOP -> 200 ns, + 10 ns launch
  CHECK(roofline_time(t, 0, OpKind::kMatmul, Dtype::kBf16, 100, Bytes{0})->ps == 210 * kNs);
  // fp8 has twice the peak: 100 ns + 10 ns
  CHECK(roofline_time(t, 0, OpKind::kMatmul, Dtype::kFp8, 100, Bytes{0})->ps == 110 * kNs);
  // elementwise (default efficiency 1): max(10 FLOP -> 10 ns, 400 B at 4 B/ns -> 100 ns)
  CHECK(roofline_time(t, 0, OpKind::kElementwise, Dtype::kBf16, 10, Bytes{400})->ps == 110 * kNs);
  // no fp32 peak declared: the cost is unknown, not zero
  CHECK_FALSE(roofline_time(t, 0, OpKind::kMatmul, Dtype::kFp32, 100, Bytes{0}).has_value());
  // ...but an op with no FLOPs (an int8 mask) is timed by its bytes: 400 B -> 100 ns + 10 ns
  CHECK(roofline_time(t, 0, OpKind::kElementwise, Dtype::kInt8, 0, Bytes{400})->ps == 110 * kNs);
}

TEST_CASE("roofline op time: dequantizing weights slows the compute term, not the memory term") {
  const Topology t = unit_hw({"devices.dev.dequant_efficiency.int4=0.25"});
  // matmul at 0.5 x 0.25 of 1 FLOP/ns: 100 FLOP -> 800 ns, + 10 ns launch
  CHECK(roofline_time(t, 0, OpKind::kMatmul, Dtype::kBf16, 100, Bytes{0}, Dtype::kInt4)->ps ==
        810 * kNs);
  // int8 declares no entry: efficiency 1, the same 200 ns + 10 ns as without dequantization
  CHECK(roofline_time(t, 0, OpKind::kMatmul, Dtype::kBf16, 100, Bytes{0}, Dtype::kInt8)->ps ==
        210 * kNs);
  // memory-bound: max(10 FLOP -> 80 ns, 800 B at 4 B/ns -> 200 ns) + 10 ns, as without
  CHECK(roofline_time(t, 0, OpKind::kMatmul, Dtype::kBf16, 10, Bytes{800}, Dtype::kInt4)->ps ==
        210 * kNs);
  // a fraction outside (0, 1] is bad input
  CHECK_THROWS_AS(unit_hw({"devices.dev.dequant_efficiency.int4=1.5"}), InputError);
  CHECK(unit_hw().devices[0].peak_dtypes() == "bf16, fp8");
}

namespace {

/// unit_hw with a host CPU next to ddr (per socket, 2 B/ns): 4 FLOP/ns of fp32 per socket
/// at efficiency 0.5, memory efficiency 0.5, 10 ns per op; then `sets`.
Topology unit_hw_cpu(std::vector<std::string> sets = {}) {
  std::vector<std::string> all = {
      "system.cpu.tier=ddr", "system.cpu.peak.fp32=4GFLOP/s", "system.cpu.compute_efficiency=0.5",
      "system.cpu.memory_efficiency=0.5", "system.cpu.launch_overhead=10ns"};
  all.insert(all.end(), sets.begin(), sets.end());
  return unit_hw(all);
}

/// A workload of one attention op.
Workload one_op(Dtype dtype, double flops, uint64_t bytes) {
  Workload w;
  Op o;
  o.name = "attention";
  o.kind = OpKind::kAttention;
  o.dtype = dtype;
  o.flops = flops;
  o.bytes = bytes;
  w.ops.push_back(o);
  return w;
}

std::optional<Duration> host_time(const Topology& t, Dtype dtype, double flops, uint64_t bytes) {
  return host_op_time(t, 0, one_op(dtype, flops, bytes), 0);
}

}  // namespace

TEST_CASE("host op time: the CPU's roofline, its peak and its tier shared by their devices") {
  // 4 devices on 2 sockets: 2 share each socket's CPU and each socket's ddr. Per device:
  // 4 FLOP/ns / 2 x 0.5 = 1 FLOP/ns, and 2 B/ns / 2 x 0.5 = 0.5 B/ns.
  const Topology t = unit_hw_cpu();
  // compute-bound: max(1000 FLOP -> 1000 ns, 100 B -> 200 ns) + 10 ns
  CHECK(host_time(t, Dtype::kFp32, 1000, 100)->ps == 1010 * kNs);
  // memory-bound: max(100 FLOP -> 100 ns, 1000 B -> 2000 ns) + 10 ns
  CHECK(host_time(t, Dtype::kFp32, 100, 1000)->ps == 2010 * kNs);
  // an op with no FLOPs is timed by its bytes, whatever its dtype: 100 B -> 200 ns + 10 ns
  CHECK(host_time(t, Dtype::kInt8, 0, 100)->ps == 210 * kNs);
  // FLOPs in a dtype the CPU has no peak for: unknown, not zero
  CHECK_FALSE(host_time(t, Dtype::kFp16, 100, 100).has_value());
  // One device per socket (4 sockets): the whole socket and its ddr, half the time.
  const Topology alone = unit_hw_cpu({"system.sockets_per_host=4"});
  CHECK(host_time(alone, Dtype::kFp32, 1000, 100)->ps == 510 * kNs);   // 500 + 10
  CHECK(host_time(alone, Dtype::kFp32, 100, 1000)->ps == 1010 * kNs);  // 1000 + 10
  // Next to ssd (per host, read 0.5 B/ns): all 4 devices share it, still 2 share a socket.
  // max(100 FLOP -> 100 ns, 100 B at 0.5 / 4 x 0.5 = 0.0625 B/ns -> 1600 ns) + 10 ns
  const Topology ssd = unit_hw_cpu({"system.cpu.tier=ssd"});
  CHECK(host_time(ssd, Dtype::kFp32, 100, 100)->ps == 1610 * kNs);
  CHECK(host_time(ssd, Dtype::kFp32, 2000, 100)->ps == 2010 * kNs);  // 2000 ns of compute
}

TEST_CASE("host op time: none without a host CPU") {
  const Topology t = load_topology_text(
      tierflow::testing::bounce_box_yaml(1, "  - {from: ddr, to: hbm, via: [pcie]}\n"),
      "bounce.yaml");
  REQUIRE_FALSE(t.system.cpu.present());
  CHECK_FALSE(host_time(t, Dtype::kFp32, 100, 100).has_value());
  CHECK_FALSE(host_time(t, Dtype::kFp32, 0, 100).has_value());
}

TEST_CASE("t4-flexgen: the CPU's decode attention is bounded by its tier's bandwidth") {
  const Topology t =
      load_topology(std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw/t4-flexgen.yaml");
  const HostCpu& cpu = t.system.cpu;
  REQUIRE(cpu.present());
  REQUIRE(cpu.tier == "ddr");
  // OPT-175B (hidden 12288, 96 heads of 128), batch 32, the last decode step of 512 + 32
  // tokens: the fp16 query and output (32 x 12288 x 2 B each) and 544 cached tokens of
  // K and V (32 x 544 x 2 x 12288 x 2 B = 855.6 MB); 2 x 96 x (128 + 128) FLOPs per pair.
  const double pairs = 32.0 * 544;
  const double flops = pairs * 2 * 96 * (128 + 128);
  const uint64_t bytes = 2 * (32ULL * 12288 * 2) + 32ULL * 544 * 2 * 12288 * 2;
  const auto d = host_time(t, Dtype::kFp16, flops, bytes);
  REQUIRE(d.has_value());
  // Never faster than the bytes at the tier's full read bandwidth (100 GB/s: 8.57 ms).
  const Tier& ddr = t.tiers[*t.tier_index("ddr")];
  const Duration floor = transfer_time(Bytes{bytes}, ddr.read_bandwidth);
  CHECK(d->ps > floor.ps);
  // Memory-bound (about 1 FLOP per byte): bytes at 0.75 x 100 GB/s (11.43 ms) + 20 us,
  // against 0.86 ms of compute at 0.5 x 2.048 TFLOP/s.
  CHECK(compute_time(flops, FlopRate{2.048e12 * 0.5}).ps < floor.ps);
  CHECK(d->ps == transfer_time(Bytes{bytes}, Bandwidth{75e9}).ps + 20'000'000);
  CHECK(static_cast<double>(d->ps) == doctest::Approx(11.4495e9).epsilon(1e-4));
}

TEST_CASE("devices spread evenly over hosts and sockets") {
  const Topology t = unit_hw();  // 4 devices, 1 host, 2 sockets
  CHECK(t.instance_of(Scope::kSocket, 0, 0) == 0);
  CHECK(t.instance_of(Scope::kSocket, 0, 1) == 0);
  CHECK(t.instance_of(Scope::kSocket, 0, 2) == 1);
  CHECK(t.instance_of(Scope::kSocket, 0, 3) == 1);
  CHECK(t.instance_of(Scope::kHost, 0, 3) == 0);
  CHECK(t.instance_of(Scope::kDevice, 0, 3) == 3);
  CHECK(t.instances(Scope::kSocket) == 2);
  CHECK(t.instances(Scope::kDevice) == 4);
  CHECK(t.instances(Scope::kSupernode) == 1);
}

TEST_CASE("--set overrides change the value and the routes that depend on it") {
  const Topology t = unit_hw({"links.pcie.bandwidth=4GB/s", "tiers.hbm.capacity=256B"});
  CHECK(t.tiers[*t.tier_index("hbm")].capacity.value == 256);
  // hbm -> ddr is now capped by the ddr write port (2 GB/s)
  CHECK(route(t, "hbm", "ddr").bandwidth.bytes_per_s == doctest::Approx(2e9));
}

TEST_CASE("--set on a path that does not exist is an error, not a new field") {
  CHECK_THROWS_WITH_AS(unit_hw({"tiers.hbm.capacty=1GB"}),
                       "--set:1:11: unknown key 'capacty' in tier 'hbm'; did you mean 'capacity'?",
                       InputError);
  CHECK_THROWS_WITH_AS(unit_hw({"tiers.hmb.capacity=1GB"}),
                       "--set:1:7: 'tiers.hmb.capacity': no tier with id 'hmb'; did you "
                       "mean 'hbm'?",
                       InputError);
  CHECK_THROWS_WITH_AS(unit_hw({"tiers.hbm.capacity=1XB"}),
                       doctest::Contains("--set:1:20: bad value for 'capacity'"), InputError);
  CHECK_THROWS_AS(unit_hw({"nonsense"}), InputError);
}

TEST_CASE("a peer path leaves on the source's links and arrives on the destination's") {
  const Topology t = unit_hw();
  const Fabric f(t);
  const size_t hbm = *t.tier_index("hbm");
  const FabricPath* p = f.peer_path(hbm, 1, 3);
  REQUIRE(p != nullptr);
  CHECK(p->route == t.route(hbm, hbm));
  std::vector<std::string> names;
  for (const uint32_t r : p->resources) names.push_back(f.resources()[r].name);
  // hbm[1] read, device 1's NVLink out to the fabric, device 3's back in, hbm[3] write.
  CHECK(names == std::vector<std::string>{"hbm[1] read", "nvl[1] hbm->fabric", "nvl[3] fabric->hbm",
                                          "hbm[3] write"});
  REQUIRE(p->engines.size() == 2);
  CHECK(f.engines()[p->engines[0]].name == "nvl[1] hbm->fabric");
  CHECK(f.engines()[p->engines[1]].name == "nvl[3] fabric->hbm");
  CHECK(f.peer_path(hbm, 1, 3) == p);  // found once
  CHECK(f.peer_path(hbm, 3, 1) != p);
  CHECK(f.peer_path(hbm, 2, 2) == nullptr);
  // A tier with no peer route (ddr is per socket) has no peer path.
  CHECK(f.peer_path(*t.tier_index("ddr"), 0, 1) == nullptr);
}

TEST_CASE("a peer path needs the switch it turns at to be one both devices reach") {
  // Two hosts, a per-host switch: devices of one host reach each other, not the other's.
  const std::string yaml = two_hosts() + R"(links:
  - {id: nvl, kind: nvlink, endpoints: [hbm, sw], per: device, bandwidth: 5GB/s, latency: 1ns}
)";
  const Topology t = load_topology_text(yaml, "two-hosts.yaml");
  const Fabric f(t);
  const size_t hbm = *t.tier_index("hbm");
  CHECK(f.peer_path(hbm, 0, 1) != nullptr);  // host 0
  CHECK(f.peer_path(hbm, 2, 3) != nullptr);  // host 1
  CHECK(f.peer_path(hbm, 1, 2) == nullptr);
  CHECK(f.peer_path(hbm, 3, 0) == nullptr);
}

TEST_CASE("a direct peer link is the source's own: a full mesh") {
  const std::string yaml = R"(tierflow: hw/1
name: mesh
devices: [{id: d, count: 3, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}
links:
  - {id: mesh, kind: xgmi, endpoints: [hbm, hbm], per: device, bandwidth: 5GB/s, latency: 1ns}
)";
  const Topology t = load_topology_text(yaml, "mesh.yaml");
  const Fabric f(t);
  const FabricPath* p = f.peer_path(0, 2, 0);
  REQUIRE(p != nullptr);
  std::vector<std::string> names;
  for (const uint32_t r : p->resources) names.push_back(f.resources()[r].name);
  CHECK(names == std::vector<std::string>{"hbm[2] read", "mesh[2] hbm->hbm", "hbm[0] write"});
}

TEST_CASE("supernodes: a switch per supernode joins the devices of its own supernode") {
  // Four hosts of one device in two supernodes (two racks), each rack's switch its own; a
  // network per cluster joins the racks.
  const std::string yaml =
      four_devices("two-racks", "{hosts: 4, supernodes: 2}") +
      R"(  - {id: pool, kind: pool, per: supernode, capacity: 4GB, read_bandwidth: 10GB/s, write_bandwidth: 10GB/s, latency: 0ns}
switches:
  - {id: rack, kind: nvswitch, per: supernode}
  - {id: net, kind: network, per: cluster}
links:
  - {id: nvl, kind: nvlink, endpoints: [hbm, rack], per: device, bandwidth: 5GB/s, latency: 1ns}
  - {id: to-pool, kind: ub, endpoints: [rack, pool], per: supernode, bandwidth: 4GB/s, latency: 1ns}
  - {id: nic, kind: rdma, endpoints: [hbm, net], per: device, bandwidth: 1GB/s, latency: 2ns}
)";
  const Topology t = load_topology_text(yaml, "two-racks.yaml");
  CHECK(t.instances(Scope::kSupernode) == 2);
  CHECK(t.instances(Scope::kCluster) == 1);
  CHECK(t.instance_of(Scope::kSupernode, 0, 1) == 0);
  CHECK(t.instance_of(Scope::kSupernode, 0, 2) == 1);
  const size_t hbm = *t.tier_index("hbm");
  const Fabric f(t);
  const FabricPath* far = far_path(f, hbm);
  CHECK(describe_route(t, *far->route) == "hbm -[nic]-> net -[nic]-> hbm");
  CHECK(f.peer_path(hbm, 1, 2, /*wider=*/false) == nullptr);
  // Each rack reaches its own pool: device 2's copy goes to pool instance 1 over rack 1.
  const size_t pool = *t.tier_index("pool");
  CHECK(t.instances(Scope::kSupernode) == 2);
  CHECK(f.tier_instance(pool, 0) == 0);
  CHECK(f.tier_instance(pool, 3) == 1);
}

TEST_CASE("a direct peer link's mesh joins the devices of one host, not of two") {
  // Two hosts of two devices, each device's own link to every peer (an xGMI mesh per
  // board): before 2026-12-01 the mesh joined all four, so a TP group or a hand-over
  // crossed from one board to the other over links that do not leave a board.
  const std::string yaml = four_devices("two-boards", "{hosts: 2}") + R"(links:
  - {id: mesh, kind: xgmi, endpoints: [hbm, hbm], per: device, bandwidth: 5GB/s, latency: 1ns}
)";
  const Topology t = load_topology_text(yaml, "two-boards.yaml");
  const size_t hbm = *t.tier_index("hbm");
  CHECK(peer_turn_scope(t, *t.route(hbm, hbm)) == Scope::kHost);
  const Fabric f(t);
  CHECK(f.peer_path(hbm, 0, 1) != nullptr);
  CHECK(f.peer_path(hbm, 3, 2) != nullptr);
  CHECK(f.peer_path(hbm, 1, 2) == nullptr);
  CHECK(f.peer_path(hbm, 2, 0) == nullptr);
  CHECK(peer_apart_reason(t, hbm) ==
        "they are on different hosts, and its 'mesh' links join the devices of one");
  // TP 2 stays on a board; TP 4 would span both.
  CHECK_FALSE(tp_group_problem(f, hbm, 2, 2));
  const std::optional<std::string> wide = tp_group_problem(f, hbm, 0, 4);
  REQUIRE(wide);
  CHECK(*wide ==
        "on devices 0 to 3, its collectives cross the peer route of 'hbm', and 'two-boards' "
        "has none from device 0 to device 2 (they are on different hosts, and its 'mesh' links "
        "join the devices of one); a narrower tensor parallelism keeps each group among the "
        "devices of one host");
}

TEST_CASE("a wider peer route joins the devices the peer route's switch does not") {
  // Two hosts, a per-host NVSwitch, and a network per cluster reached through each
  // device's PCIe and NIC: devices of one host copy over NVLink, of two over the network.
  const std::string yaml = two_hosts() + R"(  - {id: pcisw, kind: pcie_switch, per: socket}
  - {id: net, kind: network, per: cluster, latency: 7ns}
links:
  - {id: nvl, kind: nvlink, endpoints: [hbm, sw], per: device, bandwidth: 5GB/s, latency: 1ns}
  - {id: pcie, kind: pcie, endpoints: [hbm, pcisw], per: device, bandwidth: 3GB/s, latency: 2ns, dma_setup: 20ns}
  - {id: nic, kind: rdma, endpoints: [pcisw, net], per: device, bandwidth: 2GB/s, latency: 3ns}
)";
  const Topology t = load_topology_text(yaml, "two-hosts-net.yaml");
  const size_t hbm = *t.tier_index("hbm");
  CHECK(describe_route(t, *t.route(hbm, hbm)) == "hbm -[nvl]-> sw -[nvl]-> hbm");
  REQUIRE(t.wider_peers[hbm].size() == 1);  // the network is the widest scope: no more
  const Route& wide = t.wider_peers[hbm][0];
  CHECK(describe_route(t, wide) == "hbm -[pcie]-> pcisw -[nic]-> net -[nic]-> pcisw -[pcie]-> hbm");
  // bottleneck = the NIC's 2 GB/s; setup = links 2 + 3 + 3 + 2, net 7, DMA 20 = 37 ns
  CHECK(wide.bandwidth.bytes_per_s == doctest::Approx(2e9));
  CHECK(wide.setup.ps == 37 * kNs);
  CHECK(peer_turn_scope(t, *t.route(hbm, hbm)) == Scope::kHost);
  CHECK(peer_turn_scope(t, wide) == Scope::kCluster);

  const Fabric f(t);
  const FabricPath* far = far_path(f, hbm);
  CHECK(far->route == &wide);
  std::vector<std::string> names;
  for (const uint32_t r : far->resources) names.push_back(f.resources()[r].name);
  // Device 1's PCIe and NIC out to the network, device 2's back in.
  CHECK(names == std::vector<std::string>{"hbm[1] read", "pcie[1] hbm->pcisw", "nic[1] pcisw->net",
                                          "nic[2] net->pcisw", "pcie[2] pcisw->hbm",
                                          "hbm[2] write"});
  // Collectives are timed over the peer route alone: it does not join them.
  CHECK(f.peer_path(hbm, 1, 2, /*wider=*/false) == nullptr);
  CHECK(f.peer_path(hbm, 0, 1, /*wider=*/false) == f.peer_path(hbm, 0, 1));
  CHECK(f.peer_path(hbm, 1, 2) == far);  // found once

  // Topologies whose peer route joins every pair have no wider one.
  const Topology u = unit_hw();
  CHECK(u.wider_peers[*u.tier_index("hbm")].empty());
}
