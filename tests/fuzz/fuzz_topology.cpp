// libFuzzer target: the topology YAML loader (`tierflow: hw/1`), with and without
// `require_sources`.
#include "hw_models/loader.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow;
  const std::string text = fuzz::text_of(data, size);
  const std::string name = "fuzz.yaml";
  for (const bool cited : {false, true}) {
    try {
      (void)hw::load_topology_text(text, name, {.require_sources = cited});
    } catch (const InputError& e) {
      fuzz::check_error(e, name);
    }
  }
  return 0;
}
