// libFuzzer target: the routing-trace reader (tierflow.routing/1 JSON Lines). Bad input is
// an InputError naming the file; what is accepted holds at least one pick, each of one to
// 256 distinct experts, each found again under its own key.
#include <algorithm>

#include "tests/fuzz/fuzz_common.h"
#include "traces/routing_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow;
  const std::string text = fuzz::text_of(data, size);
  const std::string name = "routing.jsonl";
  try {
    const traces::RoutingTrace t = traces::parse_routing_trace(text, name);
    if (t.picks.empty()) fuzz::fail("an empty routing trace accepted", text, name);
    for (const auto& [key, pick] : t.picks) {
      std::vector<uint16_t> sorted = pick.experts;
      std::sort(sorted.begin(), sorted.end());
      if (sorted.empty() || sorted.size() > 256 ||
          std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
          pick.line == 0 || pick.column == 0) {
        fuzz::fail("an accepted routing pick breaks its invariants", text, std::to_string(key));
      }
      const auto pass = static_cast<uint32_t>(key >> 44);
      const auto layer = static_cast<uint32_t>((key >> 32) & 0xFFFU);
      const uint64_t token = key & 0xFFFFFFFFU;
      if (t.find(pass, layer, token) != &pick)
        fuzz::fail("a routing pick is not found under its own key", text, std::to_string(key));
    }
  } catch (const InputError& e) {
    fuzz::check_error(e, name);
  }
  return 0;
}
