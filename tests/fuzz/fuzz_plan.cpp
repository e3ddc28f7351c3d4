// libFuzzer target: the plan JSON reader, with its §6 verification and without, and the
// writer: a plan read back from its own text must give that text again. Workload files a
// plan names are looked up in tests/fixtures/plans (TIERFLOW_FUZZ_PLAN_DIR).
#include "core/plan_json.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow;
  const std::string text = fuzz::text_of(data, size);
  const std::string name = "fuzz.json";
  const std::string dir = TIERFLOW_FUZZ_PLAN_DIR;
  bool unverified_ok = false;
  try {
    (void)read_plan_text(text, name, dir, /*verify=*/false);
    unverified_ok = true;
  } catch (const InputError& e) {
    fuzz::check_error(e, name);
  }
  try {
    const LoadedPlan loaded = read_plan_text(text, name, dir, /*verify=*/true);
    if (!unverified_ok) fuzz::fail("verified read succeeds where the format check fails", text, "");
    const std::string canonical = write_plan(loaded.plan, &loaded.workload);
    const LoadedPlan again = read_plan_text(canonical, name, dir, true);
    const std::string second = write_plan(again.plan, &again.workload);
    if (second != canonical)
      fuzz::fail("canonical plan does not read back to itself", canonical, second);
  } catch (const InputError& e) {
    fuzz::check_error(e, name);
  }
  return 0;
}
