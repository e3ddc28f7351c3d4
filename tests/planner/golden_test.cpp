// Golden tests for the planner (STYLE "Tests"): each file in tests/planner/golden/ names a
// small graph, a pipeline or policy, a budget and optional pins in its header, then holds
// the expected result: the plan's lines (program 0) or the failure. Every plan is also
// checked by the plan verifier. TIERFLOW_UPDATE_GOLDEN=1 rewrites the expected part; the
// diff is reviewed like code.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/units.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "planner/print.h"
#include "sim/simulator.h"
#include "tools/study/sim_evaluator.h"
#include "tools/study/target.h"

using namespace tierflow;
using namespace tierflow::planner;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

/// Four ops reading three weights; w0 is read by the first and the last op.
Workload hand() {
  Workload w;
  w.name = "hand";
  const uint32_t x = w.add_tensor({"x", 16, TensorKind::kInput});
  const uint32_t w0 = w.add_tensor({"w0", 32, TensorKind::kWeight});
  const uint32_t w1 = w.add_tensor({"w1", 32, TensorKind::kWeight});
  const uint32_t w2 = w.add_tensor({"w2", 32, TensorKind::kWeight});
  const uint32_t a0 = w.add_tensor({"a0", 16, TensorKind::kActivation});
  const uint32_t a1 = w.add_tensor({"a1", 16, TensorKind::kActivation});
  const uint32_t a2 = w.add_tensor({"a2", 16, TensorKind::kActivation});
  const uint32_t y = w.add_tensor({"y", 16, TensorKind::kOutput});
  w.add_op({"op0", OpKind::kElementwise, Dtype::kBf16, 100, 0, {x, w0}, {a0}});
  w.add_op({"op1", OpKind::kElementwise, Dtype::kBf16, 200, 0, {a0}, {a1}});
  w.add_op({"op2", OpKind::kElementwise, Dtype::kBf16, 200, 0, {a1, w1}, {a2}});
  w.add_op({"op3", OpKind::kElementwise, Dtype::kBf16, 100, 0, {a2, w2, w0}, {y}});
  return w;
}

/// Two decode tokens over two layers: attention reads the layer's weight and appends to
/// its KV tensor in place, the MLP reads its own weight.
Workload layers() {
  Workload w;
  w.name = "layers";
  uint32_t x = w.add_tensor({"x", 8, TensorKind::kInput});
  uint32_t wq[2], wm[2], kv[2];
  for (int l = 0; l < 2; ++l) {
    wq[l] = w.add_tensor({fmt::format("L{}.wq", l), 32, TensorKind::kWeight, Dtype::kBf16,
                          kExternal, l});
    wm[l] = w.add_tensor({fmt::format("L{}.wm", l), 48, TensorKind::kWeight, Dtype::kBf16,
                          kExternal, l});
    kv[l] = w.add_tensor({fmt::format("L{}.kv", l), 24, TensorKind::kKv, Dtype::kBf16,
                          kExternal, l});
  }
  for (int t = 0; t < 2; ++t) {
    for (int l = 0; l < 2; ++l) {
      const uint32_t h = w.add_tensor({fmt::format("t{}.L{}.h", t, l), 8,
                                       TensorKind::kActivation, Dtype::kBf16, kExternal, l});
      Op attn{fmt::format("t{}.L{}.attn", t, l), OpKind::kAttention, Dtype::kBf16, 300, 0,
              {x, wq[l]}, {h}};
      attn.updates = {kv[l]};
      attn.layer = l;
      w.add_op(std::move(attn));
      const bool last = t == 1 && l == 1;
      const uint32_t out = w.add_tensor({fmt::format("t{}.L{}.out", t, l), 8,
                                         last ? TensorKind::kOutput : TensorKind::kActivation,
                                         Dtype::kBf16, kExternal, l});
      Op mlp{fmt::format("t{}.L{}.mlp", t, l), OpKind::kMatmul, Dtype::kBf16, 200, 0,
             {h, wm[l]}, {out}};
      mlp.layer = l;
      w.add_op(std::move(mlp));
      x = out;
    }
  }
  return w;
}

/// Two independent branches that each make a large temporary: computing one branch to
/// its end before starting the other lowers the peak.
Workload branches() {
  Workload w;
  w.name = "branches";
  const uint32_t x = w.add_tensor({"x", 8, TensorKind::kInput});
  const uint32_t a1 = w.add_tensor({"a1", 64, TensorKind::kActivation});
  const uint32_t b1 = w.add_tensor({"b1", 64, TensorKind::kActivation});
  const uint32_t a2 = w.add_tensor({"a2", 8, TensorKind::kActivation});
  const uint32_t b2 = w.add_tensor({"b2", 8, TensorKind::kActivation});
  const uint32_t y = w.add_tensor({"y", 8, TensorKind::kOutput});
  w.add_op({"fa", OpKind::kElementwise, Dtype::kBf16, 100, 0, {x}, {a1}});
  w.add_op({"fb", OpKind::kElementwise, Dtype::kBf16, 100, 0, {x}, {b1}});
  w.add_op({"ga", OpKind::kElementwise, Dtype::kBf16, 100, 0, {a1}, {a2}});
  w.add_op({"gb", OpKind::kElementwise, Dtype::kBf16, 100, 0, {b1}, {b2}});
  w.add_op({"join", OpKind::kElementwise, Dtype::kBf16, 100, 0, {a2, b2}, {y}});
  return w;
}

/// A training step: two layers forward, backward, and an optimizer update of both weights
/// with their optimizer state. h1 is idle between its forward and backward use.
Workload train() {
  Workload w;
  w.name = "train";
  const uint32_t x = w.add_tensor({"x", 8, TensorKind::kInput});
  const uint32_t w1 = w.add_tensor({"w1", 32, TensorKind::kWeight});
  const uint32_t w2 = w.add_tensor({"w2", 32, TensorKind::kWeight});
  const uint32_t m1 = w.add_tensor({"m1", 64, TensorKind::kOptimizerState});
  const uint32_t m2 = w.add_tensor({"m2", 64, TensorKind::kOptimizerState});
  const uint32_t h1 = w.add_tensor({"h1", 48, TensorKind::kActivation});
  const uint32_t h2 = w.add_tensor({"h2", 48, TensorKind::kActivation});
  const uint32_t l = w.add_tensor({"loss", 8, TensorKind::kOutput});
  const uint32_t dh2 = w.add_tensor({"dh2", 8, TensorKind::kActivation});
  const uint32_t g2 = w.add_tensor({"g2", 32, TensorKind::kGrad});
  const uint32_t dh1 = w.add_tensor({"dh1", 8, TensorKind::kActivation});
  const uint32_t g1 = w.add_tensor({"g1", 32, TensorKind::kGrad});
  w.add_op({"f1", OpKind::kMatmul, Dtype::kBf16, 400, 0, {x, w1}, {h1}});
  w.add_op({"f2", OpKind::kMatmul, Dtype::kBf16, 400, 0, {h1, w2}, {h2}});
  w.add_op({"loss", OpKind::kElementwise, Dtype::kBf16, 200, 0, {h2}, {l, dh2}});
  w.add_op({"b2", OpKind::kMatmul, Dtype::kBf16, 800, 0, {dh2, h2, w2}, {g2, dh1}});
  w.add_op({"b1", OpKind::kMatmul, Dtype::kBf16, 800, 0, {dh1, h1}, {g1}});
  Op o1{"adam1", OpKind::kOptimizer, Dtype::kBf16, 100, 0, {g1}, {}};
  o1.updates = {w1, m1};
  w.add_op(std::move(o1));
  Op o2{"adam2", OpKind::kOptimizer, Dtype::kBf16, 100, 0, {g2}, {}};
  o2.updates = {w2, m2};
  w.add_op(std::move(o2));
  return w;
}

Workload graph(const std::string& name) {
  if (name == "hand") return hand();
  if (name == "layers") return layers();
  if (name == "branches") return branches();
  if (name == "train") return train();
  FAIL("unknown graph ", name);
  return {};
}


std::string header_value(const std::string& header, std::string_view key) {
  std::istringstream in(header);
  std::string line;
  const std::string prefix = fmt::format("# {}: ", key);
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

std::string run_golden(const std::string& header) {
  const hw::Topology topo = hw::load_topology(
      kSource + "/tests/fixtures/unit_hw.yaml",
      hw::LoadOptions{{"tiers.hbm.capacity=64MiB", "tiers.ddr.capacity=64MiB"}, false});
  const Workload w = graph(header_value(header, "graph"));
  PlanRequest req;
  const std::string policy = header_value(header, "policy");
  if (!policy.empty()) req.policy = policy;
  req.pipeline = header_value(header, "pipeline");
  req.target.device_tier = *topo.tier_index("hbm");
  req.target.budget = parse_bytes(header_value(header, "budget")).value.value;
  const std::string pin = header_value(header, "pin");
  if (!pin.empty()) {
    req.pins = study::parse_pins({pin}, topo);
  }
  study::SimEvaluator eval(w, topo);
  if (header_value(header, "evaluator") == "sim") req.evaluator = &eval;
  const PlanOutcome out = make_plan(w, topo, req);
  if (!out.ok) return fmt::format("failed: {}\n", out.reason);
  const auto issue = verify_plan(*out.plan, w);
  CHECK_MESSAGE(!issue.has_value(), (issue ? issue->message : std::string()));
  const sim::SimResult r = sim::simulate(*out.plan, w, topo);
  return fmt::format("pipeline: {}\nestimated peak: {}\nsimulated makespan: {}\n{}", out.pipeline,
                     out.estimated_peak, r.error ? "error" : to_string(Duration{r.makespan}),
                     plan_text(*out.plan, w));
}

}  // namespace

TEST_CASE("planner goldens") {
  const bool update = std::getenv("TIERFLOW_UPDATE_GOLDEN") != nullptr;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(kSource + "/tests/planner/golden")) {
    if (e.path().extension() == ".txt") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 12);
  for (const auto& f : files) {
    CAPTURE(f.filename().string());
    std::ifstream in(f);
    std::string header, expected, line;
    while (std::getline(in, line)) {
      if (line.rfind("#", 0) == 0 && expected.empty()) {
        header += line + "\n";
      } else {
        expected += line + "\n";
      }
    }
    const std::string got = run_golden(header);
    if (update) {
      std::ofstream(f) << header << got;
      continue;
    }
    CHECK(got == expected);
  }
}
