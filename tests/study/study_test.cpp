// The study layer: scenarios, trials, rows and the what-if searches.
#include "tools/study/study.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "core/diagnostics.h"
#include "tests/study/golden_columns.h"
#include "tools/study/replay_vs_sim.h"
#include "tools/study/row.h"
#include "tools/study/target.h"
#include "tools/study/whatif.h"

using namespace tierflow;
using namespace tierflow::study;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

/// A small decode: the first 4 layers of Llama-3-8B, batch 2, 1024 cached tokens, 2 steps,
/// on one H100 of the 8-GPU server, planned by hyperoffload (fast and deterministic).
Scenario small_decode() {
  Scenario s;
  s.hw = kSource + "/configs/hw/h100-sxm-8gpu.yaml";
  s.workload.model = "llama-3-8b";
  s.workload.gen.phase = traces::Phase::kDecode;
  s.workload.gen.layers = 4;
  s.workload.gen.batch = 2;
  s.workload.gen.context = 1024;
  s.workload.gen.tokens = 2;
  s.policy = "hyperoffload";
  s.threads = 1;
  return s;
}

}  // namespace

TEST_CASE("set_field: generator, request, target and topology fields; unknown names suggest") {
  Scenario s;
  set_field(s, "batch", "32", "--vary");
  set_field(s, "prompt", "512", "--vary");
  set_field(s, "generate", "64", "--vary");
  set_field(s, "budget", "40GiB", "--vary");
  set_field(s, "tiers.hbm.capacity", "96GB", "--vary");
  set_field(s, "model.layers", "2", "--vary");
  CHECK(s.workload.gen.batch == 32);
  REQUIRE(s.request);
  CHECK(s.request->prompt == 512);
  CHECK(s.request->generate == 64);
  CHECK(s.budget == uint64_t{40} << 30);
  CHECK(s.sets == std::vector<std::string>{"tiers.hbm.capacity=96GB"});
  CHECK(s.workload.model_sets == std::vector<std::string>{"layers=2"});
  CHECK(get_field(s, "tiers.hbm.capacity") == "96GB");
  CHECK(get_field(s, "batch") == "32");
  try {
    set_field(s, "bacth", "4", "--vary");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("did you mean 'batch'") != std::string::npos);
  }
  CHECK_THROWS_AS(set_field(s, "batch", "0", "--vary"), InputError);
  CHECK_THROWS_AS(set_field(s, "batch", "4x", "--vary"), InputError);
  CHECK_THROWS_AS(parse_axis("batch=1,,2", "--vary"), InputError);
  const Axis a = parse_axis("context=1024,2048", "--vary");
  CHECK(a.values.size() == 2);
  const auto grid = expand_grid(s, {parse_axis("batch=1,2", "--vary"), a});
  REQUIRE(grid.size() == 4);
  // The first axis varies slowest.
  CHECK(grid[1].second == std::vector<std::string>{"1", "2048"});
  CHECK(grid[2].first.workload.gen.batch == 2);
}

TEST_CASE("set_field: counts take SI and binary prefixes; overhead needs % or a fraction") {
  Scenario s;
  set_field(s, "context", "8Ki", "--vary");
  set_field(s, "tokens", "1k", "--vary");
  CHECK(s.workload.gen.context == 8192);
  CHECK(s.workload.gen.tokens == 1000);
  try {
    set_field(s, "context", "8K", "--vary");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("did you mean 'k'? (1000; Ki is 1024)") != std::string::npos);
  }
  CHECK_THROWS_AS(set_field(s, "tp", "3000000000", "--vary"), InputError);
  CHECK(parse_overhead("10%", "--max-overhead") == doctest::Approx(0.1));
  CHECK(parse_overhead("0.1", "--max-overhead") == doctest::Approx(0.1));
  CHECK(parse_overhead("1", "--max-overhead") == doctest::Approx(1.0));
  try {
    parse_overhead("10", "--max-overhead");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "--max-overhead: '10' is ambiguous: write a percentage (10%) or a fraction at most 1 "
          "(e.g. 0.1 for 10%)");
  }
}

TEST_CASE("rows: the column set is pinned, and the same scenario gives the same row bytes") {
  check_golden_columns(columns(), kSource + "/tests/study/golden/columns.txt");

  Study a, b;
  const Trial ta = a.run(small_decode());
  const Trial tb = b.run(small_decode());
  REQUIRE(ta.ok);
  const std::string ra = rows_csv({row_of(ta)}), rb = rows_csv({row_of(tb)});
  CHECK(ra == rb);
  CHECK(rows_jsonl({row_of(ta)}) == rows_jsonl({row_of(tb)}));
  const Row r = row_of(ta);
  CHECK(std::get<std::string>(r.at("status")) == "ok");
  CHECK(std::get<int64_t>(r.at("batch")) == 2);
  CHECK(std::get<double>(r.at("makespan_s")) > 0);
  // A decode step: TPOT is the makespan per token.
  CHECK(std::get<double>(r.at("tpot_ms")) ==
        doctest::Approx(std::get<double>(r.at("makespan_s")) * 1e3 / 2));
  CHECK(std::holds_alternative<std::monostate>(r.at("ttft_ms")));
  // Every cell holds its column's type (sweep databases store and read them back by it).
  auto same_type = [](const Cell& c, CellType t) {
    switch (t) {
      case CellType::kInteger: return std::holds_alternative<int64_t>(c);
      case CellType::kReal: return std::holds_alternative<double>(c);
      case CellType::kText: return std::holds_alternative<std::string>(c);
      case CellType::kBool: return std::holds_alternative<bool>(c);
    }
    return false;
  };
  Scenario req = small_decode();
  req.request = Request{64, 3};
  const Row rq = row_of(a.run(req));
  for (const Row* row : {&r, &rq}) {
    for (size_t i = 0; i < columns().size(); ++i) {
      const Cell& c = row->cells[i];
      if (std::holds_alternative<std::monostate>(c)) continue;
      CAPTURE(columns()[i].name);
      CHECK(same_type(c, columns()[i].type));
    }
  }
}

TEST_CASE("request: TTFT is the prefill, throughput as FlexGen defines it") {
  Scenario s = small_decode();
  s.request = Request{256, 5};
  Study study;
  const Trial t = study.run(s);
  REQUIRE(t.ok);
  REQUIRE(t.request);
  REQUIRE(t.phases.size() == 2);
  const RequestMetrics& m = *t.request;
  CHECK(m.ttft_ps == t.phases[0].makespan_ps);
  CHECK(m.decode_ps == t.phases[1].makespan_ps);
  CHECK(t.phases[1].tokens == 4);  // G - 1 decode steps after the prefill's token
  CHECK(!m.extrapolated);
  CHECK(m.tpot_ms == doctest::Approx(static_cast<double>(m.decode_ps) * 1e-9 / 4));
  CHECK(m.throughput_tokens_per_s ==
        doctest::Approx(2.0 * 5 / (static_cast<double>(m.ttft_ps + m.decode_ps) * 1e-12)));
}

TEST_CASE("request: a long decode is extrapolated only when shown steady, and close to whole") {
  Scenario s = small_decode();
  s.request = Request{512, 41};  // 40 decode steps: two 8-token windows
  Study study;
  const Trial t = study.run(s);
  REQUIRE(t.ok);
  REQUIRE(t.request);
  CHECK(t.request->extrapolated);
  CHECK(t.request->decode_note.find("extrapolated") != std::string::npos);
  // The same 40 steps simulated whole.
  Scenario whole = s;
  whole.request.reset();
  whole.workload.gen.context = 512;
  whole.workload.gen.tokens = 40;
  const Trial w = study.run(whole);
  REQUIRE(w.ok);
  const double rel = std::abs(static_cast<double>(t.request->decode_ps - w.latency_ps())) /
                     static_cast<double>(w.latency_ps());
  CHECK(rel < 0.01);
}

TEST_CASE("whatif min-memory equals the smallest passing budget of a brute-force scan") {
  Scenario s = small_decode();
  Study study;
  WhatIfOptions o;
  o.max_overhead = 0.05;
  const Answer a = whatif(study, s, o);
  REQUIRE(a.found);
  // Every budget of the scan, at the search's resolution, from the residency bound up.
  const Trial fastest = study.unlimited_trial(s);
  const uint64_t lo = fastest.main().outcome.bounds.residency;
  const uint64_t hi = fastest.main().device_peak;
  const uint64_t step = std::max<uint64_t>(uint64_t{64} << 20, hi / 200);
  uint64_t smallest = 0;
  for (uint64_t b = lo; b <= hi + step; b += step) {
    Scenario p = s;
    p.budget = b;
    const Trial t = study.run(p);
    if (t.ok && t.latency_ps() <= a.limit_ps) {
      smallest = b;
      break;
    }
  }
  REQUIRE(smallest > 0);
  const auto answer = static_cast<uint64_t>(a.number);
  CHECK(answer + step >= smallest);
  CHECK(answer <= smallest + step);
  // The answer's own plan meets the limit within its budget.
  REQUIRE(a.trial);
  CHECK(a.trial->latency_ps() <= a.limit_ps);
  CHECK(a.trial->main().device_peak <= answer);
  // Its ceiling does not matter: a device with twice the memory gives the same answer.
  Scenario big = s;
  big.sets.push_back("tiers.hbm.capacity=160GB");
  const Answer b = whatif(study, big, o);
  CHECK(b.number == a.number);
}

TEST_CASE("whatif max-batch: the answer passes, the next batch does not") {
  Scenario s = small_decode();
  s.sets.push_back("tiers.hbm.capacity=5GiB");  // 4GiB usable: the H100 reserves 1GiB
  Study study;
  WhatIfOptions o;
  o.question = Question::kMaxBatch;
  const Answer a = whatif(study, s, o);  // no target: fits without offload
  REQUIRE(a.found);
  REQUIRE(a.trial);
  CHECK(a.trial->ok);
  CHECK(a.binding.find("batch " + std::to_string(a.number + 1)) != std::string::npos);
  // A brute-force scan from batch 1: the last that fits without offload is the answer.
  int64_t last = 0;
  for (int64_t b = 1; b <= a.number + 8; ++b) {
    Scenario p = s;
    p.policy = "resident";
    p.workload.gen.batch = b;
    if (!study.run(p).ok) break;
    last = b;
  }
  CHECK(last == a.number);
}

TEST_CASE("whatif upgrade: ranked by the gain at 2x, the best one names its --set") {
  Scenario s = small_decode();
  s.budget = uint64_t{1} << 30;  // offload: PCIe carries the weights
  Study study;
  WhatIfOptions o;
  o.question = Question::kUpgrade;
  const Answer a = whatif(study, s, o);
  REQUIRE(a.found);
  REQUIRE(a.upgrades.size() >= 2);
  for (size_t i = 1; i < a.upgrades.size(); ++i) CHECK(a.upgrades[i - 1].gain[1] >= a.upgrades[i].gain[1]);
  CHECK(a.upgrades.front().gain[1] > 0.05);
  CHECK(a.upgrades.front().set.find('=') != std::string::npos);
}

TEST_CASE("context_warning: positions past the model's declared maximum, cited") {
  using study::Scenario;
  Scenario s;
  s.workload.model = "llama-3-8b";  // declares 8192 (configs/models/llama-3-8b.yaml)
  s.workload.gen.phase = traces::Phase::kDecode;
  s.workload.gen.context = 8184;
  s.workload.gen.tokens = 8;
  CHECK(study::context_warning(s).empty());  // 8192 positions: within
  s.workload.gen.tokens = 9;
  CHECK(study::context_warning(s) ==
        "a context of 8184 tokens and 9 generated: 8193 positions, more than the 8192 that "
        "llama-3-8b declares (max_context, source CTX-L3); results past it assume the model "
        "runs that far");
  // An override says the model is Llama-3.1-8B.
  s.workload.model_sets = {"max_context=131072"};
  CHECK(study::context_warning(s).empty());
  s.workload.model_sets.clear();
  // A prefill counts its sequence, a request its prompt and what it generates.
  s.workload.gen.phase = traces::Phase::kPrefill;
  s.workload.gen.seq = 16384;
  CHECK(study::context_warning(s).find("a sequence of 16384 tokens: 16384 positions") == 0);
  s.request = study::Request{8000, 200};
  CHECK(study::context_warning(s).find("a prompt of 8000 tokens and 200 generated: 8200") ==
        0);
  // A workload file is what it is.
  Scenario f;
  f.workload.file = "w.json";
  CHECK(study::context_warning(f).empty());
}

TEST_CASE("expert cache on a routing trace: hits equal a brute-force LRU of the trace's picks") {
  // Mixtral, 2 layers, 24 decode steps, batch 1: the trace picks 2 of 8 experts per step and
  // layer from a skewed, repeating distribution. A 3-expert LRU cache, pinning each layer's
  // two picks, replayed by hand on the trace must give the study's hits and misses.
  constexpr int kSteps = 24, kLayers = 2, kSlots = 3;
  std::mt19937 rng(11);
  std::vector<std::vector<std::vector<int>>> picks(kSteps, std::vector<std::vector<int>>(kLayers));
  std::string text;
  for (int p = 0; p < kSteps; ++p) {
    for (int l = 0; l < kLayers; ++l) {
      std::vector<int>& x = picks[static_cast<size_t>(p)][static_cast<size_t>(l)];
      if (p > 0 && rng() % 2 == 0) {
        x = picks[static_cast<size_t>(p - 1)][static_cast<size_t>(l)];
      } else {
        const int a = static_cast<int>(rng() % 4), b = a + 1 + static_cast<int>(rng() % 4);
        x = {a, b};
      }
      text += fmt::format("{{\"pass\": {}, \"layer\": {}, \"token\": 0, \"experts\": [{}, {}]}}\n", p,
                          l, x[0], x[1]);
    }
  }
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("tierflow-rt-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "routing.jsonl").string();
  std::ofstream(file) << text;

  uint64_t hits = 0, misses = 0, clock = 0;
  std::vector<std::pair<int, int>> cache;  // (layer, expert), by last use in `last`
  std::map<std::pair<int, int>, uint64_t> last;
  for (int p = 0; p < kSteps; ++p) {
    for (int l = 0; l < kLayers; ++l) {
      const std::vector<int>& x = picks[static_cast<size_t>(p)][static_cast<size_t>(l)];
      for (int e : x) {
        const std::pair<int, int> k{l, e};
        if (std::ranges::find(cache, k) != cache.end()) {
          ++hits;
        } else {
          ++misses;
          if (cache.size() == kSlots) {
            auto victim = cache.end();
            for (auto it = cache.begin(); it != cache.end(); ++it) {
              if (it->first == l && std::ranges::find(x, it->second) != x.end()) continue;  // pinned
              if (victim == cache.end() || last[*it] < last[*victim]) victim = it;
            }
            cache.erase(victim);
          }
          cache.push_back(k);
        }
        last[k] = ++clock;
      }
    }
  }

  Scenario s;
  s.workload.model = "mixtral-8x7b";
  s.policy = "resident";
  for (const auto& [f, v] : std::vector<std::pair<std::string, std::string>>{
           {"layers", "2"},
           {"phase", "decode"},
           {"context", "64"},
           {"tokens", std::to_string(kSteps)},
           {"routing", "realistic"},
           {"routing_trace", file},
           {"expert_cache", fmt::format("lru:{}B", kSlots * uint64_t{352321536})}}) {
    set_field(s, f, v, f);
  }
  Study study;
  const Trial t = study.run(s);
  REQUIRE(t.ok);
  const PhaseResult& p = t.main();
  REQUIRE(p.realized);
  CHECK(p.routing.hits == hits);
  CHECK(p.routing.misses == misses);
  CHECK(hits > 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("replay against sim: the p90 transfer error by count and by copy time") {
  // Ten copies: nine of 1 us measured at 3 us (+200%, the jitter of a tiny copy), one of
  // 1 ms measured 2% slow. By count the p90 is the tiny copies' error; by copy time it is
  // the long copy's, which holds 99% of the simulated copy time.
  Plan plan;
  plan.programs.resize(1);
  replay::ReplayResult r;
  r.programs.resize(1);
  sim::SimResult s;
  for (uint32_t i = 0; i < 10; ++i) {
    plan.programs[0].steps.emplace_back(StepKind::kPrefetch, i, 0, i);
    const replay::Time sim_ps = i == 9 ? kPsPerMs : kPsPerUs;
    const replay::Time measured = i == 9 ? kPsPerMs + kPsPerMs / 50 : 3 * kPsPerUs;
    replay::StepRecord rec;
    rec.ran = true;
    rec.issue = rec.start = replay::Time{10} * kPsPerMs * i;
    rec.end = rec.start + measured;
    r.programs[0].steps.push_back(rec);
    sim::TransferRecord x;
    x.program = 0;
    x.step = i;
    x.start = rec.start;
    x.end = rec.start + sim_ps;
    s.transfers.push_back(x);
  }
  const ReplayComparison c = compare_runs(plan, r, s);
  CHECK(c.transfers == 10);
  CHECK(c.error_median == doctest::Approx(2.0));
  CHECK(c.error_p90 == doctest::Approx(2.0));
  CHECK(c.error_p90_by_time == doctest::Approx(0.02));
  // Weighed equally, the 90% point falls among the tiny copies again.
  s.transfers[9].end = s.transfers[9].start + kPsPerUs;
  r.programs[0].steps[9].end = r.programs[0].steps[9].start + kPsPerUs + kPsPerUs / 50;
  CHECK(compare_runs(plan, r, s).error_p90_by_time == doctest::Approx(2.0));
}

TEST_CASE("a default decode context past the model's maximum is cut to it, nothing else") {
  Scenario s;
  set_command_defaults(s.workload.gen, Command::kWhatIf);
  s.workload.model = "llama-2-7b";  // max_context 4096
  Scenario kept = s;
  cut_default_context(s);
  CHECK(s.workload.gen.context == 4096 - 8);
  CHECK(s.workload.context_cut_from == 32768);
  CHECK(context_note(s).starts_with("context 4088 tokens: the default 32768 cut to the 4096"));
  CHECK(context_warning(s).empty());
  // Within the maximum, a request, another phase, or no room for the tokens: as it was.
  s = kept;
  s.workload.model = "llama-3.1-70b";
  cut_default_context(s);
  CHECK(s.workload.gen.context == 32768);
  CHECK(context_note(s).empty());
  s = kept;
  s.request = Request{512, 4};
  cut_default_context(s);
  CHECK(s.workload.gen.context == 32768);
  s = kept;
  s.workload.gen.phase = traces::Phase::kPrefill;
  cut_default_context(s);
  CHECK(s.workload.gen.context == 32768);
  s = kept;
  s.workload.gen.tokens = 5000;
  cut_default_context(s);
  CHECK(s.workload.gen.context == 32768);
  CHECK(s.workload.context_cut_from == 0);
}

TEST_CASE("rows name a shipped topology by its name, another file by its path") {
  CHECK(topology_label(default_topology()) == "h100-sxm-8gpu");
  CHECK(topology_label(config_dir() + "/hw/../hw/gh200.yaml") == "gh200");
  CHECK(topology_label("/tmp/my/gh200.yaml") == "/tmp/my/gh200.yaml");
  CHECK(topology_label(kSource + "/tests/fixtures/unit_hw.yaml") ==
        kSource + "/tests/fixtures/unit_hw.yaml");
}
