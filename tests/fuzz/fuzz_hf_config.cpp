// libFuzzer target: the Hugging Face config importer, strict and lenient. Whatever the
// strict import accepts, the lenient one accepts too.
#include <vector>

#include "tests/fuzz/fuzz_common.h"
#include "traces/arch.h"
#include "traces/hf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow;
  const std::string text = fuzz::text_of(data, size);
  const std::string name = "config.json";
  bool strict_ok = false;
  try {
    (void)traces::import_hf_config_text(text, name);
    strict_ok = true;
  } catch (const InputError& e) {
    fuzz::check_error(e, name);
  }
  std::vector<std::string> warnings;
  try {
    (void)traces::import_hf_config_text(text, name, {.lenient = true, .warnings = &warnings});
  } catch (const InputError& e) {
    fuzz::check_error(e, name);
    if (strict_ok) fuzz::fail("lenient import refuses what the strict one accepts", text, e.what());
  }
  return 0;
}
