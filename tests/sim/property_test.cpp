// Property tests on seeded random plans (STYLE "Tests"): for each seed, a small random
// chain of ops over weights homed on ddr or hbm, and a valid plan built alongside it
// (prefetch ahead of use, consumers wait, detach after last use, a KV tensor that ops
// update and that sometimes makes a store -> wait -> detach -> prefetch round trip).
// The run must succeed and never beat its lower bounds.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "hw_models/cost.h"
#include "hw_models/loader.h"
#include "sim/simulator.h"

using namespace tierflow;
using namespace tierflow::sim;

namespace {

const std::string kFixture = std::string(TIERFLOW_SOURCE_DIR) + "/tests/fixtures/unit_hw.yaml";

constexpr uint32_t kHbm = 0, kDdr = 1;  // plan tiers

struct Case {
  Workload w;
  Plan p;
};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  Case make() {
    Case c;
    build_workload(c.w);
    c.p.name = "random";
    c.p.tiers = {"hbm", "ddr"};
    c.p.device_tier = kHbm;
    c.p.home = home_;
    // One or two programs on distinct devices; each runs the whole workload.
    const uint32_t first = uint32_t(pick(0, 3));
    c.p.programs.push_back(build_program(c.w, first));
    if (rng_() % 2 == 0)
      c.p.programs.push_back(build_program(c.w, (first + 1 + uint32_t(pick(0, 2))) % 4));
    return c;
  }

 private:
  uint64_t pick(uint64_t lo, uint64_t hi) { return lo + rng_() % (hi - lo + 1); }

  uint32_t tensor(Workload& w, std::string name, uint64_t bytes, TensorKind kind, uint32_t home) {
    home_.push_back(home);
    return w.add_tensor({std::move(name), bytes, kind});
  }

  void build_workload(Workload& w) {
    w.name = "random";
    const size_t nw = pick(3, 8);
    for (size_t i = 0; i < nw; ++i) {
      weights_.push_back(tensor(w, fmt::format("w{}", i), 8 * pick(1, 32), TensorKind::kWeight,
                                rng_() % 2 == 0 ? kDdr : kHbm));
    }
    kv_ = tensor(w, "kv", 8 * pick(2, 16), TensorKind::kKv, rng_() % 2 == 0 ? kDdr : kHbm);
    uint32_t prev = tensor(w, "x", 8 * pick(1, 8), TensorKind::kInput, kDdr);
    const size_t n = pick(20, 40);
    static constexpr OpKind kKinds[] = {OpKind::kNorm, OpKind::kMatmul, OpKind::kElementwise};
    for (size_t i = 0; i < n; ++i) {
      Op op;
      op.name = fmt::format("op{}", i);
      op.kind = kKinds[rng_() % 3];
      op.flops = double(pick(16, 2048));
      op.bytes = pick(0, 512);
      op.inputs = {prev};
      if (rng_() % 4 != 0) op.inputs.push_back(weights_[rng_() % weights_.size()]);
      if (rng_() % 4 == 0) op.updates = {kv_};
      if (rng_() % 3 == 0) op.workspace = 8 * pick(1, 8);
      const uint32_t out = tensor(w, fmt::format("a{}", i), 8 * pick(1, 8),
                                  i + 1 == n ? TensorKind::kOutput : TensorKind::kActivation, kHbm);
      op.outputs = {out};
      w.add_op(std::move(op));
      prev = out;
    }
  }

  Program build_program(const Workload& w, uint32_t device) {
    const size_t nt = w.tensors.size();
    std::vector<bool> resident(nt);
    std::vector<uint32_t> where(nt);  // a plan tier holding a valid copy
    std::vector<uint32_t> pending(nt, kNoEvent);
    std::vector<size_t> last_use(nt, SIZE_MAX);
    for (uint32_t t = 0; t < nt; ++t) {
      resident[t] = w.tensors[t].origin == kExternal && home_[t] == kHbm;
      where[t] = home_[t];
    }
    auto uses = [&](uint32_t o) {
      std::vector<uint32_t> u = w.ops[o].inputs;
      u.insert(u.end(), w.ops[o].updates.begin(), w.ops[o].updates.end());
      return u;
    };
    for (uint32_t o = 0; o < w.ops.size(); ++o) {
      for (uint32_t t : uses(o)) last_use[t] = o;
    }
    Program prog;
    prog.device = device;
    auto& s = prog.steps;
    auto need = [&](uint32_t o) {
      for (uint32_t t : uses(o)) {
        if (w.tensors[t].origin != kExternal || resident[t]) continue;
        s.push_back(Step{StepKind::kPrefetch, t, where[t], next_event_, {}});
        resident[t] = true;
        pending[t] = next_event_++;
      }
    };
    const uint32_t n = uint32_t(w.ops.size());
    for (uint32_t o = 0; o < n; ++o) {
      need(o);
      if (o + 1 < n && rng_() % 2 == 0) need(o + 1);  // prefetch one op ahead
      std::vector<uint32_t> wait;
      for (uint32_t t : uses(o)) {
        if (pending[t] != kNoEvent) {
          wait.push_back(pending[t]);
          pending[t] = kNoEvent;
        }
      }
      s.push_back(Step{StepKind::kCompute, o, 0, kNoEvent, wait});
      for (uint32_t t : w.ops[o].outputs) resident[t] = true;
      // KV round trip: store, wait, detach; the next user prefetches it back from ddr.
      if (!w.ops[o].updates.empty() && last_use[kv_] != o && rng_() % 2 == 0) {
        const uint32_t ev = next_event_++;
        s.push_back(Step{StepKind::kStore, kv_, kDdr, ev, {}});
        s.push_back(Step{StepKind::kDetach, kv_, 0, kNoEvent, {ev}});
        resident[kv_] = false;
        where[kv_] = kDdr;
      }
      for (uint32_t t : uses(o)) {
        if (last_use[t] == o && resident[t] && pending[t] == kNoEvent) {
          s.push_back(Step{StepKind::kDetach, t, 0, kNoEvent, {}});
          resident[t] = false;
        }
      }
    }
    // Sometimes store the final output and free it.
    const uint32_t out = w.ops.back().outputs[0];
    if (rng_() % 2 == 0) {
      const uint32_t ev = next_event_++;
      s.push_back(Step{StepKind::kStore, out, kDdr, ev, {}});
      s.push_back(Step{StepKind::kDetach, out, 0, kNoEvent, {ev}});
    }
    return prog;
  }

  std::mt19937_64 rng_;
  std::vector<uint32_t> home_;
  std::vector<uint32_t> weights_;
  uint32_t kv_ = 0;
  uint32_t next_event_ = 1;
};

uint64_t plan_transfer_bytes(const Case& c) {
  uint64_t sum = 0;
  for (const Program& prog : c.p.programs) {
    for (const Step& s : prog.steps) {
      if (s.kind == StepKind::kPrefetch || s.kind == StepKind::kStore) {
        sum += c.w.tensors[s.target].bytes;
      }
    }
  }
  return sum;
}

}  // namespace

TEST_CASE("random valid plans run and never beat their lower bounds") {
  const hw::Topology t = hw::load_topology(
      kFixture, hw::LoadOptions{{"tiers.hbm.capacity=1MiB", "tiers.ddr.capacity=1MiB"}, false});
  for (uint64_t seed = 0; seed < 200; ++seed) {
    CAPTURE(seed);
    const Case c = Generator(seed).make();
    REQUIRE_FALSE(verify_workload(c.w).has_value());
    const auto issue = verify_plan(c.p, c.w);
    if (issue) FAIL(issue->program << ":" << issue->step << ": " << issue->message);

    const SimResult r = simulate(c.p, c.w, t);
    if (r.error) FAIL("simulation error: " << r.error->message);

    // Compute: every program runs every op once, at its roofline time.
    Time ops_ps = 0;
    for (const Op& op : c.w.ops) {
      ops_ps += hw::roofline_time(t, 0, op.kind, op.dtype, op.flops, Bytes{op.bytes})->ps;
    }
    REQUIRE(r.devices.size() == c.p.programs.size());
    for (const DeviceResult& d : r.devices) {
      CHECK(d.compute_ps == ops_ps);
      CHECK(d.ops == c.w.ops.size());
      CHECK(r.makespan >= d.compute_ps);
      CHECK(d.compute_ps + d.stall_transfer_ps + d.stall_memory_ps <= d.end);
      CHECK(d.stall_memory_ps == 0);  // capacities are far above the plan's needs
      CHECK(d.end <= r.makespan);
    }

    // Resources: nothing moves bytes faster than its capacity, or is busy past the end.
    for (const LinkResult& l : r.links) {
      CAPTURE(l.name);
      CHECK(l.bytes / l.capacity * 1e12 <= double(r.makespan) * (1 + 1e-9));
      CHECK(l.busy_ps <= r.makespan);
      CHECK(l.peak_rate <= l.capacity * (1 + 1e-9));
    }

    // Bytes moved = the plan's prefetch and store bytes.
    uint64_t moved = 0;
    uint64_t in_out = 0;
    Time exposed = 0;
    for (const TransferRecord& x : r.transfers) {
      moved += x.bytes;
      CHECK(x.issue <= x.start);
      CHECK(x.start <= x.active);
      CHECK(x.active <= x.end);
      CHECK(x.end <= r.makespan);
      CHECK(x.exposed >= 0);
      exposed += x.exposed;
    }
    // Every transfer stall is some transfer's exposed time, once, however often the
    // waiting program was woken meanwhile.
    Time stalled = 0;
    for (const DeviceResult& d : r.devices) stalled += d.stall_transfer_ps;
    CHECK(exposed == stalled);
    for (const DeviceResult& d : r.devices) in_out += d.bytes_in + d.bytes_out;
    CHECK(moved == plan_transfer_bytes(c));
    CHECK(in_out == moved);

    // Ledger: levels never negative or over capacity.
    for (const TierResult& x : r.tiers) {
      CAPTURE(x.name);
      CHECK(x.peak >= x.final_level);
      CHECK(x.peak <= x.capacity);
      CHECK(x.average >= 0);
      CHECK(x.average <= double(x.peak) * (1 + 1e-12));
    }
  }
}
