// The export registry and its writers on tests/fixtures/plans/tiny.json over unit_hw.yaml
// (HBM raised to 4 KiB so that it runs). The tiny plan, program 0:
//   0 prefetch x from ddr (event 1)     5 detach w
//   1 prefetch w from ddr (event 2)     6 detach z, wait 3
//   2 compute norm, wait 1              7 detach x
//   3 compute mm, wait 2                8 detach y
//   4 store z to ddr (event 3)
// Goldens: tests/export/golden/; TIERFLOW_UPDATE_GOLDEN=1 rewrites them (review the diff).
#include "tools/export/export.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/plan_json.h"
#include "hw_models/loader.h"
#include "tests/support/scratch_dir.h"
#include "tools/export/step_table.h"
#include "tools/export/writers.h"

using namespace tierflow;
using namespace tierflow::exporter;

namespace {

const std::string kSource = TIERFLOW_SOURCE_DIR;
const std::string kTinyPlan = kSource + "/tests/fixtures/plans/tiny.json";

/// The tiny plan simulated, as run_export hands it to a writer.
struct Tiny {
  LoadedPlan lp = read_plan(kTinyPlan);
  hw::Topology topo = hw::load_topology(kSource + "/tests/fixtures/unit_hw.yaml",
                                        hw::LoadOptions{{"tiers.hbm.capacity=4KiB"}, false});
  std::vector<std::vector<sim::StepTime>> times;
  sim::SimResult result;
  hw::Binding bound = hw::bind(lp.plan, lp.workload, topo);
  ExportInput in{lp.plan, lp.workload, topo, kTinyPlan};

  Tiny() {
    sim::SimOptions so;
    so.step_times = &times;
    result = sim::simulate(*bound.bound, so);
    in.bound = &*bound.bound;
    in.sim = &result;
    in.step_times = &times;
  }
};

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Compares `text` with the golden file, or rewrites it under TIERFLOW_UPDATE_GOLDEN.
void check_golden(const std::string& text, const std::string& name) {
  const std::string path = kSource + "/tests/export/golden/" + name;
  if (std::getenv("TIERFLOW_UPDATE_GOLDEN") != nullptr) std::ofstream(path) << text;
  CHECK(text == read(path));
}

}  // namespace

TEST_CASE("registry: unique names, a writer each, did-you-mean for an unknown name") {
  std::vector<std::string_view> names;
  for (const Format& f : formats()) {
    CHECK(static_cast<bool>(f.write));
    CHECK(!f.description.empty());
    CHECK(std::find(names.begin(), names.end(), f.name) == names.end());
    names.push_back(f.name);
    CHECK(&find_format(f.name) == &f);
  }
  for (std::string_view want :
       {"chakra", "csv", "chrome", "plan-json", "report-json", "report-csv"}) {
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  }
  CHECK(find_format("chakra").output == OutputKind::kFolder);
  CHECK(find_format("chrome").sim == SimNeed::kTimeline);
  CHECK(find_format("plan-json").sim == SimNeed::kNone);
  try {
    (void)find_format("chakr");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.pos().file == "--format");
    CHECK(e.message().find("unknown format 'chakr'; did you mean 'chakra'?") != std::string::npos);
  }
  CHECK_THROWS_AS((void)find_format("report"), InputError);
  const std::string table = formats_table();
  for (const Format& f : formats()) CHECK(table.find(f.name) != std::string::npos);
}

TEST_CASE("step table: anchors, tiers, routes and times of the tiny plan") {
  Tiny t;
  REQUIRE(!t.result.error);
  const std::vector<StepRow> rows = step_rows(t.in, 0);
  REQUIRE(rows.size() == 9);
  CHECK(rows[0].anchor == -1);  // before the first compute step
  CHECK(rows[4].anchor == 3);   // the store after mm
  CHECK(rows[0].from_tier == "ddr");
  CHECK(rows[0].to_tier == "hbm");
  CHECK(rows[0].route == std::vector<std::string>{"pcie"});
  CHECK(rows[4].from_tier == "hbm");
  CHECK(rows[4].to_tier == "ddr");
  // The store, as `sim --transfers` reports it: issued 4559 ns, ends 4778 ns.
  CHECK(rows[4].issue_ps == 4'559'000);
  CHECK(rows[4].end_ps == 4'778'000);
  CHECK(rows[4].queue_ps == 0);
  // The compute engine's idle time before each op adds up to the device's stalls.
  int64_t stalls = 0;
  for (const StepRow& r : rows) {
    if (r.step->kind == StepKind::kCompute) {
      REQUIRE(r.stall_ps >= 0);
      stalls += r.stall_ps;
      CHECK(r.end_ps > r.start_ps);
    } else {
      CHECK(r.stall_ps == kUnset);
    }
  }
  const sim::DeviceResult& d = t.result.devices[0];
  CHECK(stalls == d.stall_transfer_ps + d.stall_memory_ps);
  // A detach is instantaneous, when its anchor (mm) has finished and event 3 completed.
  CHECK(rows[6].start_ps == rows[6].end_ps);
  CHECK(rows[6].start_ps == rows[4].end_ps);
}

TEST_CASE("csv: the pinned columns, and the tiny plan's rows") {
  std::string columns;
  for (std::string_view c : kStepColumns) columns += std::string(c) + "\n";
  check_golden(columns, "steps_columns.txt");
  Tiny t;
  const std::string csv = steps_csv(t.in);
  CHECK(csv.substr(0, csv.find('\n')) ==
        "program,device,step,kind,target,name,class,layer,bytes,flops,from_tier,to_tier,route,"
        "anchor_step,event,waits,issue_ps,start_ps,end_ps,duration_ps,queue_ps,stall_ps,"
        "exposed_ps");
  check_golden(csv, "tiny_steps.csv");
  Tiny again;
  CHECK(steps_csv(again.in) == csv);
}
