// Loading the shipped topologies and the loader's treatment of citations.
#include "hw_models/loader.h"

#include <doctest/doctest.h>

#include <filesystem>

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

TEST_CASE("--set on an unknown id suggests the ids it is a part of") {
  // The links of this file are gpu-pcie, nvlink and nvme-link.
  const std::string h100 = config("h100-sxm-8gpu.yaml");
  CHECK_THROWS_WITH_AS(
      load_topology(h100, LoadOptions{{"links.pcie.bandwidth=10GB/s"}, false}),
      "--set:1:7: --set 'links.pcie.bandwidth': no link with id 'pcie'; did you mean "
      "'gpu-pcie'?",
      InputError);
  CHECK_THROWS_WITH_AS(
      load_topology(h100,
                    LoadOptions{{"tiers.hbm.capacity=1TB", "links.link.bandwidth=1GB/s"}, false}),
      "--set:2:7: --set 'links.link.bandwidth': no link with id 'link'; did you mean "
      "'nvme-link' or 'nvlink'?",
      InputError);
}
