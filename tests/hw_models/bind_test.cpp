// Binding a plan to a topology (hw_models/bind.h) on tests/fixtures/unit_hw.yaml: four
// devices, hbm per device (128 B), ddr per socket, ssd per host.
#include "hw_models/bind.h"

#include <doctest/doctest.h>

#include "hw_models/loader.h"
#include "tests/support/fixtures.h"

using namespace tierflow;
using namespace tierflow::hw;

namespace {

using tierflow::testing::unit_hw;

// One tensor, homed on `home`, computed by one op on each of `devices`.
struct Fixture {
  Workload w;
  Plan p;
  explicit Fixture(std::vector<uint32_t> devices, std::vector<std::string> tiers = {"ddr", "hbm"},
                   uint32_t device_tier = 1) {
    w.add_tensor({"x", 64, TensorKind::kWeight});
    w.add_op({"norm", OpKind::kNorm, Dtype::kBf16, 160, 64, {0}, {}});
    p.tiers = std::move(tiers);
    p.device_tier = device_tier;
    p.home = {0};
    for (uint32_t d : devices) p.programs.push_back(Program{d, {}});
  }
};

std::string refusal(const Binding& b) {
  REQUIRE_FALSE(b.bound);
  REQUIRE(b.error);
  CHECK(b.error->kind == RunError::Kind::kTopology);
  return b.error->message;
}

}  // namespace

TEST_CASE("bind: tiers, device tier, each program's device and the budget") {
  const Topology t = unit_hw();
  Fixture f({2, 0});
  const Binding b = bind(f.p, f.w, t);
  REQUIRE(b.bound);
  const BoundPlan& bp = *b.bound;
  CHECK(bp.tier_map == std::vector<size_t>{*t.tier_index("ddr"), *t.tier_index("hbm")});
  CHECK(bp.device_tier == *t.tier_index("hbm"));
  CHECK(bp.tier(0) == *t.tier_index("ddr"));
  REQUIRE(bp.programs.size() == 2);
  CHECK(bp.programs[0].device == 2);
  CHECK(bp.programs[0].device_index == 2);
  CHECK(bp.programs[1].device == 0);
  CHECK(bp.programs[0].device_slot == bp.fabric.tier_slot(bp.device_tier, 2));
  CHECK(bp.programs[0].device_slot != bp.programs[1].device_slot);
  // No budget in the plan: the tier's usable capacity.
  CHECK(bp.budget == t.usable(bp.device_tier));
  CHECK(bp.budget == 128);
  // A fabric path from the bound plan's tiers, found once and kept.
  const FabricPath* path = bp.fabric.path(bp.tier(0), bp.device_tier, 2);
  REQUIRE(path != nullptr);
  CHECK(path == bp.fabric.path(bp.tier(0), bp.device_tier, 2));
}

TEST_CASE("bind: the plan's budget, capped by the tier's usable capacity") {
  const Topology t = unit_hw();
  Fixture f({0});
  f.p.budget = 100;
  CHECK(bind(f.p, f.w, t).bound->budget == 100);
  f.p.budget = 1000;  // more than the 128 B the tier has
  CHECK(bind(f.p, f.w, t).bound->budget == 128);
  const Topology big = unit_hw({"tiers.hbm.capacity=1KiB"});
  CHECK(bind(f.p, f.w, big).bound->budget == 1000);
}

TEST_CASE("bind: what cannot run on the topology is refused, with the program") {
  const Topology t = unit_hw();
  {
    Fixture f({0}, {"ddrr", "hbm"});
    CHECK(refusal(bind(f.p, f.w, t)) ==
          "the plan's tier 'ddrr' is not in topology 'unit-hw'; did you mean 'ddr'?");
  }
  {
    Fixture f({0}, {"ddr", "hbm"}, /*device_tier=*/0);
    CHECK(refusal(bind(f.p, f.w, t)) ==
          "the plan's device tier 'ddr' is not a per-device tier in 'unit-hw'");
  }
  {
    Fixture f({0, 4});
    const Binding b = bind(f.p, f.w, t);
    CHECK(refusal(b) == "program 1 runs on device 4, but 'unit-hw' has 4 devices");
    CHECK(b.error->program == 1);
  }
  {
    Fixture f({1, 3, 1});
    const Binding b = bind(f.p, f.w, t);
    CHECK(refusal(b) == "program 2 runs on device 1, which another program already uses");
    CHECK(b.error->program == 2);
  }
}

TEST_CASE("bind: a tensor-parallel shard needs its group's devices and the peer route among them") {
  const auto shipped = [](const std::string& name) {
    return load_topology(std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw/" + name + ".yaml");
  };
  const auto with_tp = [](std::vector<uint32_t> devices, const std::string& tp) {
    Fixture f(std::move(devices));
    f.w.meta["tp"] = tp;
    return f;
  };
  const Topology h100 = shipped("h100-sxm-8gpu");
  for (const std::string tp : {"1", "2", "8"}) {
    const Fixture f = with_tp({0, 7}, tp);
    CHECK(bind(f.p, f.w, h100).bound);
  }
  {
    const Fixture f = with_tp({0}, "16");
    CHECK(refusal(bind(f.p, f.w, h100)) ==
          "the workload is one shard of tensor parallelism 16: its group needs 16 devices of "
          "class 'h100', and 'h100-sxm-8gpu' has 8");
  }
  // Four hosts of 8 GPUs, NVSwitch per host: TP 8 on any host; TP 16 spans two, which
  // their NICs join, but collectives are timed over NVLink alone.
  const Topology cxl = shipped("h100-cxl");
  {
    const Fixture f = with_tp({0, 8, 31}, "8");
    CHECK(bind(f.p, f.w, cxl).bound);
  }
  {
    const Fixture f = with_tp({0, 16}, "16");
    const Binding b = bind(f.p, f.w, cxl);
    CHECK(refusal(b) ==
          "the workload is one shard of tensor parallelism 16: on devices 0 to 15, its "
          "collectives would cross 'ib' from device 0 to device 8, and collectives are timed "
          "over the peer route of 'hbm' alone: a group must stay among the devices one "
          "'nvswitch' joins");
    CHECK(b.error->program == 0);
  }
  // GPUs without a peer route: one shard of TP 1 only. A workload that says no TP binds.
  const Topology a100 = shipped("a100-nvme-bounce");
  {
    const Fixture f = with_tp({0}, "2");
    CHECK(refusal(bind(f.p, f.w, a100)) ==
          "the workload is one shard of tensor parallelism 2: its collectives cross the peer "
          "route of 'hbm', and 'a100-nvme-bounce' has none: TP 1");
  }
  {
    const Fixture f({0});
    CHECK(bind(f.p, f.w, a100).bound);
  }
  // A workload with a collective op that names no TP (an import): timed over the peer
  // route where there is one; refused where there is none (its collectives were free).
  {
    Fixture f({0});
    f.w.add_op({"allreduce", OpKind::kCollective, Dtype::kBf16, 0, 64, {0}, {}});
    f.w.ops.back().collective_bytes = 1 << 20;
    CHECK(refusal(bind(f.p, f.w, a100)) ==
          "op 'allreduce' is a collective (1MiB over its tensor-parallel group), and "
          "'a100-nvme-bounce' has no peer route of 'hbm' to time it over");
    CHECK(bind(f.p, f.w, h100).bound);
  }
}

TEST_CASE("group_fabric: a TP group over several hosts all-reduces across their network") {
  // Four hosts of 8 H100s, NVSwitch per host (378 GB/s, 7 us), a 47 GB/s NIC per GPU to
  // the InfiniBand network (the path 9 us).
  const std::string file = std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw/h100-cxl.yaml";
  const Topology t = load_topology(file);
  const Fabric f(t);
  const size_t hbm = *t.tier_index("hbm");
  const auto group = [](int first, int n) {
    std::vector<int> g;
    for (int d = first; d < first + n; ++d) g.push_back(d);
    return g;
  };
  // Within a host: the peer route alone, as before.
  const GroupFabric one = group_fabric(f, hbm, group(8, 8), true);
  CHECK_FALSE(one.problem);
  CHECK(one.fabric == CollectiveFabric{});
  // Over two hosts: two domains of 8, every GPU's NIC crossing, 8 x 47 GB/s out of each.
  const GroupFabric two = group_fabric(f, hbm, group(0, 16), true);
  REQUIRE_FALSE(two.problem);
  CHECK(two.fabric.domains == 2);
  CHECK(two.fabric.ranks_per_domain == 8);
  CHECK(two.fabric.out.bytes_per_s == doctest::Approx(8 * 47e9));
  CHECK(two.fabric.setup == Duration{9'000'000});
  // Refused where the caller keeps groups within a domain (peer_group_problem's message).
  CHECK(group_fabric(f, hbm, group(0, 16), false).problem ==
        peer_group_problem(f, hbm, group(0, 16)));
  // Over four hosts, two GPUs of each: the ring's crossings on two NICs a host.
  const GroupFabric spread =
      group_fabric(f, hbm, std::vector<int>{0, 1, 8, 9, 16, 17, 24, 25}, true);
  REQUIRE_FALSE(spread.problem);
  CHECK(spread.fabric.domains == 4);
  CHECK(spread.fabric.out.bytes_per_s == doctest::Approx(2 * 47e9));
  // Uneven: 8 ranks on one host, 4 on the next.
  CHECK(group_fabric(f, hbm, group(0, 12), true).problem ==
        "on devices 0 to 11, 8 of its ranks are among the devices one 'nvswitch' joins and 4 "
        "among another: a group over several must have as many ranks in each, its collectives "
        "crossing from each to the next rank to rank");
  // Two GPUs sharing each NIC (one per socket pair of GPUs): the crossings share them.
  const Topology shared = load_topology(file, LoadOptions{{"links.nic.per=socket"}, false});
  const Fabric fs(shared);
  const GroupFabric halved = group_fabric(fs, hbm, group(0, 16), true);
  REQUIRE_FALSE(halved.problem);
  const int sockets_per_host = shared.system.sockets_per_host;
  CHECK(halved.fabric.out.bytes_per_s == doctest::Approx(sockets_per_host * 47e9));

  // The time of `sent` bytes: both setups, then the slower of NVLink and the crossings.
  const Bytes sent{376'000'000};  // a millisecond at 376 GB/s
  CHECK(collective_time(t, hbm, CollectiveFabric{}, sent) ==
        transfer_time_alone(*t.route(hbm, hbm), sent));
  const Duration across = *collective_time(t, hbm, two.fabric, sent);
  CHECK(across.ps == 7'000'000 + 9'000'000 + transfer_time(sent, Bandwidth{376e9}).ps);
  // One GPU a host: no NVLink in the ring, its NIC alone.
  const GroupFabric pair = group_fabric(f, hbm, std::vector<int>{0, 8}, true);
  REQUIRE_FALSE(pair.problem);
  CHECK(collective_time(t, hbm, pair.fabric, sent)->ps ==
        9'000'000 + transfer_time(sent, Bandwidth{47e9}).ps);
}
