// Sweep specs, points, shards and the results database (tools/study/sweep.h,
// tools/study/result_db.h). The CLI's resume, kill and merge behaviour is tested end to
// end in tests/e2e/sweep_test.sh.
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <filesystem>
#include <set>

#include "core/diagnostics.h"
#include "tools/study/result_db.h"
#include "tools/study/sweep.h"

namespace tierflow::study {
namespace {

const std::string kSpec = R"(
name: unit
base:
  hw: h100-sxm-8gpu
  model: llama-3-8b
  layers: 2
  context: 256
  tokens: 2
axes:
  - {batch: [1, 2, 4], context: [128, 256, 512]}
  - links.gpu-pcie.bandwidth: [16GB/s, 64GB/s]
  - policy: [resident, tierflow]
)";

}  // namespace

TEST_CASE("sweep spec: crossed and zipped axes, grid order, values as written") {
  const SweepSpec spec = parse_sweep_spec(kSpec, "unit.yaml");
  CHECK(spec.name == "unit");
  CHECK(spec.size() == 12);
  CHECK(spec.axis_paths() == std::vector<std::string>{"batch", "context", "links.gpu-pcie.bandwidth", "policy"});
  const auto points = sweep_points(spec);
  REQUIRE(points.size() == 12);
  // The first group varies slowest; zipped axes advance together.
  CHECK(points[0].values == std::vector<std::string>{"1", "128", "16GB/s", "resident"});
  CHECK(points[1].values == std::vector<std::string>{"1", "128", "16GB/s", "tierflow"});
  CHECK(points[2].values == std::vector<std::string>{"1", "128", "64GB/s", "resident"});
  CHECK(points[11].values == std::vector<std::string>{"4", "512", "64GB/s", "tierflow"});
  for (size_t i = 0; i < points.size(); ++i) CHECK(points[i].index == static_cast<int64_t>(i));
  const Scenario& s = points[11].scenario;
  CHECK(s.workload.gen.batch == 4);
  CHECK(s.workload.gen.context == 512);
  CHECK(s.policy == "tierflow");
  CHECK(s.sets == std::vector<std::string>{"links.gpu-pcie.bandwidth=64GB/s"});
  // A bare topology name is the shipped file.
  CHECK(s.hw.ends_with("configs/hw/h100-sxm-8gpu.yaml"));

  // policy: all is every policy.
  const SweepSpec all = parse_sweep_spec("base: {layers: 2}\naxes:\n  - policy: all\n", "all.yaml");
  CHECK(all.size() == 6);
}

TEST_CASE("sweep spec: errors at file:line:col, before anything runs") {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_sweep_spec(text, "bad.yaml");
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of("axes:\n  - batch: [1, x]\n") ==
        "bad.yaml:2:16: batch: malformed number in 'x': expected a count such as 8192, 8k or 32Ki");
  CHECK(error_of("axes:\n  - {batch: [1, 2], seq: [1]}\n").starts_with("bad.yaml:2:21: zipped axes advance together"));
  CHECK(error_of("axes:\n  - batch: 4\n") == "bad.yaml:2:5: axis 'batch' needs a list of values ([v1, v2, ...])");
  CHECK(error_of("axes:\n  - batch: []\n") == "bad.yaml:2:5: axis 'batch' has no values");
  CHECK(error_of("base: {hw: no-such-topology}\naxes:\n  - batch: [1]\n").find("no-such-topology") != std::string::npos);
  CHECK(error_of("name: x\n").starts_with("bad.yaml:1:1: a sweep spec needs 'axes'"));
  // A key given twice is refused at the second, at any depth (the last would win unnoticed).
  CHECK(error_of("base: {model: llama-2-7b, model: llama-3-8b}\naxes:\n  - batch: [1]\n") ==
        "bad.yaml:1:27: duplicate key 'model'");
  CHECK(error_of("name: a\nname: b\naxes:\n  - batch: [1]\n") ==
        "bad.yaml:2:1: duplicate key 'name'");
}

TEST_CASE("shards split the points: disjoint, complete, deterministic") {
  CHECK(parse_shard("2/5").index == 2);
  CHECK(parse_shard("2/5").count == 5);
  CHECK(parse_shard("0/1").text() == "0/1");
  CHECK_THROWS_AS(parse_shard("5/5"), InputError);
  CHECK_THROWS_AS(parse_shard("-1/3"), InputError);
  CHECK_THROWS_AS(parse_shard("1"), InputError);
  CHECK_THROWS_AS(parse_shard("1/0"), InputError);
  for (int64_t n = 1; n <= 7; ++n) {
    for (int64_t p = 0; p < 50; ++p) {
      int holders = 0;
      for (int64_t i = 0; i < n; ++i) holders += Shard{i, n}.holds(p) ? 1 : 0;
      CHECK(holders == 1);
    }
  }
}

TEST_CASE("sweep id: the same spec gives the same id; any changed input another") {
  const std::string a = sweep_id(parse_sweep_spec(kSpec, "unit.yaml"));
  CHECK(a == sweep_id(parse_sweep_spec(kSpec, "other-name.yaml")));
  std::string changed = kSpec;
  changed.replace(changed.find("64GB/s"), 6, "32GB/s");
  CHECK(a != sweep_id(parse_sweep_spec(changed, "unit.yaml")));
  std::string layers = kSpec;
  layers.replace(layers.find("layers: 2"), 9, "layers: 3");
  CHECK(a != sweep_id(parse_sweep_spec(layers, "unit.yaml")));
  // Anchors in an `x-` key, merged into base: the same spec, the same id.
  const std::string merged = R"(
name: unit
x-shape: &shape {layers: 2, context: 256, tokens: 2}
base:
  <<: *shape
  hw: h100-sxm-8gpu
  model: llama-3-8b
axes:
  - {batch: [1, 2, 4], context: [128, 256, 512]}
  - links.gpu-pcie.bandwidth: [16GB/s, 64GB/s]
  - policy: [resident, tierflow]
)";
  CHECK(a == sweep_id(parse_sweep_spec(merged, "unit.yaml")));
}

TEST_CASE("results database: rows round-trip with their types; a rerun skips them") {
  const SweepSpec spec = parse_sweep_spec(kSpec, "unit.yaml");
  ResultDb db = ResultDb::for_sweep(":memory:", spec, Shard{1, 2});
  CHECK(db.meta("format") == "tierflow.sweep/1");
  CHECK(db.meta("shard") == "1/2");
  CHECK(db.meta("points") == "12");
  SweepOptions o;
  o.jobs = 2;
  o.shard = Shard{1, 2};
  const SweepSummary s = run_sweep(spec, db, o);
  CHECK(s.points == 6);
  CHECK(s.ran == 6);
  CHECK(s.ok + s.infeasible == 6);
  CHECK(s.failed == 0);
  const ResultDb::Table t = db.table();
  REQUIRE(t.rows.size() == 6);
  CHECK(t.columns[0] == "point");
  CHECK(t.columns[1] == "links.gpu-pcie.bandwidth");  // batch, context, policy are study columns
  CHECK(t.columns[2] == "exit_class");
  CHECK(t.columns.size() == 3 + columns().size());
  for (size_t r = 0; r < t.rows.size(); ++r) {
    CHECK(std::get<int64_t>(t.rows[r][0]) == static_cast<int64_t>(2 * r + 1));  // shard 1 of 2
    CHECK(std::get<std::string>(t.rows[r][1]).ends_with("GB/s"));
    for (size_t c = 3; c < t.columns.size(); ++c) {
      const Cell& cell = t.rows[r][c];
      if (std::holds_alternative<std::monostate>(cell)) continue;
      const CellType type = columns()[c - 3].type;
      CAPTURE(t.columns[c]);
      CHECK(cell.index() == (type == CellType::kInteger ? 1u : type == CellType::kReal ? 2u
                             : type == CellType::kText  ? 3u : 4u));
    }
  }
  // The rows equal the study rows of the same scenarios, cell for cell.
  Study study;
  const auto points = sweep_points(spec);
  const Row direct = row_of(study.run(points[3].scenario));
  for (size_t c = 0; c < columns().size(); ++c) {
    CAPTURE(columns()[c].name);
    CHECK(cell_text(direct.cells[c]) == cell_text(t.rows[1][c + 3]));
  }
  const SweepSummary again = run_sweep(spec, db, o);
  CHECK(again.ran == 0);
  CHECK(again.skipped == 6);
  CHECK(db.table().rows.size() == 6);
}

TEST_CASE("sweep rows: a point past the model's context or in wider weights says so") {
  const SweepSpec spec = parse_sweep_spec(R"(
base: {model: llama-2-7b, layers: 2, phase: decode, tokens: 8}
axes:
  - context: [1024, 8192]
  - weight_dtype: [fp16, fp32]
)",
                                          "notes.yaml");
  ResultDb db = ResultDb::for_sweep(":memory:", spec, Shard{});
  const SweepSummary sum = run_sweep(spec, db, SweepOptions{});
  const ResultDb::Table t = db.table();
  REQUIRE(t.rows.size() == 4);
  const auto notes = static_cast<size_t>(std::ranges::find(t.columns, "notes") - t.columns.begin());
  REQUIRE(notes < t.columns.size());
  auto at = [&](size_t r) { return std::get<std::string>(t.rows[r][notes]); };
  CHECK(at(0).empty());
  // The spec's own names, not the CLI's flags.
  CHECK(at(1) ==
        "llama-2-7b's checkpoint holds fp16 weights (checkpoint_dtype); these are fp32, 2x its "
        "bytes: weight_dtype='fp16' plans them as shipped");
  CHECK(
      at(2).starts_with("a context of 8192 tokens and 8 generated: 8200 positions, more than "
                        "the 4096 that llama-2-7b declares"));
  CHECK(at(3) == at(2) + " | " + at(1));
  CHECK(sum.noted == 3);
  CHECK(sum.first_noted == 1);
  // The same notes as a trial run directly.
  Study study;
  CHECK(row_of(study.run(sweep_points(spec)[3].scenario)).at("notes") == t.rows[3][notes]);
}

TEST_CASE("results database: another spec or shard is refused") {
  const auto dir = std::filesystem::temp_directory_path() / "tierflow-sweep-unit";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "r.db").string();
  const SweepSpec spec = parse_sweep_spec(kSpec, "unit.yaml");
  { ResultDb::for_sweep(path, spec, Shard{0, 2}); }
  CHECK_NOTHROW(ResultDb::for_sweep(path, spec, Shard{0, 2}));
  CHECK_THROWS_WITH_AS(ResultDb::for_sweep(path, spec, Shard{1, 2}), doctest::Contains("holds shard 0/2"),
                       InputError);
  std::string other = kSpec;
  other.replace(other.find("16GB/s"), 6, "8GB/s");
  CHECK_THROWS_WITH_AS(ResultDb::for_sweep(path, parse_sweep_spec(other, "unit.yaml"), Shard{0, 2}),
                       doctest::Contains("holds the results of another sweep"), InputError);
  CHECK_THROWS_AS(ResultDb::open((dir / "missing.db").string()), InputError);
  // A database of another tierflow version, whose rows lack a column of this one, is not
  // resumed into: its rows and the new ones would not be the same table.
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
    CHECK(sqlite3_exec(raw, "ALTER TABLE results DROP COLUMN peak_gddr_gib", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
    sqlite3_close(raw);
  }
  CHECK_THROWS_WITH_AS(ResultDb::for_sweep(path, spec, Shard{0, 2}),
                       doctest::Contains("without 'peak_gddr_gib'); give a new -o"),
                       InputError);
  std::filesystem::remove_all(dir);
}

// How the points are taken (a tierflow point waits for a winner to probe with while the
// first runs; each probes with its own workload's last winner) changes only the work:
// with one job or three, every point is recorded once, with the same row.
TEST_CASE("sweep: the order points run in and their probes change no row") {
  const SweepSpec spec = parse_sweep_spec(R"(
name: order
base:
  hw: h100-sxm-8gpu
  model: llama-3-8b
  layers: 2
  context: 256
  tokens: 4
  tiers.hbm.capacity: 3GB
axes:
  - batch: [1, 8]
  - links.gpu-pcie.bandwidth: [16GB/s, 32GB/s, 64GB/s]
  - policy: [tierflow, resident, reactive]
)",
                                          "order.yaml");
  std::vector<ResultDb::Table> tables;
  for (const unsigned jobs : {1U, 3U}) {
    CAPTURE(jobs);
    ResultDb db = ResultDb::for_sweep(":memory:", spec, Shard{});
    SweepOptions o;
    o.jobs = jobs;
    const SweepSummary s = run_sweep(spec, db, o);
    CHECK(s.ran == 18);
    CHECK(s.failed == 0);
    CHECK(s.ok >= 12);  // the tierflow and reactive points
    tables.push_back(db.table());
    REQUIRE(tables.back().rows.size() == 18);
  }
  for (size_t r = 0; r < 18; ++r) {
    for (size_t c = 0; c < tables[0].columns.size(); ++c) {
      CAPTURE(r);
      CAPTURE(tables[0].columns[c]);
      CHECK(cell_text(tables[0].rows[r][c]) == cell_text(tables[1].rows[r][c]));
    }
  }
}

}  // namespace tierflow::study
