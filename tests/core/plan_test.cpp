// The plan rules of ARCHITECTURE §6, each broken once, and the JSON round trip.
#include <doctest/doctest.h>

#include "core/diagnostics.h"
#include "core/plan_json.h"
#include "core/sha256.h"
#include "core/workload_json.h"

using namespace tierflow;

namespace {

// x --norm--> y --mm(w)--> z, mm also updates kv in place.
Workload tiny() {
  Workload w;
  w.name = "tiny";
  w.add_tensor({"x", 64, TensorKind::kInput});
  w.add_tensor({"w", 2048, TensorKind::kWeight});
  w.add_tensor({"kv", 512, TensorKind::kKv});
  w.add_tensor({"y", 64, TensorKind::kActivation});
  w.add_tensor({"z", 64, TensorKind::kOutput});
  w.add_op({"norm", OpKind::kNorm, Dtype::kBf16, 160, 128, {0}, {3}});
  w.add_op({"mm", OpKind::kMatmul, Dtype::kBf16, 2048, 2176, {3, 1}, {4}, {2}});
  return w;
}

Step compute(uint32_t op, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kCompute, op, 0, kNoEvent, std::move(wait)};
}
Step prefetch(uint32_t t, uint32_t ev) {
  return Step{StepKind::kPrefetch, t, 1, ev, {}};
}
Step store(uint32_t t, uint32_t ev) {
  return Step{StepKind::kStore, t, 1, ev, {}};
}
Step detach(uint32_t t, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kDetach, t, 0, kNoEvent, std::move(wait)};
}

// tiers: 0 = hbm (device), 1 = ddr. x, w and z live in ddr; kv and y on the device.
Plan good() {
  Plan p;
  p.name = "good";
  p.topology_ref = {"unit_hw.yaml", ""};
  p.tiers = {"hbm", "ddr"};
  p.device_tier = 0;
  p.home = {1, 1, 0, 0, 1};
  p.programs = {Program{0,
                        {prefetch(0, 1), prefetch(1, 2), compute(0, {1}), compute(1, {2}),
                         store(4, 3), detach(1), detach(4, {3}), detach(0), detach(3)}}};
  return p;
}

std::string issue(const Plan& p) {
  auto i = verify_plan(p, tiny());
  return i ? fmt::format("{}:{}: {}", i->program, i->step, i->message) : "ok";
}

}  // namespace

TEST_CASE("a well-formed plan verifies and round-trips byte for byte") {
  const Workload w = tiny();
  const Plan p = good();
  CHECK(issue(p) == "ok");
  const std::string text = write_plan(p, &w);
  const LoadedPlan back = read_plan_text(text, "p.json", ".");
  CHECK(write_plan(back.plan, &back.workload) == text);
  CHECK(back.plan.programs[0].steps[4].kind == StepKind::kStore);
  CHECK(back.plan.tiers[back.plan.programs[0].steps[4].tier] == "ddr");
}

TEST_CASE("budget, pipeline and routing are plan fields; a plan/1 file keeps them in meta") {
  const Workload w = tiny();
  Plan p = good();
  p.budget = 4096;
  p.pipeline = "reorder,place,liveness,layerwise,insert,schedule,verify";
  p.routing = "realistic";
  p.meta["policy"] = "\"layerwise\"";
  const std::string text = write_plan(p, &w);
  CHECK(text.find("\"format\": \"tierflow.plan/2\"") != std::string::npos);
  CHECK(text.find("\n  \"budget\": 4096,\n") != std::string::npos);
  const LoadedPlan back = read_plan_text(text, "p.json", ".");
  CHECK(back.plan.budget == 4096);
  CHECK(back.plan.pipeline == p.pipeline);
  CHECK(back.plan.routing == "realistic");
  CHECK(write_plan(back.plan, &back.workload) == text);

  // The same plan as tierflow.plan/1 wrote it: the fields in meta, as JSON values.
  std::string v1 = text;
  const auto swap = [&v1](const std::string& from, const std::string& to) {
    const size_t at = v1.find(from);
    REQUIRE(at != std::string::npos);
    v1.replace(at, from.size(), to);
  };
  swap("tierflow.plan/2", "tierflow.plan/1");
  swap("\n  \"budget\": 4096,", "");
  swap("\n  \"pipeline\": \"" + p.pipeline + "\",", "");
  swap("\n  \"routing\": \"realistic\",", "");
  swap("\"meta\": {", "\"meta\": {\"budget\": 4096, \"pipeline\": \"" + p.pipeline +
                          "\", \"routing\": \"realistic\", ");
  const LoadedPlan old = read_plan_text(v1, "old.json", ".");
  CHECK(old.plan.budget == 4096);
  CHECK(old.plan.pipeline == p.pipeline);
  CHECK(old.plan.routing == "realistic");
  CHECK(old.plan.meta.size() == 1);  // policy only: the fields left meta
  CHECK(write_plan(old.plan, &old.workload) == text);

  // No budget: the field is absent, and reads back as 0 (the tier's capacity).
  Plan none = good();
  const std::string bare = write_plan(none, &w);
  CHECK(bare.find("\"budget\"") == std::string::npos);
  CHECK(bare.find("\"routing\"") == std::string::npos);
  CHECK(read_plan_text(bare, "p.json", ".").plan.budget == 0);
}

TEST_CASE("each §6 rule, broken") {
  Plan p = good();
  p.programs[0].steps[2] = compute(0);  // no wait on the prefetch of x
  CHECK(issue(p) ==
        "0:2: op 'norm' may start before the prefetch of tensor 0 'x' lands: wait on event 1");

  p = good();
  p.programs[0].steps.erase(p.programs[0].steps.begin() + 1);  // w never prefetched
  p.programs[0].steps[2].wait.clear();
  CHECK(issue(p) ==
        "0:2: op 'mm' reads tensor 1 'w', which is not resident on 'hbm': prefetch it "
        "first, or do not detach it earlier");

  p = good();
  p.programs[0].steps.insert(p.programs[0].steps.begin() + 3, detach(3));  // y before mm
  CHECK(issue(p) ==
        "0:3: detach of tensor 3 'y' loses data: no other tier holds a current copy "
        "and op 1 'mm' (step 4) still uses it; store it and wait for the store first");

  p = good();
  p.programs[0].steps[6] = detach(4);  // z detached while its store is in flight
  CHECK(issue(p) == "0:6: detach of tensor 4 'z' while a transfer uses it: wait on event 3 first");

  p = good();
  p.programs[0].steps[2].wait = {3};  // waits on the store issued later
  CHECK(issue(p) ==
        "0:2: waits on event 3, which step 4 completes later: the program would wait forever");

  p = good();
  p.programs[0].steps[1].event = 1;  // event ids are unique
  CHECK(issue(p) == "0:1: event 1 is already completed by program 0 step 0");

  p = good();
  p.programs[0].steps.erase(p.programs[0].steps.begin() + 3);  // mm never runs
  CHECK(issue(p).starts_with("0:"));

  p = good();
  // Prefetching y from ddr, where it was never stored.
  p.programs[0].steps.push_back(prefetch(3, 9));
  CHECK(issue(p) ==
        "0:9: 'ddr' holds no valid copy of tensor 3 'y' (home 'hbm'): store it there "
        "and wait for the store first");
}

TEST_CASE("a detach is safe once the store has been waited on") {
  Plan p = good();
  // y stored to ddr, waited, detached, prefetched back before mm.
  p.home[3] = 1;
  auto& s = p.programs[0].steps;
  s = {prefetch(0, 1), prefetch(1, 2), compute(0, {1}),    store(3, 5),
       detach(3, {5}), prefetch(3, 6), compute(1, {2, 6}), store(4, 3),
       detach(1),      detach(4, {3}), detach(0),          detach(3)};
  CHECK(issue(p) == "ok");
}

TEST_CASE("plan errors point at the step in the JSON") {
  const Workload w = tiny();
  Plan p = good();
  p.programs[0].steps[2] = compute(0);
  const std::string text = write_plan(p, &w);
  try {
    read_plan_text(text, "p.json", ".");
    FAIL("expected an error");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("p.json:") == 0);
    CHECK(msg.find("program 0 step 2: op 'norm' may start before") != std::string::npos);
    // The position is the step's line.
    const int line = e.pos().line;
    size_t at = 0;
    for (int i = 1; i < line; ++i) at = text.find('\n', at) + 1;
    CHECK(text.substr(at, text.find('\n', at) - at) == "      {\"compute\": 0},");
  }
}

TEST_CASE("SHA-256 matches the FIPS 180-4 examples") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
