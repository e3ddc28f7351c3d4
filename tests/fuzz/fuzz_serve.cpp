// libFuzzer target: the serving engine under every combination of its settings. An input is
// the flags of `tierflow serve` (one or more per line, parsed by the CLI's own flag
// definitions, tools/cli/flags.cpp) with requests from `--arrivals` (the generator) on a
// shipped topology and model. The settings meet in the engine: replicas, disaggregated
// prefill and its routers, tensor parallelism, KV tiers with their policies and write
// modes, preemption by recompute or swap, chunked prefill, speculative decoding (n-gram or
// a draft model), warm-up, SLOs. What must hold:
//   - a bad setting is refused by the flag parser, or as an InputError naming a flag
//     (position "--NAME") or the topology or model file at fault, never anything else: no
//     assertion, crash or overflow (the sanitizers' part);
//   - a run keeps its books: every request served or rejected, its times in order
//     (arrival, first scheduled, first token, KV handed over, last token), hand-overs only
//     when disaggregated, no more computed prompt tokens than prompt tokens;
//   - the same settings give the same run, byte for byte (the JSON summary).
// Inputs that touch files (a trace, a topology or model path, a timeline) are skipped, as
// are request sets too large to run in a fuzzing step: the trace readers are
// fuzz_requests's, the limits the hostile suite's (tests/e2e/hostile_test.sh).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/units.h"
#include "tests/fuzz/fuzz_common.h"
#include "tools/cli/flags.h"
#include "tools/study/serve.h"

namespace {

using namespace tierflow;

/// Requests, prompt and output tokens beyond which an input runs too long for a fuzz step.
constexpr uint64_t kMaxRequests = 64;
constexpr uint64_t kMaxPrompt = 1 << 16;
constexpr uint64_t kMaxOutput = 1 << 10;

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// A name, not a path: shipped topologies and models only.
bool shipped(const std::string& name) {
  return name.find('/') == std::string::npos && name.find('.') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

/// The generator's `n=` and `turns=` (sessions of turns), read loosely: an input whose
/// spec asks for more requests than a fuzz step runs is skipped before any is made.
bool small_enough(const std::string& spec) {
  uint64_t n = 0, turns = 1;
  std::istringstream in(spec);
  for (std::string field; std::getline(in, field, ',');) {
    for (const auto& [key, into] : {std::pair{"n=", &n}, std::pair{"turns=", &turns}}) {
      if (!field.starts_with(key)) continue;
      const ParseResult<int64_t> v = parse_count(field.substr(std::string_view(key).size()));
      if (!v.ok() || v.value < 0) return true;  // the generator refuses it
      *into = static_cast<uint64_t>(v.value);
    }
  }
  return n > 0 && n <= kMaxRequests && turns <= 8 && n * turns <= kMaxRequests;
}

void check_books(const study::ServeStudy& x, const std::string& input) {
  const serve::ServeResult& r = x.result;
  if (r.cache_only) {
    if (r.computed_tokens > r.prompt_tokens)
      fuzz::fail("a cache-only replay computed more than the prompts", input, "");
    return;
  }
  if (r.requests.size() != x.trace.requests.size())
    fuzz::fail("a request left out of the records", input, std::to_string(r.requests.size()));
  uint64_t handed = 0;
  for (const serve::RequestRecord& q : r.requests) {
    if (q.rejected) continue;
    const bool ordered = q.arrival <= q.scheduled && q.scheduled <= q.first_token &&
                         q.first_token <= q.finish && q.scheduled >= 0;
    if (!ordered) fuzz::fail("a served request's times out of order", input, std::to_string(q.id));
    if (q.decode_replica >= 0) {
      ++handed;
      if (r.prefill_replicas == 0) fuzz::fail("a hand-over without prefill replicas", input, "");
      if (!(q.first_token <= q.handoff_admitted && q.handoff_admitted <= q.handed_over &&
            q.handed_over <= q.finish)) {
        fuzz::fail("a hand-over's times out of order", input, std::to_string(q.id));
      }
    }
  }
  if (handed != r.handoffs) fuzz::fail("hand-overs miscounted", input, std::to_string(handed));
  // Speculative decoding: no more accepted than drafted, no more drafted than the steps
  // could (each at most spec_tokens); off, nothing.
  if (r.spec_accepted > r.spec_drafted ||
      r.spec_drafted > r.spec_steps * static_cast<uint64_t>(r.spec_tokens) ||
      (r.spec_tokens == 0 && r.spec_steps > 0)) {
    fuzz::fail("speculative decoding's counts do not add up", input,
               fmt::format("{} steps, {} drafted, {} accepted", r.spec_steps, r.spec_drafted,
                           r.spec_accepted));
  }
  if (r.computed_tokens > r.prompt_tokens)
    fuzz::fail("more prompt tokens computed than given", input, "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = fuzz::text_of(data, size);
  std::vector<std::string> args = words_of(input);
  if (args.size() > 64) return 0;

  // The settings, as `tierflow serve` declares them.
  study::ServeSettings s;
  CLI::App app("fuzz", "serve");
  cli::add_serve_setting_flags(&app, s);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError&) {
    return 0;  // the CLI prints it and exits 2
  }
  if (!s.trace.empty() || !s.model.hf_config.empty() || !s.timeline.empty()) return 0;
  if (!shipped(s.hw) || !shipped(s.model.model) || !shipped(s.spec_draft)) return 0;
  if (s.arrivals.empty() || !small_enough(s.arrivals)) return 0;

  const auto run = [&]() -> std::optional<study::ServeStudy> {
    try {
      study::ServeSetup setup = study::prepare_serve(s);
      for (const traces::Request& q : setup.trace->requests) {
        if (q.prompt_tokens > kMaxPrompt || q.output_tokens > kMaxOutput) return std::nullopt;
      }
      study::check_serve(setup);
      return study::run_serve(setup);
    } catch (const InputError& e) {
      // A flag, or the topology or model file a check found wrong (an override's result:
      // `--set tiers.hbm.capacity=1GiB` leaves nothing past the device's reserve, which
      // the file's line declares).
      const std::string& at = e.pos().file;
      if (!at.starts_with("--") && !at.ends_with(".yaml"))
        fuzz::fail("a serving error names neither a flag nor a file", e.what(), input);
      if (e.message().empty()) fuzz::fail("a serving error without a message", e.what(), input);
      return std::nullopt;
    }
  };
  const std::optional<study::ServeStudy> x = run();
  if (!x) return 0;
  check_books(*x, input);
  const std::string json = study::serve_json(*x);
  (void)study::serve_text(*x);
  const std::optional<study::ServeStudy> again = run();
  if (!again || study::serve_json(*again) != json)
    fuzz::fail("the same settings, another run", json, again ? study::serve_json(*again) : "");
  return 0;
}
