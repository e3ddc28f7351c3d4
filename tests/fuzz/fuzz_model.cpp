// libFuzzer target: the model YAML loader (`tierflow: model/1`), with and without
// `require_sources`, and with an override of a field.
#include "tests/fuzz/fuzz_common.h"
#include "traces/arch_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow;
  const std::string text = fuzz::text_of(data, size);
  const std::string name = "fuzz.yaml";
  for (const bool cited : {false, true}) {
    try {
      (void)traces::load_arch_text(
          text, name, cited ? std::vector<std::string>{"layers=2"} : std::vector<std::string>{},
          cited);
    } catch (const InputError& e) {
      // An override's error names the flag, not the file.
      if (e.pos().file != "--set") fuzz::check_error(e, name);
    }
  }
  return 0;
}
