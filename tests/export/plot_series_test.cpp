// Unit tests for tools/export/plot_series: buckets, the per-bucket peaks of step functions,
// the stacked kinds at the peak of their total, and coverage of intervals.
#include "tools/export/plot_series.h"

#include <doctest/doctest.h>

#include <vector>

namespace tierflow::exporter {
namespace {

constexpr uint32_t kWeight = 0, kKv = 2, kWorkspace = uint32_t(sim::kWorkspaceKind);

TEST_CASE("buckets: whole-picosecond widths that cover the window") {
  // 1000 ps in at most 300 buckets: width ceil(1000 / 300) = 4 ps, 250 buckets.
  const Buckets b = make_buckets(0, 1000, 300);
  CHECK(b.width == 4);
  CHECK(b.count == 250);
  CHECK(b.index(0) == 0);
  CHECK(b.index(3) == 0);
  CHECK(b.index(4) == 1);
  CHECK(b.index(999) == 249);
  CHECK(b.index(5000) == 249);  // clamped
  CHECK(b.start(250) == 1000);
  // Fewer picoseconds than buckets: one bucket per picosecond.
  const Buckets small = make_buckets(0, 7, 1000);
  CHECK(small.width == 1);
  CHECK(small.count == 7);
  // An empty window still has one bucket.
  CHECK(make_buckets(0, 0, 10).count == 1);
}

TEST_CASE("bucket peaks: a spike shorter than a bucket still shows at full height") {
  // Rate: 0 until 5, 10 in [5, 6), 2 from 6 on. Buckets of 10 ps over [0, 30).
  const std::vector<sim::RateChange> rate = {{5, 10}, {6, 2}};
  const Buckets b = make_buckets(0, 30, 3);
  REQUIRE(b.width == 10);
  // Bucket 0 holds the spike; bucket 1 starts at the value held (2) and stays there.
  CHECK(bucket_peaks(rate, b) == std::vector<double>{10, 2, 2});
  // Before the first change the value is 0.
  CHECK(bucket_peaks({{25, 1}}, b) == std::vector<double>{0, 0, 1});
}

TEST_CASE("stacked kinds: the composition at the first instant the total peaks") {
  // Buckets of 10 ps over [0, 20).
  //   t=0   weight 100
  //   t=2   kv 50                    total 150
  //   t=4   weight 40, workspace 100 total 190  <- peak of bucket 0 (both at one instant)
  //   t=6   workspace 0              total 90
  //   t=12  kv 80                    total 120  <- bucket 1 starts at 90, peaks at 120
  sim::TierSeries s;
  s.changes = {{0, 100, kWeight},    {2, 50, kKv},       {4, 40, kWeight},
               {4, 100, kWorkspace}, {6, 0, kWorkspace}, {12, 80, kKv}};
  const Buckets b = make_buckets(0, 20, 2);
  const KindStack k = stack_kinds(s, b);
  REQUIRE(k.bytes.size() == 2);
  CHECK(k.bytes[0][kWeight] == 40);
  CHECK(k.bytes[0][kKv] == 50);
  CHECK(k.bytes[0][kWorkspace] == 100);
  CHECK(k.bytes[1][kWeight] == 40);
  CHECK(k.bytes[1][kKv] == 80);
  CHECK(k.bytes[1][kWorkspace] == 0);
  CHECK(k.peak == 190);
  CHECK(k.kinds == ((1U << kWeight) | (1U << kKv) | (1U << kWorkspace)));
}

TEST_CASE("stacked kinds: a million changes become one value per bucket") {
  sim::TierSeries s;
  // A sawtooth: weight climbs 1 byte per ps for 1000 ps, then drops to 0, 1000 times.
  for (sim::Time t = 0; t < 1'000'000; ++t) {
    s.changes.push_back({t, static_cast<uint64_t>(t % 1000), kWeight});
  }
  const Buckets b = make_buckets(0, 1'000'000, 500);
  const KindStack k = stack_kinds(s, b);
  REQUIRE(k.bytes.size() == 500);
  // Each bucket spans 2000 ps, two teeth: its peak is the top of a tooth.
  for (const auto& bytes : k.bytes) CHECK(bytes[kWeight] == 999);
  CHECK(k.peak == 999);
}

TEST_CASE("coverage: the union of overlapping intervals, split at bucket edges") {
  // Buckets of 10 ps over [0, 30). Spans [2, 8) and [5, 15) overlap: union [2, 15);
  // [25, 40) is cut at the window's end.
  const Buckets b = make_buckets(0, 30, 3);
  const std::vector<Span> spans = {{25, 40}, {5, 15}, {2, 8}};
  CHECK(coverage(spans, b) == std::vector<sim::Time>{8, 5, 5});
  CHECK(coverage({}, b) == std::vector<sim::Time>{0, 0, 0});
}

TEST_CASE("cumulative: running sums of layers") {
  const auto c = cumulative({{1, 2}, {10, 20}, {100, 200}});
  REQUIRE(c.size() == 3);
  CHECK(c[0] == std::vector<double>{1, 2});
  CHECK(c[1] == std::vector<double>{11, 22});
  CHECK(c[2] == std::vector<double>{111, 222});
}

}  // namespace
}  // namespace tierflow::exporter
