// Questions over a service (tools/study/serve_find.h) answered by search: the split of the
// replicas between prefill and decode. End to end (the CLI's text and JSON, whatif,
// Python) in tests/e2e/serve_test.sh and tests/python/test_api.py.
#include "tools/study/serve_find.h"

#include <doctest/doctest.h>

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

ServeAnswer ask(const ServeSettings& s, const std::string& target) {
  ServeAsk a;
  a.question = ServeQuestion::kSplit;
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

}  // namespace tierflow::study
