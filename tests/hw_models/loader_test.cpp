// Loading the shipped topologies and the loader's treatment of citations.
#include "hw_models/loader.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "core/yaml_input.h"
#include "tools/study/hw_show.h"

using namespace tierflow;
using namespace tierflow::hw;

namespace {
std::string config(std::string_view name) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw/" + std::string(name);
}
}  // namespace

TEST_CASE("every shipped topology loads with every number cited") {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw")) {
    if (e.path().extension() != ".yaml") continue;
    CAPTURE(e.path().string());
    const Topology t = load_topology(e.path().string(), LoadOptions{{}, /*require_sources=*/true});
    CHECK(t.total_devices() > 0);
    // Every tier is reachable both ways from the first device's local tier.
    const size_t local = *t.tier_index(t.devices[0].local_tier);
    for (size_t i = 0; i < t.tiers.size(); ++i) {
      if (i == local) continue;
      CHECK(t.route(local, i) != nullptr);
      CHECK(t.route(i, local) != nullptr);
    }
    ++n;
  }
  CHECK(n >= 10);
}

TEST_CASE("CloudMatrix384: 384 NPUs of 128 GB, and the pool behind each socket's UB port") {
  const Topology t = load_topology(config("cloudmatrix384.yaml"));
  CHECK(t.total_devices() == 384);
  CHECK(t.system.hosts == 48);
  const Tier& hbm = t.tiers[*t.tier_index("hbm")];
  CHECK(hbm.capacity.value == 128'000'000'000ULL);
  CHECK(hbm.capacity.value * static_cast<uint64_t>(t.instances(hbm.per)) == 49'152'000'000'000ULL);
  const Route* r = t.route(*t.tier_index("hbm"), *t.tier_index("pool"));
  REQUIRE(r != nullptr);
  // 160 GB/s per Kunpeng UB port at the topology's stated UB efficiency is the bottleneck.
  const Link& cpu_ub = t.links[r->hops.back().link];
  CHECK(cpu_ub.per == Scope::kSocket);
  CHECK(r->bandwidth.bytes_per_s == doctest::Approx(cpu_ub.effective(true).bytes_per_s));
  CHECK(r->bandwidth.bytes_per_s < 160e9 + 1);
}

TEST_CASE("a cited value records its source; an unknown source key is an error") {
  const std::string base = R"(tierflow: hw/1
name: cite
sources: {S1: "datasheet"}
devices: [{id: d, count: 1, local_tier: hbm, peak: {bf16: {value: 1TFLOP/s, source: S1}}, source: S1}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: {value: 1GB, source: S1, note: "vendor GB"}, read_bandwidth: 1GB/s, write_bandwidth: 1GB/s, latency: 0ns)";
  const Topology t =
      load_topology_text(base + ", source: S1}\n", "cite.yaml", LoadOptions{{}, true});
  const auto* o = t.tiers[0].origins.find("capacity");
  REQUIRE(o != nullptr);
  CHECK(o->source == "S1");
  CHECK(o->note == "vendor GB");
  CHECK(o->pos.line == 6);
  // Without the tier's own `source:` its bandwidths are uncited.
  CHECK_THROWS_WITH_AS(load_topology_text(base + "}\n", "cite.yaml", LoadOptions{{}, true}),
                       doctest::Contains("'read_bandwidth' of tier 'hbm' has no source"),
                       InputError);
  // Without --require-sources the same file is fine.
  CHECK_NOTHROW(load_topology_text(base + "}\n", "cite.yaml"));
  CHECK_THROWS_WITH_AS(load_topology_text(base + ", source: s1}\n", "cite.yaml"),
                       doctest::Contains("unknown source 's1': not defined under 'sources'; did "
                                         "you mean 'S1'?"),
                       InputError);
}

TEST_CASE("show --json reports base units and is stable") {
  const Topology t = load_topology(config("h100-sxm-8gpu.yaml"));
  const auto j = study::show_json(t);
  CHECK(j["system"]["devices"] == 8);
  // The H100's HBM as the device exposes it (81,559 MiB), less the 1 GiB reserve.
  CHECK(j["tiers"][0]["capacity_bytes"] == 81'559ULL << 20);
  CHECK(j["tiers"][0]["usable_bytes"] == (81'559ULL << 20) - (1ULL << 30));
  CHECK(j["devices"][0]["reserved_bytes"] == 1ULL << 30);
  CHECK(study::show_json(t).dump() == j.dump());
  CHECK(study::show_text(t) == study::show_text(load_topology(config("h100-sxm-8gpu.yaml"))));
}

TEST_CASE("usable memory: a tier's capacity less its devices' reserve") {
  const std::string h100 = config("h100-sxm-8gpu.yaml");
  const Topology t = load_topology(h100);
  const size_t hbm = *t.tier_index("hbm"), ddr = *t.tier_index("ddr");
  CHECK(t.usable(hbm) == (81'559ULL << 20) - (1ULL << 30));
  CHECK(t.usable(ddr) == t.tiers[ddr].capacity.value);  // no device computes from DDR
  // Overrides apply to both; a reserve of 0B gives the whole tier.
  const Topology none = load_topology(h100, LoadOptions{{"devices.h100.reserved=0B"}, false});
  CHECK(none.usable(hbm) == 81'559ULL << 20);
  const Topology big = load_topology(
      h100, LoadOptions{{"tiers.hbm.capacity=96GB", "devices.h100.reserved=2GiB"}, false});
  CHECK(big.usable(hbm) == 96'000'000'000ULL - (2ULL << 30));
  CHECK(study::show_text(big).find(" 87.4GiB ") != std::string::npos);  // 96GB = 89.4GiB, less 2GiB
  // A reserve that leaves nothing is an error at the value, with the way out.
  CHECK_THROWS_WITH_AS(
      load_topology(h100, LoadOptions{{"tiers.hbm.capacity=1GB"}, false}),
      doctest::Contains("device 'h100': reserved 1GiB leaves nothing of local_tier 'hbm' (1GB) "
                        "to plans; lower it (--set devices.h100.reserved=0B)"),
      InputError);
  CHECK_THROWS_WITH_AS(load_topology(h100, LoadOptions{{"devices.h100.reserved=-1GiB"}, false}),
                       doctest::Contains("reserved"), InputError);
}

TEST_CASE("--set of a list field: [a, b] or a,b, each id checked at its column") {
  const std::string h100 = config("h100-sxm-8gpu.yaml");
  for (const std::string v : {"[rc, hbm]", "rc,hbm", "[ rc , hbm ]"}) {
    CAPTURE(v);
    const Topology t = load_topology(h100, LoadOptions{{"links.gpu-pcie.endpoints=" + v}, false});
    const auto& ends = t.links[0].endpoints;
    CHECK(ends == std::vector<std::string>{"rc", "hbm"});
  }
  CHECK_THROWS_WITH_AS(
      load_topology(h100, LoadOptions{{"tiers.hbm.id=ddr"}, false}),
      doctest::Contains("--set:1:11: 'tiers.hbm.id': an id is not changed by an override"),
      InputError);
  CHECK_THROWS_WITH_AS(load_topology(h100, LoadOptions{{"links.gpu-pcie.endpoints=[]"}, false}),
                       doctest::Contains("expected a list of 2 ids, got 0"), InputError);
  CHECK_THROWS_WITH_AS(
      load_topology(h100, LoadOptions{{"links.gpu-pcie.endpoints=[hbm,rc,x]"}, false}),
      doctest::Contains("expected a list of 2 ids, got 3"), InputError);
}

TEST_CASE("--set on an unknown id suggests the ids it is a part of") {
  // The links of this file are gpu-pcie, nvlink and nvme-link.
  const std::string h100 = config("h100-sxm-8gpu.yaml");
  CHECK_THROWS_WITH_AS(load_topology(h100, LoadOptions{{"links.pcie.bandwidth=10GB/s"}, false}),
                       "--set:1:7: 'links.pcie.bandwidth': no link with id 'pcie'; did you mean "
                       "'gpu-pcie'?",
                       InputError);
  CHECK_THROWS_WITH_AS(
      load_topology(h100,
                    LoadOptions{{"tiers.hbm.capacity=1TB", "links.link.bandwidth=1GB/s"}, false}),
      "--set:2:7: 'links.link.bandwidth': no link with id 'link'; did you mean "
      "'nvme-link' or 'nvlink'?",
      InputError);
}

namespace {
/// A topology of two devices whose `system:` block ends the file: `cpu` (its lines) comes
/// from line 11 on. Every number cites S1.
const std::string kCpuTopologyBase = R"(tierflow: hw/1
name: cpu
sources: {S1: "datasheet", S2: "assumption"}
devices: [{id: d, count: 2, local_tier: hbm, peak: {bf16: 1TFLOP/s}, source: S1}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 1TB/s, write_bandwidth: 1TB/s, latency: 0ns, source: S1}
  - {id: ddr, kind: ddr, per: socket, capacity: 1TB, read_bandwidth: 100GB/s, write_bandwidth: 100GB/s, latency: 0ns, source: S1}
links:
  - {id: pcie, kind: pcie, endpoints: [hbm, ddr], per: device, bandwidth: 25GB/s, latency: 0ns, source: S1}
system:
)";

Topology cpu_topology(const std::string& cpu, const LoadOptions& options = {}) {
  return load_topology_text(kCpuTopologyBase + cpu, "cpu.yaml", options);
}

/// The message of the InputError that loading `cpu` throws; empty when it loads.
std::string cpu_load_error(const std::string& cpu, const LoadOptions& options = {}) {
  try {
    cpu_topology(cpu, options);
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_CASE("system.cpu: a host CPU block loads; keys not given keep their defaults") {
  const std::string cpu = R"(  cpu:
    description: "16 cores"
    tier: ddr
    peak: {fp32: {value: 2TFLOP/s, source: S1, note: "16 x 2 GHz x 64"}, fp16: 1TFLOP/s}
    compute_efficiency: 0.5
    launch_overhead: 10us
    source: S2
)";
  const Topology t = cpu_topology(cpu, LoadOptions{{}, /*require_sources=*/true});
  const HostCpu& c = t.system.cpu;
  CHECK(c.present());
  CHECK(c.description == "16 cores");
  CHECK(c.tier == "ddr");
  CHECK(c.source == "S2");
  CHECK(c.peak[static_cast<size_t>(Dtype::kFp32)].flop_per_s == 2e12);
  CHECK(c.peak[static_cast<size_t>(Dtype::kFp16)].flop_per_s == 1e12);
  CHECK(c.peak[static_cast<size_t>(Dtype::kBf16)].flop_per_s == 0.0);
  CHECK(c.peak_dtypes() == "fp32, fp16");
  CHECK(c.compute_efficiency == 0.5);
  CHECK(c.memory_efficiency == 1.0);  // not given: the default
  CHECK(c.launch_overhead.ps == 10'000'000);
  // The CPU's fields are the system's, under `cpu.`; messages about the CPU point at `cpu:`.
  const schema::Origin* peak = t.system.origins.find("cpu.peak.fp32");
  REQUIRE(peak != nullptr);
  CHECK(peak->source == "S1");
  CHECK(peak->note == "16 x 2 GHz x 64");
  CHECK(peak->pos.line == 14);
  CHECK(c.origins.pos.str() == "cpu.yaml:11:3");
  // Without a CPU (every shipped topology but one): nothing is described.
  CHECK_FALSE(load_topology(config("h100-sxm-8gpu.yaml")).system.cpu.present());
  CHECK_FALSE(cpu_topology("  hosts: 1\n").system.cpu.present());
}

TEST_CASE(
    "system.cpu: the CPU's numbers are cited by their own source, the CPU's or the system's") {
  const std::string uncited = "  cpu: {tier: ddr, peak: {fp32: 1TFLOP/s}}\n";
  CHECK(cpu_load_error(uncited, LoadOptions{{}, true}) ==
        "cpu.yaml:11:33: 'cpu.peak.fp32' of system has no source: write {value: ..., source: "
        "KEY} or give the system a 'source:'");
  CHECK(cpu_load_error("  cpu: {tier: ddr, peak: {fp32: 1TFLOP/s}, source: S2}\n", {{}, true})
            .empty());
  CHECK(cpu_load_error("  source: S2\n" + uncited, {{}, true}).empty());
  CHECK(cpu_load_error("  cpu: {tier: ddr, peak: {fp32: 1TFLOP/s}, source: S3}\n") ==
        "cpu.yaml:11:52: unknown source 'S3': not defined under 'sources'; did you mean 'S1'?");
}

TEST_CASE("system.cpu: a described CPU computes next to a shared tier; each fault names its key") {
  // A peak rate describes the CPU; it then needs a tier that is not per device.
  CHECK(cpu_load_error("  cpu:\n    peak: {fp32: 1TFLOP/s}\n") ==
        "cpu.yaml:11:3: system cpu is missing required key 'tier' (the 'per: socket', 'per: "
        "host' or 'per: supernode' tier its ops read and write)");
  CHECK(cpu_load_error("  cpu:\n    tier: dr\n    peak: {fp32: 1TFLOP/s}\n") ==
        "cpu.yaml:12:11: system cpu: tier 'dr' is not a tier; did you mean 'ddr'?");
  CHECK(cpu_load_error("  cpu:\n    tier: hbm\n    peak: {fp32: 1TFLOP/s}\n") ==
        "cpu.yaml:12:11: system cpu: tier 'hbm' is a 'per: device' tier; the CPU computes next "
        "to a 'per: socket', 'per: host' or 'per: supernode' tier");
  // CPU fields without any peak rate describe nothing.
  CHECK(cpu_load_error("  cpu:\n    tier: ddr\n    compute_efficiency: 0.5\n") ==
        "cpu.yaml:11:3: system cpu declares no peak rate: a host CPU needs one, e.g. 'peak: "
        "{fp32: 2TFLOP/s}' (or remove 'cpu')");
  // Efficiencies are fractions in (0, 1]; peak rates are positive.
  CHECK(cpu_load_error("  cpu: {tier: ddr, peak: {fp32: 1TFLOP/s}, compute_efficiency: 1.5}\n") ==
        "cpu.yaml:11:64: bad value for 'cpu.compute_efficiency': must be in (0, 1], got 1.5");
  CHECK(cpu_load_error("  cpu: {tier: ddr, peak: {fp32: 1TFLOP/s}, memory_efficiency: 0}\n") ==
        "cpu.yaml:11:63: bad value for 'cpu.memory_efficiency': must be in (0, 1], got 0");
  CHECK(cpu_load_error("  cpu: {tier: ddr, peak: {fp32: -1TFLOP/s}}\n") ==
        "cpu.yaml:11:33: bad value for 'cpu.peak.fp32': negative value '-1TFLOP/s': a FLOP rate "
        "cannot be negative");
  // Unknown keys suggest the nearest one, at each level.
  CHECK(cpu_load_error("  cpu: {tier: ddr, peek: {fp32: 1TFLOP/s}}\n") ==
        "cpu.yaml:11:20: unknown key 'cpu.peek' in system cpu; did you mean 'peak'?");
  CHECK(cpu_load_error("  cpus: {tier: ddr}\n") ==
        "cpu.yaml:11:3: unknown key 'cpus' in system; did you mean 'cpu'?");
}

TEST_CASE("system.cpu: --set overrides a CPU field like any other, or describes a CPU") {
  const std::string t4 = config("t4-flexgen.yaml");
  const Topology t = load_topology(t4, LoadOptions{{"system.cpu.peak.fp32=4TFLOP/s"}, true});
  CHECK(t.system.cpu.peak[static_cast<size_t>(Dtype::kFp32)].flop_per_s == 4e12);
  CHECK(t.system.origins.find("cpu.peak.fp32")->source == "--set");
  // A topology without a CPU gets one from --set alone.
  const Topology h100 =
      load_topology(config("h100-sxm-8gpu.yaml"),
                    LoadOptions{{"system.cpu.tier=ddr", "system.cpu.peak.bf16=10TFLOP/s"}, false});
  CHECK(h100.system.cpu.present());
  CHECK(h100.system.cpu.tier == "ddr");
  // ...and its faults point at the --set that made it.
  CHECK_THROWS_WITH_AS(load_topology(config("h100-sxm-8gpu.yaml"),
                                     LoadOptions{{"system.cpu.peak.bf16=10TFLOP/s"}, false}),
                       doctest::Contains("--set:1:22: system cpu is missing required key 'tier'"),
                       InputError);
  CHECK_THROWS_WITH_AS(load_topology(t4, LoadOptions{{"system.cpu.tier=gddr"}, false}),
                       "--set:1:17: system cpu: tier 'gddr' is a 'per: device' tier; the CPU "
                       "computes next to a 'per: socket', 'per: host' or 'per: supernode' tier",
                       InputError);
  CHECK_THROWS_WITH_AS(load_topology(t4, LoadOptions{{"system.cpu.peek.fp32=1TFLOP/s"}, false}),
                       "--set:1:8: unknown key 'cpu.peek.fp32' in system; did you mean "
                       "'cpu.peak.fp32'?",
                       InputError);
}

TEST_CASE("YAML merge keys and aliases: '<<' merges a mapping's entries; its own keys win") {
  const std::string head = R"(tierflow: hw/1
name: merged
devices: [{id: d, count: 1, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 16GiB, read_bandwidth: 1TB/s, write_bandwidth: 1TB/s, latency: 500ns}
  - {id: ddr, kind: ddr, per: host, capacity: 64GiB, read_bandwidth: 100GB/s, write_bandwidth: 100GB/s, latency: 100ns}
  - {id: cxl, kind: cxl, per: host, capacity: 64GiB, read_bandwidth: 50GB/s, write_bandwidth: 50GB/s, latency: 300ns}
links:
)";
  const std::string expanded =
      head +
      R"(  - {id: a, kind: pcie, per: device, duplex: full, bandwidth: 32GB/s, latency: 1us, endpoints: [hbm, ddr]}
  - {id: b, kind: pcie, per: device, duplex: full, bandwidth: 16GB/s, latency: 1us, endpoints: [hbm, cxl]}
)";
  const std::string merged =
      head +
      R"(  - &pcie {id: a, kind: pcie, per: device, duplex: full, bandwidth: 32GB/s, latency: &lat 1us, endpoints: [hbm, ddr]}
  - <<: *pcie
    id: b
    bandwidth: 16GB/s
    endpoints: [hbm, cxl]
)";
  const Topology want = load_topology_text(expanded, "t.yaml");
  const Topology got = load_topology_text(merged, "t.yaml");
  CHECK(study::show_json(got).dump() == study::show_json(want).dump());
  // A list of mappings: the earlier one's keys win over the later's.
  const std::string two =
      head +
      R"(  - &one {id: a, kind: pcie, per: device, duplex: full, bandwidth: 32GB/s, latency: 1us, endpoints: [hbm, ddr]}
  - &two {id: c, kind: pcie, per: device, duplex: half, bandwidth: 8GB/s, latency: 2us, endpoints: [hbm, ddr]}
  - {<<: [*one, *two], id: b, bandwidth: 16GB/s, endpoints: [hbm, cxl]}
)";
  const Topology t2 = load_topology_text(two, "two.yaml");
  const Link& b = t2.links.back();
  CHECK(b.id == "b");
  CHECK(b.duplex == Duplex::kFull);
  CHECK(b.latency.ps == load_topology_text(expanded, "e.yaml").links.back().latency.ps);
  // A field reached through an alias or a merge is placed where this object uses it.
  const std::string bad =
      head +
      R"(  - {id: a, kind: pcie, per: device, duplex: full, bandwidth: 32GB/s, latency: &lat 1us, endpoints: [hbm, ddr]}
  - {id: b, kind: pcie, per: device, duplex: full, bandwidth: 16GB/s, latency: 1us, efficiency: *lat, endpoints: [hbm, cxl]}
)";
  CHECK_THROWS_WITH_AS(load_topology_text(bad, "bad.yaml"),
                       "bad.yaml:10:85: bad value for 'efficiency': expected a fraction in (0, "
                       "1], got '1us' (through an alias: written at bad.yaml:9:80)",
                       InputError);
  // A merged key's fault is named at the mapping that merges it, with where it is written:
  // here a tier's entries merged into a link.
  std::string tier_into_link = merged;
  tier_into_link.replace(tier_into_link.find("  - {id: cxl"), 12, "  - &cxl {id: cxl");
  tier_into_link += "  - {<<: *cxl, id: c, endpoints: [hbm, cxl]}\n";
  CHECK_THROWS_WITH_AS(load_topology_text(tier_into_link, "m.yaml"),
                       "m.yaml:14:5: unknown key 'capacity' in link 'c' ('capacity' merged by "
                       "'<<', written at m.yaml:7:42)",
                       InputError);
  CHECK_THROWS_WITH_AS(load_topology_text(head + "  - {<<: 5, id: b}\n", "s.yaml"),
                       "s.yaml:9:10: '<<' merges a mapping or a list of mappings (e.g. '<<: "
                       "*defaults'), got a scalar",
                       InputError);
  // A whole list item written as an alias is placed where the list uses it.
  const std::string items = R"(tierflow: hw/1
name: items
x-tier: &t {id: hbm, kind: hbm, per: device, capacity: 16GiB, read_bandwidth: 1TB/s, write_bandwidth: 1TB/s, latency: 500ns}
devices: [{id: d, count: 1, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - *t
  - *t
)";
  CHECK_THROWS_WITH_AS(load_topology_text(items, "i.yaml"),
                       doctest::Contains("i.yaml:7:5: duplicate id 'hbm': already used by the "
                                         "tier at line 6"),
                       InputError);
  CHECK_THROWS_WITH_AS(load_topology_text(items + "links:\n  - *t\n", "i.yaml"),
                       "i.yaml:9:5: bad value for 'kind': 'hbm' is not one of: pcie, hccs, ub, "
                       "nvlink, c2c, cxl, nvme, xgmi, rdma, memcpy (through an alias: written at "
                       "i.yaml:3:28)",
                       InputError);
  CHECK(schema::alias_sites(items, "i.yaml") ==
        schema::AliasSites{{"tiers[0]", SourcePos{"i.yaml", 6, 5}},
                           {"tiers[1]", SourcePos{"i.yaml", 7, 5}}});
  // A whole group through an alias: its fields are placed at the use, for later checks.
  const std::string peaks = R"(tierflow: hw/1
name: peaks
x-peak: &p {bf16: 1TFLOP/s, fp8: 2TFLOP/s}
devices:
  - {id: d, count: 1, local_tier: hbm, peak: *p}
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 16GiB, read_bandwidth: 1TB/s, write_bandwidth: 1TB/s, latency: 500ns}
)";
  const Topology with_peaks = load_topology_text(peaks, "p.yaml");
  CHECK(with_peaks.devices[0].origins.pos_of("peak.fp8") == SourcePos{"p.yaml", 5, 40});
  // Quoted, '<<' is a plain key.
  CHECK_THROWS_WITH_AS(load_topology_text(head + "  - {\"<<\": {id: b}}\n", "q.yaml"),
                       "q.yaml:9:6: unknown key '<<' in link #1", InputError);
}
