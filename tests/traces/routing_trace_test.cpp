// Routing traces (traces/routing_trace.h): read at file:line:col, and a workload generated
// with one takes exactly its picks.
#include "traces/routing_trace.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "core/diagnostics.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"

using namespace tierflow;
using namespace tierflow::traces;

namespace {

const std::string kConfigs = std::string(TIERFLOW_SOURCE_DIR) + "/configs";

// A file of `text` in a fresh temporary folder; each call its own (the reader caches by path,
// size and time).
std::string write_trace(const std::string& text) {
  static int n = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("tierflow-routing-{}-{}", ::getpid(), n++);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "r.jsonl").string();
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& text) {
  try {
    (void)read_routing_trace(write_trace(text));
  } catch (const InputError& e) {
    return fmt::format("{}:{}: {}", e.pos().line, e.pos().col, e.message());
  }
  return "accepted";
}

}  // namespace

TEST_CASE("routing trace: read, and refused at line:col") {
  const std::string path = write_trace(
      "{\"pass\": 0, \"layer\": 1, \"token\": 2, \"experts\": [3, 5]}\n"
      "  {\"experts\": [0, 7], \"token\": 0, \"layer\": 0, \"pass\": 1}\n");
  const auto t = read_routing_trace(path);
  REQUIRE(t->picks.size() == 2);
  const RoutingPick* p = t->find(0, 1, 2);
  REQUIRE(p != nullptr);
  CHECK(p->experts == std::vector<uint16_t>{3, 5});
  CHECK(p->line == 1);
  CHECK(t->find(1, 0, 0)->line == 2);
  CHECK(t->find(1, 0, 0)->column == 15);
  CHECK(t->find(0, 0, 0) == nullptr);
  CHECK(read_routing_trace(path) == t);  // read once

  CHECK(error_of("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"expert\": [1]}\n") ==
        "1:37: unknown key 'expert' in a routing pick (pass, layer, token, experts); did you "
        "mean 'experts'?");
  CHECK(error_of("{\"pass\": 0, \"layer\": 0, \"experts\": [1]}\n") ==
        "1:1: missing key 'token' in a routing pick (each needs pass, layer, token and experts)");
  CHECK(error_of("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1, 1]}\n") ==
        "1:52: expert 1 is picked twice");
  CHECK(error_of("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": []}\n") ==
        "1:48: experts is empty: a token picks at least one");
  CHECK(error_of("{\"pass\": -1, \"layer\": 0, \"token\": 0, \"experts\": [1]}\n").starts_with("1:10: "));
  CHECK(error_of("{\"pass\": 0, \"layer\": 4096, \"token\": 0, \"experts\": [1]}\n").starts_with("1:22: "));
  CHECK(error_of("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": [65536]}\n").starts_with("1:49: "));
  CHECK(error_of("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1]}\n"
                 "{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": [2]}\n") ==
        "2:1: pass 0, layer 0, token 0 is given twice (first on line 1)");
  CHECK(error_of("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1]} {\"pass\": 1}\n") ==
        "1:53: a second value on one line: a routing trace holds one JSON object per line");
  CHECK(error_of("[1, 2]\n").starts_with("1:1: expected a JSON object"));
  CHECK(error_of("\n\n").starts_with("0:0: empty routing trace"));
}

TEST_CASE("routing trace: a generated workload takes exactly its picks") {
  const Arch a = load_arch(find_arch("mixtral-8x7b", kConfigs));
  GenOptions o{.phase = Phase::kDecode,
               .batch = 3,
               .context = 64,
               .tokens = 5,
               .routing = Routing::kSeeded,
               .layers = 3};
  // Seeded picks: 2 of 8 per (step, layer, sequence).
  std::mt19937 rng(5);
  std::map<std::pair<int, int>, std::set<int>> want;  // (step, layer) -> experts
  std::string text;
  for (int p = 0; p < 5; ++p) {
    for (int l = 0; l < 3; ++l) {
      for (int t = 0; t < 3; ++t) {
        int e1 = static_cast<int>(rng() % 8), e2 = e1;
        while (e2 == e1) e2 = static_cast<int>(rng() % 8);
        want[{p, l}].insert({e1, e2});
        text += fmt::format("{{\"pass\": {}, \"layer\": {}, \"token\": {}, \"experts\": [{}, {}]}}\n",
                            p, l, t, e1, e2);
      }
    }
  }
  o.routing_trace = write_trace(text);
  const Workload w = generate(a, o);
  std::map<std::pair<int, int>, std::set<int>> got;
  for (const Op& op : w.ops) {
    int p = 0, l = 0, e = 0;
    if (std::sscanf(op.name.c_str(), "t%d.L%d.expert%d", &p, &l, &e) == 3) got[{p, l}].insert(e);
  }
  CHECK(got == want);
  CHECK(w.meta.at("routing_trace") == "\"" + o.routing_trace + "\"");
  // The same trace, the same workload; the seed plays no part.
  o.seed = 99;
  CHECK(generate(a, o).ops.size() == w.ops.size());

  SUBCASE("a pick the workload needs that the trace lacks") {
    o.tokens = 6;
    try {
      (void)generate(a, o);
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(e.pos().file == o.routing_trace);
      CHECK(e.message() == "no pick for pass 5, layer 0, token 0: the workload routes 3 tokens a "
                           "pass (decode: one per sequence, a pass per step)");
    }
  }
  SUBCASE("a pick of the wrong count, or an expert the model lacks, at its line") {
    o.routing_trace = write_trace("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1]}\n");
    o.tokens = 1;
    o.batch = 1;
    o.layers = 1;
    try {
      (void)generate(a, o);
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(e.pos().line == 1);
      CHECK(e.pos().col == 48);
      CHECK(e.message() == "pass 0, layer 0, token 0 picks 1 expert; mixtral-8x7b picks 2 a token");
    }
    o.routing_trace = write_trace("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1, 8]}\n");
    CHECK_THROWS_WITH_AS(generate(a, o),
                         doctest::Contains("expert 8 of pass 0, layer 0, token 0: mixtral-8x7b has 8 "
                                           "routed experts (0 to 7)"),
                         InputError);
  }
  SUBCASE("with expected routing, or with skew, refused naming --routing-trace") {
    o.routing = Routing::kExpected;
    CHECK_THROWS_WITH_AS(generate(a, o), doctest::Contains("a routing trace is the routing that runs"),
                         InputError);
    o.routing = Routing::kSeeded;
    o.routing_skew = 1;
    CHECK_THROWS_WITH_AS(generate(a, o), doctest::Contains("skew and repeats shape the seeded"),
                         InputError);
  }
}
