// Questions over a service (tools/study/serve_find.h) answered by search: the split of the
// replicas between prefill and decode, the fewest replicas and the fewest devices. End to end (the
// CLI's text and JSON, whatif, Python) in tests/e2e/serve_test.sh and tests/python/test_api.py.
#include "tools/study/serve_find.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/diagnostics.h"

namespace tierflow::study {
namespace {

/// Llama-3-8B on an H100 node: long prompts, outputs long enough for TPOT to matter.
ServeSettings split_base(int replicas) {
  ServeSettings s;
  s.names = SettingNames::kFields;
  s.model.model = "llama-3-8b";
  s.arrivals = "poisson,rate=6/s,n=200,prompt=uniform:2048:8192,output=uniform:32:256,seed=5";
  s.engine.replicas = replicas;
  return s;
}

ServeAnswer ask(const ServeSettings& s, const std::string& target,
                ServeQuestion q = ServeQuestion::kSplit) {
  ServeAsk a;
  a.question = q;
  a.target = parse_serve_target(target, "target");
  return find_serve(s, prepare_serve(s), a);
}

}  // namespace

TEST_CASE("split: every division runs, colocated first; the best that passes is the answer") {
  const ServeSettings s = split_base(4);
  const ServeAnswer a = ask(s, "p99-tpot=10s");
  CHECK(a.split_replicas == 4);
  REQUIRE(a.probes.size() == 4);
  // Each probe is the run of its division, as serve runs it.
  for (int p = 0; p < 4; ++p) {
    ServeSettings d = s;
    d.engine.prefill_replicas = p;
    d.engine.replicas = 4 - p;
    const double tpot = serve_metric(run_serve(prepare_serve(d)), a.target);
    CHECK(a.probes[size_t(p)].knob == p);
    CHECK(a.probes[size_t(p)].value == tpot);
  }
  // All pass a loose bound: the lowest TPOT wins (the first of equals).
  REQUIRE(a.found);
  double best = std::numeric_limits<double>::infinity();
  int at = -1;
  for (const ServeProbe& p : a.probes) {
    CHECK(p.pass);
    if (p.value < best) {
      best = p.value;
      at = static_cast<int>(p.knob);
    }
  }
  CHECK(a.knob == at);
  REQUIRE(a.at_answer);
  CHECK(a.at_answer->result.prefill_replicas == at);
  CHECK(a.at_answer->result.replicas == 4 - at);
  CHECK(serve_answer_text(a).find("answer: ") != std::string::npos);
  // A bound none meets: no answer, every division still run.
  const ServeAnswer none = ask(s, "p99-tpot=1us");
  CHECK_FALSE(none.found);
  CHECK(none.probes.size() == 4);
  CHECK(serve_answer_text(none).find("every division of the replicas misses it") !=
        std::string::npos);
}

TEST_CASE("split: one replica has nothing to divide") {
  CHECK_THROWS_WITH_AS(ask(split_base(1), "p99-tpot=1s"),
                       doctest::Contains("split divides the replicas between prefill and decode"),
                       InputError);
}

namespace {

/// Llama-3-8B on an H100 host of `devices` devices, busy enough that replicas matter.
ServeSettings busy_base(int devices) {
  ServeSettings s;
  s.names = SettingNames::kFields;
  s.sets = {fmt::format("devices.h100.count={}", devices)};
  s.model.model = "llama-3-8b";
  s.arrivals = "poisson,rate=40/s,n=600,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3";
  return s;
}

double metric_at(ServeSettings s, int tp, int replicas, const ServeTarget& t) {
  s.model.gen.tp = tp;
  s.engine.replicas = replicas;
  return serve_metric(run_serve(prepare_serve(s)), t);
}

}  // namespace

TEST_CASE("min-replicas: the most replicas the devices hold is tried, not only powers of two") {
  // Six devices: 1, 2 and 4 replicas miss the bound, 6 meet it (8 do not fit). The search
  // said none when it doubled past the devices.
  const ServeSettings s = busy_base(6);
  const ServeAnswer a = ask(s, "p99-ttft=170ms", ServeQuestion::kMinReplicas);
  const ServeTarget t = a.target;
  REQUIRE(metric_at(s, 1, 6, t) <= 0.17);
  REQUIRE(metric_at(s, 1, 5, t) > 0.17);
  REQUIRE(a.found);
  CHECK(a.knob == 6);
  for (const ServeProbe& p : a.probes) CHECK(p.knob <= 6);
}

TEST_CASE("min-devices: the fewest devices over every tensor parallelism and replica count") {
  const ServeSettings s = busy_base(8);
  for (const std::string target : {"p99-ttft=300ms", "p99-tpot=15ms", "p99-ttft=1us"}) {
    CAPTURE(target);
    const ServeAnswer a = ask(s, target, ServeQuestion::kMinDevices);
    // Every setup by brute force: the fewest devices that pass, ties to the better metric.
    int best_devices = 0, best_tp = 0, best_replicas = 0;
    double best = 0;
    for (int tp = 1; tp <= 8; tp *= 2) {
      for (int r = 1; r * tp <= 8; ++r) {
        const double v = metric_at(s, tp, r, a.target);
        if (!(v <= a.target.bound)) continue;
        if (best_devices == 0 || tp * r < best_devices || (tp * r == best_devices && v < best)) {
          best_devices = tp * r;
          best_tp = tp;
          best_replicas = r;
          best = v;
        }
      }
    }
    CHECK(a.found == (best_devices > 0));
    if (!a.found) {
      CHECK(serve_answer_text(a).find("every tensor parallelism and replica count") !=
            std::string::npos);
      continue;
    }
    CHECK(a.knob == best_devices);
    CHECK(a.tp == best_tp);
    CHECK(a.replicas == best_replicas);
    REQUIRE(a.at_answer);
    CHECK(a.at_answer->result.tp == best_tp);
    CHECK(a.at_answer->result.replicas == best_replicas);
    // Each probe is the run of its setup, as serve runs it.
    for (const ServeProbe& p : a.probes) {
      CHECK(p.tp * p.knob <= 8);
      CHECK(p.value == metric_at(s, p.tp, static_cast<int>(p.knob), a.target));
    }
    CHECK(serve_answer_text(a).find(fmt::format("answer: {} devices: {} replica", best_devices,
                                                best_replicas)) != std::string::npos);
  }
}

TEST_CASE("tp not given: the least power of two that leaves room for KV, said in a note") {
  ServeSettings s = busy_base(8);
  s.arrivals = "poisson,rate=2/s,n=20,prompt=fixed:512,output=fixed:8";
  CHECK(s.model.gen.tp == 0);
  // Llama-3-8B fits one H100: TP 1, nothing said (as given).
  ServeSetup x = prepare_serve(s);
  CHECK(x.gen.tp == 1);
  CHECK(x.notes.empty());
  // Llama-3-70B (131 GiB of bf16 weights) needs two; fp8 weights fit one.
  s.model.model = "llama-3-70b";
  x = prepare_serve(s);
  CHECK(x.gen.tp == 2);
  REQUIRE(x.notes.size() == 1);
  CHECK(x.notes[0] ==
        "tp not given: TP 2, the least that leaves llama-3-70b room for KV (155 "
        "blocks of 512 tokens a replica); tp sets it");
  CHECK(run_serve(x).result.tp == 2);
  CHECK(x.engine.replicas == 4);  // replicas not given: as many as the 8 devices hold
  s.weight_dtype = "fp8";
  CHECK(prepare_serve(s).gen.tp == 1);
  s.weight_dtype = "bf16";
  // Five replicas of TP 2 need 10 of the 8 devices: the user's error at the TP chosen (a
  // wider one would need more still), not a TP passed over.
  s.engine.replicas = 5;
  CHECK_THROWS_WITH_AS(prepare_serve(s), doctest::Contains("replicas"), InputError);
  s.engine.replicas = 1;
  // None leaves room (405B in bf16 on one L40S): TP 1's error, which says what would.
  s.sets.clear();
  s.hw = "l40s-server";
  s.model.model = "llama-3.1-405b";
  CHECK_THROWS_WITH_AS(prepare_serve(s), doctest::Contains("no tensor parallelism up to the"),
                       serve::DoesNotFit);
  // Given, a TP is kept: TP 1 does not fit and says so.
  s = busy_base(8);
  s.model.model = "llama-3-70b";
  s.model.gen.tp = 1;
  CHECK_THROWS_WITH_AS(run_serve(prepare_serve(s)),
                       doctest::Contains("raise the tensor parallelism"), serve::DoesNotFit);
}

TEST_CASE("min-devices: a tensor parallelism the model cannot take fails alone, with why") {
  // Llama-3-70B on H100s from TP 1: it leaves no room for a KV block; the others run.
  ServeSettings s = busy_base(8);
  s.model.model = "llama-3-70b";
  s.model.gen.tp = 1;
  s.arrivals = "poisson,rate=2/s,n=60,prompt=lognormal:2000:0.6,output=uniform:50:300,seed=3";
  const ServeAnswer a = ask(s, "p99-ttft=10s", ServeQuestion::kMinDevices);
  REQUIRE(!a.probes.empty());
  CHECK(a.probes.front().tp == 1);
  CHECK_FALSE(a.probes.front().pass);
  CHECK(a.probes.front().why.find("no room") != std::string::npos);
  REQUIRE(a.found);
  CHECK(a.tp >= 2);
  CHECK(serve_answer_json(a).find("\"why\"") != std::string::npos);
  // Disaggregated, the devices are divided by split, not counted here.
  s.engine.prefill_replicas = 1;
  CHECK_THROWS_WITH_AS(ask(s, "p99-ttft=10s", ServeQuestion::kMinDevices),
                       doctest::Contains("min-devices counts replicas that prefill and decode"),
                       InputError);
}

TEST_CASE("replicas not given: as many as the devices hold beside any prefill replicas") {
  ServeSettings s = busy_base(8);
  s.arrivals = "poisson,rate=2/s,n=20,prompt=fixed:512,output=fixed:8";
  CHECK(s.engine.replicas == 0);
  CHECK(get_serve_field(s, "replicas").empty());
  CHECK(prepare_serve(s).engine.replicas == 8);
  s.model.gen.tp = 4;
  CHECK(prepare_serve(s).engine.replicas == 2);
  // A TP that does not divide the devices leaves the rest idle: 2 of TP 3 on 8.
  s.model.gen.tp = 3;
  CHECK(prepare_serve(s).engine.replicas == 2);
  // Beside one prefill replica of TP 4, two decode replicas of TP 2.
  s.model.gen.tp = 2;
  s.engine.prefill_replicas = 1;
  s.engine.prefill_tp = 4;
  ServeSetup x = prepare_serve(s);
  CHECK(x.engine.replicas == 2);
  CHECK(run_serve(x).result.devices() == 8);
  // The prefill replicas take every device: one decode replica is still asked for, refused.
  s.engine.prefill_replicas = 2;
  CHECK_THROWS_WITH_AS(run_serve(prepare_serve(s)), doctest::Contains("need 10 devices"),
                       InputError);
  // Given, kept.
  s.engine.prefill_replicas = 0;
  s.engine.prefill_tp = 0;
  s.engine.replicas = 3;
  CHECK(prepare_serve(s).engine.replicas == 3);
}

TEST_CASE("nodes: copies of a one-host topology serve together; min-devices says the nodes") {
  // Nodes of four H100s (the file's one host, its count set to 4), three of them.
  ServeSettings s = busy_base(4);
  s.nodes = 3;
  const ServeSetup setup = prepare_serve(s);
  CHECK(class_devices(setup) == 12);
  CHECK(setup.topology.system.hosts == 3);
  // The engine's messages count the copies' devices: they name the copies.
  CHECK(setup.topology.name == "3 x h100-sxm-8gpu");
  CHECK(setup.topology_name == "h100-sxm-8gpu");
  // The same as the topology given three hosts of four by hand.
  ServeSettings by_hand = busy_base(12);
  by_hand.sets.push_back("system.hosts=3");
  for (const int tp : {1, 2, 4}) {
    CAPTURE(tp);
    const ServeTarget t = parse_serve_target("p99-tpot=15ms", "target");
    CHECK(metric_at(s, tp, 12 / tp, t) == metric_at(by_hand, tp, 12 / tp, t));
  }
  const ServeStudy run = run_serve(setup);
  CHECK(run.nodes == 3);
  // --replicas not given: as many as the nodes' devices hold, at the TP chosen (1).
  CHECK(setup.engine.replicas == 12);
  CHECK(serve_text(run).starts_with(
      "serve llama-3-8b on 3 x h100-sxm-8gpu: 12 replicas x TP 1 (h100)"));
  // TP 8 given spans two nodes: its all-reduces cross the servers' network, and the
  // summary says so.
  ServeSettings wide = s;
  wide.model.gen.tp = 8;
  const ServeStudy across = run_serve(prepare_serve(wide));
  CHECK(across.result.tp_domains == 2);
  CHECK(across.result.collective_bandwidth > 0);
  CHECK(serve_text(across).find("tensor parallelism across scale-up domains: each TP 8 group "
                                "spans 2 scale-up domains of 4 devices") != std::string::npos);
  const ServeAnswer a = ask(s, "p99-tpot=15ms", ServeQuestion::kMinDevices);
  REQUIRE(a.found);
  CHECK(a.nodes == 3);
  CHECK(a.nodes_used == (static_cast<int>(a.knob) + 3) / 4);
  CHECK(a.tp <= 4);
  CHECK(serve_answer_text(a).find(
            fmt::format("of TP {} on {} of the 3 nodes", a.tp, a.nodes_used)) != std::string::npos);
  CHECK(serve_answer_json(a).find(fmt::format("\"nodes_used\": {}", a.nodes_used)) !=
        std::string::npos);
}

TEST_CASE(
    "nodes: copies of a supernode are supernodes of their own; a count out of bounds refused") {
  const auto error_of = [](const ServeSettings& s) -> std::string {
    try {
      (void)prepare_serve(s);
    } catch (const InputError& e) {
      return e.pos().file + ": " + e.message();
    }
    return "no error";
  };
  ServeSettings s = busy_base(8);
  s.sets.clear();
  s.hw = "cloudmatrix384";
  s.nodes = 2;
  // Each copy its own UB fabric and memory pool (per supernode); the RDMA plane (per
  // cluster) one for both. Refused before 2026-12-01 (the copies would have shared them).
  const ServeSetup two = prepare_serve(s);
  CHECK(class_devices(two) == 768);
  CHECK(two.topology.system.supernodes == 2);
  CHECK(two.topology.instances(hw::Scope::kSupernode) == 2);
  CHECK(two.topology.instance_of(hw::Scope::kSupernode, 0, 383) == 0);
  CHECK(two.topology.instance_of(hw::Scope::kSupernode, 0, 384) == 1);
  CHECK(two.topology.instances(hw::Scope::kCluster) == 1);
  s.hw.clear();
  s.nodes = 0;
  CHECK(error_of(s) == "nodes: expected a whole number from 1 to 1024, got 0");
  s.nodes = 1025;
  CHECK(error_of(s) == "nodes: expected a whole number from 1 to 1024, got 1025");
}

}  // namespace tierflow::study
