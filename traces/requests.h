// Request traces for the serving simulator: when each request arrives, how long its
// prompt is, how many tokens it generates, and which prefix of its prompt it shares with
// other requests. Read from the Mooncake JSON Lines trace or the Azure LLM inference CSV,
// or generated from a seeded spec. docs/serving.md, "Request traces", states every rule.
//
// Glossary
//   block        `block_tokens` consecutive prompt tokens; block i of a request covers
//                tokens [i*B, min((i+1)*B, prompt)), so the last block may be partial.
//   block hash   a number naming a block together with everything before it (as
//                Mooncake's hash_ids do): two requests share a prefix exactly as far as
//                their leading hashes are equal.
//   arrival      picoseconds since the first request of the trace (after rate scaling).
//   session      the turns of one multi-turn conversation (generator only): each turn's
//                prompt is the previous turn's prompt and output plus a new message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.h"

namespace tierflow::traces {

// The limits of a request trace (docs/serving.md, "Request traces").
/// Requests in one trace.
inline constexpr uint64_t kMaxRequests = 10'000'000;
/// Prompt or output tokens of one request (2^24).
inline constexpr uint32_t kMaxRequestTokens = uint32_t{1} << 24;
/// Hash blocks of all requests together (2^28: 2 GiB of hashes).
inline constexpr uint64_t kMaxTraceBlocks = uint64_t{1} << 28;
/// Tokens per block.
inline constexpr uint32_t kMaxBlockTokens = uint32_t{1} << 16;
/// The latest arrival after rate scaling: 2^61 ps, about 26.7 days.
inline constexpr int64_t kMaxArrivalPs = kMaxSimTimePs / 2;
/// The tokens per block of the Mooncake trace (its hash_ids are one per 512 tokens).
inline constexpr uint32_t kMooncakeBlockTokens = 512;

/// One request of a serving trace.
struct Request {
  uint64_t id = 0;             ///< index in arrival order after sorting (0-based)
  int64_t arrival_ps = 0;      ///< picoseconds since the first request of the trace
  uint32_t prompt_tokens = 0;  ///< >= 1
  uint32_t output_tokens = 0;  ///< >= 1 (an output length of 0 in a file is counted as 1)
  /// Prefix block hashes: exactly ceil(prompt_tokens / block_tokens) of them.
  std::vector<uint64_t> blocks;
  uint64_t session = 0;  ///< multi-turn session id from the generator (1-based; 0: none)
  uint32_t turn = 0;     ///< 0-based turn within the session (0 when session is 0)
};

struct RequestTrace {
  std::vector<Request> requests;                 ///< sorted by arrival (stable); never empty
  uint32_t block_tokens = kMooncakeBlockTokens;  ///< tokens per hash block
  /// False: the source had no prefix information; every block hash is then unique in the
  /// trace, so no prefix can hit.
  bool has_prefixes = false;
  /// "mooncake FILE", "azure FILE", or "generated: SPEC" with every default written out
  /// (the seed included), which generates the same requests again.
  std::string source;
  /// Facts the caller says to the user on stderr ("FILE: 3 timestamps out of order:
  /// sorted stably by arrival").
  std::vector<std::string> notes;
};

struct TraceOptions {
  /// Arrivals compressed by this factor (2: twice the rate, every arrival time halved,
  /// rounded to the nearest ps); > 0 and finite.
  double rate_scale = 1.0;
  /// Keep only the first N requests after sorting (0: all).
  uint64_t first = 0;
  /// Tokens per block for sources without prefix information (Azure) and for the
  /// generator, in [1, kMaxBlockTokens]. A Mooncake file's prefix blocks are 512 tokens:
  /// a divisor of 512 splits each into pages of that many tokens (split_blocks), so that
  /// the KV cache holds pages as vLLM's 16-token blocks while prefixes still match by
  /// whole trace blocks.
  uint32_t block_tokens = kMooncakeBlockTokens;
};

/// Reads a Mooncake trace: JSON Lines, one object per line with `timestamp` (ms, a number
/// >= 0), `input_length` (an integer >= 1), `output_length` (an integer >= 0) and
/// `hash_ids` (ceil(input_length / 512) integers >= 0). InputError at FILE:LINE:COL.
RequestTrace read_mooncake(const std::string& path, const TraceOptions& o);
/// The same from text; `name` stands for the file in positions and in `source`.
RequestTrace parse_mooncake(std::string_view text, const std::string& name, const TraceOptions& o);

/// Reads an Azure LLM inference trace: CSV with the header columns TIMESTAMP,
/// ContextTokens and GeneratedTokens in any order (no others), TIMESTAMP as
/// "2023-11-16 18:15:46.6805900". InputError at FILE:LINE:COL.
RequestTrace read_azure(const std::string& path, const TraceOptions& o);
/// The same from text; `name` stands for the file in positions and in `source`.
RequestTrace parse_azure(std::string_view text, const std::string& name, const TraceOptions& o);

/// Reads a Mooncake trace when the first non-blank character is '{', an Azure CSV when the
/// first line names one of its columns; anything else is an InputError saying which
/// formats are read.
RequestTrace read_request_trace(const std::string& path, const TraceOptions& o);

/// Generates requests from `spec` ("poisson,rate=5/s,n=1000,prompt=lognormal:2000:0.6,
/// output=uniform:50:400,groups=8,system=1024,seed=7"). Errors are InputError at
/// `source` (the flag that gave the spec, e.g. "--arrivals").
RequestTrace generate_requests(const std::string& spec, const TraceOptions& o,
                               std::string_view source);

/// What every reader and the generator end with: checks `o`, sorts `trace.requests`
/// stably by arrival (noting "NAME: N timestamps out of order: sorted stably by arrival"
/// when `note_order` and some were), keeps the first o.first, makes arrivals relative to
/// the earliest, numbers the requests and scales them (scale_arrivals). InputError at
/// `name` for an empty trace, a bad option or a scaled arrival past kMaxArrivalPs.
void finish_trace(RequestTrace& trace, const TraceOptions& o, const std::string& name,
                  bool note_order);

/// Splits every prefix block of `trace` into pages of `page_tokens` (a divisor of its
/// block size): page k of block id h gets id h x pages + k, so a page hits exactly when its
/// block would, and the last, partial block has only the pages its tokens need. Nothing
/// when `page_tokens` is the block size; InputError at `name` otherwise.
void split_blocks(RequestTrace& trace, uint32_t page_tokens, const std::string& name);

/// Throws InputError at `name` unless `rate_scale` is a positive finite number that keeps
/// the arrivals of `trace` (relative to its first) within kMaxArrivalPs.
void check_rate_scale(const RequestTrace& trace, double rate_scale, const std::string& name);
/// Divides the arrivals of a finished trace read at rate scale 1 by `rate_scale`, rounded
/// to the nearest ps: the arrivals finish_trace gives at that scale. Checked as
/// check_rate_scale does.
void scale_arrivals(RequestTrace& trace, double rate_scale, const std::string& name);

}  // namespace tierflow::traces
