// Serving sweeps (`kind: serve`, tools/study/sweep.h) and their rows
// (tools/study/serve_row.h): fields, errors at the spec's positions, rows equal to the runs
// they stand for, infeasible points, the pinned column set. End to end (the CLI, resume,
// merge) in tests/e2e/sweep_test.sh.
#include <doctest/doctest.h>

#include <cmath>

#include "core/diagnostics.h"
#include "tests/study/golden_columns.h"
#include "tools/study/result_db.h"
#include "tools/study/serve_row.h"
#include "tools/study/sweep.h"

namespace tierflow::study {
namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;

// A KV pool tight enough to preempt at the full rate (19 GiB of HBM for Llama-3-8B).
const std::string kServeSpec = R"(
name: serve-unit
kind: serve
base:
  model: llama-3-8b
  arrivals: poisson,rate=20/s,n=60,prompt=uniform:512:4096,output=uniform:16:128,seed=3
  tiers.hbm.capacity: 19GiB
  replicas: 1
  slo: ttft=2s
axes:
  - preemption: [recompute, swap]
  - {rate_scale: [0.25, 1], token_budget: [4096, 8192]}
)";

std::string error_of(const std::string& text) {
  try {
    (void)parse_sweep_spec(text, "s.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const Cell& cell(const ResultDb::Table& t, size_t row, std::string_view column) {
  for (size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c] == column) return t.rows[row][c];
  }
  FAIL("no column ", column);
  static const Cell none;
  return none;
}

/// Every point of the spec `yaml`, run on two workers into a database in memory.
std::pair<SweepSummary, ResultDb::Table> run_spec(const std::string& yaml,
                                                  const std::string& file) {
  const SweepSpec spec = parse_sweep_spec(yaml, file);
  ResultDb db = ResultDb::for_sweep(":memory:", spec, Shard{});
  SweepOptions o;
  o.jobs = 2;
  const SweepSummary sum = run_sweep(spec, db, o);
  return {sum, db.table()};
}

}  // namespace

TEST_CASE("serving sweep spec: fields, zipped axes, points as settings") {
  const SweepSpec spec = parse_sweep_spec(kServeSpec, "serve.yaml");
  CHECK(spec.serving());
  CHECK(spec.size() == 4);
  const auto points = sweep_points(spec);
  REQUIRE(points.size() == 4);
  CHECK(points[0].values == std::vector<std::string>{"recompute", "0.25", "4096"});
  CHECK(points[3].values == std::vector<std::string>{"swap", "1", "8192"});
  const ServeSettings& s = points[3].serve;
  CHECK(s.preemption == "swap");
  CHECK(s.trace_options.rate_scale == 1.0);
  CHECK(s.engine.token_budget == 8192);
  CHECK(s.model.model == "llama-3-8b");
  CHECK(s.sets == std::vector<std::string>{"tiers.hbm.capacity=19GiB"});
  CHECK(s.names == SettingNames::kFields);  // errors name the fields as the spec writes them
  // A serving spec and a step spec with the same axes are different sweeps.
  CHECK(sweep_id(spec) != sweep_id(parse_sweep_spec(
                              "base: {layers: 2}\naxes:\n  - policy: [resident]\n", "s.yaml")));
}

TEST_CASE("serving sweep spec: errors at file:line:col, naming the field") {
  const std::string head = "kind: serve\nbase:\n  model: llama-3-8b\n  arrivals: poisson,rate=2/s,n=5,prompt=fixed:64,output=fixed:4\n";
  CHECK(error_of("kind: serv\naxes: [{tp: [1]}]\n").starts_with("s.yaml:1:7: unknown kind 'serv'"));
  CHECK(error_of("kind: serv\naxes: [{tp: [1]}]\n").ends_with("did you mean 'serve'?"));
  // Unknown serving fields, on an axis and in the base; step fields are not serving fields.
  const std::string unknown = error_of(head + "axes:\n  - replica: [1, 2]\n");
  CHECK(unknown.starts_with("s.yaml:6:5: unknown serving field 'replica'"));
  CHECK(unknown.ends_with("did you mean 'replicas'?"));
  CHECK(error_of(head + "axes:\n  - policy: all\n").starts_with("s.yaml:6:5: unknown serving field 'policy'"));
  CHECK(error_of("kind: serve\nbase:\n  batch: 4\naxes: [{tp: [1]}]\n").starts_with("s.yaml:3:10: unknown serving field 'batch'"));
  // A value at its own position: a count, a word (with did you mean), a KV tier.
  CHECK(error_of(head + "axes:\n  - tp: [1, x]\n").starts_with("s.yaml:6:13: tp: malformed number in 'x'"));
  const std::string router = error_of(head + "axes:\n  - router: [prefix, prefx]\n");
  CHECK(router.starts_with("s.yaml:6:22: router: expected one of round-robin, least-loaded, prefix"));
  CHECK(router.ends_with("did you mean 'prefix'?"));
  CHECK(error_of(head + "axes:\n  - kv_tiers: [\"ddr:512GiB\", \"dram:1TiB\"]\n").starts_with("s.yaml:6:30: kv_tiers: no tier 'dram'"));
  // An error of the base is the base's, whichever axis value found it.
  CHECK(error_of("kind: serve\nbase:\n  model: llama-3-8b\n  arrivals: poisson,rate=2/s,n=5\naxes:\n  - tp: [1, 2]\n")
            .starts_with("s.yaml:4:13: arrivals: 'prompt' is required"));
  // A point whose combination fails (more devices than the class has) names the point.
  const std::string combo = error_of(head + "axes:\n  - tp: [4, 8]\n  - replicas: [1, 2]\n");
  CHECK(combo.find("point 3 (tp=8, replicas=2)") != std::string::npos);
  CHECK(combo.find("replicas") != std::string::npos);
  // One value per base field.
  CHECK(error_of(head + "  tp: [1, 2]\naxes: [{replicas: [1]}]\n").find("takes one value") != std::string::npos);
}

TEST_CASE("serving sweep: each row is the run of its settings; a model that does not fit is infeasible") {
  const SweepSpec spec = parse_sweep_spec(kServeSpec, "serve.yaml");
  ResultDb db = ResultDb::for_sweep(":memory:", spec, Shard{});
  CHECK(db.meta("kind") == "serve");
  SweepOptions o;
  o.jobs = 2;
  const SweepSummary sum = run_sweep(spec, db, o);
  CHECK(sum.ran == 4);
  CHECK(sum.ok == 4);
  const ResultDb::Table t = db.table();
  REQUIRE(t.rows.size() == 4);
  // point, exit_class, then the serving columns (the axes are serving columns).
  CHECK(t.columns.size() == 2 + serve_columns().size());
  CHECK(t.types.size() == t.columns.size());
  for (size_t r = 0; r < 4; ++r) {
    // The same settings written by hand, run directly.
    ServeSettings s;
    s.model.model = "llama-3-8b";
    s.arrivals = "poisson,rate=20/s,n=60,prompt=uniform:512:4096,output=uniform:16:128,seed=3";
    s.sets = {"tiers.hbm.capacity=19GiB"};
    s.engine.replicas = 1;
    s.slo = "ttft=2s";
    s.preemption = r < 2 ? "recompute" : "swap";
    s.trace_options.rate_scale = r % 2 == 0 ? 0.25 : 1.0;
    s.engine.token_budget = r % 2 == 0 ? 4096 : 8192;
    const ServeStudy x = run_serve(s);
    CAPTURE(r);
    CHECK(std::get<std::string>(cell(t, r, "status")) == "ok");
    CHECK(std::get<int64_t>(cell(t, r, "requests")) == static_cast<int64_t>(x.summary.counted));
    CHECK(std::get<int64_t>(cell(t, r, "preemptions")) == static_cast<int64_t>(x.summary.preemptions));
    CHECK(std::get<int64_t>(cell(t, r, "recomputed_tokens")) ==
          static_cast<int64_t>(x.result.recomputed_tokens));
    CHECK(std::get<double>(cell(t, r, "ttft_p99_s")) == serve_latency(x, "ttft", 99));
    CHECK(std::get<double>(cell(t, r, "ttft_mean_s")) == serve_latency(x, "ttft", 0));
    CHECK(std::get<double>(cell(t, r, "tpot_p50_ms")) == serve_latency(x, "tpot", 50) * 1e3);
    CHECK(std::get<double>(cell(t, r, "goodput_share")) == serve_goodput_share(x));
    CHECK(std::get<double>(cell(t, r, "output_tokens_per_s")) ==
          static_cast<double>(x.summary.output_tokens) / x.summary.span_s());
    CHECK(std::get<std::string>(cell(t, r, "preemption")) == s.preemption);
    CHECK(std::get<double>(cell(t, r, "rate_scale")) == s.trace_options.rate_scale);
  }
  // The tight pool preempts at the full rate; swap computes nothing again.
  CHECK(std::get<int64_t>(cell(t, 1, "preemptions")) > 0);
  CHECK(std::get<int64_t>(cell(t, 3, "recomputed_tokens")) == 0);
  CHECK(std::get<int64_t>(cell(t, 3, "swap_outs")) > 0);
  const SweepSummary again = run_sweep(spec, db, o);
  CHECK(again.ran == 0);
  CHECK(again.skipped == 4);

  // Llama-3-70B does not fit one H100: a result of the point, not an error of the spec.
  const auto [ts, tt] = run_spec(
      "kind: serve\nbase:\n  model: llama-3-70b\n  arrivals: "
      "poisson,rate=2/s,n=8,prompt=fixed:512,output=fixed:8\naxes:\n  - tp: [1, 2]\n",
      "tp.yaml");
  CHECK(ts.infeasible == 1);
  CHECK(ts.ok == 1);
  CHECK(std::get<int64_t>(tt.rows[0][1]) == 1);  // exit_class
  CHECK(std::get<std::string>(cell(tt, 0, "status")) == "infeasible");
  CHECK(std::get<std::string>(cell(tt, 0, "reason")).starts_with("tp: the weights"));
  CHECK(std::holds_alternative<std::monostate>(cell(tt, 0, "ttft_p99_s")));
  CHECK(std::get<std::string>(cell(tt, 1, "status")) == "ok");
}

TEST_CASE("serving sweep: disaggregated prefill is a field: its rows, its hand-over times") {
  const auto [sum, t] = run_spec(
      "kind: serve\nbase:\n  model: llama-3-8b\n  arrivals: "
      "poisson,rate=2/s,n=30,prompt=uniform:1024:4096,output=uniform:8:64,seed=9\naxes:\n  - "
      "{prefill_replicas: [0, 1], replicas: [2, 1]}\n",
      "pd.yaml");
  CHECK(sum.ok == 2);
  REQUIRE(t.rows.size() == 2);
  CHECK(std::get<int64_t>(cell(t, 0, "prefill_replicas")) == 0);
  CHECK(std::get<int64_t>(cell(t, 1, "prefill_replicas")) == 1);
  // Colocated: no hand-over; disaggregated: the run's.
  CHECK(std::holds_alternative<std::monostate>(cell(t, 0, "handoff_p99_ms")));
  ServeSettings s;
  s.model.model = "llama-3-8b";
  s.arrivals = "poisson,rate=2/s,n=30,prompt=uniform:1024:4096,output=uniform:8:64,seed=9";
  s.engine.prefill_replicas = 1;
  s.engine.replicas = 1;
  const ServeStudy x = run_serve(s);
  CHECK(x.result.handoffs == 30);
  CHECK(std::get<double>(cell(t, 1, "handoff_p99_ms")) == serve_latency(x, "handoff", 99) * 1e3);
  CHECK(std::get<double>(cell(t, 1, "ttft_p99_s")) == serve_latency(x, "ttft", 99));
  // The decode router is a field: by prefix, a session's second turn is copied in part.
  const auto [rsum, rt] = run_spec(
      "kind: serve\nbase:\n  model: llama-3-8b\n  prefill_replicas: 1\n  replicas: 2\n  "
      "arrivals: poisson,rate=4/s,n=100,turns=2,think=5s,prompt=fixed:2048,output=fixed:300,"
      "seed=3\naxes:\n  - decode_router: [least-loaded, prefix]\n",
      "routers.yaml");
  CHECK(rsum.ok == 2);
  REQUIRE(rt.rows.size() == 2);
  CHECK(std::get<std::string>(cell(rt, 0, "decode_router")) == "least-loaded");
  CHECK(std::get<std::string>(cell(rt, 1, "decode_router")) == "prefix");
  CHECK(std::get<std::string>(cell(rt, 1, "status")) == "ok");
}

TEST_CASE("serving sweep: nodes is a field: replicas over several copies of the topology") {
  // Eight and twelve TP-2 replicas on two and three H100 nodes: each row the run of its
  // settings, its devices from the nodes'.
  const auto [sum, t] = run_spec(
      "kind: serve\nbase:\n  model: llama-3-8b\n  tp: 2\n  arrivals: "
      "poisson,rate=20/s,n=60,prompt=uniform:1024:4096,output=uniform:8:64,seed=9\naxes:\n  - "
      "{nodes: [2, 3], replicas: [8, 12]}\n",
      "nodes.yaml");
  CHECK(sum.ok == 2);
  REQUIRE(t.rows.size() == 2);
  for (const size_t row : {size_t{0}, size_t{1}}) {
    CAPTURE(row);
    CHECK(std::get<std::string>(cell(t, row, "status")) == "ok");
    CHECK(std::get<std::string>(cell(t, row, "topology")) == "h100-sxm-8gpu");
    ServeSettings s;
    s.model.model = "llama-3-8b";
    s.model.gen.tp = 2;
    s.nodes = static_cast<int>(std::get<int64_t>(cell(t, row, "nodes")));
    s.engine.replicas = static_cast<int>(std::get<int64_t>(cell(t, row, "replicas")));
    CHECK(s.nodes == static_cast<int>(2 + row));
    s.arrivals = "poisson,rate=20/s,n=60,prompt=uniform:1024:4096,output=uniform:8:64,seed=9";
    const ServeStudy x = run_serve(s);
    CHECK(x.result.devices() == 8 * s.nodes);
    CHECK(std::get<double>(cell(t, row, "ttft_p99_s")) == serve_latency(x, "ttft", 99));
    CHECK(std::get<double>(cell(t, row, "output_tokens_per_s_per_device")) ==
          doctest::Approx(static_cast<double>(x.summary.output_tokens) / x.summary.span_s() /
                          (8.0 * s.nodes)));
  }
}

TEST_CASE("serving rows: hits per tier kind add up to the hit share") {
  ServeSettings s;
  s.names = SettingNames::kFields;
  s.model.model = "llama-3-8b";
  // Groups sharing a long system prompt, a DDR tier below the device.
  s.arrivals =
      "poisson,rate=40/s,n=300,prompt=fixed:2048,output=fixed:16,groups=4,system=1536,seed=2";
  s.sets = {"tiers.hbm.capacity=24GiB"};
  s.kv_tiers = "ddr:64GiB";
  const ServeSetup setup = prepare_serve(s);
  const ServeStudy x = run_serve(setup);
  ServeOutcome o;
  o.settings = s;
  o.setup = &setup;
  o.run = &x;
  const Row row = serve_row_of(o);
  auto at = [&](std::string_view name) -> const Cell& {
    for (size_t c = 0; c < serve_columns().size(); ++c) {
      if (serve_columns()[c].name == name) return row.cells[c];
    }
    FAIL("no column ", name);
    static const Cell none;
    return none;
  };
  const double hbm = std::get<double>(at("hit_hbm_share"));
  const double ddr = std::get<double>(at("hit_ddr_share"));
  CHECK(hbm > 0);
  CHECK(hbm + ddr == doctest::Approx(std::get<double>(at("hit_share"))));
  CHECK(std::get<double>(at("hit_ssd_share")) == 0);
  // No slo: no goodput.
  CHECK(std::holds_alternative<std::monostate>(at("goodput_share")));
  CHECK(std::get<double>(at("kv_pool_gib")) > 0);
  CHECK(std::get<std::string>(at("notes")).empty());
}

TEST_CASE("serving sweep: a row carries its run's notes; the summary counts them") {
  const SweepSpec spec = parse_sweep_spec(R"(
name: kv-order
kind: serve
base:
  model: llama-3-8b
  tiers.hbm.capacity: 24GiB
  arrivals: poisson,rate=20/s,n=40,prompt=fixed:1024,output=fixed:8,seed=1
axes:
  - kv_tiers: ["ddr:64GiB,ssd:1TiB", "ssd:1TiB,ddr:64GiB"]
)",
                                          "kv.yaml");
  ResultDb db = ResultDb::for_sweep(":memory:", spec, Shard{});
  const SweepSummary sum = run_sweep(spec, db, SweepOptions{});
  const ResultDb::Table t = db.table();
  REQUIRE(t.rows.size() == 2);
  CHECK(std::get<std::string>(cell(t, 0, "notes")).empty());
  const std::string& notes = std::get<std::string>(cell(t, 1, "notes"));
  CHECK(notes.starts_with("kv_tiers: 'ssd' comes before 'ddr'"));
  CHECK(sum.noted == 1);
  CHECK(sum.first_noted == 1);
  CHECK(sum.first_notes == notes);
  CHECK(sweep_summary_text(spec, db, sum, Shard{}, 2, 1, "kv.db")
            .find("  1 point run has notes (the 'notes' column); point 1's: kv_tiers: 'ssd'") !=
        std::string::npos);
}

TEST_CASE("serving rows: the column set is pinned") {
  check_golden_columns(serve_columns(), kSource + "/tests/study/golden/serve_columns.txt");
}

}  // namespace tierflow::study
