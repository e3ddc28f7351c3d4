// Request traces: the Mooncake excerpt and the full released trace, a synthetic Azure CSV,
// sorting, cutting and rate scaling, format sniffing, the generator's distributions,
// shared system prompts and multi-turn sessions, and every bad-input fixture of
// tests/errors/requests/ with its message and position.
#include "traces/requests.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

#include "core/diagnostics.h"

using namespace tierflow;
using namespace tierflow::traces;

namespace {

std::string source_path(std::string_view relative) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/" + std::string(relative);
}

const std::string kExcerpt = source_path("tests/data/serve/mooncake_conversation_200.jsonl");
const std::string kAzure = source_path("tests/data/serve/azure_synthetic.csv");
// The released trace, in the shared data folder beside the checkout (not shipped).
const std::string kFullTrace = source_path("../shared/data/mooncake/conversation_trace.jsonl");

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

/// The InputError that `f` throws (fails the test when it throws none).
template <class F>
InputError error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e;
  }
  FAIL("no InputError");
  return InputError(SourcePos{}, "");
}

bool same_requests(const RequestTrace& a, const RequestTrace& b) {
  if (a.requests.size() != b.requests.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const Request& x = a.requests[i];
    const Request& y = b.requests[i];
    if (x.id != y.id || x.arrival_ps != y.arrival_ps || x.prompt_tokens != y.prompt_tokens ||
        x.output_tokens != y.output_tokens || x.blocks != y.blocks || x.session != y.session ||
        x.turn != y.turn) {
      return false;
    }
  }
  return true;
}

RequestTrace generate(const std::string& spec, TraceOptions o = {}) {
  return generate_requests(spec, o, "--arrivals");
}

}  // namespace

TEST_CASE("the Mooncake excerpt: 200 requests, 25 timestamps, one hash per 512 tokens") {
  // Figures of tests/data/serve/README.md, counted from the file.
  const RequestTrace t = read_mooncake(kExcerpt, {});
  REQUIRE(t.requests.size() == 200);
  CHECK(t.block_tokens == 512);
  CHECK(t.has_prefixes);
  CHECK(t.source == "mooncake " + kExcerpt);
  CHECK(t.notes.empty());
  const Request& r0 = t.requests[0];
  CHECK(r0.id == 0);
  CHECK(r0.arrival_ps == 0);
  CHECK(r0.prompt_tokens == 6758);
  CHECK(r0.output_tokens == 500);
  std::vector<uint64_t> first_ids(14);
  std::iota(first_ids.begin(), first_ids.end(), 0);
  CHECK(r0.blocks == first_ids);  // ceil(6758 / 512) = 14
  CHECK(r0.session == 0);
  // Line 2 shares block 0 (the system prompt) with line 1 and nothing after it.
  CHECK(t.requests[1].blocks[0] == 0);
  CHECK(t.requests[1].blocks[1] == 14);
  // Line 11 is the first at 3,000 ms; the last line is at 72,000 ms.
  CHECK(t.requests[9].arrival_ps == 0);
  CHECK(t.requests[10].arrival_ps == 3'000 * kPsPerMs);
  CHECK(t.requests[199].arrival_ps == 72'000 * kPsPerMs);
  uint64_t prompt = 0, output = 0, blocks = 0;
  std::set<int64_t> stamps;
  for (size_t i = 0; i < t.requests.size(); ++i) {
    const Request& r = t.requests[i];
    CHECK(r.id == i);
    CHECK(r.blocks.size() == ceil_div(r.prompt_tokens, 512));
    if (i > 0) CHECK(r.arrival_ps >= t.requests[i - 1].arrival_ps);
    prompt += r.prompt_tokens;
    output += r.output_tokens;
    blocks += r.blocks.size();
    stamps.insert(r.arrival_ps);
  }
  CHECK(prompt == 2'782'179);
  CHECK(output == 71'379);
  CHECK(blocks == 5'537);
  CHECK(stamps.size() == 25);
}

TEST_CASE("the full Mooncake conversation trace: 12,031 requests, mean input 12,035 tokens") {
  if (!std::filesystem::exists(kFullTrace)) {
    MESSAGE("skipped: " << kFullTrace << " is absent");
    return;
  }
  const RequestTrace t = read_request_trace(kFullTrace, {});
  REQUIRE(t.requests.size() == 12'031);
  CHECK(t.notes.empty());  // in order, no output_length 0
  uint64_t prompt = 0;
  std::set<int64_t> stamps;
  for (const Request& r : t.requests) {
    prompt += r.prompt_tokens;
    stamps.insert(r.arrival_ps);
    CHECK(r.blocks.size() == ceil_div(r.prompt_tokens, 512));
  }
  // The release's figures (its README): mean input 12,035 tokens (144,793,723 / 12,031 =
  // 12,035.06), about 1,180 distinct timestamps (exactly 1,180), the last at 3,536,999 ms.
  CHECK(prompt / t.requests.size() == 12'035);
  CHECK(stamps.size() == 1'180);
  CHECK(t.requests.back().arrival_ps == 3'536'999 * kPsPerMs);
}

TEST_CASE("rate_scale divides arrivals, rounded to the ps; first keeps the earliest N") {
  TraceOptions o;
  o.rate_scale = 2;
  RequestTrace t = read_mooncake(kExcerpt, o);
  CHECK(t.requests[10].arrival_ps == 1'500 * kPsPerMs);
  CHECK(t.requests[199].arrival_ps == 36'000 * kPsPerMs);
  o.rate_scale = 3;
  t = read_mooncake(kExcerpt, o);
  // Line 27 is at 5,999 ms: 5,999e9 / 3 = 1,999,666,666,666.67 ps, rounded up.
  CHECK(t.requests[26].arrival_ps == 1'999'666'666'667);
  o.rate_scale = 0.5;
  t = read_mooncake(kExcerpt, o);
  CHECK(t.requests[199].arrival_ps == 144'000 * kPsPerMs);

  o = {};
  o.first = 12;
  t = read_mooncake(kExcerpt, o);
  REQUIRE(t.requests.size() == 12);
  CHECK(t.requests[11].id == 11);
  CHECK(t.requests[11].arrival_ps == 3'000 * kPsPerMs);
  o.first = 1'000;  // more than there are: all
  CHECK(read_mooncake(kExcerpt, o).requests.size() == 200);

  // 72 s at a rate 100,000 times lower spans 83.33 days: past 2^61 ps.
  o = {};
  o.rate_scale = 1e-5;
  CHECK(error_of([&] { read_mooncake(kExcerpt, o); }).message() ==
        "the trace spans 83.33 days at rate scale 1e-05: more than the limit of 2^61 ps (about "
        "26.7 days)");

  for (const double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    o = {};
    o.rate_scale = bad;
    const InputError e = error_of([&] { read_mooncake(kExcerpt, o); });
    CHECK(e.message() == fmt::format("rate scale {} is not a positive finite number", bad));
  }
}

TEST_CASE("scale_arrivals of a trace read at rate scale 1 gives the arrivals read at that scale") {
  const RequestTrace once = read_mooncake(kExcerpt, TraceOptions{});
  for (const double scale : {1.0, 2.0, 3.0, 0.5, 1.0 / 3, 1024.0, 1.0 / 1024}) {
    TraceOptions o;
    o.rate_scale = scale;
    const RequestTrace read = read_mooncake(kExcerpt, o);
    RequestTrace scaled = once;
    scale_arrivals(scaled, scale, kExcerpt);
    REQUIRE(scaled.requests.size() == read.requests.size());
    for (size_t i = 0; i < read.requests.size(); ++i) {
      CHECK(scaled.requests[i].arrival_ps == read.requests[i].arrival_ps);
    }
  }
  // Past the limit, as reading at that scale says it.
  RequestTrace scaled = once;
  CHECK(error_of([&] { scale_arrivals(scaled, 1e-5, kExcerpt); }).message() ==
        "the trace spans 83.33 days at rate scale 1e-05: more than the limit of 2^61 ps (about "
        "26.7 days)");
}

TEST_CASE("timestamps out of order are sorted stably, with a note; output 0 counts as 1") {
  // Lines (timestamp ms, input): (105, 1), (101, 2), (101, 3), (100, 4). Two steps go
  // down (105 -> 101, 101 -> 100). Sorted: 100, 101 (line 2), 101 (line 3), 105; arrivals
  // are relative to the earliest, 100 ms.
  const std::string text =
      "{\"timestamp\": 105, \"input_length\": 1, \"output_length\": 7, \"hash_ids\": [9]}\n"
      "\n"
      "{\"timestamp\": 101, \"input_length\": 2, \"output_length\": 0, \"hash_ids\": [8]}\n"
      "{\"hash_ids\": [7], \"output_length\": 7, \"input_length\": 3, \"timestamp\": 101.5}\n"
      "  {\"timestamp\": 100, \"input_length\": 4, \"output_length\": 7, \"hash_ids\": [6]}";
  const RequestTrace t = parse_mooncake(text, "u.jsonl", {});
  REQUIRE(t.requests.size() == 4);
  CHECK(t.requests[0].prompt_tokens == 4);
  CHECK(t.requests[1].prompt_tokens == 2);
  CHECK(t.requests[2].prompt_tokens == 3);
  CHECK(t.requests[3].prompt_tokens == 1);
  CHECK(t.requests[0].arrival_ps == 0);
  CHECK(t.requests[1].arrival_ps == 1 * kPsPerMs);
  CHECK(t.requests[2].arrival_ps == 1'500'000'000);  // 1.5 ms
  CHECK(t.requests[3].arrival_ps == 5 * kPsPerMs);
  CHECK(t.requests[1].output_tokens == 1);
  CHECK(t.requests[3].blocks == std::vector<uint64_t>{9});
  CHECK(t.requests[2].id == 2);
  REQUIRE(t.notes.size() == 2);
  CHECK(t.notes[0] ==
        "u.jsonl: 1 request with output_length 0: counted as 1 (a request generates at least "
        "one token)");
  CHECK(t.notes[1] == "u.jsonl: 2 timestamps out of order: sorted stably by arrival");

  // Equal timestamps keep file order (stability).
  const std::string ties =
      "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 1, \"input_length\": 30, \"output_length\": 1, \"hash_ids\": [2]}\n"
      "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [3]}\n";
  const RequestTrace u = parse_mooncake(ties, "t.jsonl", {});
  std::vector<uint32_t> prompts;
  for (const Request& r : u.requests) prompts.push_back(r.prompt_tokens);
  CHECK(prompts == std::vector<uint32_t>{20, 40, 10, 30});
}

TEST_CASE("Mooncake blocks split into pages: ids per page, the partial block's pages only") {
  // 700 tokens: a whole 512-token block (id 5) and 188 tokens of block 9. Pages of 128
  // tokens: 4 of block 5 (ids 20..23), 2 of block 9 (ids 36, 37), ceil(700 / 128) = 6 in all.
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [5, 9]}\n"
      "{\"timestamp\": 1, \"input_length\": 512, \"output_length\": 3, \"hash_ids\": [5]}\n";
  TraceOptions o;
  o.block_tokens = 128;
  const RequestTrace t = parse_mooncake(text, "p.jsonl", o);
  CHECK(t.block_tokens == 128);
  CHECK(t.requests[0].blocks == std::vector<uint64_t>{20, 21, 22, 23, 36, 37});
  // The same block's pages in another request: the same ids, so they match.
  CHECK(t.requests[1].blocks == std::vector<uint64_t>{20, 21, 22, 23});
  // Pages of one token, and the block size itself (no split).
  o.block_tokens = 1;
  CHECK(parse_mooncake(text, "p.jsonl", o).requests[0].blocks.size() == 700);
  o.block_tokens = 512;
  CHECK(parse_mooncake(text, "p.jsonl", o).requests[0].blocks == std::vector<uint64_t>{5, 9});
  // Not a divisor of 512, or above it.
  for (const uint32_t bad : {100U, 1024U}) {
    o.block_tokens = bad;
    CHECK_THROWS_WITH_AS(parse_mooncake(text, "p.jsonl", o),
                         doctest::Contains("split only into pages that divide them"), InputError);
  }
  // An id too large to multiply by the page count.
  o.block_tokens = 16;
  CHECK_THROWS_WITH_AS(
      parse_mooncake("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, "
                     "\"hash_ids\": [18446744073709551615]}\n",
                     "p.jsonl", o),
      doctest::Contains("too large to split into 32 pages"), InputError);
}

TEST_CASE("Azure CSV: timestamps to ps across midnight and a month's end; unique blocks") {
  // tests/data/serve/azure_synthetic.csv, rows in file order:
  //   1  2023-11-30 23:59:58.5000000  1024  100
  //   2  2023-11-30 23:59:59.2500000   513    0   (counted as 1)
  //   3  2023-11-30 23:59:58.0000001  4805  237   (the earliest)
  //   4  2023-12-01 00:00:00.0000000     1    1
  //   5  2023-12-01 00:00:01.1         2048   64
  // Arrivals after the earliest: row 3 0; row 1 0.4999999 s; row 2 1.2499999 s; row 4
  // 1.9999999 s; row 5 3.0999999 s. One step goes down (row 2 -> row 3).
  const RequestTrace t = read_azure(kAzure, {});
  REQUIRE(t.requests.size() == 5);
  CHECK_FALSE(t.has_prefixes);
  CHECK(t.block_tokens == 512);
  CHECK(t.source == "azure " + kAzure);
  std::vector<uint32_t> prompts;
  std::vector<int64_t> arrivals;
  for (const Request& r : t.requests) {
    prompts.push_back(r.prompt_tokens);
    arrivals.push_back(r.arrival_ps);
  }
  CHECK(prompts == std::vector<uint32_t>{4805, 1024, 513, 1, 2048});
  CHECK(arrivals == std::vector<int64_t>{0, 499'999'900'000, 1'249'999'900'000, 1'999'999'900'000,
                                         3'099'999'900'000});
  CHECK(t.requests[2].output_tokens == 1);
  // One hash per block, numbered in file order, none shared: ceil(1024/512) = 2,
  // ceil(513/512) = 2, ceil(4805/512) = 10, 1, ceil(2048/512) = 4.
  CHECK(t.requests[1].blocks == std::vector<uint64_t>{0, 1});
  CHECK(t.requests[2].blocks == std::vector<uint64_t>{2, 3});
  CHECK(t.requests[0].blocks.front() == 4);
  CHECK(t.requests[0].blocks.back() == 13);
  CHECK(t.requests[3].blocks == std::vector<uint64_t>{14});
  CHECK(t.requests[4].blocks == std::vector<uint64_t>{15, 16, 17, 18});
  REQUIRE(t.notes.size() == 2);
  CHECK(t.notes[0] == fmt::format("{}: 1 request with GeneratedTokens 0: counted as 1 (a request "
                                  "generates at least one token)",
                                  kAzure));
  CHECK(t.notes[1] == kAzure + ": 1 timestamp out of order: sorted stably by arrival");

  TraceOptions o;
  o.block_tokens = 256;
  CHECK(read_azure(kAzure, o).requests[0].blocks.size() == 19);  // ceil(4805 / 256)
}

TEST_CASE("Azure CSV: any column order, CRLF, leap days, year ends, UTC offsets") {
  // 2024 is a leap year: 02-28 23:59:59.9 -> 02-29 00:00:00.1 is 0.2 s, -> 03-01 is a day
  // more. The year end: 2023-12-31 23:59:59 -> 2024-01-01 00:00:01 is 2 s. 12:00:00+01:00
  // is 11:00:00 UTC, one hour before 12:00:00Z.
  const std::string text =
      "GeneratedTokens , ContextTokens,TIMESTAMP\r\n"
      "5,10,2024-02-28 23:59:59.9\r\n"
      "5,20,2024-02-29 00:00:00.1\r\n"
      "\r\n"
      "5,30,2024-03-01 00:00:00.1\r\n";
  const RequestTrace t = parse_azure(text, "a.csv", {});
  REQUIRE(t.requests.size() == 3);
  CHECK(t.requests[0].prompt_tokens == 10);
  CHECK(t.requests[1].arrival_ps == 200'000'000'000);
  CHECK(t.requests[2].arrival_ps == 86'400 * kPsPerS + 200'000'000'000);
  CHECK(t.requests[2].output_tokens == 5);

  const RequestTrace y = parse_azure(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-12-31 23:59:59,1,1\n2024-01-01 00:00:01,1,1\n",
      "y.csv", {});
  CHECK(y.requests[1].arrival_ps == 2 * kPsPerS);

  const RequestTrace z = parse_azure(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 12:00:00Z,1,1\n"
      "2024-05-10 12:00:00+01:00,2,1\n2024-05-10 12:00:00.5-00:30,3,1\n",
      "z.csv", {});
  std::vector<uint32_t> order;
  for (const Request& r : z.requests) order.push_back(r.prompt_tokens);
  CHECK(order == std::vector<uint32_t>{2, 1, 3});
  CHECK(z.requests[1].arrival_ps == 3'600 * kPsPerS);
  CHECK(z.requests[2].arrival_ps == 5'400 * kPsPerS + 500 * kPsPerMs);
}

TEST_CASE("read_request_trace tells the formats apart by content") {
  CHECK(read_request_trace(kExcerpt, {}).source == "mooncake " + kExcerpt);
  CHECK(read_request_trace(kAzure, {}).source == "azure " + kAzure);
}

TEST_CASE("a Mooncake trace may start with a byte order mark or white space") {
  const std::string line =
      R"({"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]})";
  for (const std::string& text : {"\xEF\xBB\xBF" + line + "\n", "  " + line + "\n", line}) {
    const RequestTrace t = parse_mooncake(text, "t.jsonl", {});
    CHECK(t.requests.size() == 1);
  }
}

TEST_CASE("every bad request trace fails with its message at FILE:LINE:COL") {
  struct Case {
    const char* file;
    int line;
    int col;
    const char* message;
  };
  // Each fixture holds one fault; the position is the fault's first character (a missing
  // key: its object's '{'; too few hash ids: the array's '['; too many: the first extra).
  const Case cases[] = {
      {"a01-unknown-column.csv", 1, 1,
       "unknown column 'Timestamp' in the Azure CSV header; did you mean 'TIMESTAMP'?"},
      {"a02-missing-column.csv", 1, 1,
       "the Azure CSV header lacks column 'GeneratedTokens' (it needs TIMESTAMP, ContextTokens "
       "and GeneratedTokens)"},
      {"a03-bad-month.csv", 3, 6,
       "TIMESTAMP '2023-13-16 18:15:47.0000000': month 13 is not in 1..12"},
      {"a04-no-leap-day.csv", 2, 9,
       "TIMESTAMP '2023-02-29 00:00:00.0000000': day 29 is not in 1..28 for that month"},
      {"a05-eight-fraction-digits.csv", 2, 28,
       "TIMESTAMP '2023-11-16 18:15:46.68059001': more than 7 fractional digits of a second"},
      {"a06-extra-field.csv", 3, 34, "4 fields where the header has 3"},
      {"a07-zero-context.csv", 2, 29, "ContextTokens must be at least 1, got 0"},
      {"a08-not-a-number.csv", 2, 29,
       "ContextTokens: expected a whole number of tokens, got '12a'"},
      {"a09-duplicate-column.csv", 1, 25, "column 'TIMESTAMP' appears twice in the header"},
      {"a10-span-past-limit.csv", 3, 1,
       "TIMESTAMP '2023-12-01 00:00:00.0000000' is 30 days from the first row's: a trace may span "
       "at most 26.7 days (2^61 ps)"},
      {"a11-bad-date-shape.csv", 2, 5,
       "TIMESTAMP '2023/11/16 18:15:46.6805900': expected a time like 2023-11-16 18:15:46.6805900"},
      {"m01-unknown-key.jsonl", 2, 18,
       "unknown key 'input_len' in a Mooncake request; did you mean 'input_length'?"},
      {"m02-missing-key.jsonl", 2, 1,
       "missing key 'hash_ids' in a Mooncake request (each needs timestamp, input_length, "
       "output_length and hash_ids)"},
      {"m03-too-many-hash-ids.jsonl", 2, 79,
       "more hash_ids than the 2 that input_length 600 needs (one per 512-token block, the last "
       "may be partial)"},
      {"m04-too-few-hash-ids.jsonl", 1, 73,
       "hash_ids has 2 ids, 1 fewer than the 3 that input_length 1500 needs (one per 512-token "
       "block, the last may be partial)"},
      {"m05-negative-timestamp.jsonl", 1, 15, "timestamp must be >= 0 ms, got -1"},
      {"m06-zero-input-length.jsonl", 1, 34, "input_length must be at least 1, got 0"},
      {"m07-input-too-long.jsonl", 1, 34,
       "input_length 16777217 is above the limit of 16777216 tokens"},
      {"m08-negative-hash-id.jsonl", 1, 76, "hash_ids: must not be negative, got -1"},
      {"m09-two-objects-on-one-line.jsonl", 1, 74,
       "a second value on one line: a Mooncake trace holds one JSON object per line"},
      {"m10-not-an-object.jsonl", 2, 1,
       "expected a JSON object: a Mooncake trace holds one per line"},
      {"m11-duplicate-key.jsonl", 1, 80, "duplicate key 'timestamp'"},
      {"m12-missing-comma.jsonl", 2, 17, "expected ',' or '}', got a string"},
      {"m13-fractional-input-length.jsonl", 1, 34, "input_length: expected an integer, got 1.5"},
      {"m14-timestamp-past-limit.jsonl", 2, 15,
       "timestamp 3000000000 ms is past the limit of 2305843009 ms (2^61 ps, about 26.7 days)"},
      {"m15-negative-output-length.jsonl", 1, 56, "output_length must be >= 0, got -3"},
      {"m16-repeated-hash-id.jsonl", 2, 77,
       "hash id 10 follows 10 here, but starts the prompt on line 1: a hash names its block "
       "together with everything before it, so one prompt's ids are distinct and an id always "
       "follows the same id"},
      {"m17-reordered-hash-ids.jsonl", 2, 73,
       "hash id 4 starts the prompt here, but follows 3 on line 1: a hash names its block "
       "together with everything before it, so one prompt's ids are distinct and an id always "
       "follows the same id"},
      {"x01-blank.jsonl", 0, 0,
       "empty file: a request trace is Mooncake JSON Lines or an Azure LLM inference CSV"},
      {"x02-unknown-format.txt", 1, 1,
       "not a request trace: tierflow reads Mooncake JSON Lines (one object per line, the first "
       "character '{') and Azure LLM inference CSV (a header with TIMESTAMP, ContextTokens and "
       "GeneratedTokens)"},
  };
  const std::string dir = source_path("tests/errors/requests/");
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) ++files;
  }
  CHECK(files == std::size(cases));  // every fixture is listed here
  for (const Case& c : cases) {
    const std::string file = c.file;
    CAPTURE(file);
    const std::string path = dir + c.file;
    const InputError e = error_of([&] { read_request_trace(path, {}); });
    CHECK(e.pos().file == path);
    CHECK(e.pos().line == c.line);
    CHECK(e.pos().col == c.col);
    CHECK(e.message() == c.message);
  }
  // Too many ids before input_length is known: found when it is, at the first extra id.
  const InputError late = error_of([] {
    parse_mooncake(
        "{\"hash_ids\": [0, 1, 2], \"timestamp\": 0, \"input_length\": 512, \"output_length\": 1}",
        "l.jsonl", {});
  });
  CHECK(late.pos().col == 18);  // the second id
  CHECK(late.message() ==
        "more hash_ids than the 1 that input_length 512 needs (one per 512-token block, the last "
        "may be partial)");
  // The format readers refuse what read_request_trace refuses, at the same place.
  const InputError e = error_of([&] { read_mooncake(dir + "m01-unknown-key.jsonl", {}); });
  CHECK(e.pos().line == 2);
  CHECK(error_of([&] { parse_mooncake("", "e.jsonl", {}); }).message() ==
        "no requests: a trace needs at least one");
  CHECK(error_of([&] {
          parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n", "e.csv", {});
        }).message() == "no requests: a trace needs at least one");
}

TEST_CASE("generator: the same spec gives the same requests; another seed, others") {
  const std::string spec =
      "poisson,rate=5/s,n=1000,prompt=lognormal:2000:0.6,output=uniform:50:400,groups=8,"
      "system=1024,seed=7";
  const RequestTrace a = generate(spec);
  const RequestTrace b = generate(spec);
  CHECK(same_requests(a, b));
  CHECK(a.source == "generated: " + spec);
  CHECK(a.has_prefixes);
  CHECK(a.requests.front().arrival_ps == 0);
  const RequestTrace c = generate(
      "poisson,rate=5/s,n=1000,prompt=lognormal:2000:0.6,output=uniform:50:400,groups=8,"
      "system=1024,seed=8");
  CHECK_FALSE(same_requests(a, c));
  // The source writes every default out and generates the same requests again.
  const RequestTrace d = generate("n=10, output=fixed:3,prompt = fixed:5,rate=300/min");
  CHECK(d.source == "generated: poisson,rate=300/min,n=10,prompt=fixed:5,output=fixed:3,seed=1");
  CHECK(same_requests(d, generate(d.source.substr(std::string_view("generated: ").size()))));
  // The stream is pinned: mt19937_64's output is fixed by the standard and the
  // distributions are tierflow's own, so these first requests of seed 7 (recorded when the
  // generator was written) must not change with the compiler or the standard library.
  std::vector<int64_t> arrivals;
  std::vector<uint32_t> prompts, outputs;
  for (size_t i = 0; i < 4; ++i) {
    arrivals.push_back(a.requests[i].arrival_ps);
    prompts.push_back(a.requests[i].prompt_tokens);
    outputs.push_back(a.requests[i].output_tokens);
  }
  CHECK(arrivals == std::vector<int64_t>{0, 30'460'509'150, 283'563'271'622, 640'522'075'353});
  CHECK(prompts == std::vector<uint32_t>{5964, 5218, 1900, 12901});  // 1024 + lognormal
  CHECK(outputs == std::vector<uint32_t>{363, 140, 158, 354});
  CHECK(a.requests[0].blocks[0] == a.requests[2].blocks[0]);  // the same group
}

TEST_CASE("generator: Poisson and gamma gaps, lognormal and uniform lengths, by their means") {
  // 100,000 Poisson arrivals at 5/s: the mean gap is 0.2 s with a standard error of
  // 0.2 / sqrt(1e5) = 0.3%; 1.5% is five of those.
  const RequestTrace p =
      generate("poisson,rate=5/s,n=100k,prompt=lognormal:2000:0.6,output=uniform:50:400");
  REQUIRE(p.requests.size() == 100'000);
  const double mean_gap_s = static_cast<double>(p.requests.back().arrival_ps) / 99'999 / kPsPerS;
  CHECK(mean_gap_s == doctest::Approx(0.2).epsilon(0.015));
  // Lognormal with mean 2000 and sigma 0.6: the coefficient of variation is
  // sqrt(e^0.36 - 1) = 0.66, so the sample mean's standard error is 0.2%; 1% is five.
  double prompt = 0, output = 0;
  uint32_t out_lo = UINT32_MAX, out_hi = 0;
  for (const Request& r : p.requests) {
    prompt += r.prompt_tokens;
    output += r.output_tokens;
    out_lo = std::min(out_lo, r.output_tokens);
    out_hi = std::max(out_hi, r.output_tokens);
  }
  CHECK(prompt / 1e5 == doctest::Approx(2000).epsilon(0.01));
  CHECK(output / 1e5 == doctest::Approx(225).epsilon(0.01));  // (50 + 400) / 2
  CHECK(out_lo == 50);
  CHECK(out_hi == 400);

  // Gamma gaps with cv 3 at 2/s: mean 0.5 s (standard error 3 / sqrt(1e5) = 0.95%; 5%),
  // coefficient of variation 3 (within 10%).
  const RequestTrace g = generate("gamma,rate=2/s,cv=3,n=100000,prompt=fixed:512,output=fixed:128");
  double sum = 0, sum2 = 0;
  for (size_t i = 1; i < g.requests.size(); ++i) {
    const double gap =
        static_cast<double>(g.requests[i].arrival_ps - g.requests[i - 1].arrival_ps) / kPsPerS;
    sum += gap;
    sum2 += gap * gap;
  }
  const double n = static_cast<double>(g.requests.size() - 1);
  const double mean = sum / n;
  const double cv = std::sqrt(sum2 / n - mean * mean) / mean;
  CHECK(mean == doctest::Approx(0.5).epsilon(0.05));
  CHECK(cv == doctest::Approx(3).epsilon(0.10));
  // Gamma with cv 1 below its shape-1 boundary, and cv 0.5 above it: means hold.
  for (const char* spec : {"gamma,rate=10/s,cv=0.5,n=20000,prompt=fixed:1,output=fixed:1",
                           "gamma,rate=10/s,cv=1,n=20000,prompt=fixed:1,output=fixed:1"}) {
    const RequestTrace h = generate(spec);
    CHECK(static_cast<double>(h.requests.back().arrival_ps) / 19'999 / kPsPerS ==
          doctest::Approx(0.1).epsilon(0.03));
  }
}

TEST_CASE("generator: groups share exactly their system prompt's whole blocks") {
  // system 1024 = two whole blocks of 512; prompt 1024 + 100 = 1124 tokens = 3 blocks, the
  // third holding the system prompt's end and the request's own text.
  for (const auto& c : std::vector<std::pair<std::string, size_t>>{
           {"poisson,rate=5/s,n=2000,prompt=fixed:100,output=fixed:10,groups=8,system=1024", 2},
           {"poisson,rate=5/s,n=2000,prompt=fixed:100,output=fixed:10,groups=8,system=1000", 1}}) {
    const std::string& spec = c.first;
    const size_t shared = c.second;
    CAPTURE(spec);
    const RequestTrace t = generate(spec);
    std::map<uint64_t, std::vector<uint64_t>> groups;  // first block -> the shared blocks
    std::map<uint64_t, int> uses;                      // hash -> requests holding it
    for (const Request& r : t.requests) {
      const size_t system = std::stoul(spec.substr(spec.rfind('=') + 1));
      REQUIRE(r.prompt_tokens == system + 100);
      REQUIRE(r.blocks.size() == ceil_div(r.prompt_tokens, 512));
      const std::vector<uint64_t> lead(r.blocks.begin(),
                                       r.blocks.begin() + static_cast<long>(shared));
      const auto [it, added] = groups.emplace(lead.front(), lead);
      CHECK(it->second == lead);  // a group's requests agree on all its whole blocks
      for (const uint64_t h : r.blocks) ++uses[h];
    }
    CHECK(groups.size() == 8);
    // Shared hashes are exactly the groups' whole system blocks; every other is used once.
    size_t shared_hashes = 0;
    for (const auto& [h, n] : uses) {
      if (n > 1) ++shared_hashes;
    }
    CHECK(shared_hashes == 8 * shared);
  }
  // Without groups or turns no hash repeats.
  const RequestTrace u = generate("poisson,rate=5/s,n=3000,prompt=uniform:1:5000,output=fixed:1");
  std::set<uint64_t> all;
  size_t blocks = 0;
  for (const Request& r : u.requests) {
    all.insert(r.blocks.begin(), r.blocks.end());
    blocks += r.blocks.size();
  }
  CHECK(all.size() == blocks);
}

TEST_CASE("generator: a session's next turn shares the whole blocks of the history") {
  // prompt 1000, output 100, block 512, think 20 s:
  //   turn 0: prompt 1000, blocks [A B'] (B' partial: tokens 512..999)
  //   turn 1: prompt 1000 + 100 + 1000 = 2100; history 1100 = 2 whole blocks: [A C ...]
  //           where C holds tokens 512..1023 (prompt end + output start), not B'
  //   turn 2: prompt 2100 + 100 + 1000 = 3200; history 2200 = 4 whole blocks, all turn 1's
  const RequestTrace t =
      generate("poisson,rate=1/s,n=10,prompt=fixed:1000,output=fixed:100,turns=4,think=20s");
  REQUIRE(t.requests.size() == 10);  // sessions of 4, 4 and 2 turns
  std::map<uint64_t, std::vector<const Request*>> sessions;
  for (const Request& r : t.requests) sessions[r.session].push_back(&r);
  REQUIRE(sessions.size() == 3);
  CHECK(sessions.count(0) == 0);
  CHECK(sessions[3].size() == 2);
  for (const auto& [id, turns] : sessions) {
    for (size_t k = 0; k < turns.size(); ++k) {
      const Request& r = *turns[k];
      CHECK(r.turn == k);
      CHECK(r.prompt_tokens == 1000 + k * 1100);
      if (k == 0) continue;
      const Request& p = *turns[k - 1];
      CHECK(r.arrival_ps == p.arrival_ps + 20 * kPsPerS);
      const size_t history = (p.prompt_tokens + p.output_tokens) / 512;  // whole blocks
      const size_t whole_prompt = p.prompt_tokens / 512;
      for (size_t b = 0; b < whole_prompt; ++b) CHECK(r.blocks[b] == p.blocks[b]);
      // The block that straddles the end of the previous prompt differs from its partial one.
      if (p.prompt_tokens % 512 != 0) CHECK(r.blocks[whole_prompt] != p.blocks[whole_prompt]);
      // Blocks past the history are new in this turn.
      for (size_t b = history; b < r.blocks.size(); ++b) {
        CHECK(std::find(p.blocks.begin(), p.blocks.end(), r.blocks[b]) == p.blocks.end());
      }
      // The next turn sees this turn's blocks over the output too.
      if (k + 1 < turns.size()) {
        for (size_t b = 0; b < history; ++b) CHECK(turns[k + 1]->blocks[b] == r.blocks[b]);
      }
    }
  }
  // Different sessions share nothing.
  CHECK(sessions[1][0]->blocks[0] != sessions[2][0]->blocks[0]);
}

TEST_CASE("generator: rate_scale, first and block_tokens apply as to files") {
  const std::string spec = "poisson,rate=5/s,n=100,prompt=fixed:1000,output=fixed:1";
  const RequestTrace a = generate(spec);
  TraceOptions o;
  o.rate_scale = 2;
  o.first = 50;
  o.block_tokens = 100;
  const RequestTrace b = generate(spec, o);
  REQUIRE(b.requests.size() == 50);
  CHECK(b.block_tokens == 100);
  CHECK(b.requests[0].blocks.size() == 10);
  CHECK(b.requests[49].arrival_ps ==
        std::llround(static_cast<double>(a.requests[49].arrival_ps) / 2));
}

TEST_CASE("generator: bad specs say what is wrong") {
  const std::pair<const char*, const char*> cases[] = {
      {"poisson,rat=5/s,n=10,prompt=fixed:1,output=fixed:1",
       "unknown key 'rat'; did you mean 'rate'?"},
      {"poison,rate=5/s,n=10,prompt=fixed:1,output=fixed:1",
       "unknown item 'poison': an arrival process (poisson, gamma) or key=value; did you mean "
       "'poisson'?"},
      {"poisson,gamma,rate=5/s,n=10,prompt=fixed:1,output=fixed:1",
       "two arrival processes: 'poisson' and 'gamma'"},
      {"poisson,rate=5/s,n=10,prompt=fixed:1", "'output' is required (e.g. output=uniform:50:400)"},
      {"poisson,rate=5,n=10,prompt=fixed:1,output=fixed:1",
       "rate=5: give a unit: 5/s, 300/min or 36000/h"},
      {"poisson,rate=5/day,n=10,prompt=fixed:1,output=fixed:1",
       "rate=5/day: unknown unit '/day' (requests per s, min or h)"},
      {"poisson,rate=0/s,n=10,prompt=fixed:1,output=fixed:1",
       "rate=0/s is outside (0, 1000000000/s]"},
      {"poisson,rate=5/s,n=20000000,prompt=fixed:1,output=fixed:1",
       "n=20000000 is outside [1, 10000000]"},
      {"poisson,rate=5/s,n=0,prompt=fixed:1,output=fixed:1", "n=0 is outside [1, 10000000]"},
      {"poisson,rate=5/s,n=10,n=11,prompt=fixed:1,output=fixed:1", "duplicate key 'n'"},
      {"poisson,rate=5/s,n=10,,prompt=fixed:1,output=fixed:1",
       "an empty item in 'poisson,rate=5/s,n=10,,prompt=fixed:1,output=fixed:1'"},
      {"poisson,rate=5/s,n=10,prompt=normal:5:1,output=fixed:1",
       "prompt: unknown distribution 'normal'; did you mean 'lognormal'? (fixed:N, uniform:LO:HI "
       "or "
       "lognormal:MEAN:SIGMA)"},
      {"poisson,rate=5/s,n=10,prompt=uniform:5,output=fixed:1",
       "prompt: 'uniform' takes 2 values (uniform:LO:HI)"},
      {"poisson,rate=5/s,n=10,prompt=uniform:50:5,output=fixed:1",
       "prompt uniform HI=5 is outside [50, 1048576]"},
      {"poisson,rate=5/s,n=10,prompt=fixed:2000000,output=fixed:1",
       "prompt fixed=2000000 is outside [1, 1048576]"},
      {"poisson,rate=5/s,n=10,prompt=lognormal:2000:9,output=fixed:1",
       "prompt lognormal SIGMA 9 is outside [0, 4]"},
      {"poisson,rate=5/s,n=10,prompt=lognormal:x:1,output=fixed:1",
       "prompt lognormal MEAN: expected a number, got 'x'"},
      {"gamma,rate=5/s,n=10,prompt=fixed:1,output=fixed:1", "'cv' is required (e.g. gamma,cv=3)"},
      {"poisson,rate=5/s,cv=2,n=10,prompt=fixed:1,output=fixed:1",
       "cv applies to gamma arrivals only (poisson gaps have cv 1)"},
      {"poisson,rate=5/s,n=10,prompt=fixed:1,output=fixed:1,groups=4",
       "groups needs system=L, the tokens of each group's system prompt"},
      {"poisson,rate=5/s,n=10,prompt=fixed:1,output=fixed:1,turns=3",
       "turns needs think=D, the time between turns (e.g. think=20s)"},
      {"poisson,rate=5/s,n=10,prompt=fixed:1,output=fixed:1,think=3s",
       "think applies to sessions of turns=2 or more"},
      {"poisson,rate=5/s,n=10,prompt=fixed:1,output=fixed:1,seed=-1",
       "seed: expected a whole number below 2^64, got '-1'"},
      {"poisson,rate=1/h,n=1000000,prompt=fixed:1,output=fixed:1",
       "arrivals pass the limit of 2^61 ps (about 26.7 days) after 655 requests: raise rate or "
       "lower n"},
      {"poisson,rate=5/s,n=100,prompt=fixed:1000000,output=fixed:1000000,turns=100,think=1s",
       "turn 9 of a session has a prompt of 17000000 tokens, above the limit of 16777216: lower "
       "turns "
       "or the lengths"},
  };
  for (const auto& [spec_text, message] : cases) {
    const std::string spec = spec_text;
    CAPTURE(spec);
    const InputError e = error_of([&] { generate(spec); });
    CHECK(e.pos().file == "--arrivals");
    CHECK(e.message() == message);
  }
}
