// write_workload's layout: finding its sections, and reading through its shortcuts (line
// readers, ops on a second thread) gives exactly what the general reader gives, results
// and errors alike.
#include "core/workload_layout.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/diagnostics.h"
#include "core/workload_json.h"

using namespace tierflow;

namespace {

// Two layers of x -> norm -> matmul(w) -> y with a KV update, a collective, a workspace
// and a fractional FLOP count: every optional field of both object kinds.
Workload sample() {
  Workload w;
  w.name = "sample";
  w.meta["layers"] = "2";
  uint32_t x = w.add_tensor({"x", 64, TensorKind::kInput, Dtype::kBf16, kExternal, -1});
  for (int l = 0; l < 2; ++l) {
    const std::string p = fmt::format("L{}.", l);
    const uint32_t wt =
        w.add_tensor({p + "w", 2048, TensorKind::kWeight, Dtype::kFp8, kExternal, l});
    const uint32_t kv = w.add_tensor({p + "kv", 512, TensorKind::kKv, Dtype::kBf16, kExternal, l});
    const uint32_t n =
        w.add_tensor({p + "n", 64, TensorKind::kActivation, Dtype::kBf16, kExternal, l});
    const uint32_t y =
        w.add_tensor({p + "y", 64, TensorKind::kActivation, Dtype::kFp32, kExternal, l});
    w.add_op({p + "norm", OpKind::kNorm, Dtype::kBf16, 160.5, 128, {x}, {n}, {}, 0, l, 0});
    w.add_op({p + "mm", OpKind::kMatmul, Dtype::kBf16, 2048, 2176, {n, wt}, {y}, {kv}, 256, l, 0});
    x = y;
  }
  const uint32_t out = w.add_tensor({"out", 64, TensorKind::kOutput, Dtype::kBf16, kExternal, -1});
  w.add_op({"reduce", OpKind::kCollective, Dtype::kBf16, 0, 128, {x}, {out}, {}, 0, -1, 64});
  return w;
}

const WorkloadReadOptions kGeneral{/*parallel_min_bytes=*/SIZE_MAX, /*shortcuts=*/false};
const WorkloadReadOptions kShortcuts{/*parallel_min_bytes=*/SIZE_MAX, /*shortcuts=*/true};
const WorkloadReadOptions kParallel{/*parallel_min_bytes=*/0, /*shortcuts=*/true};
const WorkloadReadOptions kParallelGeneral{/*parallel_min_bytes=*/0, /*shortcuts=*/false};

/// The workload written back, or "error: " and the message.
std::string outcome(const std::string& text, const WorkloadReadOptions& options) {
  try {
    return write_workload(read_workload_text(text, "w.json", options));
  } catch (const InputError& e) {
    return std::string("error: ") + e.what();
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("the layout of a written workload is found from the tensors' '['") {
  const std::string text = write_workload(sample());
  const size_t tensors_at = text.find("\"tensors\": [") + 11;
  const WorkloadLayout layout = guess_workload_layout(text, tensors_at);
  CHECK(layout.ops_at == text.find("\"ops\": [") + 7);
  CHECK(layout.tensors == 10);
  CHECK(layout.ops == 5);
  // Anything else is no layout: a one-line file, or a '[' that is not the tensors'.
  const std::string one_line = "{\"tensors\": [{\"id\": 0}], \"ops\": []}";
  CHECK(guess_workload_layout(one_line, one_line.find('[')).ops_at == std::string::npos);
  CHECK(guess_workload_layout(text, 0).ops_at == std::string::npos);
}

TEST_CASE("every way of reading gives the same workload") {
  const std::string text = write_workload(sample());
  for (const auto& options : {kGeneral, kShortcuts, kParallel, kParallelGeneral}) {
    CHECK(outcome(text, options) == text);
  }
}

TEST_CASE("every way of reading gives the same error on each bad-workload fixture") {
  const auto dir = std::filesystem::path(TIERFLOW_SOURCE_DIR) / "tests/errors/workload";
  int fixtures = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++fixtures;
    const std::string text = read_file(entry.path());
    const std::string want = outcome(text, kGeneral);
    CAPTURE(entry.path().filename().string());
    CHECK(want.starts_with("error: "));
    CHECK(outcome(text, kShortcuts) == want);
    CHECK(outcome(text, kParallel) == want);
  }
  CHECK(fixtures > 40);
}

TEST_CASE("every way of reading agrees on damaged workloads") {
  // Seeded random edits of a written workload: a byte deleted, inserted or replaced, by
  // the characters that matter to JSON and to the layout. Whatever the general reader
  // makes of each (a workload or an error), the shortcuts make the same.
  const std::string text = write_workload(sample());
  const std::string alphabet = "{}[],:\" \n0123456789-.eE\\aozL";
  std::mt19937 rng(20240917);  // seed: any fixed value
  int errors = 0;
  for (int n = 0; n < 1500; ++n) {
    std::string bad = text;
    const size_t at = std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng);
    const char c = alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    switch (n % 3) {
      case 0:
        bad.erase(at, 1);
        break;
      case 1:
        bad.insert(at, 1, c);
        break;
      default:
        bad[at] = c;
        break;
    }
    const std::string want = outcome(bad, kGeneral);
    errors += want.starts_with("error: ") ? 1 : 0;
    CAPTURE(n);
    CAPTURE(bad);
    REQUIRE(outcome(bad, kShortcuts) == want);
    REQUIRE(outcome(bad, kParallel) == want);
  }
  CHECK(errors > 500);  // most edits break the file; the rest must read the same too
}
