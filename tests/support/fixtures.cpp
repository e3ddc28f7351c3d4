#include "tests/support/fixtures.h"

#include <fmt/format.h>

#include "core/diagnostics.h"
#include "hw_models/loader.h"
#include "planner/pass.h"

namespace tierflow::testing {

hw::Topology unit_hw(std::vector<std::string> sets) {
  return hw::load_topology(std::string(TIERFLOW_SOURCE_DIR) + "/tests/fixtures/unit_hw.yaml",
                           hw::LoadOptions{std::move(sets), false});
}

hw::Topology roomy_unit_hw() {
  return unit_hw({"tiers.hbm.capacity=64MiB", "tiers.ddr.capacity=64MiB"});
}

std::string bounce_box_yaml(int devices, const std::string& routes) {
  return R"(tierflow: hw/1
name: bounce
system: {hosts: 1, sockets_per_host: 1}
devices: [{id: dev, count: )" +
         std::to_string(devices) + R"(, local_tier: hbm, peak: {bf16: 1TFLOP/s}}]
tiers:
  - {id: hbm, kind: hbm, per: device, capacity: 1GB, read_bandwidth: 1TB/s, write_bandwidth: 1TB/s, latency: 0ns}
  - {id: ddr, kind: ddr, per: host, capacity: 1GB, read_bandwidth: 100GB/s, write_bandwidth: 100GB/s, latency: 0ns}
  - {id: ssd, kind: ssd, per: host, capacity: 1TB, read_bandwidth: 10GB/s, write_bandwidth: 5GB/s, latency: 0ns}
links:
  - {id: pcie, kind: pcie, endpoints: [hbm, ddr], per: device, bandwidth: 25GB/s, latency: 0ns}
  - {id: nvme, kind: nvme, endpoints: [ddr, ssd], per: host, bandwidth: 64GB/s, latency: 0ns}
routes:
)" + routes;
}

Workload cycle_workload(double flops) {
  Workload w;
  w.name = "cycle";
  uint32_t a = w.add_tensor({"x", 4, TensorKind::kInput});
  uint32_t wt[3];
  for (int k = 0; k < 3; ++k) {
    wt[k] = w.add_tensor({fmt::format("w{}", k), 32, TensorKind::kWeight});
  }
  for (int i = 0; i < 9; ++i) {
    const TensorKind kind = i == 8 ? TensorKind::kOutput : TensorKind::kActivation;
    const uint32_t out = w.add_tensor({fmt::format("a{}", i), 4, kind});
    Op op{fmt::format("op{}", i), OpKind::kElementwise, Dtype::kBf16, flops, 0, {a, wt[i % 3]}};
    op.outputs = {out};
    w.add_op(std::move(op));
    a = out;
  }
  return w;
}

std::string pipeline_error(std::string_view pipeline) {
  try {
    (void)planner::Pipeline::parse(pipeline);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace tierflow::testing
