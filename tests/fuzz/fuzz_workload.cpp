// libFuzzer target: the workload JSON reader. The general reader and the shortcut for
// write_workload's own layout, on one thread and on two, must agree: the same workload
// (compared by its canonical text) or the same error. A workload read back from its
// canonical text must give that text again.
#include "core/workload_json.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace tierflow;

/// The canonical text of what `text` reads as, or "error: " and the error.
std::string outcome(const std::string& text, const WorkloadReadOptions& options) {
  const std::string name = "fuzz.json";
  try {
    return write_workload(read_workload_text(text, name, options));
  } catch (const InputError& e) {
    fuzz::check_error(e, name);
    return std::string("error: ") + e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = fuzz::text_of(data, size);
  const std::string general = outcome(text, {.shortcuts = false});
  const std::string shortcut = outcome(text, {.parallel_min_bytes = SIZE_MAX});
  if (general != shortcut)
    fuzz::fail("shortcut reader differs from the general one", general, shortcut);
  const std::string parallel = outcome(text, {.parallel_min_bytes = 0});
  if (general != parallel)
    fuzz::fail("two-thread reader differs from one thread", general, parallel);
  if (general.rfind("error: ", 0) != 0) {
    const std::string again = outcome(general, {});
    if (again != general) fuzz::fail("canonical text does not read back to itself", general, again);
  }
  return 0;
}
