// Unit tests for sim/timeline: the streamed file is valid Chrome Trace Event JSON with exact
// microsecond times, the metadata and flow shapes Perfetto needs, and deterministic bytes.
#include "sim/timeline.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "tests/support/scratch_dir.h"

namespace tierflow::sim {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tierflow::testing::ScratchDir;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The events of a finished timeline, checking the document's outer shape on the way.
json events_of(const std::string& text) {
  const json doc = json::parse(text);  // throws (fails the test) on invalid JSON
  REQUIRE(doc.is_object());
  // Viewers read ts in microseconds whatever displayTimeUnit says; the metadata says so.
  CHECK(doc.at("displayTimeUnit") == "ns");
  CHECK(doc.at("otherData").at("ts_unit") == "us");
  CHECK(doc.at("otherData").at("dur_unit") == "us");
  CHECK(doc.at("otherData").at("ts_exact_from") == "integer picoseconds");
  REQUIRE(doc.at("traceEvents").is_array());
  return doc.at("traceEvents");
}

// Events with phase `ph` (and name `name`, when given).
std::vector<json> select(const json& events, std::string_view ph, std::string_view name = "") {
  std::vector<json> out;
  for (const json& e : events) {
    if (e.at("ph") == ph && (name.empty() || e.at("name") == name)) out.push_back(e);
  }
  return out;
}

// Whether `text` holds a number in exponent notation ("1e-06"), which times never use.
bool has_exponent(std::string_view text) {
  const auto digit = [&](size_t i) { return i < text.size() && text[i] >= '0' && text[i] <= '9'; };
  for (size_t i = 1; i + 1 < text.size(); ++i) {
    if ((text[i] == 'e' || text[i] == 'E') && digit(i - 1) &&
        (digit(i + 1) || text[i + 1] == '-' || text[i + 1] == '+')) {
      return true;
    }
  }
  return false;
}

// Writes a small timeline exercising every event kind; used for shape and determinism.
/// The sample's events, without finish().
void fill_sample(Timeline& t) {
  const ProcessId gpu = t.process("gpu0", /*sort_index=*/1);
  const ProcessId host = t.process("host", /*sort_index=*/0);
  const TrackId h2d0 = t.track(gpu, "h2d lane 0", /*sort_index=*/0);
  const TrackId h2d1 = t.track(gpu, "h2d lane 1", /*sort_index=*/1);
  const TrackId compute = t.track(gpu, "compute", /*sort_index=*/2);
  const TrackId cpu = t.track(host, "cpu", /*sort_index=*/0);
  // ps:   0        1'000'000   1'500'000    2'500'000
  // h2d0  [w0 .......]
  // h2d1       [w1 ..........]
  // comp                     [matmul ..........]
  const Arg w0_args[] = {{"bytes", uint64_t{4096}}, {"tensor", std::string_view("w0")}};
  t.slice(h2d0, 0, 1'000'000, "w0", "transfer", w0_args);
  t.slice(h2d1, 500'000, 1'500'000, "w1", "transfer");
  t.slice(compute, 1'500'000, 2'500'000, "matmul", "compute");
  t.slice(cpu, 0, 2'500'000, "step", "host");
  t.counter(gpu, "hbm bytes", 0, 0);
  t.counter(gpu, "hbm bytes", 1'000'000, 4096);
  t.counter(gpu, "hbm bytes", 1'500'000, 4096);  // unchanged: skipped
  t.counter(gpu, "hbm bytes", 1'500'000, 8192);
  t.flow(1, h2d0, 0, compute, 1'500'000, "w0");
  t.flow(2, h2d1, 500'000, compute, 1'500'000, "w1");
  const Arg err_args[] = {{"needed", int64_t{-3}}, {"ratio", 0.25}};
  t.instant(compute, 2'500'000, "out of memory", err_args);
}

void write_sample(const std::string& path) {
  Timeline t(path);
  fill_sample(t);
  t.finish();
}

TEST_CASE("Timeline: written into a command's output set, it appears with the set, same bytes") {
  ScratchDir dir("set");
  const std::string alone = dir.file("alone.json"), in_set = dir.file("set.json");
  write_sample(alone);
  tierflow::OutputSet set;
  {
    Timeline t(*set.open(in_set));
    fill_sample(t);
    t.finish();
  }
  CHECK_FALSE(std::filesystem::exists(in_set));  // finished, not yet published
  set.add(dir.file("report.txt"), "report\n");
  set.publish();
  CHECK(read_all(in_set) == read_all(alone));
}

TEST_CASE("Timeline: metadata names and orders processes and tracks with unique ids") {
  ScratchDir dir("meta");
  const std::string path = dir.file("t.json");
  write_sample(path);
  const json events = events_of(read_all(path));

  const auto pnames = select(events, "M", "process_name");
  REQUIRE(pnames.size() == 2);
  CHECK(pnames[0].at("pid") == 1);
  CHECK(pnames[0].at("args").at("name") == "gpu0");
  CHECK(pnames[1].at("pid") == 2);
  CHECK(pnames[1].at("args").at("name") == "host");
  const auto psort = select(events, "M", "process_sort_index");
  REQUIRE(psort.size() == 2);
  CHECK(psort[0].at("args").at("sort_index") == 1);
  CHECK(psort[1].at("args").at("sort_index") == 0);

  const auto tnames = select(events, "M", "thread_name");
  const auto tsort = select(events, "M", "thread_sort_index");
  REQUIRE(tnames.size() == 4);
  REQUIRE(tsort.size() == 4);
  std::set<int64_t> tids;
  for (size_t i = 0; i < tnames.size(); ++i) {
    tids.insert(tnames[i].at("tid").get<int64_t>());
    CHECK(tsort[i].at("tid") == tnames[i].at("tid"));
    CHECK(tsort[i].at("pid") == tnames[i].at("pid"));
  }
  // Unique across processes, and never a pid (a tid equal to a pid is that process's
  // main thread to Perfetto).
  CHECK(tids.size() == 4);
  CHECK(tids.count(1) == 0);
  CHECK(tids.count(2) == 0);
  CHECK(tnames[0].at("args").at("name") == "h2d lane 0");
  CHECK(tnames[3].at("pid") == 2);
  CHECK(tsort[2].at("args").at("sort_index") == 2);
}

TEST_CASE("Timeline: slices, counters, instants and args") {
  ScratchDir dir("events");
  const std::string path = dir.file("t.json");
  write_sample(path);
  const json events = events_of(read_all(path));

  const auto slices = select(events, "X");
  REQUIRE(slices.size() == 4);
  CHECK(slices[0].at("name") == "w0");
  CHECK(slices[0].at("cat") == "transfer");
  CHECK(slices[0].at("ts") == 0.0);
  CHECK(slices[0].at("dur") == 1.0);
  CHECK(slices[0].at("args").at("bytes") == 4096);
  CHECK(slices[0].at("args").at("tensor") == "w0");
  CHECK_FALSE(slices[1].contains("args"));

  // 0 -> 4096 -> (4096 skipped) -> 8192.
  const auto counters = select(events, "C", "hbm bytes");
  REQUIRE(counters.size() == 3);
  CHECK(counters[0].at("args").at("value") == 0);
  CHECK(counters[1].at("args").at("value") == 4096);
  CHECK(counters[2].at("args").at("value") == 8192);
  CHECK(counters[2].at("ts") == 1.5);
  CHECK(counters[2].at("pid") == 1);

  const auto instants = select(events, "i");
  REQUIRE(instants.size() == 1);
  CHECK(instants[0].at("s") == "t");
  CHECK(instants[0].at("name") == "out of memory");
  CHECK(instants[0].at("args").at("needed") == -3);
  CHECK(instants[0].at("args").at("ratio") == 0.25);
  CHECK(instants[0].at("tid") == slices[2].at("tid"));
}

TEST_CASE("Timeline: a counter with keys writes one value per key, stacked") {
  ScratchDir dir("stacked");
  const std::string path = dir.file("t.json");
  {
    Timeline t(path);
    const ProcessId mem = t.process("memory", 0);
    const std::string_view keys[] = {"weight", "kv", "workspace"};
    const SeriesId s = t.series(mem, "hbm[0] bytes by kind", keys);
    CHECK(t.series(mem, "hbm[0] bytes by kind", keys) == s);  // the same series
    const double v0[] = {0, 0, 0};
    const double v1[] = {4096, 512, 0};
    const double v2[] = {4096, 512, 64};
    t.counter(s, 0, v0);
    t.counter(s, 1'000'000, v1);
    t.counter(s, 1'500'000, v1);  // unchanged: skipped
    t.counter(s, 2'000'000, v2);
    t.finish();
  }
  const std::string text = read_all(path);
  // Keys in the order given, every key in every sample (chrome://tracing stacks series
  // in key order and needs each in every sample).
  CHECK(
      text.find(
          R"("ts":1.000000,"name":"hbm[0] bytes by kind","args":{"weight":4096,"kv":512,"workspace":0}})") !=
      std::string::npos);
  const auto samples = select(events_of(text), "C", "hbm[0] bytes by kind");
  REQUIRE(samples.size() == 3);
  CHECK(samples[0].at("args").size() == 3);
  CHECK(samples[2].at("ts") == 2.0);
  CHECK(samples[2].at("args").at("workspace") == 64);
}

TEST_CASE("Timeline: flows are s/f pairs with one id, cat and name, bound to enclosing slices") {
  ScratchDir dir("flow");
  const std::string path = dir.file("t.json");
  write_sample(path);
  const json events = events_of(read_all(path));
  const auto starts = select(events, "s");
  const auto finishes = select(events, "f");
  REQUIRE(starts.size() == 2);
  REQUIRE(finishes.size() == 2);
  const auto slices = select(events, "X");
  for (size_t i = 0; i < 2; ++i) {
    const json& s = starts[i];
    const json& f = finishes[i];
    CHECK(s.at("id") == f.at("id"));
    CHECK(s.at("cat") == f.at("cat"));
    CHECK(s.at("name") == f.at("name"));
    CHECK(f.at("bp") == "e");
    CHECK_FALSE(s.contains("bp"));
    // Each end lies on its slice's track, at that slice's start.
    CHECK(s.at("tid") == slices[i].at("tid"));
    CHECK(s.at("ts") == slices[i].at("ts"));
    CHECK(f.at("tid") == slices[2].at("tid"));
    CHECK(f.at("ts") == slices[2].at("ts"));
  }
  CHECK(starts[0].at("id") == 1);
  CHECK(starts[1].at("id") == 2);
  CHECK(starts[0].at("cat") == "flow");
  CHECK(starts[0].at("name") == "w0");

  // Written after both of its slices, so that viewers that break equal-time ties by file
  // order open the slice before binding the flow to it.
  const std::string text = read_all(path);
  CHECK(text.find(R"("name":"matmul")") < text.find(R"({"ph":"s")"));
}

TEST_CASE("Timeline: ts and dur are exact microseconds printed from integer picoseconds") {
  ScratchDir dir("time");
  const std::string path = dir.file("t.json");
  {
    Timeline t(path);
    const TrackId tr = t.track(t.process("p", 0), "t", 0);
    // start, end: the raw ts and dur the file must contain.
    t.slice(tr, 0, 1, "a", "c");                  // ts 0.000000, dur 0.000001
    t.slice(tr, 1, 1'000'000, "b", "c");          // ts 0.000001, dur 0.999999
    t.slice(tr, 999'999, 1'000'000, "c", "c");    // ts 0.999999, dur 0.000001
    t.slice(tr, 1'000'000, 1'000'000, "d", "c");  // ts 1.000000, dur 0.000000
    t.slice(tr, 123'456'789'012, 123'456'789'012 + 7'000'000'000'000, "e", "c");
    t.counter(1, "k", 123'456'789'012, 1);  // ts 123456.789012
    t.finish();
  }
  const std::string text = read_all(path);
  CHECK(text.find(R"("ts":0.000000,"dur":0.000001,"name":"a")") != std::string::npos);
  CHECK(text.find(R"("ts":0.000001,"dur":0.999999,"name":"b")") != std::string::npos);
  CHECK(text.find(R"("ts":0.999999,"dur":0.000001,"name":"c")") != std::string::npos);
  CHECK(text.find(R"("ts":1.000000,"dur":0.000000,"name":"d")") != std::string::npos);
  CHECK(text.find(R"("ts":123456.789012,"dur":7000000.000000,"name":"e")") != std::string::npos);
  CHECK(text.find(R"("ts":123456.789012,"name":"k")") != std::string::npos);
  CHECK(has_exponent(R"("ts":1e-06)"));  // the check can fail
  CHECK_FALSE(has_exponent(text));

  // Parsed as doubles they are as close as a double gets.
  const auto slices = select(events_of(text), "X");
  REQUIRE(slices.size() == 5);
  CHECK(slices[1].at("ts").get<double>() == doctest::Approx(0.000001).epsilon(1e-12));
  CHECK(slices[4].at("ts").get<double>() == doctest::Approx(123456.789012).epsilon(1e-15));
}

TEST_CASE("Timeline: strings are escaped and always valid UTF-8") {
  ScratchDir dir("escape");
  const std::string path = dir.file("t.json");
  const std::string tricky = "q\"uote \\back\\ slash\nnew\tline\r\x01\x1f end";
  const std::string unicode =
      "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x9A\x80";  // café 日本 🚀
  const std::string broken = "bad\xFF byte \xC3 cut \xED\xA0\x80 surrogate";
  {
    Timeline t(path);
    const ProcessId p = t.process(tricky, 0);
    const TrackId tr = t.track(p, unicode, 0);
    const Arg args[] = {{tricky, std::string_view(unicode)}, {"b", std::string_view(broken)}};
    t.slice(tr, 0, 10, broken, "c\"at", args);
    t.finish();
  }
  const std::string text = read_all(path);
  const json events = events_of(text);  // nlohmann rejects invalid UTF-8 too
  CHECK(select(events, "M", "process_name")[0].at("args").at("name") == tricky);
  CHECK(select(events, "M", "thread_name")[0].at("args").at("name") == unicode);
  const json slice = select(events, "X")[0];
  CHECK(slice.at("cat") == "c\"at");
  CHECK(slice.at("args").at(tricky) == unicode);
  // Each byte that is not UTF-8 becomes U+FFFD.
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string repaired =
      "bad" + fffd + " byte " + fffd + " cut " + fffd + fffd + fffd + " surrogate";
  CHECK(slice.at("name") == repaired);
  CHECK(slice.at("args").at("b") == repaired);
  // Control characters are escaped, never raw.
  CHECK(text.find('\x01') == std::string::npos);
  CHECK(text.find("\\u0001") != std::string::npos);
  CHECK(text.find("\\u001f") != std::string::npos);
}

TEST_CASE("Timeline: argument values of every kind") {
  ScratchDir dir("args");
  const std::string path = dir.file("t.json");
  {
    Timeline t(path);
    const TrackId tr = t.track(t.process("p", 0), "t", 0);
    const Arg args[] = {
        {"i64", std::numeric_limits<int64_t>::min()},
        {"u64", std::numeric_limits<uint64_t>::max()},
        {"d", 1e-7},
        {"big", 1e300},
        {"s", std::string_view("v")},
    };
    t.slice(tr, 0, 1, "a", "c", args);
    t.finish();
  }
  const json a = select(events_of(read_all(path)), "X")[0].at("args");
  CHECK(a.at("i64").get<int64_t>() == std::numeric_limits<int64_t>::min());
  CHECK(a.at("u64").get<uint64_t>() == std::numeric_limits<uint64_t>::max());
  CHECK(a.at("d").get<double>() == 1e-7);
  CHECK(a.at("big").get<double>() == 1e300);
  CHECK(a.at("s") == "v");
}

TEST_CASE("Timeline: the same calls give byte-identical files") {
  ScratchDir dir("determinism");
  write_sample(dir.file("a.json"));
  write_sample(dir.file("b.json"));
  const std::string a = read_all(dir.file("a.json"));
  CHECK_FALSE(a.empty());
  CHECK(a == read_all(dir.file("b.json")));
}

TEST_CASE("Timeline: an empty timeline is a valid document") {
  ScratchDir dir("empty");
  const std::string path = dir.file("t.json");
  {
    Timeline t(path);
    t.finish();
  }
  CHECK(events_of(read_all(path)).empty());
}

TEST_CASE("Timeline: events stream to disk; unfinished timelines leave no file") {
  ScratchDir dir("stream");
  const std::string path = dir.file("t.json");
  {
    Timeline t(path);
    const TrackId tr = t.track(t.process("p", 0), "t", 0);
    // ~100 bytes per slice: 40000 slices are several times the 1 MiB output buffer.
    for (int64_t i = 0; i < 40'000; ++i) t.slice(tr, i * 10, i * 10 + 5, "s", "c");
    CHECK_FALSE(fs::exists(path));
    REQUIRE(dir.entry_count() == 1);  // the temp file, already holding most events
    const auto temp = fs::directory_iterator(dir.file(""))->path();
    CHECK(fs::file_size(temp) > (size_t{2} << 20));
    // Destroyed without finish(): an aborted run.
  }
  CHECK(dir.entry_count() == 0);
}

TEST_CASE("Lanes: the lowest free lane, reused after release") {
  Lanes lanes;
  CHECK(lanes.count() == 0);
  CHECK(lanes.acquire() == 0);
  CHECK(lanes.acquire() == 1);
  lanes.release(0);
  CHECK(lanes.acquire() == 0);
  CHECK(lanes.acquire() == 2);
  CHECK(lanes.count() == 3);
  // Releasing 2 then 1 hands out 1 first: the lowest, not the most recent.
  lanes.release(2);
  lanes.release(1);
  CHECK(lanes.acquire() == 1);
  CHECK(lanes.acquire() == 2);
  CHECK(lanes.acquire() == 3);
  CHECK(lanes.count() == 4);
}

}  // namespace
}  // namespace tierflow::sim
