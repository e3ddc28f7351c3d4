// Writing topologies back as files (hw_models/writer.h): every shipped topology written and
// read again keeps its numbers, citations, notes and routes, and writing is a fixed point.
#include "hw_models/writer.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "hw_models/loader.h"

using namespace tierflow;
using namespace tierflow::hw;

namespace {

/// Bandwidths and FLOP rates are written as tierflow prints them (four significant digits
/// at least), so they come back within this.
constexpr double kPrinted = 5e-4;

template <class Obj>
void check_citations(const Obj& a, const Obj& b, const Topology& t) {
  for (const auto& field : a.origins.fields) {
    const auto& key = field.first;  // a plain name: clang 14 cannot capture a binding
    const auto& origin = field.second;
    CAPTURE(key);
    const schema::Origin* back = b.origins.find(key);
    REQUIRE(back != nullptr);
    if (t.sources.count(origin.source) != 0) CHECK(back->source == origin.source);
    CHECK(back->note == origin.note);
  }
}

void check_same_cpu(const HostCpu& a, const HostCpu& b) {
  CHECK(a.present() == b.present());
  CHECK(a.description == b.description);
  CHECK(a.source == b.source);
  CHECK(a.tier == b.tier);
  for (size_t d = 0; d < a.peak.size(); ++d) {
    CHECK(b.peak[d].flop_per_s == doctest::Approx(a.peak[d].flop_per_s).epsilon(kPrinted));
  }
  CHECK(a.compute_efficiency == b.compute_efficiency);
  CHECK(a.memory_efficiency == b.memory_efficiency);
  CHECK(a.launch_overhead == b.launch_overhead);
}

void check_same(const Topology& a, const Topology& b) {
  CHECK(a.name == b.name);
  CHECK(a.description == b.description);
  CHECK(a.sources == b.sources);
  CHECK(a.system.hosts == b.system.hosts);
  CHECK(a.system.sockets_per_host == b.system.sockets_per_host);
  check_same_cpu(a.system.cpu, b.system.cpu);
  check_citations(a.system, b.system, a);
  REQUIRE(a.devices.size() == b.devices.size());
  for (size_t i = 0; i < a.devices.size(); ++i) {
    const Device& x = a.devices[i];
    const Device& y = b.devices[i];
    CAPTURE(x.id);
    CHECK(x.id == y.id);
    CHECK(x.count == y.count);
    CHECK(x.local_tier == y.local_tier);
    for (size_t d = 0; d < x.peak.size(); ++d) {
      CHECK(y.peak[d].flop_per_s == doctest::Approx(x.peak[d].flop_per_s).epsilon(kPrinted));
    }
    CHECK(x.compute_eff == y.compute_eff);
    CHECK(x.memory_eff == y.memory_eff);
    CHECK(x.dequant_eff == y.dequant_eff);
    CHECK(x.launch_overhead == y.launch_overhead);
    CHECK(x.dispatch_compute == y.dispatch_compute);
    CHECK(x.dispatch_copy == y.dispatch_copy);
    CHECK(x.dispatch_detach == y.dispatch_detach);
    CHECK(x.reserved == y.reserved);
    check_citations(x, y, a);
  }
  REQUIRE(a.tiers.size() == b.tiers.size());
  for (size_t i = 0; i < a.tiers.size(); ++i) {
    const Tier& x = a.tiers[i];
    const Tier& y = b.tiers[i];
    CAPTURE(x.id);
    CHECK(x.kind == y.kind);
    CHECK(x.per == y.per);
    CHECK(x.capacity == y.capacity);
    CHECK(y.read_bandwidth.bytes_per_s ==
          doctest::Approx(x.read_bandwidth.bytes_per_s).epsilon(kPrinted));
    CHECK(y.write_bandwidth.bytes_per_s ==
          doctest::Approx(x.write_bandwidth.bytes_per_s).epsilon(kPrinted));
    CHECK(x.latency == y.latency);
    CHECK(x.write_latency == y.write_latency);
    CHECK(x.attach == y.attach);
    check_citations(x, y, a);
  }
  REQUIRE(a.switches.size() == b.switches.size());
  REQUIRE(a.links.size() == b.links.size());
  for (size_t i = 0; i < a.links.size(); ++i) {
    const Link& x = a.links[i];
    const Link& y = b.links[i];
    CAPTURE(x.id);
    CHECK(x.endpoints == y.endpoints);
    CHECK(y.bandwidth.bytes_per_s == doctest::Approx(x.bandwidth.bytes_per_s).epsilon(kPrinted));
    CHECK(x.efficiency == y.efficiency);
    CHECK(x.efficiency_reverse == y.efficiency_reverse);
    CHECK(x.duplex == y.duplex);
    CHECK(x.duplex_efficiency == y.duplex_efficiency);
    CHECK(x.copy_engines == y.copy_engines);
    CHECK(x.dma_setup == y.dma_setup);
    check_citations(x, y, a);
  }
  REQUIRE(a.pins.size() == b.pins.size());
  for (size_t i = 0; i < a.pins.size(); ++i) {
    CHECK(a.pins[i].buffer == b.pins[i].buffer);
    CHECK(a.pins[i].buffers == b.pins[i].buffers);
  }
  REQUIRE(a.routes.size() == b.routes.size());
  for (size_t i = 0; i < a.routes.size(); ++i) {
    REQUIRE(a.routes[i].has_value() == b.routes[i].has_value());
    if (!a.routes[i]) continue;
    CHECK(a.routes[i]->steps.size() == b.routes[i]->steps.size());
    CHECK(a.routes[i]->setup == b.routes[i]->setup);
    CHECK(a.routes[i]->buffers == b.routes[i]->buffers);
    CHECK(a.routes[i]->bandwidth.bytes_per_s ==
          doctest::Approx(b.routes[i]->bandwidth.bytes_per_s).epsilon(kPrinted));
  }
}

}  // namespace

TEST_CASE("every shipped topology written and read again is the same topology") {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw")) {
    if (e.path().extension() != ".yaml") continue;
    CAPTURE(e.path().string());
    const LoadOptions cited{{}, /*require_sources=*/true};
    const Topology t = load_topology(e.path().string(), cited);
    const std::string text = topology_yaml(t);
    const Topology back = load_topology_text(text, "written.yaml", cited);
    check_same(t, back);
    CHECK(topology_yaml(back) == text);
    // A topology without a host CPU writes no `cpu:` block.
    CHECK((text.find("\n  cpu:\n") != std::string::npos) == t.system.cpu.present());
    ++n;
  }
  CHECK(n >= 10);
}

TEST_CASE("a written topology: header comments, quoted text, cited values, --set uncited") {
  const std::string base = R"(tierflow: hw/1
name: w
description: "a: b # not a comment"
sources: {S1: "datasheet \"v2\""}
devices: [{id: d, count: 1, local_tier: hbm, peak: {bf16: {value: 1TFLOP/s, source: S1, note: "dense"}}, source: S1}]
tiers:
  - {id: hbm, description: "null", kind: hbm, per: device, capacity: 80GiB, read_bandwidth: 3TB/s, write_bandwidth: 3TB/s, latency: 100ns, source: S1}
)";
  const Topology t =
      load_topology_text(base, "w.yaml", LoadOptions{{"tiers.hbm.capacity=40GiB"}, false});
  const std::string text = topology_yaml(t, {"first", "", "third"});
  CHECK(text.rfind("# first\n#\n# third\ntierflow: hw/1\nname: w\n", 0) == 0);
  CHECK(text.find("description: \"a: b # not a comment\"") != std::string::npos);
  CHECK(text.find("S1: \"datasheet \\\"v2\\\"\"") != std::string::npos);
  CHECK(text.find("bf16: {value: 1TFLOP/s, source: S1, note: \"dense\"}") != std::string::npos);
  // `--set` is no citation key of the file: the value stays, uncited.
  CHECK(text.find("capacity: 40GiB\n") != std::string::npos);
  // Text that YAML would read as null keeps its quotes.
  CHECK(text.find("description: \"null\"") != std::string::npos);
  const Topology back = load_topology_text(text, "written.yaml");
  CHECK(back.description == "a: b # not a comment");
  CHECK(back.tiers[0].description == "null");
  CHECK(back.tiers[0].capacity.value == uint64_t{40} << 30);
}

TEST_CASE("a written host CPU reads back as the same CPU, with its citations") {
  const std::string base = R"(tierflow: hw/1
name: w
sources: {S1: "datasheet"}
system:
  sockets_per_host: 2
  cpu:
    description: "two sockets' cores"
    tier: ddr
    peak: {fp32: {value: 1.5TFLOP/s, source: S1, note: "per socket"}, fp16: 1.5TFLOP/s}
    memory_efficiency: 0.8
    launch_overhead: 20us
    source: S1
devices: [{id: d, count: 2, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 1TB/s, write_bandwidth: 1TB/s, latency: 0ns}
  - {id: ddr, kind: ddr, per: host, capacity: 1TB, read_bandwidth: 100GB/s, write_bandwidth: 100GB/s, latency: 0ns}
links: [{id: pcie, kind: pcie, endpoints: [hbm, ddr], per: device, bandwidth: 25GB/s, latency: 0ns}]
)";
  const Topology t = load_topology_text(base, "w.yaml",
                                        LoadOptions{{"system.cpu.compute_efficiency=0.25"}, false});
  const std::string text = topology_yaml(t);
  // The block as the file spells it; the efficiency set by --set is written, uncited, and
  // the keys not given (memory_efficiency aside) stay out.
  CHECK(text.find("  cpu:\n"
                  "    description: \"two sockets' cores\"\n"
                  "    source: S1\n"
                  "    tier: ddr\n"
                  "    peak:\n"
                  "      fp32: {value: 1.5TFLOP/s, source: S1, note: \"per socket\"}\n"
                  "      fp16: 1.5TFLOP/s\n"
                  "    compute_efficiency: 0.25\n"
                  "    memory_efficiency: 0.8\n"
                  "    launch_overhead: 20us\n") != std::string::npos);
  const Topology back = load_topology_text(text, "written.yaml");
  check_same_cpu(t.system.cpu, back.system.cpu);
  CHECK(back.system.cpu.compute_efficiency == 0.25);
  CHECK(back.system.origins.find("cpu.peak.fp32")->note == "per socket");
  CHECK(topology_yaml(back) == text);
}
