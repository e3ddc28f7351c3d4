// The Chakra writer on tests/fixtures/plans/tiny.json over unit_hw.yaml (HBM 4 KiB),
// decoded back with the same schema. Program 0 and the nodes it must give:
//   step 0 prefetch x (event 1)  -> node 0 MEM_LOAD_NODE   no deps (before any compute)
//   step 1 prefetch w (event 2)  -> node 1 MEM_LOAD_NODE   no deps
//   step 2 compute norm, wait 1  -> node 2 COMP_NODE       data [0]
//   step 3 compute mm, wait 2    -> node 3 COMP_NODE       data [1], ctrl [2]
//   step 4 store z (event 3)     -> node 4 MEM_STORE_NODE  ctrl [3] (its anchor)
//   steps 5-8 detach             -> no node (z's wait on event 3 has no later step of z)
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <google/protobuf/io/coded_stream.h>

#include "core/plan_json.h"
#include "hw_models/loader.h"
#include "tests/support/scratch_dir.h"
#include "tools/export/chakra/chakra_et.pb.h"
#include "tools/export/export.h"
#include "tools/export/writers.h"

using namespace tierflow;
using namespace tierflow::exporter;
namespace pb = tierflow::chakra;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

struct Trace {
  pb::GlobalMetadata meta;
  std::vector<pb::Node> nodes;
};

/// Reads a stream of varint-length-delimited messages: metadata, then nodes.
Trace decode(const std::string& bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  Trace t;
  auto next = [&](google::protobuf::MessageLite& m) {
    uint32_t n = 0;
    if (!in.ReadVarint32(&n)) return false;
    const auto limit = in.PushLimit(static_cast<int>(n));
    REQUIRE(m.ParseFromCodedStream(&in));
    REQUIRE(in.ConsumedEntireMessage());
    in.PopLimit(limit);
    return true;
  };
  REQUIRE(next(t.meta));
  pb::Node node;
  while (next(node)) t.nodes.push_back(node);
  return t;
}

const pb::AttributeProto* attr(const pb::Node& n, std::string_view name) {
  for (const pb::AttributeProto& a : n.attr()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

std::vector<uint64_t> deps(const google::protobuf::RepeatedField<uint64_t>& d) {
  return {d.begin(), d.end()};
}

}  // namespace

TEST_CASE("chakra: the tiny plan as nodes, dependencies and attributes") {
  const std::string plan_file = kSource + "/tests/fixtures/plans/tiny.json";
  const LoadedPlan lp = read_plan(plan_file);
  const hw::Topology topo = hw::load_topology(kSource + "/tests/fixtures/unit_hw.yaml",
                                              hw::LoadOptions{{"tiers.hbm.capacity=4KiB"}, false});
  std::vector<std::vector<sim::StepTime>> times;
  sim::SimOptions so;
  so.step_times = &times;
  const hw::Binding b = hw::bind(lp.plan, lp.workload, topo);
  REQUIRE(b.bound);
  const sim::SimResult r = sim::simulate(*b.bound, so);
  REQUIRE(!r.error);
  ExportInput in{lp.plan, lp.workload, topo, plan_file};
  in.bound = &*b.bound;
  in.sim = &r;
  in.step_times = &times;

  const std::string bytes = chakra_trace(in, 0);
  CHECK(bytes == chakra_trace(in, 0));  // deterministic
  const Trace t = decode(bytes);
  CHECK(t.meta.version() == "1.0.0");
  REQUIRE(t.nodes.size() == 5);
  const std::vector<pb::NodeType> types = {pb::MEM_LOAD_NODE, pb::MEM_LOAD_NODE, pb::COMP_NODE,
                                           pb::COMP_NODE, pb::MEM_STORE_NODE};
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    CAPTURE(i);
    CHECK(t.nodes[i].id() == i);
    CHECK(t.nodes[i].type() == types[i]);
    REQUIRE(attr(t.nodes[i], "tensor_size") != nullptr);
  }
  // Order and waits both as data_deps (upstream's convention); ctrl_deps stay empty.
  CHECK(deps(t.nodes[0].data_deps()).empty());
  CHECK(deps(t.nodes[2].data_deps()) == std::vector<uint64_t>{0});
  CHECK(deps(t.nodes[3].data_deps()) == std::vector<uint64_t>{1, 2});
  CHECK(deps(t.nodes[4].data_deps()) == std::vector<uint64_t>{3});
  for (const pb::Node& n : t.nodes) CHECK(n.ctrl_deps().empty());

  // Operands as ASTRA-sim's memory tracking reads them: name, bytes, name, bytes, ...
  auto operands = [&](size_t node, std::string_view which) {
    const pb::AttributeProto* a = attr(t.nodes[node], which);
    REQUIRE(a != nullptr);
    return std::vector<std::string>(a->string_list().values().begin(),
                                    a->string_list().values().end());
  };
  CHECK(operands(3, "inputs") == std::vector<std::string>{"y", "64", "w", "96", "kv", "512"});
  CHECK(operands(3, "outputs") == std::vector<std::string>{"z", "64", "kv", "512"});
  CHECK(operands(1, "inputs").empty());
  CHECK(operands(1, "outputs") == std::vector<std::string>{"w", "96"});
  CHECK(operands(4, "inputs") == std::vector<std::string>{"z", "64"});
  CHECK(operands(4, "outputs").empty());

  // Sizes and names: mm is 2048 FLOP over 2176 B; w is 96 B prefetched ddr -> hbm over pcie.
  CHECK(t.nodes[3].name() == "mm");
  CHECK(attr(t.nodes[3], "num_ops")->int64_val() == 2048);
  CHECK(attr(t.nodes[3], "tensor_size")->uint64_val() == 2176);
  CHECK(attr(t.nodes[3], "op_kind")->string_val() == "matmul");
  CHECK(attr(t.nodes[1], "tensor_size")->uint64_val() == 96);
  CHECK(attr(t.nodes[1], "tensor_name")->string_val() == "w");
  CHECK(attr(t.nodes[1], "src_tier")->string_val() == "ddr");
  CHECK(attr(t.nodes[1], "dst_tier")->string_val() == "hbm");
  CHECK(attr(t.nodes[1], "route")->string_val() == "pcie");
  CHECK(attr(t.nodes[4], "src_tier")->string_val() == "hbm");
  CHECK(attr(t.nodes[4], "dst_tier")->string_val() == "ddr");
  // The store ran 4559 ns -> 4778 ns: 219 ns exactly, 0 whole microseconds.
  CHECK(attr(t.nodes[4], "duration_ps")->uint64_val() == 219'000);
  CHECK(t.nodes[4].duration_micros() == 0);
  CHECK(t.nodes[4].start_time_micros() == 5);  // 4.559 us, rounded

  // Written into a folder as STEM.PROGRAM.et.
  testing::ScratchDir dir("chakra");
  ExportOptions eo;
  eo.stem = "tiny";
  CHECK(!run_export(find_format("chakra"), lp.plan, lp.workload, topo, plan_file,
                    dir.file("traces"), eo)
             .error);
  CHECK(std::filesystem::exists(dir.file("traces/tiny.0.et")));
}

TEST_CASE("run_export: a folder format needs a folder, a file format a file") {
  const std::string plan_file = kSource + "/tests/fixtures/plans/tiny.json";
  const LoadedPlan lp = read_plan(plan_file);
  const hw::Topology topo = hw::load_topology(kSource + "/tests/fixtures/unit_hw.yaml",
                                              hw::LoadOptions{{"tiers.hbm.capacity=4KiB"}, false});
  testing::ScratchDir dir("export-out");
  const auto run = [&](std::string_view format, const std::string& out) {
    return run_export(find_format(format), lp.plan, lp.workload, topo, plan_file, out, {});
  };
  CHECK_THROWS_AS(run("chakra", "-"), InputError);
  std::ofstream(dir.file("file.txt")) << "x";
  CHECK_THROWS_AS(run("chakra", dir.file("file.txt")), InputError);
  CHECK_THROWS_AS(run("csv", dir.file("")), InputError);  // an existing folder
  CHECK_THROWS_AS(run("csv", dir.file("missing/x.csv")), InputError);
  CHECK(!run("csv", dir.file("x.csv")).error);
  // No temp file left behind; the failed chakra run created nothing.
  CHECK(dir.entries() == std::vector<std::string>{"file.txt", "x.csv"});
  // The 128-byte HBM of the fixture cannot hold the device-resident kv: an error, no file.
  const hw::Topology small = hw::load_topology(kSource + "/tests/fixtures/unit_hw.yaml");
  const ExportOutcome o =
      run_export(find_format("csv"), lp.plan, lp.workload, small, plan_file, dir.file("y.csv"), {});
  REQUIRE(o.error);
  CHECK(o.error->kind == RunError::Kind::kCapacity);
  CHECK(!std::filesystem::exists(dir.file("y.csv")));
}
