// The serving engine against what must hold whatever the model: an M/D/1 queue's waiting
// time, the bytes loads move, preemption that still serves every request, determinism.
#include "sim/serve/engine.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "hw_models/loader.h"
#include "hw_models/routes.h"
#include "traces/arch_loader.h"

using namespace tierflow;

namespace {

std::string config(const std::string& rel) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/configs/" + rel;
}

struct Setup {
  traces::Arch arch = traces::load_arch(config("models/llama-3-8b.yaml"));
  hw::Topology topo;
  traces::GenOptions gen;
  explicit Setup(std::vector<std::string> sets = {})
      : topo(hw::load_topology(config("hw/h100-sxm-8gpu.yaml"),
                               hw::LoadOptions{std::move(sets), false})) {}
};

/// The four-host H100 topology with one override.
hw::Topology h100_cxl(std::string set) {
  return hw::load_topology(config("hw/h100-cxl.yaml"), hw::LoadOptions{{std::move(set)}, false});
}

/// An empty trace of 512-token blocks whose hashes the test chooses.
traces::RequestTrace hand_trace() {
  traces::RequestTrace trace;
  trace.block_tokens = 512;
  trace.has_prefixes = true;
  trace.source = "test";
  return trace;
}

/// Appends a request arriving at `at_ps` whose prompt is `blocks`, whole, and 4 tokens out.
void add_request(traces::RequestTrace& trace, int64_t at_ps, std::vector<uint64_t> blocks) {
  traces::Request q;
  q.id = trace.requests.size();
  q.arrival_ps = at_ps;
  q.prompt_tokens = static_cast<uint32_t>(blocks.size() * 512);
  q.output_tokens = 4;
  q.blocks = std::move(blocks);
  trace.requests.push_back(std::move(q));
}

double mean_queue_s(const serve::ServeResult& r) {
  double sum = 0;
  for (const serve::RequestRecord& q : r.requests)
    sum += static_cast<double>(q.scheduled - q.arrival);
  return sum / static_cast<double>(r.requests.size()) / 1e12;
}

}  // namespace

TEST_CASE("serve: one server, fixed service, Poisson arrivals: the M/D/1 waiting time") {
  Setup s;
  serve::ServeOptions o;
  o.max_seqs = 1;  // one request at a time: a single server
  // The service time D of one request alone.
  const traces::RequestTrace one =
      traces::generate_requests("poisson,rate=1/s,n=1,prompt=fixed:512,output=fixed:4", {}, "test");
  const serve::ServeResult alone = serve::serve(one, s.arch, s.gen, s.topo, o);
  const double d = static_cast<double>(alone.requests[0].finish - alone.requests[0].arrival) / 1e12;
  REQUIRE(d > 0);
  // Load 0.5: W = rho D / (2 (1 - rho)) = D / 2.
  const double rate = 0.5 / d;
  const traces::RequestTrace trace = traces::generate_requests(
      fmt::format("poisson,rate={}/s,n=40000,prompt=fixed:512,output=fixed:4,seed=3", rate), {},
      "test");
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  for (const serve::RequestRecord& q : r.requests) {
    CHECK(q.finish - q.scheduled == alone.requests[0].finish - alone.requests[0].arrival);
  }
  const double want = 0.5 * d / (2 * (1 - 0.5));
  CHECK(mean_queue_s(r) == doctest::Approx(want).epsilon(0.05));
}

TEST_CASE("serve: requests arriving at one instant start in one iteration, not one alone") {
  Setup s;
  traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=1/s,n=5,prompt=fixed:1536,output=fixed:4", {}, "test");
  for (traces::Request& q : trace.requests) q.arrival_ps = 0;
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, serve::ServeOptions{});
  // 5 x 1536 tokens fit the 8192-token budget: every prompt in the first iteration, none
  // queued behind a batch of one.
  for (const serve::RequestRecord& q : r.requests) {
    CHECK(q.scheduled == 0);
    CHECK(q.first_token == r.requests[0].first_token);
  }
  CHECK(r.iterations == 4);  // the prefill (with the first token), then 3 decodes
}

TEST_CASE("serve: Little's law: the time-average queue is the arrival rate times the mean wait") {
  // Four running sequences at most, so requests queue; memory for all, so none is preempted
  // and a request waits once, from arrival to its first admission. The engine's waiting
  // count over time (its queue, sampled at every change) must integrate to the waits its
  // records give: L T = lambda W T.
  Setup s;
  serve::ServeOptions o;
  o.max_seqs = 4;
  o.record_series = true;
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=30/s,n=3000,prompt=uniform:64:1024,output=uniform:8:64,seed=4", {}, "test");
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(r.preemptions == 0);
  const auto waiting = std::find_if(r.series.begin(), r.series.end(), [](const serve::Series& x) {
    return x.name == "replica 0 waiting";
  });
  REQUIRE(waiting != r.series.end());
  REQUIRE_FALSE(waiting->time.empty());
  CHECK(waiting->value.back() == 0);  // the queue empties
  long double area = 0;  // request-picoseconds spent waiting, by the queue
  for (size_t i = 0; i + 1 < waiting->time.size(); ++i) {
    area += static_cast<long double>(waiting->value[i]) *
            static_cast<long double>(waiting->time[i + 1] - waiting->time[i]);
  }
  long double waits = 0;  // the same, by the records
  int64_t queued = 0;
  for (const serve::RequestRecord& q : r.requests) {
    waits += static_cast<long double>(q.scheduled - q.arrival);
    queued += q.scheduled > q.arrival ? 1 : 0;
  }
  CHECK(queued > 1000);  // a real queue, not a trivial one
  CHECK(static_cast<double>(area) == doctest::Approx(static_cast<double>(waits)).epsilon(1e-12));
}

TEST_CASE("serve: hits below the device are loaded, and the links carry exactly their bytes") {
  // A device pool of a few dozen blocks and a DDR tier: shared prefixes come back from DDR.
  // Blocks of 512 tokens, one a transfer, and of 16, up to 32 a transfer.
  for (const uint32_t block_tokens : {512U, 16U}) {
  CAPTURE(block_tokens);
  Setup s({"tiers.hbm.capacity=18.5GiB"});
  serve::ServeOptions o;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, 64ULL << 30}};
  traces::TraceOptions to;
  to.block_tokens = block_tokens;
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=2/s,n=300,prompt=uniform:256:2048,output=fixed:8,groups=4,system=4096,seed=5",
      to, "test");
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(r.block_tokens == block_tokens);
  REQUIRE(r.levels.size() == 2);
  const serve::LevelRecord& ddr = r.levels[1];
  const uint64_t loads = ddr.stats.moves_out[static_cast<size_t>(serve::MoveKind::kLoad)];
  CHECK(loads > 0);
  CHECK(ddr.hit_tokens > 0);
  // Every prompt token is a hit at one level or computed.
  uint64_t hits = 0, prompt = 0;
  for (const serve::RequestRecord& q : r.requests) {
    CHECK(q.finish > 0);
    prompt += q.prompt_tokens;
    for (uint64_t h : q.hit_tokens) hits += h;
  }
  CHECK(hits + r.computed_tokens == prompt);
  // The DDR port read the loads and nothing else (demotions write it).
  double ddr_read = 0;
  for (const serve::ResourceRecord& res : r.resources) {
    if (res.name.starts_with("ddr") && res.name.ends_with("read")) ddr_read += res.bytes;
  }
  const double block_bytes = static_cast<double>(r.kv_bytes_per_token * r.block_tokens);
  CHECK(ddr_read == doctest::Approx(static_cast<double>(loads) * block_bytes));
  // Small blocks travel together: fewer transfers than blocks moved.
  if (block_tokens == 16) CHECK(r.transfers < loads);
  }
}

TEST_CASE("serve: a Mooncake trace's blocks split into pages: every request served, more hits") {
  // The excerpt's 512-token blocks as 64-token pages: the pool holds pages, a full hit
  // computes its last page only, and the prefix index still matches whole trace blocks.
  Setup s({"tiers.hbm.capacity=40GiB"});
  serve::ServeOptions o;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, 256ULL << 30}};
  const std::string path =
      std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/serve/mooncake_conversation_200.jsonl";
  traces::TraceOptions pages;
  pages.block_tokens = 64;
  const traces::RequestTrace whole = traces::read_request_trace(path, {});
  const traces::RequestTrace split = traces::read_request_trace(path, pages);
  const serve::ServeResult a = serve::serve(whole, s.arch, s.gen, s.topo, o);
  const serve::ServeResult b = serve::serve(split, s.arch, s.gen, s.topo, o);
  CHECK(b.block_tokens == 64);
  CHECK(b.prompt_tokens == a.prompt_tokens);
  for (const serve::RequestRecord& q : b.requests) CHECK((q.rejected || q.finish >= q.first_token));
  // Prefixes match by whole trace blocks either way: pages never hit less.
  CHECK(b.computed_tokens <= a.computed_tokens);

  // A prompt served twice, 10 s apart: the second finds all of it cached, and computes its
  // last block again: 512 tokens, or one page of 64.
  const std::string twice =
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 2, \"hash_ids\": [1, 2]}\n"
      "{\"timestamp\": 10000, \"input_length\": 1024, \"output_length\": 2, \"hash_ids\": [1, 2]}\n";
  const serve::ServeResult ta =
      serve::serve(traces::parse_mooncake(twice, "twice.jsonl", {}), s.arch, s.gen, s.topo, o);
  const serve::ServeResult tb =
      serve::serve(traces::parse_mooncake(twice, "twice.jsonl", pages), s.arch, s.gen, s.topo, o);
  CHECK(ta.computed_tokens == 1024 + 512);
  CHECK(tb.computed_tokens == 1024 + 64);
}

TEST_CASE(
    "serve: a small device pool preempts and still serves every request, the same way twice") {
  Setup s({"tiers.hbm.capacity=19GiB"});
  serve::ServeOptions o;
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=20/s,n=200,prompt=uniform:512:4096,output=uniform:64:512,seed=9", {}, "test");
  const serve::ServeResult a = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(a.preemptions > 0);
  for (const serve::RequestRecord& q : a.requests) {
    CHECK((q.rejected || (q.first_token >= 0 && q.finish >= q.first_token)));
  }
  const serve::ServeResult b = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(a.requests.size() == b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    CHECK(a.requests[i].finish == b.requests[i].finish);
    CHECK(a.requests[i].preemptions == b.requests[i].preemptions);
  }
}

TEST_CASE("serve: prefills under way that hold the whole pool preempt instead of waiting forever") {
  // Four-turn chat sessions with long shared system prompts on a pool of 89 blocks: chunked
  // prefills admitted to fill what is free leave, at times, only prefills running with no
  // room for their next chunks. They must preempt (as decodes do) and every request finish.
  Setup s({"tiers.hbm.capacity=24GB"});
  serve::ServeOptions o;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, 64ULL << 30}};
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=2/s,n=2000,turns=4,think=30s,prompt=lognormal:600:0.8,"
      "output=lognormal:200:0.6,groups=8,system=2048,seed=11",
      {}, "test");
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(r.device_pool_blocks == 89);
  uint64_t finished = 0;
  for (const serve::RequestRecord& q : r.requests) {
    CHECK_FALSE(q.rejected);
    finished += q.finish >= q.first_token && q.first_token >= q.arrival ? 1U : 0U;
  }
  CHECK(finished == trace.requests.size());
  CHECK(r.preemptions > 0);
}

TEST_CASE("serve: loads before the prefill wait longer than loads layered with it") {
  // Two system prompts of 32 blocks each, a pool of 35: the other group's come from DDR.
  Setup s({"tiers.hbm.capacity=19GiB"});
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=1/s,n=100,prompt=fixed:512,output=fixed:2,groups=2,system=16384,seed=2", {},
      "test");
  serve::ServeOptions o;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, 64ULL << 30}};
  o.load = serve::LoadMode::kLayered;
  const serve::ServeResult layered = serve::serve(trace, s.arch, s.gen, s.topo, o);
  o.load = serve::LoadMode::kBefore;
  const serve::ServeResult before = serve::serve(trace, s.arch, s.gen, s.topo, o);
  serve::Time sum_layered = 0, sum_before = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    sum_layered += layered.requests[i].first_token - layered.requests[i].arrival;
    sum_before += before.requests[i].first_token - before.requests[i].arrival;
  }
  CHECK(layered.levels[1].hit_tokens > 0);
  CHECK(sum_before > sum_layered);
}

TEST_CASE("serve: the next turn of a session finds the previous turn's prompt and output cached") {
  Setup s;
  // Turns 60 s apart, each served in a few seconds: turn k+1's prompt is turn k's prompt and
  // output and a new message, and every whole block of the first two is a hit.
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=0.01/s,n=40,prompt=fixed:600,output=fixed:900,turns=4,think=60s,seed=4", {},
      "test");
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, serve::ServeOptions{});
  std::map<std::pair<uint64_t, uint32_t>, size_t> at;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    at[{trace.requests[i].session, trace.requests[i].turn}] = i;
  }
  int checked = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const traces::Request& q = trace.requests[i];
    if (q.turn == 0) continue;
    const traces::Request& prev = trace.requests[at.at({q.session, q.turn - 1})];
    REQUIRE(r.requests[i].arrival >= r.requests[at.at({q.session, q.turn - 1})].finish);
    const uint64_t whole = (prev.prompt_tokens + prev.output_tokens) / 512 * 512;
    CHECK(r.requests[i].hit_tokens[0] >= whole);
    ++checked;
  }
  CHECK(checked >= 20);
}

TEST_CASE("serve: a prompt block is a hit for others only once it is whole") {
  // Three requests of one prompt (4,096 tokens, eight 512-token blocks), 700 new tokens an
  // iteration. The first computes 700 a time; the second, queued behind it, is admitted in
  // the first's sixth iteration, when 3,500 tokens are computed: six whole blocks and 428
  // tokens of the seventh, which is no hit. The third, after both, finds seven (the last
  // block is always computed).
  Setup s;
  traces::RequestTrace trace = hand_trace();
  for (const int64_t at : {int64_t{0}, int64_t{1'000'000}, int64_t{100'000'000'000'000}})
    add_request(trace, at, {1, 2, 3, 4, 5, 6, 7, 8});
  serve::ServeOptions o;
  o.token_budget = 700;
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(r.requests.size() == 3);
  CHECK(r.requests[1].scheduled > r.requests[0].scheduled);
  CHECK(r.requests[1].hit_tokens[0] == 6 * 512);
  CHECK(r.requests[2].hit_tokens[0] == 7 * 512);
  CHECK(r.computed_tokens == 3 * 4096 - 13 * 512);
}

TEST_CASE("serve: swap preemption copies the victims' blocks out and back instead of recomputing") {
  Setup s({"tiers.hbm.capacity=19GiB"});
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=20/s,n=200,prompt=uniform:512:4096,output=uniform:64:512,seed=9", {}, "test");
  serve::ServeOptions o;
  const serve::ServeResult recompute = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(recompute.preemptions > 0);
  CHECK(recompute.recomputed_tokens > 0);
  CHECK(recompute.swap_tier.empty());
  CHECK(recompute.transfers == 0);  // no KV tier: nothing moves but swaps

  o.preemption = serve::PreemptionKind::kSwap;
  const serve::ServeResult swap = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(swap.swap_tier == "ddr");
  CHECK(swap.swap_blocks == (uint64_t{4} << 30) / (swap.kv_bytes_per_token * swap.block_tokens));
  REQUIRE(swap.swap_outs > 0);
  CHECK(swap.swap_outs + swap.swap_fallbacks == swap.preemptions);
  CHECK(swap.swap_fallbacks == 0);
  CHECK(swap.recomputed_tokens == 0);  // nothing is computed twice
  CHECK(swap.swapped_in_blocks <= swap.swapped_blocks);
  CHECK(swap.transfers == swap.swapped_blocks + swap.swapped_in_blocks);
  // Every request is served whole; the links carry exactly the swapped bytes.
  for (const serve::RequestRecord& q : swap.requests) {
    CHECK((q.rejected || q.finish >= q.first_token));
  }
  const double block_bytes = static_cast<double>(swap.kv_bytes_per_token * swap.block_tokens);
  double ddr_write = 0, ddr_read = 0;
  for (const serve::ResourceRecord& res : swap.resources) {
    if (res.name == "ddr[0] write") ddr_write = res.bytes;
    if (res.name == "ddr[0] read") ddr_read = res.bytes;
  }
  CHECK(ddr_write == doctest::Approx(static_cast<double>(swap.swapped_blocks) * block_bytes));
  CHECK(ddr_read == doctest::Approx(static_cast<double>(swap.swapped_in_blocks) * block_bytes));
  // Same inputs, same run.
  const serve::ServeResult again = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(again.requests.size() == swap.requests.size());
  for (size_t i = 0; i < swap.requests.size(); ++i) {
    CHECK(again.requests[i].finish == swap.requests[i].finish);
  }

  // A swap space of one block takes the smallest victims only; the rest are recomputed.
  o.swap_bytes = swap.kv_bytes_per_token * swap.block_tokens;
  const serve::ServeResult small = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(small.swap_blocks == 1);
  CHECK(small.swap_fallbacks > 0);
  CHECK(small.swap_outs + small.swap_fallbacks == small.preemptions);
  CHECK(small.swapped_blocks == small.swap_outs);  // one block each
}

TEST_CASE("serve: a swap space the topology cannot give is refused, naming the setting") {
  Setup s;
  const traces::RequestTrace trace =
      traces::generate_requests("poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2", {}, "test");
  serve::ServeOptions o;
  o.preemption = serve::PreemptionKind::kSwap;
  const auto error_at = [&](const serve::ServeOptions& x) -> std::string {
    try {
      serve::serve(trace, s.arch, s.gen, s.topo, x);
    } catch (const InputError& e) {
      return e.pos().file + ": " + e.message();
    }
    return "no error";
  };
  o.swap_tier = "dram";
  CHECK(error_at(o).starts_with("swap_tier: no tier 'dram'"));
  o.swap_tier = "hbm";
  CHECK(error_at(o).starts_with("swap_tier: 'hbm' is the device tier"));
  o.swap_tier = "";
  o.swap_bytes = 1;
  CHECK(error_at(o).starts_with("swap_space: 1B of swap space per device holds no block"));
  // A pebibyte per device: more than the socket's DDR has.
  o.swap_bytes = uint64_t{1} << 50;
  CHECK(error_at(o).find("does not fit") != std::string::npos);
}

namespace {

/// The time a copy of `bytes` takes alone over the topology's peer route of tier 0.
double peer_copy_ps(const hw::Topology& t, double bytes) {
  const hw::Route* peer = t.route(0, 0);
  REQUIRE(peer != nullptr);
  return static_cast<double>(peer->setup.ps) + bytes / peer->bandwidth.bytes_per_s * 1e12;
}

/// One request of a 4,096-token prompt and 4 tokens out.
traces::RequestTrace four_k() {
  return traces::generate_requests("poisson,rate=1/s,n=1,prompt=fixed:4096,output=fixed:4", {},
                                   "test");
}

/// four_k() served by one prefill and one decode replica (devices 0 and 1).
serve::ServeResult handed_over_once(const Setup& s) {
  serve::ServeOptions o;
  o.prefill_replicas = 1;
  serve::ServeResult r = serve::serve(four_k(), s.arch, s.gen, s.topo, o);
  REQUIRE(r.requests.size() == 1);
  return r;
}

double p99_tpot_s(const serve::ServeResult& r) {
  std::vector<double> v;
  for (const serve::RequestRecord& q : r.requests) {
    if (q.output_tokens > 1)
      v.push_back(static_cast<double>(q.finish - q.first_token) / (q.output_tokens - 1) / 1e12);
  }
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::ceil(0.99 * static_cast<double>(v.size()))) - 1];
}

}  // namespace

TEST_CASE("serve, disaggregated: the prefill replica gives the first token, NVLink the KV") {
  Setup s;
  const serve::ServeResult c = serve::serve(four_k(), s.arch, s.gen, s.topo, {});
  const serve::ServeResult r = handed_over_once(s);
  const serve::RequestRecord& q = r.requests[0];
  CHECK(r.prefill_replicas == 1);
  CHECK(r.replicas == 1);
  CHECK(q.replica == 0);
  CHECK(q.decode_replica == 1);
  // The prompt's iteration is the one a colocated replica runs.
  CHECK(q.first_token == c.requests[0].first_token);
  // Its 8 blocks (4,096 tokens of 512) go device 0 -> device 1 over the peer route, one
  // transfer a block, all at once: the route's setup, then 512 MiB at its bandwidth.
  CHECK(r.handoffs == 1);
  CHECK(r.handoff_blocks == 8);
  const double bytes = 4096.0 * static_cast<double>(r.kv_bytes_per_token);
  CHECK(bytes == 512.0 * 1024 * 1024);
  const double copy_ps = peer_copy_ps(s.topo, bytes);
  CHECK(static_cast<double>(q.handed_over - q.first_token) ==
        doctest::Approx(copy_ps).epsilon(1e-6));
  // Then the same three decode steps as colocated.
  CHECK(q.finish - q.handed_over == c.requests[0].finish - c.requests[0].first_token);
  double out = 0, in = 0;
  for (const serve::ResourceRecord& x : r.resources) {
    if (x.name == "nvlink[0] hbm->nvswitch") out = x.bytes;
    if (x.name == "nvlink[1] nvswitch->hbm") in = x.bytes;
  }
  CHECK(out == doctest::Approx(bytes));
  CHECK(in == doctest::Approx(bytes));
  // A one-token request ends on its prefill replica: nothing is handed over.
  const traces::RequestTrace single = traces::generate_requests(
      "poisson,rate=1/s,n=1,prompt=fixed:4096,output=fixed:1", {}, "test");
  serve::ServeOptions o;
  o.prefill_replicas = 1;
  const serve::ServeResult r1 = serve::serve(single, s.arch, s.gen, s.topo, o);
  CHECK(r1.handoffs == 0);
  CHECK(r1.requests[0].decode_replica == -1);
  CHECK(r1.requests[0].finish == r1.requests[0].first_token);
}

TEST_CASE("serve, disaggregated: between two servers the KV crosses their NICs, not NVLink") {
  // Two servers of one H100 each: the prefill replica on the first, the decode replica on
  // the second. Their NVSwitches are per host, so the hand-over takes the wider peer route,
  // over each GPU's PCIe and ConnectX-7 through the InfiniBand fabric.
  Setup s({"system.hosts=2", "devices.h100.count=2"});
  const size_t hbm = *s.topo.tier_index("hbm");
  REQUIRE(s.topo.wider_peers[hbm].size() == 1);
  const hw::Route& net = s.topo.wider_peers[hbm][0];
  CHECK(hw::describe_route(s.topo, net) ==
        "hbm -[gpu-pcie]-> rc -[nic]-> ib -[nic]-> rc -[gpu-pcie]-> hbm");
  CHECK(net.bandwidth.bytes_per_s == doctest::Approx(47e9));  // 400 Gb/s x 0.94
  const serve::ServeResult r = handed_over_once(s);
  const serve::RequestRecord& q = r.requests[0];
  CHECK(q.decode_replica == 1);
  // 8 blocks, one transfer each, all at once: the route's setup, then 512 MiB at 47 GB/s
  // (11.4 ms, where NVLink took 1.4 ms).
  const double bytes = 4096.0 * static_cast<double>(r.kv_bytes_per_token);
  const double copy_ps = static_cast<double>(net.setup.ps) + bytes / 47e9 * 1e12;
  CHECK(static_cast<double>(q.handed_over - q.first_token) ==
        doctest::Approx(copy_ps).epsilon(1e-6));
  CHECK(copy_ps > 8 * peer_copy_ps(s.topo, bytes));
  double nic_out = 0, nic_in = 0, pcie_out = 0, nvlink = 0;
  for (const serve::ResourceRecord& x : r.resources) {
    if (x.name == "nic[0] rc->ib") nic_out = x.bytes;
    if (x.name == "nic[1] ib->rc") nic_in = x.bytes;
    if (x.name == "gpu-pcie[0] hbm->rc") pcie_out = x.bytes;
    if (x.name.starts_with("nvlink")) nvlink += x.bytes;
  }
  CHECK(nic_out == doctest::Approx(bytes));
  CHECK(nic_in == doctest::Approx(bytes));
  CHECK(pcie_out == doctest::Approx(bytes));
  CHECK(nvlink == 0);
}

TEST_CASE("serve, disaggregated: every request served, decodes free of prefills, deterministic") {
  Setup s;
  // Long prompts, moderate outputs: colocated, every prefill chunk slows the decodes that
  // share its iteration; disaggregated, decode iterations hold decodes alone.
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=3/s,n=300,prompt=uniform:4096:12288,output=uniform:64:256,seed=11", {}, "test");
  serve::ServeOptions colo;
  colo.replicas = 3;
  serve::ServeOptions o;
  o.prefill_replicas = 1;
  o.replicas = 2;
  const serve::ServeResult c = serve::serve(trace, s.arch, s.gen, s.topo, colo);
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  std::map<int32_t, int> per_decode;
  for (const serve::RequestRecord& q : r.requests) {
    CHECK(q.finish > 0);
    CHECK(q.replica == 0);
    CHECK(q.handed_over >= q.first_token);
    CHECK(q.finish > q.handed_over);
    ++per_decode[q.decode_replica];
  }
  CHECK(r.handoffs == 300);
  // The least loaded decode replica takes each: both get a fair share.
  REQUIRE(per_decode.size() == 2);
  CHECK(per_decode[1] > 100);
  CHECK(per_decode[2] > 100);
  CHECK(p99_tpot_s(r) < p99_tpot_s(c));
  // The same inputs, the same run.
  const serve::ServeResult again = serve::serve(trace, s.arch, s.gen, s.topo, o);
  for (size_t i = 0; i < r.requests.size(); ++i) {
    CHECK(again.requests[i].finish == r.requests[i].finish);
    CHECK(again.requests[i].handed_over == r.requests[i].handed_over);
  }
}

TEST_CASE("serve, disaggregated: a full decode replica holds hand-overs back; the copy waits") {
  Setup s;
  // Two sequences at most per replica, long outputs: the decode replica is the bottleneck,
  // and prompts done on the prefill replica wait for a place there.
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=20/s,n=40,prompt=fixed:1024,output=fixed:400,seed=6", {}, "test");
  serve::ServeOptions o;
  o.prefill_replicas = 1;
  o.max_seqs = 2;
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  // Two blocks of 512 tokens a request: the copy alone (two transfers side by side).
  const double copy_ps = peer_copy_ps(s.topo, 1024.0 * static_cast<double>(r.kv_bytes_per_token));
  int waited = 0;
  for (const serve::RequestRecord& q : r.requests) {
    CHECK(q.first_token <= q.handoff_admitted);
    waited += q.handoff_admitted > q.first_token ? 1 : 0;
    // Nothing else shares NVLink: once admitted, the copy takes its time alone.
    CHECK(static_cast<double>(q.handed_over - q.handoff_admitted) ==
          doctest::Approx(copy_ps).epsilon(1e-6));
  }
  CHECK(waited > 30);
}

TEST_CASE("serve, disaggregated: a decode replica holding a prefix is not sent it again") {
  Setup s;
  // Two-turn sessions: turn 2's prompt starts with turn 1's prompt and output, which the
  // one decode replica still caches when turn 2 is handed over.
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=1/s,n=40,turns=2,think=30s,prompt=fixed:2048,output=fixed:600,seed=2", {},
      "test");
  serve::ServeOptions o;
  o.prefill_replicas = 1;
  const serve::ServeResult r = serve::serve(trace, s.arch, s.gen, s.topo, o);
  uint64_t blocks = 0;
  for (const serve::RequestRecord& q : r.requests) {
    CHECK(q.finish > 0);
    blocks += (q.prompt_tokens + r.block_tokens - 1) / r.block_tokens;
  }
  CHECK(r.handoffs == 40);
  CHECK(r.handoff_blocks < blocks);
  CHECK(r.handoff_blocks >= 20 * 4);  // at least turn 1's four blocks each
}

TEST_CASE(
    "serve, disaggregated: the decode router: by prefix a turn goes where the last one "
    "is, in turn alternately") {
  Setup s;
  // Two-turn sessions over two decode replicas, busy enough that their loads differ: by
  // load alone turn 2 often lands on the replica that does not hold turn 1's KV.
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=4/s,n=200,turns=2,think=5s,prompt=fixed:2048,output=fixed:300,seed=3", {},
      "test");
  serve::ServeOptions o;
  o.prefill_replicas = 1;
  o.replicas = 2;
  const serve::ServeResult by_load = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(by_load.decode_router == serve::RouterKind::kLeastLoaded);
  o.decode_router = serve::RouterKind::kPrefix;
  const serve::ServeResult by_prefix = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(by_prefix.decode_router == serve::RouterKind::kPrefix);
  o.decode_router = serve::RouterKind::kRoundRobin;
  const serve::ServeResult in_turn = serve::serve(trace, s.arch, s.gen, s.topo, o);
  // In turn: the 200 hand-overs alternate, 100 to each decode replica whatever its load.
  std::map<int32_t, int> in_turn_per;
  for (const serve::RequestRecord& q : in_turn.requests) ++in_turn_per[q.decode_replica];
  CHECK(in_turn_per == std::map<int32_t, int>{{1, 100}, {2, 100}});
  std::map<int32_t, int> per_decode;
  for (const serve::RequestRecord& q : by_prefix.requests) {
    CHECK(q.finish > 0);
    ++per_decode[q.decode_replica];
  }
  CHECK(by_prefix.handoffs == by_load.handoffs);
  CHECK(by_prefix.handoff_blocks < by_load.handoff_blocks);
  // Both decode replicas still serve: a first turn (no prefix anywhere) goes by load.
  REQUIRE(per_decode.size() == 2);
  CHECK(per_decode[1] > 40);
  CHECK(per_decode[2] > 40);
  // A cache-only replay has no arrival-time state to route by: it refuses both routers
  // that need one, where it sent requests in turn without a word.
  serve::ServeOptions two;
  two.replicas = 2;
  for (const serve::RouterKind k : {serve::RouterKind::kPrefix, serve::RouterKind::kLeastLoaded}) {
    two.router = k;
    CHECK_THROWS_WITH_AS(serve::cache_only(trace, s.arch, s.gen, s.topo, two),
                         doctest::Contains("a cache-only replay (no time) does not have"),
                         InputError);
  }
  two.router = serve::RouterKind::kRoundRobin;
  CHECK(serve::cache_only(trace, s.arch, s.gen, s.topo, two).prompt_tokens > 0);
}

TEST_CASE("serve, disaggregated: devices the peer route cannot join are refused") {
  Setup s;
  const traces::RequestTrace trace =
      traces::generate_requests("poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2", {}, "test");
  const auto error_at = [&](const hw::Topology& t, const serve::ServeOptions& x) -> std::string {
    try {
      serve::serve(trace, s.arch, s.gen, t, x);
    } catch (const InputError& e) {
      return e.pos().file + ": " + e.message();
    }
    return "no error";
  };
  serve::ServeOptions o;
  o.prefill_replicas = 4;
  o.replicas = 5;
  CHECK(error_at(s.topo, o) ==
        "prefill_replicas: 4 prefill and 5 decode replicas of TP 1 need 9 devices; "
        "'h100-sxm-8gpu' has 8 of class 'h100'");
  serve::ServeOptions none;
  none.replicas = 0;
  CHECK(error_at(s.topo, none) == "replicas: expected at least 1 replicas, got 0");
  none.replicas = 1;
  none.prefill_replicas = -1;
  CHECK(error_at(s.topo, none) == "prefill_replicas: expected at least 0 replicas, got -1");
  // Four hosts of 8 GPUs, NVSwitch per host: a TP-8 replica on each host reaches another
  // over their NICs; with the fabric per host (a network joining no hosts) it reaches none.
  traces::GenOptions tp8;
  tp8.tp = 8;
  o.prefill_replicas = 1;
  o.replicas = 1;
  const hw::Topology cxl = hw::load_topology(config("hw/h100-cxl.yaml"));
  CHECK(serve::serve(trace, s.arch, tp8, cxl, o).handoffs == 2);
  const hw::Topology apart = h100_cxl("switches.ib.per=host");
  std::string e;
  try {
    serve::serve(trace, s.arch, tp8, apart, o);
  } catch (const InputError& x) {
    e = x.pos().file + ": " + x.message();
  }
  CHECK(e.starts_with("prefill_replicas: disaggregated prefill hands each request's KV cache"));
  CHECK(e.find("none from device 0 to device 8") != std::string::npos);
  // Its network is one per host here, which joins no two hosts: one per cluster would.
  CHECK(
      e.ends_with("it models no scale-out network to join them: a switch `per: cluster` "
                  "that each device reaches over a link of its own (docs/hardware.md)"));
  // No peer route at all (four PCIe A100s).
  const hw::Topology a100 = hw::load_topology(config("hw/a100-nvme-bounce.yaml"));
  CHECK(error_at(a100, o).ends_with("and 'a100-nvme-bounce' has none"));
}

TEST_CASE("serve: a replica's devices must reach one another for its TP collectives") {
  Setup s;
  const traces::RequestTrace trace =
      traces::generate_requests("poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2", {}, "test");
  const auto error_at = [&](const hw::Topology& t, int tp, serve::ServeOptions x = {}) {
    traces::GenOptions g;
    g.tp = tp;
    try {
      serve::serve(trace, s.arch, g, t, x);
    } catch (const InputError& e) {
      return e.pos().file + ": " + e.message();
    }
    return std::string("no error");
  };
  // Four hosts of 8 GPUs, NVSwitch per host: TP 8 runs on each host, TP 16 spans two,
  // its all-reduces over the InfiniBand network between them (unless refused, as the front
  // end's own choice of TP is).
  const hw::Topology cxl = hw::load_topology(config("hw/h100-cxl.yaml"));
  serve::ServeOptions four;
  four.replicas = 4;
  CHECK(error_at(cxl, 8, four) == "no error");
  CHECK(error_at(cxl, 16) == "no error");
  serve::ServeOptions within;
  within.tp_across_domains = false;
  CHECK(error_at(cxl, 16, within) ==
        "tp: a replica of TP 16: on devices 0 to 15, its collectives would cross 'ib' from "
        "device 0 to device 8, and collectives are timed over the peer route of 'hbm' alone: a "
        "group must stay among the devices one 'nvswitch' joins; or pipeline stages take the "
        "same devices, a group each (pp: 2 stages of TP 8)");
  // Without the network joining the hosts: none joins them, and the remedy is said.
  const hw::Topology apart = h100_cxl("switches.ib.per=host");
  CHECK(error_at(apart, 16) ==
        "tp: a replica of TP 16: on devices 0 to 15, its collectives cross the peer route of "
        "'hbm', and 'h100-cxl' has none from device 0 to device 8 (they reach no switch in "
        "common); a narrower tensor parallelism keeps each group among the devices one switch "
        "joins");
  // A prefill replica of its own TP is named by it.
  serve::ServeOptions pd;
  pd.prefill_replicas = 1;
  pd.prefill_tp = 16;
  CHECK(error_at(cxl, 8, pd) == "no error");
  pd.tp_across_domains = false;
  CHECK(error_at(cxl, 8, pd).starts_with("prefill_tp: a replica of TP 16: on devices 0 to 15"));
  // Six GPUs a host: TP 8 takes 6 of host 0 and 2 of host 1, refused with stages whose
  // groups each stay within a host; of two TP 4 replicas, the first lies within host 0 and
  // the second over both, which would time them alike: refused.
  const hw::Topology six = h100_cxl("devices.h100.count=24");
  CHECK(error_at(six, 8) ==
        "tp: a replica of TP 8: on devices 0 to 7, 6 of its ranks are among the devices one "
        "'nvswitch' joins and 2 among another: a group over several must have as many ranks in "
        "each, its collectives crossing from each to the next rank to rank; or pipeline stages "
        "take the same devices, a group each (pp: 4 stages of TP 2)");
  serve::ServeOptions two;
  two.replicas = 2;
  CHECK(error_at(six, 4, two) ==
        "tp: a replica of TP 4: on devices 4 to 7, its group spans 2 scale-up domains (2 "
        "devices each) where the first's spans 1: every group of a kind must lie alike; or "
        "pipeline stages take the same devices, a group each (pp: 2 stages of TP 2)");
  // No peer route at all (four PCIe A100s): TP 1 only.
  const hw::Topology a100 = hw::load_topology(config("hw/a100-nvme-bounce.yaml"));
  CHECK(error_at(a100, 1) == "no error");
  CHECK(error_at(a100, 2) ==
        "tp: a replica of TP 2: its collectives cross the peer route of 'hbm', and "
        "'a100-nvme-bounce' has none: TP 1");
}

TEST_CASE(
    "serve: KV tier instances that TP groups straddle unevenly are divided, not counted twice") {
  // Six GPUs, three a socket; replicas of TP 2: devices 0-1 (socket 0), 2-3 (both), 4-5
  // (socket 1). Socket 0's DDR serves two levels, ddr[0] and ddr[0,1]: each gets the part of
  // its devices there (2 of 3, 1 of 3), so that the blocks they hold fit the socket once.
  Setup s({"devices.h100.count=6"});
  traces::GenOptions tp2;
  tp2.tp = 2;
  serve::ServeOptions o;
  o.replicas = 3;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, 0}};
  const traces::RequestTrace trace =
      traces::generate_requests("poisson,rate=1/s,n=4,prompt=fixed:512,output=fixed:2", {}, "test");
  const serve::ServeResult r = serve::serve(trace, s.arch, tp2, s.topo, o);
  REQUIRE(r.levels.size() == 6);
  CHECK(r.levels[3].name == "ddr[0]");
  CHECK(r.levels[4].name == "ddr[0,1]");
  CHECK(r.levels[5].name == "ddr[1]");
  const uint64_t shard = r.kv_bytes_per_token * r.block_tokens;
  const uint64_t usable = s.topo.usable(*s.topo.tier_index("ddr"));
  const uint64_t a = r.levels[3].capacity_blocks, b = r.levels[4].capacity_blocks;
  const uint64_t c = r.levels[5].capacity_blocks;
  // Socket 0 holds 2 shards of each ddr[0] block and 1 of each ddr[0,1] block; socket 1 the
  // same with ddr[1].
  CHECK((2 * a + b) * shard <= usable);
  CHECK((2 * c + b) * shard <= usable);
  // Each device an equal part, a third of its socket's DDR: every level the same number of
  // blocks, and the sockets full but for rounding.
  CHECK(a == b);
  CHECK(c == a);
  CHECK((2 * a + b + 3) * shard > usable);
  // Aligned groups (TP 1, four replicas a socket) keep the whole socket each.
  serve::ServeOptions one;
  one.replicas = 6;
  one.kv_tiers = o.kv_tiers;
  const serve::ServeResult w = serve::serve(trace, s.arch, s.gen, s.topo, one);
  REQUIRE(w.levels.size() == 8);
  CHECK(w.levels[6].capacity_blocks == usable / (w.kv_bytes_per_token * w.block_tokens));
}

TEST_CASE("serve, disaggregated: prefill at TP 4, decode at TP 2: each shard from its sources") {
  // Llama-3-70B on an H200 node: one prefill replica of 4 GPUs, two decode replicas of 2.
  traces::Arch arch = traces::load_arch(config("models/llama-3-70b.yaml"));
  const hw::Topology topo = hw::load_topology(config("hw/h200-sxm-8gpu.yaml"));
  traces::GenOptions tp2, tp4;
  tp2.tp = 2;
  tp4.tp = 4;
  const traces::RequestTrace one = traces::generate_requests(
      "poisson,rate=1/s,n=1,prompt=fixed:4096,output=fixed:4", {}, "test");
  serve::ServeOptions o;
  o.prefill_replicas = 1;
  o.prefill_tp = 4;
  o.replicas = 2;
  const serve::ServeResult r = serve::serve(one, arch, tp2, topo, o);
  CHECK(r.tp == 2);
  CHECK(r.prefill_tp == 4);
  // The prompt as one TP-4 replica computes it; the decode steps as one TP-2 replica's.
  const serve::ServeResult p4 = serve::serve(one, arch, tp4, topo, serve::ServeOptions{});
  const serve::ServeResult d2 = serve::serve(one, arch, tp2, topo, serve::ServeOptions{});
  const serve::RequestRecord& q = r.requests[0];
  CHECK(q.first_token == p4.requests[0].first_token);
  CHECK(q.finish - q.handed_over == d2.requests[0].finish - d2.requests[0].first_token);
  CHECK(r.prefill_weight_bytes == p4.weight_bytes);
  CHECK(r.prefill_pool_blocks == p4.device_pool_blocks);
  CHECK(r.weight_bytes == d2.weight_bytes);
  CHECK(r.device_pool_blocks == d2.device_pool_blocks);
  // Devices 0-3 prefill, 4-5 and 6-7 decode; the request decodes on replica 1 (devices 4-5).
  // Device 4 holds the first half of the KV heads, which prefill devices 0 and 1 hold: each
  // sends a quarter of a block, and device 4 receives half of each block.
  CHECK(q.decode_replica == 1);
  const double block = static_cast<double>(d2.kv_bytes_per_token) * 2 * 512;  // all heads
  std::map<std::string, double> bytes;
  for (const serve::ResourceRecord& x : r.resources) bytes[x.name] = x.bytes;
  for (const char* out : {"nvlink[0] hbm->nvswitch", "nvlink[1] hbm->nvswitch",
                          "nvlink[2] hbm->nvswitch", "nvlink[3] hbm->nvswitch"}) {
    CAPTURE(out);
    CHECK(bytes[out] == doctest::Approx(8 * block / 4));
  }
  CHECK(bytes["nvlink[4] nvswitch->hbm"] == doctest::Approx(8 * block / 2));
  CHECK(bytes["nvlink[5] nvswitch->hbm"] == doctest::Approx(8 * block / 2));
  CHECK(bytes.count("nvlink[6] nvswitch->hbm") == 0);
  // A prefill TP the model refuses, or one whose replica cannot hold the weights, names
  // prefill_tp.
  const auto error_at = [&](int ptp, const hw::Topology& t) -> std::string {
    serve::ServeOptions x = o;
    x.prefill_tp = ptp;
    try {
      serve::serve(one, arch, tp2, t, x);
    } catch (const InputError& e) {
      return e.pos().file + ": " + e.message();
    }
    return "no error";
  };
  CHECK(error_at(3, topo) ==
        "prefill_tp: tp 3 does not divide the 64 attention heads of llama-3-70b");
  // 131 GiB of weights on one 80 GB H100.
  const hw::Topology h100 = hw::load_topology(config("hw/h100-sxm-8gpu.yaml"));
  const std::string e = error_at(1, h100);
  CHECK(e.starts_with("prefill_tp: the weights of llama-3-70b"));
  CHECK(e.find("per device of a prefill replica") != std::string::npos);
}

TEST_CASE("serve: the kv-aware router counts a hit below the device as its load's time") {
  // Two replicas of Llama-3-8B on devices 0 and 1, which share socket 0's DDR, written
  // through. A (16 blocks) computes on replica 0 and its blocks reach DDR. At one instant
  // P (4 new blocks) takes replica 0 (a tie: the lower number), then X, A's 16 blocks and
  // one more: on replica 0 its device holds them, behind P's 2,048 tokens; on replica 1
  // DDR holds them. Over PCIe the 16 loads are worth a few hundred prompt tokens, so X goes
  // to replica 1; over a PCIe of 1 GB/s each takes seconds, worth more than a block's
  // tokens, so X waits behind P on replica 0.
  traces::RequestTrace trace = hand_trace();
  std::vector<uint64_t> a;
  for (uint64_t h = 1; h <= 16; ++h) a.push_back(h);
  add_request(trace, 0, a);
  add_request(trace, 10'000'000'000'000, {200, 201, 202, 203});
  std::vector<uint64_t> x = a;
  x.push_back(17);
  add_request(trace, 10'000'000'000'000, x);
  serve::ServeOptions o;
  o.replicas = 2;
  o.router = serve::RouterKind::kKvAware;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, uint64_t{64} << 30, serve::EvictionKind::kLru,
                              serve::AdmissionKind::kAll, serve::WriteKind::kThrough}};
  const auto run = [&](std::vector<std::string> sets) {
    Setup s(std::move(sets));
    return serve::serve(trace, s.arch, s.gen, s.topo, o);
  };
  const serve::ServeResult fast = run({});
  REQUIRE(fast.requests.size() == 3);
  CHECK(fast.requests[0].replica == 0);
  CHECK(fast.requests[1].replica == 0);
  CHECK(fast.requests[2].replica == 1);
  CHECK(fast.requests[2].hit_tokens[1] == 16 * 512);  // from DDR
  const serve::ServeResult slow = run({"links.gpu-pcie.bandwidth=1GB/s"});
  REQUIRE(slow.requests.size() == 3);
  CHECK(slow.requests[1].replica == 0);
  CHECK(slow.requests[2].replica == 0);
  CHECK(slow.requests[2].hit_tokens[0] == 16 * 512);  // on the device
}

TEST_CASE("serve: the kv-aware router weighs a replica's cached prefix against its backlog") {
  Setup s;
  // Blocks of 512 tokens, hashes chosen by hand. A (16 blocks) and then B (A's blocks and
  // two more) arrive on idle replicas; then, at one instant, C1 (32 new blocks) and C2 (B's
  // blocks and two more).
  traces::RequestTrace trace = hand_trace();
  const auto request = [&](int64_t at_s, std::vector<uint64_t> blocks) {
    add_request(trace, at_s * 1'000'000'000'000, std::move(blocks));
  };
  const auto range = [](uint64_t from, uint64_t to) {
    std::vector<uint64_t> v;
    for (uint64_t h = from; h <= to; ++h) v.push_back(h);
    return v;
  };
  request(0, range(1, 16));
  request(10, range(1, 18));
  request(20, range(100, 131));
  std::vector<uint64_t> c2 = range(1, 18);
  c2.push_back(19);
  c2.push_back(20);
  request(20, c2);
  serve::ServeOptions o;
  o.replicas = 2;
  o.router = serve::RouterKind::kKvAware;
  const serve::ServeResult kv = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(kv.requests.size() == 4);
  // Idle replicas: B goes where A's 16 blocks are and computes only its two new ones.
  CHECK(kv.requests[0].replica == 0);
  CHECK(kv.requests[1].replica == 0);
  CHECK(kv.requests[1].hit_tokens[0] == 16 * 512);
  // Idle again, C1 takes replica 0 (a tie: the lower number). C2 finds 18 of its 20 blocks
  // there, behind C1's 16,384 tokens to compute: 17,408 tokens of work against 10,240 on
  // replica 1, which it takes.
  CHECK(kv.requests[2].replica == 0);
  CHECK(kv.requests[3].replica == 1);
  // The prefix router looks at the prefix alone: C2 waits behind C1.
  o.router = serve::RouterKind::kPrefix;
  const serve::ServeResult by_prefix = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(by_prefix.requests[3].replica == 0);
  CHECK(by_prefix.requests[3].hit_tokens[0] == 18 * 512);
  CHECK(kv.requests[3].first_token - kv.requests[3].arrival <
        by_prefix.requests[3].first_token - by_prefix.requests[3].arrival);
  // kv-aware weighs prompts to compute: a decode replica computes none.
  o.prefill_replicas = 1;
  o.router = serve::RouterKind::kRoundRobin;
  o.decode_router = serve::RouterKind::kKvAware;
  CHECK_THROWS_WITH_AS(serve::serve(trace, s.arch, s.gen, s.topo, o),
                       doctest::Contains("a decode replica computes none"), InputError);
  // What only disaggregated serving reads is refused without prefill replicas, not ignored.
  o.prefill_replicas = 0;
  o.decode_router = serve::RouterKind::kPrefix;
  CHECK_THROWS_WITH_AS(serve::serve(trace, s.arch, s.gen, s.topo, o),
                       doctest::Contains("give prefill_replicas too"), InputError);
  o.decode_router = serve::RouterKind::kLeastLoaded;
  o.prefill_tp = 2;
  CHECK_THROWS_WITH_AS(serve::serve(trace, s.arch, s.gen, s.topo, o),
                       doctest::Contains("give prefill_replicas too"), InputError);
}

TEST_CASE("serve: speculative decoding yields the accepted drafts and one more per step") {
  Setup s;
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=2/s,n=60,prompt=uniform:200:2000,output=uniform:20:300,seed=6", {}, "test");
  uint64_t decode_tokens = 0;  // outputs after the first token
  for (const traces::Request& q : trace.requests) decode_tokens += q.output_tokens - 1;
  const serve::ServeResult plain = serve::serve(trace, s.arch, s.gen, s.topo, {});
  CHECK(plain.spec_steps == 0);
  serve::ServeOptions o;
  o.spec.tokens = 3;
  // Every draft accepted: each step yields k + 1 tokens but the last of an output, which
  // drafts what is left; a step that has one token left drafts none.
  o.spec.accept = 1;
  const serve::ServeResult all = serve::serve(trace, s.arch, s.gen, s.topo, o);
  uint64_t steps = 0, drafting = 0;
  for (const traces::Request& q : trace.requests) {
    const uint64_t left = q.output_tokens - 1;
    steps += (left + 3) / 4;
    drafting += (left + 3) / 4 - (left % 4 == 1 ? 1 : 0);
  }
  CHECK(all.spec_steps == drafting);
  CHECK(all.spec_accepted == all.spec_drafted);
  CHECK(all.spec_steps + all.spec_accepted + (steps - drafting) == decode_tokens);
  // None accepted: a step yields one token, as without drafts, and verifying the drafts
  // costs time.
  o.spec.accept = 0;
  const serve::ServeResult none = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(none.spec_accepted == 0);
  double tpot_plain = 0, tpot_none = 0, tpot_all = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    REQUIRE(none.requests[i].finish > 0);
    tpot_plain += static_cast<double>(plain.requests[i].finish - plain.requests[i].first_token);
    tpot_none += static_cast<double>(none.requests[i].finish - none.requests[i].first_token);
    tpot_all += static_cast<double>(all.requests[i].finish - all.requests[i].first_token);
  }
  CHECK(tpot_none >= tpot_plain);
  CHECK(tpot_all < 0.5 * tpot_plain);
  // In between: the share of drafts accepted is what the acceptance probability gives,
  // sum over n = 1..k of a^n out of k at full steps.
  o.spec.accept = 0.6;
  const serve::ServeResult some = serve::serve(trace, s.arch, s.gen, s.topo, o);
  const double share =
      static_cast<double>(some.spec_accepted) / static_cast<double>(some.spec_drafted);
  CHECK(share == doctest::Approx((0.6 + 0.36 + 0.216) / 3).epsilon(0.05));
  // The same seed, the same draws; another seed, others.
  CHECK(serve::serve(trace, s.arch, s.gen, s.topo, o).spec_accepted == some.spec_accepted);
  o.spec.seed = 2;
  CHECK(serve::serve(trace, s.arch, s.gen, s.topo, o).spec_accepted != some.spec_accepted);
}

TEST_CASE("serve: a draft model takes device memory and time; bad settings are refused") {
  Setup s;
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=2/s,n=40,prompt=uniform:200:2000,output=uniform:20:300,seed=6", {}, "test");
  serve::ServeOptions o;
  o.spec.tokens = 4;
  o.spec.accept = 0.7;
  const serve::ServeResult ngram = serve::serve(trace, s.arch, s.gen, s.topo, o);
  o.spec.draft = std::make_shared<const traces::Arch>(s.arch);  // Llama-3-8B drafting for itself
  const serve::ServeResult drafted = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(drafted.spec_draft == "llama-3-8b");
  CHECK(drafted.draft_weight_bytes == ngram.weight_bytes);
  CHECK(drafted.weight_bytes == 2 * ngram.weight_bytes);
  CHECK(drafted.kv_bytes_per_token == 2 * ngram.kv_bytes_per_token);
  CHECK(drafted.device_pool_blocks < ngram.device_pool_blocks / 2 + 1);
  // The same draws, more time: four draft passes a step.
  CHECK(drafted.spec_accepted == ngram.spec_accepted);
  CHECK(drafted.makespan > ngram.makespan);
  // A draft of another vocabulary proposes tokens the model does not have.
  traces::Arch other = s.arch;
  other.name = "other";
  other.vocab = 32000;
  o.spec.draft = std::make_shared<const traces::Arch>(other);
  CHECK_THROWS_WITH_AS(serve::serve(trace, s.arch, s.gen, s.topo, o),
                       doctest::Contains("the draft other has a vocabulary of 32000 tokens"),
                       InputError);
  o.spec.draft = nullptr;
  o.spec.accept = 1.5;
  CHECK_THROWS_WITH_AS(serve::serve(trace, s.arch, s.gen, s.topo, o),
                       doctest::Contains("expected a probability from 0 to 1, got 1.5"),
                       InputError);
  o.spec.accept = 0.7;
  o.spec.tokens = 0;
  CHECK_THROWS_WITH_AS(serve::serve(trace, s.arch, s.gen, s.topo, o),
                       doctest::Contains("speculative decoding is off (0 draft tokens per step)"),
                       InputError);
  o.spec.tokens = 4;
  CHECK_THROWS_WITH_AS(serve::cache_only(trace, s.arch, s.gen, s.topo, o),
                       doctest::Contains("a cache-only replay decodes nothing"), InputError);
  // Disaggregated: the prefill replicas compute the draft's KV of the prompt too, and the
  // hand-overs copy it with the model's; the decode replicas draft.
  o.prefill_replicas = 1;
  const serve::ServeResult pd = serve::serve(trace, s.arch, s.gen, s.topo, o);
  o.spec.draft = std::make_shared<const traces::Arch>(s.arch);
  const serve::ServeResult pd_draft = serve::serve(trace, s.arch, s.gen, s.topo, o);
  CHECK(pd.spec_steps > 0);
  CHECK(pd_draft.spec_accepted == pd.spec_accepted);
  CHECK(pd_draft.prefill_weight_bytes == 2 * pd.prefill_weight_bytes);
  CHECK(pd_draft.prefill_kv_bytes_per_token == 2 * pd.prefill_kv_bytes_per_token);
  CHECK(pd_draft.handoff_blocks == pd.handoff_blocks);
  double copied = 0, copied_draft = 0;  // over the links: the hand-overs alone
  for (const serve::ResourceRecord& x : pd.resources) copied += x.link ? x.bytes : 0.0;
  for (const serve::ResourceRecord& x : pd_draft.resources) copied_draft += x.link ? x.bytes : 0.0;
  CHECK(copied > 0);
  CHECK(copied_draft == doctest::Approx(2.0 * copied).epsilon(0.01));
}

TEST_CASE("serve: each replica's work adds up to the run's") {
  // `own`: no prompt shares a block with another's, so a sequence admitted again finds
  // at most the KV it had.
  const auto check = [](const serve::ServeResult& r, bool own) {
    REQUIRE(r.replica_records.size() == size_t(r.replicas + r.prefill_replicas));
    std::map<int64_t, uint64_t> routed;
    uint64_t output = 0, preemptions = 0;
    for (const serve::RequestRecord& q : r.requests) {
      if (q.rejected) continue;
      ++routed[static_cast<int64_t>(q.replica)];
      if (q.decode_replica >= 0) ++routed[q.decode_replica];
      output += q.output_tokens;
      preemptions += q.preemptions;
    }
    uint64_t iterations = 0, computed = 0, generated = 0, preempted = 0;
    for (size_t i = 0; i < r.replica_records.size(); ++i) {
      const serve::ReplicaRecord& x = r.replica_records[i];
      CHECK(x.prefill_only == (int(i) < r.prefill_replicas));
      CHECK(x.requests == routed[static_cast<int64_t>(i)]);
      CHECK(x.compute <= x.busy);
      CHECK(x.busy <= r.makespan);
      CHECK(x.busy > 0);
      iterations += x.iterations;
      computed += x.prompt_tokens;
      generated += x.output_tokens;
      preempted += x.preemptions;
    }
    CHECK(iterations == r.iterations);
    // Every prompt token computed once, plus what preemption made computed again: at most
    // that (a prefix hit on readmission may be longer than the first one), and at most one
    // token more per preemption (a decode's last token, whose KV it had not computed yet,
    // is computed with the prompt when it is admitted again).
    CHECK(computed <= r.computed_tokens + r.recomputed_tokens + r.preemptions);
    if (own) CHECK(computed >= r.computed_tokens + r.recomputed_tokens);
    CHECK(generated == output);
    CHECK(preempted == preemptions);
    CHECK(r.devices() == r.replicas * r.tp + r.prefill_replicas * r.prefill_tp);
  };
  // Colocated, a pool small enough to preempt, KV in DDR (loads under the compute).
  Setup s({"tiers.hbm.capacity=19GiB"});
  const traces::RequestTrace trace = traces::generate_requests(
      "poisson,rate=20/s,n=200,prompt=uniform:512:4096,output=uniform:64:512,groups=4,"
      "system=2048,seed=9",
      {}, "test");
  serve::ServeOptions o;
  o.replicas = 2;
  o.router = serve::RouterKind::kKvAware;
  o.kv_tiers = {serve::KvTier{"ddr", 1.0, uint64_t{64} << 30}};
  const serve::ServeResult colo = serve::serve(trace, s.arch, s.gen, s.topo, o);
  REQUIRE(colo.preemptions > 0);
  check(colo, false);
  // Prompts of their own, preempted in prefill and in decode: what they compute again is
  // exactly the KV they had that is no longer cached (no sequence admitted again finds a
  // prompt block it had only begun: the second trace's preemptions, in mid-prefill, did
  // before such blocks went by a hash of their own, by 1,383 tokens on two replicas).
  o.kv_tiers.clear();
  for (const char* spec :
       {"poisson,rate=20/s,n=200,prompt=uniform:512:4096,output=uniform:64:512,seed=9",
        "poisson,rate=10/s,n=300,prompt=lognormal:3000:0.6,output=uniform:50:400,seed=2"}) {
    INFO(spec);
    const serve::ServeResult alone =
        serve::serve(traces::generate_requests(spec, {}, "test"), s.arch, s.gen, s.topo, o);
    REQUIRE(alone.preemptions > 0);
    CHECK(alone.recomputed_tokens > 0);
    check(alone, true);
  }
  // Disaggregated: prefill replicas compute prompts and give first tokens; decode ones the
  // rest.
  Setup d;
  serve::ServeOptions pd;
  pd.prefill_replicas = 1;
  pd.replicas = 2;
  const serve::ServeResult split = serve::serve(trace, d.arch, d.gen, d.topo, pd);
  check(split, false);
  CHECK(split.replica_records[0].output_tokens == split.requests.size());
  CHECK(split.replica_records[1].prompt_tokens == 0);
  CHECK(split.devices() == 3);
}
