// Workload JSON round trips and the verifier's rules, with positions.
#include <doctest/doctest.h>

#include "core/diagnostics.h"
#include "core/workload_json.h"

using namespace tierflow;

namespace {

// x -> norm -> y -> matmul(w) -> z ; kv updated in place by the matmul
Workload tiny() {
  Workload w;
  w.name = "tiny";
  w.meta = {{"phase", "\"decode\""}, {"batch", "1"}};
  const uint32_t x = w.add_tensor({"x", 64, TensorKind::kInput, Dtype::kBf16, kExternal, -1});
  const uint32_t wt = w.add_tensor({"w", 2048, TensorKind::kWeight, Dtype::kBf16, kExternal, 0});
  const uint32_t kv = w.add_tensor({"kv", 512, TensorKind::kKv, Dtype::kBf16, kExternal, 0});
  const uint32_t y = w.add_tensor({"y", 64, TensorKind::kActivation, Dtype::kBf16, kExternal, 0});
  const uint32_t z = w.add_tensor({"z", 64, TensorKind::kOutput, Dtype::kBf16, kExternal, 0});
  w.add_op({"norm", OpKind::kNorm, Dtype::kBf16, 160, 128, {x}, {y}, {}, 0, 0, 0});
  w.add_op({"mm", OpKind::kMatmul, Dtype::kBf16, 2048, 2176, {y, wt}, {z}, {kv}, 256, 0, 0});
  return w;
}

}  // namespace

TEST_CASE("write -> read -> write is byte-identical") {
  const Workload w = tiny();
  REQUIRE_FALSE(verify_workload(w).has_value());
  const std::string a = write_workload(w);
  const Workload back = read_workload_text(a, "tiny.json");
  CHECK(write_workload(back) == a);
  CHECK(back.ops[1].updates == std::vector<uint32_t>{2});
  CHECK(back.tensors[3].origin == 0);
  CHECK(back.meta.at("phase") == "\"decode\"");
  CHECK(a.find("\"updates\": [2]") != std::string::npos);
}

TEST_CASE("the verifier names the field and item at fault, with its JSON position") {
  Workload w = tiny();
  std::string text = write_workload(w);
  // Make op 1 read tensor 4 (its own output).
  const auto at = text.find("\"inputs\": [3, 1]");
  REQUIRE(at != std::string::npos);
  text.replace(at, 16, "\"inputs\": [3, 4]");
  CHECK_THROWS_WITH_AS(read_workload_text(text, "w.json"),
                       "w.json:14:108: op 1: op 'mm' reads tensor 4 'z', which it produces itself",
                       InputError);
}

TEST_CASE("reading before producing is reported, with the cycle when there is one") {
  Workload w;
  w.name = "cyc";
  const uint32_t a = w.add_tensor({"a", 8, TensorKind::kActivation});
  const uint32_t b = w.add_tensor({"b", 8, TensorKind::kActivation});
  w.add_op({"p", OpKind::kOther, Dtype::kBf16, 0, 0, {b}, {a}});
  w.add_op({"q", OpKind::kOther, Dtype::kBf16, 0, 0, {a}, {b}});
  const auto issue = verify_workload(w);
  REQUIRE(issue.has_value());
  CHECK(issue->on_op);
  CHECK(issue->index == 0);
  CHECK(issue->field == "inputs");
  CHECK(issue->message ==
        "tensor 1 'b' is read before it is produced (by op 1); the ops form a cycle: 0 -> 1 -> 0");
  CHECK_FALSE(topological_order(w).has_value());
  CHECK(topological_order(tiny()).value() == std::vector<uint32_t>{0, 1});
}

TEST_CASE("malformed JSON and unknown keys name line and column") {
  CHECK_THROWS_WITH_AS(
      read_workload_text("{\"format\": \"tierflow.workload/1\",\n \"nmae\": 1}", "x.json"),
      "x.json:2:2: unknown key 'nmae' in the workload; did you mean 'name'?", InputError);
  CHECK_THROWS_WITH_AS(read_workload_text("{\"format\": \"tierflow.workload/2\"}", "x.json"),
                       "x.json:1:12: unsupported format 'tierflow.workload/2': this tierflow "
                       "reads 'tierflow.workload/1'",
                       InputError);
  CHECK_THROWS_WITH_AS(
      read_workload_text("{\"name\": \"x\",", "x.json"),
      "x.json:1:14: malformed JSON: expected a key in double quotes, got the end of the file",
      InputError);
}
