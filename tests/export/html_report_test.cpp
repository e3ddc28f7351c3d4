// Unit tests for tools/export/html_report: the page of a small simulated plan on
// tests/fixtures/unit_hw.yaml (its sections, plots and escaped names), a stopped run, a
// comparison, determinism, and the size of the page of a very long run.
#include "tools/export/html_report.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/diagnostics.h"
#include "hw_models/loader.h"
#include "tools/export/report_sections.h"

namespace tierflow::exporter {
namespace {

constexpr uint32_t kHbm = 0, kDdr = 1;

size_t count(const std::string& text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The plan of tests/sim/recorder_test.cpp with names that need escaping: x (64 B, home ddr)
// is prefetched while norm0 runs; norm1 waits 49 ns for it.
ReportRun small_run(std::vector<std::string> sets = {}, std::string name = "plan <A&B>") {
  ReportRun r;
  r.file = "dir/p\"1\".json";
  Workload& w = r.plan.workload;
  w.name = "tiny <wl>";
  w.meta["model"] = "\"m<1>\"";
  const uint32_t h = w.add_tensor({"h", 32, TensorKind::kWeight});
  const uint32_t x = w.add_tensor({"x<script>", 64, TensorKind::kWeight});
  const uint32_t a = w.add_tensor({"a", 16, TensorKind::kActivation});
  const uint32_t b = w.add_tensor({"b", 16, TensorKind::kOutput});
  w.add_op({"norm0", OpKind::kNorm, Dtype::kBf16, 160, 128, {h}, {a}});
  w.add_op({"norm1 \"quoted\"", OpKind::kNorm, Dtype::kBf16, 100, 64, {x, a}, {b}});
  Plan& p = r.plan.plan;
  p.name = std::move(name);
  p.meta["policy"] = "\"layerwise\"";
  p.budget = 128;  // its peak: h, x, a and b live at once
  p.meta["bounds_makespan_ps"] = "300000";
  p.tiers = {"hbm", "ddr"};
  p.device_tier = kHbm;
  p.home = {kHbm, kDdr, kHbm, kHbm};
  p.programs = {Program{
      0,
      {Step{StepKind::kPrefetch, x, kDdr, 1, {}}, Step{StepKind::kCompute, 0, 0, kNoEvent, {}},
       Step{StepKind::kCompute, 1, 0, kNoEvent, {1}}, Step{StepKind::kDetach, x, 0, kNoEvent, {}},
       Step{StepKind::kDetach, h, 0, kNoEvent, {}}}}};
  REQUIRE_FALSE(verify_plan(p, w).has_value());
  r.sets = std::move(sets);
  r.topology = hw::load_topology(std::string(TIERFLOW_SOURCE_DIR) + "/tests/fixtures/unit_hw.yaml",
                                 hw::LoadOptions{r.sets, false});
  simulate_for_report(r, sim::OnFull::kFail);
  return r;
}

TEST_CASE("the page of one run: summary, plots, waits, every name escaped") {
  std::vector<ReportRun> runs;
  // Room above the plan's budget: the plot draws both lines.
  runs.push_back(small_run({"links.pcie.copy_engines=1", "tiers.hbm.capacity=256B"}));
  REQUIRE_FALSE(runs[0].result.error.has_value());
  const std::string page = html_report(runs);
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.substr(page.size() - 8) == "</html>\n");
  // Self-contained: nothing fetched, nothing run.
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("src=") == std::string::npos);
  CHECK(page.find("href=\"http") == std::string::npos);
  CHECK(page.find("@import") == std::string::npos);
  // Names from the files, escaped.
  CHECK(page.find("plan &lt;A&amp;B&gt;") != std::string::npos);
  CHECK(page.find("x&lt;script&gt;") != std::string::npos);
  CHECK(page.find("norm1 &quot;quoted&quot;") != std::string::npos);
  CHECK(page.find("dir/p&quot;1&quot;.json") != std::string::npos);
  CHECK(page.find("model=m&lt;1&gt;") != std::string::npos);
  CHECK(page.find("plan <A&B>") == std::string::npos);
  // Header: makespan 329 ns, the bound and gap, the override, the policy.
  CHECK(page.find("329ns") != std::string::npos);
  CHECK(page.find("makespan &ge; 300ns (gap 1.097&times;)") != std::string::npos);
  CHECK(page.find("--set links.pcie.copy_engines=1") != std::string::npos);
  CHECK(page.find(">layerwise") != std::string::npos);
  // Plots: activity, hbm[0] and ddr[0] stacked by kind, the pcie direction that carried x.
  CHECK(count(page, "<svg") == 4);
  CHECK(page.find("hbm[0] bytes by tensor kind") != std::string::npos);
  CHECK(page.find("ddr[0] bytes by tensor kind") != std::string::npos);
  CHECK(page.find("pcie[0] rc-&gt;hbm rate") != std::string::npos);
  CHECK(page.find("of its 256B (off scale); budget 128B") != std::string::npos);
  CHECK(page.find(">budget 128B</text>") != std::string::npos);  // hbm peaks at all of it
  CHECK(page.find(">capacity 1 GB/s</text>") != std::string::npos);
  CHECK(page.find("time (ns)") != std::string::npos);
  // Kind colours: weight, activation and output on hbm[0].
  CHECK(page.find(std::string("fill=\"") + std::string(kind_color(0)) + "\"") != std::string::npos);
  CHECK(page.find(std::string("fill=\"") + std::string(kind_color(6)) + "\"") != std::string::npos);
  // The one exposed wait: norm1 waited 49 ns for x, from ddr over pcie.
  CHECK(page.find("1 wait: 49ns waiting for transfers") != std::string::npos);
  CHECK(page.find("step 2 (norm1 &quot;quoted&quot;)") != std::string::npos);
  CHECK(page.find("ddr -&gt; rc -[pcie]-&gt; hbm") != std::string::npos);
  // Same runs, same bytes.
  CHECK(html_report(runs) == page);
  CHECK(report_exit_code(runs) == 0);
}

TEST_CASE("a run that stops is drawn up to the stop with the error on top") {
  std::vector<ReportRun> runs;
  // 100 B of hbm: x (64 B) does not fit beside h (32 B) and a (16 B) once norm0 starts.
  runs.push_back(small_run({"tiers.hbm.capacity=100B"}));
  REQUIRE(runs[0].result.error.has_value());
  CHECK(runs[0].result.error->kind == sim::SimError::Kind::kCapacity);
  const std::string page = html_report(runs);
  const size_t error = page.find("<div class=\"error\" role=\"alert\">");
  REQUIRE(error != std::string::npos);
  CHECK(error < page.find("<svg"));  // above every plot
  CHECK(page.find("The simulation stopped at 0ps: capacity") != std::string::npos);
  CHECK(page.find("&#39;hbm[0]&#39; is over capacity") != std::string::npos);
  CHECK(report_exit_code(runs) == 1);
}

TEST_CASE("several runs: a comparison with bars, then each run") {
  std::vector<ReportRun> runs;
  runs.push_back(small_run({}, "fast"));
  runs.push_back(small_run({"links.pcie.bandwidth=0.5GB/s"}, "slow"));
  const std::string page = html_report(runs);
  const size_t compare = page.find("<h2>Policy comparison</h2>");
  REQUIRE(compare != std::string::npos);
  CHECK(compare < page.find("id=\"run1\""));
  CHECK(page.find("id=\"run2\"") != std::string::npos);
  CHECK(count(page, "<svg class=\"bars\"") == 4);
  // Both are layerwise plans, so the bars are named by plan.
  CHECK(page.find(">fast</text>") != std::string::npos);
  CHECK(page.find(">slow</text>") != std::string::npos);
  // The slow one takes 64 ns more for x: 393 ns, 1.195 times the fast one.
  CHECK(page.find("1.195&times;") != std::string::npos);
}

TEST_CASE("a long run's page stays small: series are drawn per pixel") {
  std::vector<ReportRun> runs;
  runs.push_back(small_run());
  ReportRun& r = runs[0];
  // Replace the series with a million memory changes, 200,000 ops and 100,000 rate changes
  // over 1 s, as a long decode would give.
  sim::SimSeries big;
  big.tiers.push_back(r.series.tiers[0]);
  big.tiers[0].changes.clear();
  for (sim::Time t = 0; t < 1'000'000; ++t) {
    big.tiers[0].changes.push_back({t * 1'000'000, uint64_t(t % 97), uint32_t(t % 3 == 0 ? 0 : 1)});
  }
  for (uint32_t i = 0; i < 200'000; ++i) {
    const sim::Time t = sim::Time{i} * 5'000'000;
    big.compute.push_back({0, 1, 0, t, t + 3'000'000});
    big.stalls.push_back({0, 1, t + 3'000'000, t + 5'000'000, i % 2 == 0});
  }
  big.links.push_back(r.series.links[0]);
  big.links[0].changes.clear();
  for (sim::Time t = 0; t < 100'000; ++t) {
    big.links[0].changes.push_back({t * 10'000'000, double(t % 2) * 1e9});
  }
  r.series = std::move(big);
  r.result.makespan = 1'000'000'000'000;  // 1 s
  const std::string page = html_report(runs);
  CHECK(page.size() < size_t{1} << 20);
  CHECK(page.find("time (s)") != std::string::npos);
}

}  // namespace
}  // namespace tierflow::exporter
