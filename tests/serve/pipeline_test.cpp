// Pipeline parallelism in the serving engine: the layers split into stages as vLLM splits
// them, each stage's devices holding its layers' weights and KV, an iteration passing the
// stages one after the other with its activations sent between them, and as many batches
// in flight as there are stages.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/diagnostics.h"
#include "core/units.h"
#include "hw_models/fabric.h"
#include "hw_models/loader.h"
#include "sim/serve/engine.h"
#include "sim/serve/iteration_cost.h"
#include "traces/arch_loader.h"

using namespace tierflow;

namespace {

std::string config(const std::string& rel) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/configs/" + rel;
}

hw::Topology h100(std::vector<std::string> sets = {}) {
  return hw::load_topology(config("hw/h100-sxm-8gpu.yaml"),
                           hw::LoadOptions{std::move(sets), false});
}

serve::IterationCost cost(const traces::Arch& a, const hw::Topology& t, int tp, int pp) {
  traces::GenOptions g;
  g.tp = tp;
  const size_t tier = *t.tier_index(t.devices[0].local_tier);
  return serve::IterationCost(a, g, t, 0, tier, pp);
}

/// Requests of `tokens` prompt tokens (distinct blocks) and `out` output tokens, arriving at
/// the given times.
traces::RequestTrace trace_of(std::vector<int64_t> arrivals_ps, uint32_t tokens, uint32_t out) {
  traces::RequestTrace trace;
  trace.block_tokens = 512;
  trace.source = "test";
  uint64_t next_block = 1;
  for (const int64_t at : arrivals_ps) {
    traces::Request q;
    q.id = trace.requests.size();
    q.arrival_ps = at;
    q.prompt_tokens = tokens;
    q.output_tokens = out;
    for (uint32_t b = 0; b < (tokens + 511) / 512; ++b) q.blocks.push_back(next_block++);
    trace.requests.push_back(std::move(q));
  }
  return trace;
}

/// Llama-3-8B at TP 1 in two stages on an H100 server: one layer half per GPU.
struct TwoStages {
  hw::Topology t = h100();
  traces::Arch a = traces::load_arch(config("models/llama-3-8b.yaml"));
  traces::GenOptions g = [] {
    traces::GenOptions x;
    x.tp = 1;
    return x;
  }();
  serve::ServeOptions o = [] {
    serve::ServeOptions x;
    x.pp = 2;
    return x;
  }();
};

std::string error_of(const traces::RequestTrace& trace, const traces::Arch& a,
                     const traces::GenOptions& g, const hw::Topology& t,
                     const serve::ServeOptions& o) {
  try {
    (void)serve::check_setup(trace, a, g, t, o);
  } catch (const InputError& e) {
    return e.pos().file + ": " + e.message();
  }
  return "";
}

}  // namespace

TEST_CASE("pipeline stages: the layers split as vLLM splits them, each stage its weights and KV") {
  const hw::Topology t = h100();
  const traces::Arch a = traces::load_arch(config("models/llama-3-70b.yaml"));
  const serve::IterationCost one = cost(a, t, 2, 1);
  // 80 layers in 3: 26 each, the remainder one each to the stages before the last.
  const serve::IterationCost three = cost(a, t, 2, 3);
  REQUIRE(three.stages() == 3);
  CHECK(three.stage_layers(0) == 27);
  CHECK(three.stage_layers(1) == 27);
  CHECK(three.stage_layers(2) == 26);
  CHECK(cost(a, t, 2, 4).stage_layers(3) == 20);
  // One stage holds everything; the stages' parts add up to it (the head untied).
  CHECK(one.stage_weight_bytes(0) == one.weight_bytes());
  uint64_t weights = 0, kv = 0;
  for (int s = 0; s < 3; ++s) {
    weights += three.stage_weight_bytes(s);
    kv += three.stage_kv_bytes_per_token(s);
  }
  CHECK(weights == one.weight_bytes());
  CHECK(kv == one.kv_bytes_per_token());
  // The embedding on the first stage, the head on the last: with one layer fewer, the last
  // stage holds less than the others by a layer, more by the head.
  const uint64_t embed = static_cast<uint64_t>(a.vocab) * static_cast<uint64_t>(a.hidden) * 2 / 2;
  CHECK(three.stage_weight_bytes(0) > three.stage_weight_bytes(1));
  CHECK(three.stage_weight_bytes(0) - three.stage_weight_bytes(1) == embed);
  CHECK(three.weight_bytes() == three.stage_weight_bytes(0));
  CHECK(three.kv_bytes_per_token() == three.stage_kv_bytes_per_token(0));
  CHECK(three.stage_kv_bytes_per_token(2) * 27 == three.stage_kv_bytes_per_token(0) * 26);

  // A tied embedding is held by both ends (vLLM's last stage builds its own head).
  traces::Arch tied = a;
  tied.tied_embeddings = true;
  const serve::IterationCost tied_one = cost(tied, t, 2, 1);
  const serve::IterationCost tied_two = cost(tied, t, 2, 2);
  CHECK(tied_two.stage_weight_bytes(0) + tied_two.stage_weight_bytes(1) ==
        tied_one.weight_bytes() + embed);

  // Each stage's time: its layers', the embedding on the first, the head on the last; they
  // add up to the iteration's time on one stage.
  std::vector<serve::SeqWork> work = {{0, 1500, true}, {3000, 1, true}, {700, 1, true}};
  serve::IterationCost one_cost = cost(a, t, 2, 1);
  serve::IterationCost three_cost = cost(a, t, 2, 3);
  std::vector<serve::Time> stages;
  three_cost.stage_times(work, stages);
  REQUIRE(stages.size() == 3);
  CHECK(std::accumulate(stages.begin(), stages.end(), serve::Time{0}) == one_cost.time(work));
  CHECK(three_cost.time(work) == one_cost.time(work));
  CHECK(stages[0] > stages[2]);  // a layer more, and the embedding

  // More stages than layers leave one without: refused, naming pp.
  traces::GenOptions g;
  const size_t tier = *t.tier_index(t.devices[0].local_tier);
  CHECK_THROWS_WITH_AS(serve::IterationCost(a, g, t, 0, tier, 81),
                       "pp: expected 1 to 80 pipeline stages (one layer each at least) for "
                       "llama-3-70b, got 81",
                       InputError);
}

TEST_CASE("pipeline stages: a request's first token after every stage and the hops between") {
  // Llama-3-8B on two H100s, one layer half on each: one prompt of 1,024 tokens.
  const TwoStages x;
  const hw::Topology& t = x.t;
  const traces::Arch& a = x.a;
  const traces::GenOptions& g = x.g;
  const serve::ServeOptions& o = x.o;
  const traces::RequestTrace trace = trace_of({0}, 1024, 1);
  const serve::ServeResult r = serve::serve(trace, a, g, t, o);
  REQUIRE(r.pp == 2);
  CHECK(r.devices() == 2);
  serve::IterationCost c = cost(a, t, 1, 2);
  std::vector<serve::Time> stages;
  const serve::SeqWork work[] = {{0, 1024, true}};
  c.stage_times(work, stages);
  // The hop: the hidden states and the residual of 1,024 tokens, bf16, over NVLink.
  const hw::Fabric f(t);
  const hw::FabricPath* p = f.peer_path(*t.tier_index("hbm"), 0, 1);
  REQUIRE(p != nullptr);
  const Bytes sent{uint64_t{2} * 1024 * static_cast<uint64_t>(a.hidden) * 2};
  const serve::Time hop = p->route->setup.ps + transfer_time(sent, p->route->bandwidth).ps;
  CHECK(hop > 0);
  CHECK(r.requests[0].first_token - r.requests[0].arrival == stages[0] + hop + stages[1]);
  CHECK(r.requests[0].finish == r.requests[0].first_token);
  CHECK(r.replica_records[0].busy == stages[0] + hop + stages[1]);
  CHECK(r.replica_records[0].compute == (stages[0] + stages[1]) / 2);
}

TEST_CASE("pipeline stages: a second batch enters the first stage while the first is in the next") {
  TwoStages x;
  const hw::Topology& t = x.t;
  const traces::Arch& a = x.a;
  traces::GenOptions& g = x.g;
  serve::ServeOptions& o = x.o;
  // The second request arrives just after the first has started.
  const traces::RequestTrace trace = trace_of({0, 1000}, 4096, 1);
  const serve::ServeResult piped = serve::serve(trace, a, g, t, o);
  serve::IterationCost c = cost(a, t, 1, 2);
  std::vector<serve::Time> stages;
  const serve::SeqWork work[] = {{0, 4096, true}};
  c.stage_times(work, stages);
  const serve::RequestRecord& first = piped.requests[0];
  const serve::RequestRecord& second = piped.requests[1];
  // Admitted at once into a batch of its own, it waits only for the first stage.
  CHECK(second.scheduled == 1000);
  CHECK(first.first_token - first.arrival > stages[0] + stages[1]);
  // It leaves the first stage when both are through it, the second when it is through both
  // there: the first's token, then the slower stage's time more.
  CHECK(second.first_token == first.first_token + std::max(stages[0], stages[1]));
  CHECK(piped.iterations == 2);

  // Without stages (TP 2 on the same two devices) one batch at a time: the second waits.
  o.pp = 1;
  g.tp = 2;
  const serve::ServeResult tp = serve::serve(trace, a, g, t, o);
  CHECK(tp.requests[1].scheduled == tp.requests[0].first_token);
}

TEST_CASE("pipeline stages: TP 4 x PP 2 holds about what TP 8 holds; every request served") {
  const hw::Topology t = h100();
  const traces::Arch a = traces::load_arch(config("models/llama-3-70b.yaml"));
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=6/s,n=300,prompt=lognormal:3000:0.8,output=uniform:20:300,seed=5", {}, "test");
  traces::GenOptions g;
  g.tp = 8;
  serve::ServeOptions o;
  o.max_seqs = 64;
  const serve::ServeResult tp8 = serve::serve(trace, a, g, t, o);
  g.tp = 4;
  o.pp = 2;
  const serve::ServeResult piped = serve::serve(trace, a, g, t, o);
  CHECK(piped.devices() == 8);
  CHECK(static_cast<double>(piped.device_pool_blocks) ==
        doctest::Approx(static_cast<double>(tp8.device_pool_blocks)).epsilon(0.03));
  uint64_t out = 0;
  for (const serve::RequestRecord& q : piped.requests) {
    CHECK_FALSE(q.rejected);
    CHECK(q.first_token > q.arrival);
    CHECK(q.finish >= q.first_token);
    out += q.output_tokens;
  }
  CHECK(piped.replica_records[0].output_tokens == out);
  // Deterministic.
  const serve::ServeResult again = serve::serve(trace, a, g, t, o);
  REQUIRE(again.requests.size() == piped.requests.size());
  for (size_t i = 0; i < again.requests.size(); ++i) {
    CHECK(again.requests[i].finish == piped.requests[i].finish);
  }

  // Under a small pool, preemption by swap and KV held in DDR below the device: still
  // every request served, the swaps and loads each device's stage's shard.
  serve::ServeOptions tight = o;
  tight.preemption = serve::PreemptionKind::kSwap;
  tight.kv_tiers.push_back(serve::KvTier{"ddr", 1.0, uint64_t{64} << 30});
  const hw::Topology small = h100({"tiers.hbm.capacity=20GiB"});
  const serve::ServeResult s = serve::serve(trace, a, g, small, tight);
  CHECK(s.preemptions > 0);
  CHECK(s.swap_outs > 0);
  CHECK(s.transfers > 0);
  for (const serve::RequestRecord& q : s.requests) CHECK((q.finish > 0 || q.rejected));
}

TEST_CASE("pipeline stages, disaggregated: each stage's KV handed to the same stage") {
  // Llama-3-8B, TP 1 x PP 2: the prefill replica on devices 0 and 1, the decode replica on
  // 2 and 3; one request of three blocks, handed over NVLink stage to stage.
  TwoStages x;
  const hw::Topology& t = x.t;
  const traces::Arch& a = x.a;
  const traces::GenOptions& g = x.g;
  serve::ServeOptions& o = x.o;
  o.prefill_replicas = 1;
  o.replicas = 1;
  const traces::RequestTrace trace = trace_of({0}, 1536, 8);
  const serve::ServeResult r = serve::serve(trace, a, g, t, o);
  REQUIRE(r.handoffs == 1);
  CHECK(r.devices() == 4);
  CHECK(r.requests[0].decode_replica == 1);
  CHECK(r.requests[0].finish > r.requests[0].handed_over);
  const serve::IterationCost c = cost(a, t, 1, 2);
  const double blocks = static_cast<double>(r.handoff_blocks);
  CHECK(blocks == 3);
  double from0 = 0, from1 = 0;
  for (const serve::ResourceRecord& res : r.resources) {
    if (res.name == "hbm[0] read") from0 = res.bytes;
    if (res.name == "hbm[1] read") from1 = res.bytes;
  }
  CHECK(from0 ==
        doctest::Approx(blocks * 512 * static_cast<double>(c.stage_kv_bytes_per_token(0))));
  CHECK(from1 ==
        doctest::Approx(blocks * 512 * static_cast<double>(c.stage_kv_bytes_per_token(1))));
}

TEST_CASE("pipeline stages: what is not modelled, and stages no route joins, are refused") {
  const traces::Arch a = traces::load_arch(config("models/llama-3-8b.yaml"));
  const traces::RequestTrace trace = trace_of({0}, 512, 4);
  traces::GenOptions g;
  g.tp = 2;
  serve::ServeOptions o;
  o.pp = 2;
  o.replicas = 1;
  const hw::Topology t = h100();
  o.spec.tokens = 2;
  o.spec.accept = 0.5;
  CHECK(error_of(trace, a, g, t, o) ==
        "pp: pipeline parallelism is modelled without speculative decoding (the draft's passes "
        "and stages are not)");
  o.spec = {};
  o.pp = 0;
  CHECK(error_of(trace, a, g, t, o) == "pp: expected at least 1 pipeline stage, got 0");
  o.pp = 5;
  CHECK(error_of(trace, a, g, t, o) ==
        "pp: 1 replica of TP 2 x PP 5 needs 10 devices; 'h100-sxm-8gpu' has 8 of class 'h100'");
  // Two Ascend servers model no network between them: stage 0 cannot send to stage 1.
  const hw::Topology ascend =
      hw::load_topology(config("hw/ascend-910b-8npu.yaml"),
                        hw::LoadOptions{{"system.hosts=2", "devices.ascend910b.count=16"}, false});
  g.tp = 8;
  o.pp = 2;
  const std::string e = error_of(trace, a, g, ascend, o);
  CHECK(
      e.starts_with("pp: pipeline stage 0 sends its activations to stage 1 over the peer "
                    "route of 'hbm'"));
  CHECK(e.find("it models no scale-out network") != std::string::npos);
  // A TP group over both hosts all-reduces over their network; where groups must stay
  // within a host (the front end's own choice of TP), it is refused.
  const hw::Topology two = h100({"system.hosts=2", "devices.h100.count=16"});
  g.tp = 16;
  o.pp = 1;
  CHECK(error_of(trace, a, g, two, o).empty());
  o.tp_across_domains = false;
  CHECK(error_of(trace, a, g, two, o).starts_with("tp: a replica of TP 16"));
  o.tp_across_domains = true;
  g.tp = 8;
  o.pp = 2;
  CHECK(error_of(trace, a, g, two, o).empty());
}
