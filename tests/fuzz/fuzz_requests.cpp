// libFuzzer target: the request-trace readers (Mooncake JSON Lines, Azure CSV, and the
// sniffing between them). Bad input is an InputError naming the file; what is accepted is a
// trace the engine can take: sorted by arrival, numbered, every request's blocks exactly
// covering its prompt.
#include "tests/fuzz/fuzz_common.h"
#include "traces/requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow;
  const std::string text = fuzz::text_of(data, size);
  const std::string name = "trace";
  for (const bool azure : {false, true}) {
    try {
      const traces::RequestTrace t = azure ? traces::parse_azure(text, name, {})
                                           : traces::parse_mooncake(text, name, {});
      if (t.requests.empty()) fuzz::fail("an empty trace accepted", text, t.source);
      for (size_t i = 0; i < t.requests.size(); ++i) {
        const traces::Request& r = t.requests[i];
        const uint64_t blocks = (r.prompt_tokens + t.block_tokens - 1) / t.block_tokens;
        if (r.id != i || r.prompt_tokens == 0 || r.output_tokens == 0 || r.blocks.size() != blocks ||
            r.arrival_ps < 0 || (i > 0 && r.arrival_ps < t.requests[i - 1].arrival_ps)) {
          fuzz::fail("an accepted trace breaks its invariants", text, t.source);
        }
      }
    } catch (const InputError& e) {
      fuzz::check_error(e, name);
    }
  }
  return 0;
}
