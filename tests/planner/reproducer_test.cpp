// Unit tests for planner/reproducer: the file a failed pass leaves is valid JSON whatever the
// names in it.
#include "planner/reproducer.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace tierflow::planner {
namespace {

TEST_CASE("reproducer: names with quotes and backslashes read back as they were") {
  Reproducer r;
  r.workload = R"(runs\a "b".json)";
  r.workload_sha256 = "00ff";
  r.topology = "configs/hw/h100-sxm-8gpu.yaml";
  r.pipeline = "place,liveness,select,insert";
  r.budget = 314572800;
  // A pass's message names the tensor and op, which come from the workload file.
  r.failure = R"(insert: tensor 'w"q\0' of op 'mm\"x' has no room)";
  const std::string text = reproducer_json(r);
  CHECK(text.back() == '\n');
  const nlohmann::json j = nlohmann::json::parse(text);
  CHECK(j.at("format") == "tierflow.reproducer/1");
  CHECK(j.at("workload") == r.workload);
  CHECK(j.at("workload_sha256") == r.workload_sha256);
  CHECK(j.at("topology") == r.topology);
  CHECK(j.at("pipeline") == r.pipeline);
  CHECK(j.at("budget") == r.budget);
  CHECK(j.at("failure") == r.failure);
}

TEST_CASE("reproducer: the layout is one member a line") {
  Reproducer r{"w.json", "ab", "t.yaml", "place", 7, "broke"};
  CHECK(reproducer_json(r) ==
        "{\n  \"format\": \"tierflow.reproducer/1\",\n  \"workload\": \"w.json\",\n"
        "  \"workload_sha256\": \"ab\",\n  \"topology\": \"t.yaml\",\n  \"pipeline\": \"place\",\n"
        "  \"budget\": 7,\n  \"failure\": \"broke\"\n}\n");
}

}  // namespace
}  // namespace tierflow::planner
