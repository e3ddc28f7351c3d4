// The test plan builders: every plan they build verifies, the same seed gives the same
// bytes, and the layerwise plan streams exactly the host-homed tensors, once per run.
#include "tests/support/plan_builders.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/plan_json.h"
#include "core/workload_json.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

using namespace tierflow;
using namespace tierflow::testing;

namespace {

const std::string kConfigs = std::string(TIERFLOW_SOURCE_DIR) + "/configs";

std::string verify(const Plan& p, const Workload& w) {
  auto i = verify_plan(p, w);
  return i ? fmt::format("{}:{}:{}: {}", i->program, i->step, i->tensor, i->message) : "ok";
}

/// Small real workloads: dense decode, MoE decode, a checkpointed training step.
std::vector<Workload> real_workloads() {
  using namespace tierflow::traces;
  std::vector<Workload> out;
  GenOptions decode;
  decode.phase = Phase::kDecode;
  decode.context = 300;
  decode.tokens = 2;
  decode.layers = 2;
  decode.kv_block = 128;
  out.push_back(generate(load_arch(find_arch("llama-2-7b", kConfigs)), decode));
  out.push_back(generate(load_arch(find_arch("mixtral-8x7b", kConfigs)), decode));
  GenOptions train;
  train.phase = Phase::kTrain;
  train.seq = 64;
  train.layers = 2;
  train.checkpoint = true;
  out.push_back(generate(load_arch(find_arch("llama-2-7b", kConfigs)), train));
  return out;
}

/// Same steps apart from event ids.
bool same_choices(const Program& a, const Program& b) {
  return std::equal(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(),
                    [](const Step& x, const Step& y) {
                      return x.kind == y.kind && x.target == y.target && x.tier == y.tier &&
                             x.wait.size() == y.wait.size();
                    });
}

std::array<size_t, 4> count_kinds(const Plan& p) {
  std::array<size_t, 4> n{};
  for (const Program& prog : p.programs) {
    for (const Step& s : prog.steps) ++n[static_cast<size_t>(s.kind)];
  }
  return n;
}

/// One line per step: "compute attn0 wait 0,1", "prefetch kv from ddr e3", "detach a".
std::string listing(const Program& prog, const Plan& p, const Workload& w) {
  std::string out;
  for (const Step& s : prog.steps) {
    const std::string_view what = kStepKindNames[static_cast<size_t>(s.kind)];
    if (s.kind == StepKind::kCompute) {
      out += fmt::format("{} {}", what, w.ops[s.target].name);
    } else {
      out += fmt::format("{} {}", what, w.tensors[s.target].name);
    }
    if (s.kind == StepKind::kPrefetch) out += fmt::format(" from {}", p.tiers[s.tier]);
    if (s.kind == StepKind::kStore) out += fmt::format(" to {}", p.tiers[s.tier]);
    if (s.event != kNoEvent) out += fmt::format(" e{}", s.event);
    if (!s.wait.empty()) out += fmt::format(" wait {}", fmt::join(s.wait, ","));
    out += "\n";
  }
  return out;
}

// attn0 reads w and appends to kv, mm reads w again, attn1 appends to kv again:
//   x, w --attn0(kv)--> a --mm(w)--> b --attn1(kv)--> y
Workload three_ops() {
  Workload w;
  w.name = "three";
  w.add_tensor({"x", 64, TensorKind::kInput});
  w.add_tensor({"w", 1024, TensorKind::kWeight});
  w.add_tensor({"kv", 512, TensorKind::kKv});
  w.add_tensor({"a", 64, TensorKind::kActivation});
  w.add_tensor({"b", 64, TensorKind::kActivation});
  w.add_tensor({"y", 64, TensorKind::kOutput});
  w.add_op({"attn0", OpKind::kAttention, Dtype::kBf16, 100, 100, {0, 1}, {3}, {2}});
  w.add_op({"mm", OpKind::kMatmul, Dtype::kBf16, 100, 100, {3, 1}, {4}});
  w.add_op({"attn1", OpKind::kAttention, Dtype::kBf16, 100, 100, {4}, {5}, {2}});
  return w;
}

}  // namespace

TEST_CASE("resident_plan: computes in order, frees activations, never transfers") {
  const Workload w = three_ops();
  const Plan p = resident_plan(w, {/*devices=*/2, "hbm"});
  CHECK(verify(p, w) == "ok");
  CHECK(p.tiers == std::vector<std::string>{"hbm"});
  REQUIRE(p.programs.size() == 2);
  // a dies with mm, b with attn1; y is an output and x, w, kv are external: they stay.
  const std::string expected =
      "compute attn0\n"
      "compute mm\n"
      "detach a\n"
      "compute attn1\n"
      "detach b\n";
  CHECK(listing(p.programs[0], p, w) == expected);
  CHECK(listing(p.programs[1], p, w) == expected);
  CHECK(p.programs[1].device == 1);

  for (const Workload& real : real_workloads()) {
    CAPTURE(real.name);
    const Plan r = resident_plan(real, {/*devices=*/2, "hbm"});
    CHECK(verify(r, real) == "ok");
    const auto n = count_kinds(r);
    CHECK(n[static_cast<size_t>(StepKind::kPrefetch)] == 0);
    CHECK(n[static_cast<size_t>(StepKind::kStore)] == 0);
    CHECK(n[static_cast<size_t>(StepKind::kCompute)] == 2 * real.ops.size());
  }
}

TEST_CASE("streamed_plan on three ops: one prefetch per run, kv stored before its re-read") {
  const Workload w = three_ops();
  StreamOptions o;
  o.host_kinds = {TensorKind::kWeight, TensorKind::kKv};

  // Runs: w {attn0, mm} (back to back), kv {attn0} and {attn1} (mm in between). kv is
  // modified by attn0 and read again, so it goes back to ddr before its detach; the
  // second prefetch of kv reads that copy. Lookahead 1: each prefetch follows the compute
  // just before its run (the first ones sit at the program start).
  Plan p = streamed_plan(w, {/*devices=*/1, "hbm"}, o);
  CHECK(verify(p, w) == "ok");
  CHECK(p.home == std::vector<uint32_t>{0, 1, 1, 0, 0, 0});
  CHECK(listing(p.programs[0], p, w) ==
        "prefetch w from ddr e0\n"
        "prefetch kv from ddr e1\n"
        "compute attn0 wait 0,1\n"
        "store kv to ddr e2\n"
        "detach kv wait 2\n"
        "compute mm\n"
        "detach w\n"
        "detach a\n"
        "prefetch kv from ddr e3\n"
        "compute attn1 wait 3\n"
        "detach kv\n"
        "detach b\n");

  // Lookahead 2 would anchor kv's second prefetch before attn0 finished with it: it goes
  // right after the detach instead. Two devices: the copy's events continue from 4.
  o.lookahead = 2;
  p = streamed_plan(w, {/*devices=*/2, "hbm"}, o);
  CHECK(verify(p, w) == "ok");
  CHECK(listing(p.programs[1], p, w) ==
        "prefetch w from ddr e4\n"
        "prefetch kv from ddr e5\n"
        "compute attn0 wait 4,5\n"
        "store kv to ddr e6\n"
        "detach kv wait 6\n"
        "prefetch kv from ddr e7\n"
        "compute mm\n"
        "detach w\n"
        "detach a\n"
        "compute attn1 wait 7\n"
        "detach kv\n"
        "detach b\n");

  // Gap 2: kv's uses (one op apart) form one run: one prefetch, nothing stored. With
  // write_back_last the modified kv goes home after its last run.
  o.lookahead = 1;
  o.gap = 2;
  o.write_back_last = true;
  p = streamed_plan(w, {/*devices=*/1, "hbm"}, o);
  CHECK(verify(p, w) == "ok");
  CHECK(listing(p.programs[0], p, w) ==
        "prefetch w from ddr e0\n"
        "prefetch kv from ddr e1\n"
        "compute attn0 wait 0,1\n"
        "compute mm\n"
        "detach w\n"
        "detach a\n"
        "compute attn1\n"
        "store kv to ddr e2\n"
        "detach kv wait 2\n"
        "detach b\n");

  // Default: only weights on the host; kv stays on the device, updated in place.
  p = streamed_plan(w, {/*devices=*/1, "hbm"}, StreamOptions{});
  CHECK(verify(p, w) == "ok");
  CHECK(count_kinds(p) == std::array<size_t, 4>{3, 1, 0, 3});
}

TEST_CASE("streamed_plan on real workloads: verifies, prefetches each host tensor per run") {
  for (const Workload& w : real_workloads()) {
    for (const bool kv : {false, true}) {
      for (const uint32_t lookahead : {1u, 3u}) {
        for (const uint32_t gap : {1u, 4u}) {
          CAPTURE(w.name);
          CAPTURE(kv);
          CAPTURE(lookahead);
          CAPTURE(gap);
          StreamOptions o;
          if (kv) o.host_kinds.push_back(TensorKind::kKv);
          o.lookahead = lookahead;
          o.gap = gap;
          const Plan p = streamed_plan(w, {/*devices=*/2, "hbm"}, o);
          REQUIRE(verify(p, w) == "ok");
          // Expected prefetches per tensor: its number of runs when host-homed, else none.
          std::vector<std::vector<uint32_t>> uses(w.tensors.size());
          for (uint32_t op = 0; op < w.ops.size(); ++op) {
            for (uint32_t t : w.ops[op].inputs) uses[t].push_back(op);
            for (uint32_t t : w.ops[op].updates) uses[t].push_back(op);
          }
          std::vector<size_t> expected(w.tensors.size()), got(w.tensors.size());
          for (uint32_t t = 0; t < w.tensors.size(); ++t) {
            const Tensor& x = w.tensors[t];
            const bool host = x.origin == kExternal &&
                              (x.kind == TensorKind::kWeight || (kv && x.kind == TensorKind::kKv));
            CHECK(p.home[t] == (host ? 1u : 0u));
            auto& u = uses[t];
            std::sort(u.begin(), u.end());
            for (size_t i = 0; host && i < u.size(); ++i) {
              if (i == 0 || u[i] - u[i - 1] - 1 >= gap) ++expected[t];
            }
          }
          for (const Step& s : p.programs[0].steps) {
            if (s.kind == StepKind::kPrefetch) ++got[s.target];
          }
          CHECK(got == expected);
        }
      }
    }
  }
}

TEST_CASE("random_plan verifies on real workloads") {
  for (const Workload& w : real_workloads()) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      CAPTURE(w.name);
      CAPTURE(seed);
      CHECK(verify(random_plan(seed, w, {/*devices=*/2, "hbm"}), w) == "ok");
    }
  }
}

TEST_CASE("200 seeded random workloads x random plans verify, with every step kind") {
  std::array<size_t, 4> kinds{};
  size_t identical = 0, programs = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    CAPTURE(seed);
    const Workload w = random_workload(seed);
    REQUIRE_FALSE(verify_workload(w).has_value());
    const PlanShape shape{/*devices=*/1 + static_cast<uint32_t>(seed % 3), "hbm"};
    RandomPlanOptions o;
    if (seed % 2 == 1) o.host_tiers = {"ddr"};
    const Plan p = random_plan(seed, w, shape, o);
    REQUIRE(verify(p, w) == "ok");
    const auto n = count_kinds(p);
    for (size_t k = 0; k < n.size(); ++k) {
      if (n[k] > 0) ++kinds[k];
    }
    for (size_t d = 1; d < p.programs.size(); ++d) {
      ++programs;
      if (same_choices(p.programs[d], p.programs[0])) ++identical;
    }
    // The resident and layerwise plans verify on the same workloads.
    REQUIRE(verify(resident_plan(w, shape), w) == "ok");
    StreamOptions so;
    so.host_kinds = {TensorKind::kWeight, TensorKind::kKv};
    so.lookahead = 1 + static_cast<uint32_t>(seed % 4);
    so.gap = 1 + static_cast<uint32_t>(seed % 3);
    REQUIRE(verify(streamed_plan(w, shape, so), w) == "ok");
  }
  // Every step kind shows up in nearly every plan.
  for (size_t k = 0; k < kinds.size(); ++k) {
    CAPTURE(kStepKindNames[k]);
    CHECK(kinds[k] >= 190);
  }
  // Later programs sometimes repeat program 0, sometimes draw their own.
  CHECK(identical > 0);
  CHECK(identical < programs);
}

TEST_CASE("the same seed gives byte-identical workloads and plans") {
  for (uint64_t seed : {0u, 7u, 12345u}) {
    CAPTURE(seed);
    const Workload w = random_workload(seed);
    CHECK(write_workload(random_workload(seed)) == write_workload(w));
    CHECK(write_workload(random_workload(seed + 1)) != write_workload(w));
    const PlanShape shape{/*devices=*/3, "hbm"};
    const std::string text = write_plan(random_plan(seed, w, shape), &w);
    CHECK(write_plan(random_plan(seed, w, shape), &w) == text);
    CHECK(write_plan(random_plan(seed + 1, w, shape), &w) != text);
  }
  // Options shape the draw: a bigger workload.
  RandomWorkloadOptions big;
  big.ops = 200;
  big.layers = 8;
  const Workload w = random_workload(3, big);
  CHECK(w.ops.size() == 200);
  CHECK(w.ops.back().layer == 7);
  CHECK(verify(random_plan(3, w, {/*devices=*/2, "hbm"}), w) == "ok");
}
