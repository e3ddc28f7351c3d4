// Reading request traces: the Mooncake JSON Lines trace, the Azure LLM inference CSV, the
// format sniffing between them, and the one ending (sort, cut, scale, number) that the
// readers and the generator share.
#include "traces/requests.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/json_reader.h"

namespace tierflow::traces {
namespace {

constexpr int64_t kPsPerDay = 86'400 * kPsPerS;
/// The largest Mooncake timestamp: kMaxArrivalPs in whole milliseconds.
constexpr int64_t kMaxTimestampMs = kMaxArrivalPs / kPsPerMs;

uint64_t blocks_for(uint64_t tokens, uint32_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

void check_block_tokens(uint32_t block_tokens, const std::string& name) {
  if (block_tokens < 1 || block_tokens > kMaxBlockTokens) {
    throw InputError::at(SourcePos{name}, "block size of {} tokens is outside [1, {}]",
                         block_tokens, kMaxBlockTokens);
  }
}

std::string zero_output_note(const std::string& name, uint64_t count, std::string_view column) {
  return fmt::format(
      "{}: {} request{} with {} 0: counted as 1 (a request generates at least one "
      "token)",
      name, count, count == 1 ? "" : "s", column);
}

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// --- Mooncake ----------------------------------------------------------------------------

constexpr std::array<std::string_view, 4> kMooncakeKeys = {"timestamp", "input_length",
                                                           "output_length", "hash_ids"};

/// Whether a line break lies between the last value and the token at `at` (only white
/// space can lie between them), or only white space (after a UTF-8 byte order mark) lies
/// before it in the file.
bool starts_line(std::string_view text, size_t at) {
  size_t k = at;
  for (; k > 0 && is_blank(text[k - 1]); --k) {
    if (text[k - 1] == '\n') return true;
  }
  return k == 0 || (k == 3 && text.substr(0, 3) == "\xEF\xBB\xBF");
}

std::string too_many_ids(uint64_t want, int64_t input) {
  return fmt::format(
      "more hash_ids than the {} that input_length {} needs (one per 512-token "
      "block, the last may be partial)",
      want, input);
}

/// The offset of item `index` of the array at `array_at` (an error path: reads it again).
size_t array_item_offset(const JsonReader& r, size_t array_at, uint64_t index) {
  JsonReader again(r.text(), r.file());
  again.seek(array_at);
  again.begin_array("hash_ids");
  for (uint64_t i = 0; i < index && again.next_item(); ++i) again.skip_value();
  again.next_item();
  return again.offset();
}

/// Where each hash id of a trace first came, and what came before it in that prompt: a
/// hash names its block together with everything before it, so it always follows the same
/// hash (or always starts the prompt). Repeated or reordered ids would make prompts share
/// blocks they do not share (and one prompt hold a block twice).
class PrefixChains {
 public:
  /// Checks request `blocks` (item i read at offset `at[i]` of `r`'s text) against every
  /// request before it; InputError at the first id that breaks a chain.
  void add(const JsonReader& r, const std::vector<uint64_t>& blocks,
           const std::vector<size_t>& at) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Link here{i > 0 ? blocks[i - 1] : 0, i == 0, at[i]};
      const auto [it, fresh] = links_.try_emplace(blocks[i], here);
      const Link& first = it->second;
      if (fresh || (first.root == here.root && (here.root || first.parent == here.parent)))
        continue;
      r.fail_at(at[i],
                "hash id {} {} here, but {} on line {}: a hash names its block together with "
                "everything before it, so one prompt's ids are distinct and an id always follows "
                "the same id",
                blocks[i], what(here), what(first),
                text_position(r.text(), first.at, r.file()).line);
    }
  }

 private:
  struct Link {
    uint64_t parent;  ///< the id before it (when not root)
    bool root;        ///< it starts a prompt
    size_t at;        ///< where it came first
  };
  static std::string what(const Link& l) {
    return l.root ? std::string("starts the prompt") : fmt::format("follows {}", l.parent);
  }
  std::unordered_map<uint64_t, Link> links_;
};

}  // namespace

RequestTrace parse_mooncake(std::string_view text, const std::string& name, const TraceOptions& o) {
  RequestTrace trace;
  trace.block_tokens = kMooncakeBlockTokens;
  trace.has_prefixes = true;
  trace.source = "mooncake " + name;
  JsonReader r(text, name);
  if (text.substr(0, 3) == "\xEF\xBB\xBF") r.seek(3);  // a byte order mark, as Azure's reader skips
  uint64_t total_blocks = 0;
  uint64_t zero_outputs = 0;
  PrefixChains chains;
  std::vector<size_t> id_at;  // where each hash id of the request was read
  while (r.peek() != JsonReader::Kind::kEnd) {
    const size_t at = r.offset();
    if (!starts_line(text, at)) {
      r.fail_at(at, "a second value on one line: a Mooncake trace holds one JSON object per line");
    }
    if (r.peek() != JsonReader::Kind::kObject) {
      r.fail_at(at, "expected a JSON object: a Mooncake trace holds one per line");
    }
    if (trace.requests.size() == kMaxRequests) {
      r.fail_at(at, "more than {} requests: the limit of a trace", kMaxRequests);
    }
    Request q;
    unsigned seen = 0;
    size_t hash_at = 0;
    int64_t input = 0;
    r.begin_object("a request");
    std::string_view key;
    while (r.next_key(key)) {
      const size_t key_at = r.key_offset();
      const auto k = static_cast<unsigned>(
          std::find(kMooncakeKeys.begin(), kMooncakeKeys.end(), key) - kMooncakeKeys.begin());
      if (k == kMooncakeKeys.size()) {
        r.fail_at(key_at, "unknown key '{}' in a Mooncake request{}", key,
                  did_you_mean(key, kMooncakeKeys));
      }
      if ((seen & (1u << k)) != 0) r.fail_at(key_at, "duplicate key '{}'", key);
      seen |= 1u << k;
      const size_t value_at = r.offset();
      switch (k) {
        case 0: {
          const double ms = r.read_number("timestamp");
          if (ms < 0) r.fail_at(value_at, "timestamp must be >= 0 ms, got {}", ms);
          if (ms > static_cast<double>(kMaxTimestampMs)) {
            r.fail_at(value_at,
                      "timestamp {} ms is past the limit of {} ms (2^61 ps, about 26.7 days)", ms,
                      kMaxTimestampMs);
          }
          // Whole milliseconds (the released trace's) convert exactly.
          q.arrival_ps = ms == std::floor(ms) ? static_cast<int64_t>(ms) * kPsPerMs
                                              : std::llround(ms * static_cast<double>(kPsPerMs));
          break;
        }
        case 1:
          input = r.read_int("input_length", INT64_MIN, INT64_MAX);
          if (input < 1) r.fail_at(value_at, "input_length must be at least 1, got {}", input);
          if (input > kMaxRequestTokens) {
            r.fail_at(value_at, "input_length {} is above the limit of {} tokens", input,
                      kMaxRequestTokens);
          }
          q.prompt_tokens = static_cast<uint32_t>(input);
          break;
        case 2: {
          const int64_t out = r.read_int("output_length", INT64_MIN, INT64_MAX);
          if (out < 0) r.fail_at(value_at, "output_length must be >= 0, got {}", out);
          if (out > kMaxRequestTokens) {
            r.fail_at(value_at, "output_length {} is above the limit of {} tokens", out,
                      kMaxRequestTokens);
          }
          if (out == 0) ++zero_outputs;
          q.output_tokens = out == 0 ? 1 : static_cast<uint32_t>(out);
          break;
        }
        default: {
          hash_at = value_at;
          // Ids past the most this request (or any request) needs are refused as they come,
          // so that a runaway array costs no memory.
          const uint64_t cap = input > 0
                                   ? blocks_for(static_cast<uint64_t>(input), kMooncakeBlockTokens)
                                   : blocks_for(kMaxRequestTokens, kMooncakeBlockTokens);
          q.blocks.reserve(input > 0 ? cap : 64);
          id_at.clear();
          r.begin_array("hash_ids");
          while (r.next_item()) {
            if (q.blocks.size() == cap) {
              if (input > 0) r.fail_at(r.offset(), "{}", too_many_ids(cap, input));
              r.fail_at(r.offset(),
                        "hash_ids: more than {} ids, the most an input_length of {} needs", cap,
                        kMaxRequestTokens);
            }
            id_at.push_back(r.offset());
            q.blocks.push_back(r.read_uint("hash_ids", UINT64_MAX));
          }
          break;
        }
      }
    }
    if (seen != 0xfu) {
      for (unsigned k = 0; k < kMooncakeKeys.size(); ++k) {
        if ((seen & (1u << k)) == 0) {
          r.fail_at(at,
                    "missing key '{}' in a Mooncake request (each needs timestamp, "
                    "input_length, output_length and hash_ids)",
                    kMooncakeKeys[k]);
        }
      }
    }
    const uint64_t want = blocks_for(q.prompt_tokens, kMooncakeBlockTokens);
    if (q.blocks.size() > want) {  // hash_ids came before input_length
      r.fail_at(array_item_offset(r, hash_at, want), "{}", too_many_ids(want, q.prompt_tokens));
    }
    if (q.blocks.size() < want) {
      r.fail_at(hash_at,
                "hash_ids has {} ids, {} fewer than the {} that input_length {} needs (one per "
                "512-token block, the last may be partial)",
                q.blocks.size(), want - q.blocks.size(), want, q.prompt_tokens);
    }
    total_blocks += want;
    if (total_blocks > kMaxTraceBlocks) {
      r.fail_at(hash_at, "more than {} hash blocks in all: the limit of a trace", kMaxTraceBlocks);
    }
    chains.add(r, q.blocks, id_at);
    trace.requests.push_back(std::move(q));
  }
  if (zero_outputs > 0)
    trace.notes.push_back(zero_output_note(name, zero_outputs, "output_length"));
  finish_trace(trace, o, name, /*note_order=*/true);
  split_blocks(trace, o.block_tokens, name);
  return trace;
}

RequestTrace read_mooncake(const std::string& path, const TraceOptions& o) {
  const FileText file(path);
  return parse_mooncake(file.view(), path, o);
}

// --- Azure CSV ---------------------------------------------------------------------------

namespace {

constexpr std::array<std::string_view, 3> kAzureColumns = {"TIMESTAMP", "ContextTokens",
                                                           "GeneratedTokens"};

/// One field of a CSV line: its text (spaces around it dropped) and its offset in the file.
struct Field {
  std::string_view text;
  size_t at = 0;
};

/// Splits the line [begin, end) of `text` at commas.
void split_fields(std::string_view text, size_t begin, size_t end, std::vector<Field>& out) {
  out.clear();
  size_t start = begin;
  while (true) {
    size_t stop = start;
    while (stop < end && text[stop] != ',') ++stop;
    size_t a = start;
    size_t b = stop;
    while (a < b && (text[a] == ' ' || text[a] == '\t')) ++a;
    while (b > a && is_blank(text[b - 1])) --b;
    out.push_back({text.substr(a, b - a), a});
    if (stop >= end) break;
    start = stop + 1;
  }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146'097 + doe - 719'468;
}

bool leap_year(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/// A timestamp as a day number and the picoseconds into that day (UTC).
struct Stamp {
  int64_t day = 0;
  int64_t ps = 0;
};

/// Parses "YYYY-MM-DD HH:MM:SS[.F{1,7}][Z|+HH:MM|-HH:MM]"; on failure returns the offset in
/// `s` of the fault and sets `error`.
size_t parse_stamp(std::string_view s, Stamp& out, std::string& error) {
  size_t i = 0;
  const auto digits = [&](size_t n, int64_t& v) {
    v = 0;
    for (size_t k = 0; k < n; ++k, ++i) {
      if (i >= s.size() || s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    return true;
  };
  const auto expect = [&](char c) {
    if (i >= s.size() || s[i] != c) return false;
    ++i;
    return true;
  };
  const auto bad = [&](size_t at, std::string message) {
    error = std::move(message);
    return at;
  };
  constexpr std::string_view kShape = "expected a time like 2023-11-16 18:15:46.6805900";
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (!digits(4, y) || !expect('-') || !digits(2, mo) || !expect('-') || !digits(2, d) ||
      !(expect(' ') || expect('T')) || !digits(2, h) || !expect(':') || !digits(2, mi) ||
      !expect(':') || !digits(2, sec)) {
    return bad(i, std::string(kShape));
  }
  constexpr std::array<int64_t, 12> kMonthDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  // The offsets of the month, day, hour, minute and second are fixed by the shape.
  if (mo < 1 || mo > 12) return bad(5, fmt::format("month {} is not in 1..12", mo));
  const int64_t month_days =
      kMonthDays[static_cast<size_t>(mo - 1)] + (mo == 2 && leap_year(y) ? 1 : 0);
  if (d < 1 || d > month_days) {
    return bad(8, fmt::format("day {} is not in 1..{} for that month", d, month_days));
  }
  if (h > 23) return bad(11, fmt::format("hour {} is not in 0..23", h));
  if (mi > 59) return bad(14, fmt::format("minute {} is not in 0..59", mi));
  if (sec > 59) return bad(17, fmt::format("second {} is not in 0..59", sec));
  int64_t frac_ps = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = kPsPerS;
    size_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (++n > 7) return bad(i, "more than 7 fractional digits of a second");
      scale /= 10;
      frac_ps += (s[i] - '0') * scale;
      ++i;
    }
    if (n == 0) return bad(i, "expected digits after the decimal point");
  }
  int64_t offset_s = 0;
  if (i < s.size() && s[i] == 'Z') {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    const int64_t sign = s[i] == '-' ? -1 : 1;
    ++i;
    int64_t oh = 0, om = 0;
    const size_t zone_at = i;
    if (!digits(2, oh) || !expect(':') || !digits(2, om) || oh > 23 || om > 59) {
      return bad(zone_at, "expected a UTC offset like +00:00");
    }
    offset_s = sign * (oh * 3600 + om * 60);
  }
  if (i != s.size()) return bad(i, std::string(kShape));
  out.day = days_from_civil(y, mo, d);
  // A local time at offset +H is H hours ahead of UTC: subtract it.
  out.ps = ((h * 60 + mi) * 60 + sec - offset_s) * kPsPerS + frac_ps;
  return 0;
}

/// An integer token count in a CSV field; `what` names the column.
int64_t token_field(const Field& f, std::string_view what, std::string_view text,
                    const std::string& name) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(f.text.data(), f.text.data() + f.text.size(), v);
  if (f.text.empty() || ec == std::errc::invalid_argument || p != f.text.data() + f.text.size()) {
    throw InputError::at(text_position(text, f.at, name),
                         "{}: expected a whole number of tokens, got '{}'", what, f.text);
  }
  if (ec == std::errc::result_out_of_range || v > kMaxRequestTokens) {
    throw InputError::at(text_position(text, f.at, name), "{} {} is above the limit of {} tokens",
                         what, f.text, kMaxRequestTokens);
  }
  return v;
}

}  // namespace

RequestTrace parse_azure(std::string_view text, const std::string& name, const TraceOptions& o) {
  check_block_tokens(o.block_tokens, name);
  RequestTrace trace;
  trace.block_tokens = o.block_tokens;
  trace.has_prefixes = false;
  trace.source = "azure " + name;
  const auto fail = [&](size_t at, std::string message) -> InputError {
    return InputError(text_position(text, at, name), std::move(message));
  };
  std::array<size_t, kAzureColumns.size()> column{};  // the field index of each column
  column.fill(SIZE_MAX);
  size_t width = 0;  // fields per line
  bool header = true;
  std::vector<Field> fields;
  Stamp first_stamp;
  uint64_t total_blocks = 0;
  uint64_t zero_outputs = 0;
  size_t pos = text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    const size_t begin = pos;
    pos = end + 1;
    size_t first_char = begin;
    while (first_char < end && is_blank(text[first_char])) ++first_char;
    if (first_char == end) continue;  // a blank line
    split_fields(text, begin, end, fields);
    if (header) {
      header = false;
      width = fields.size();
      for (size_t f = 0; f < fields.size(); ++f) {
        const auto k = static_cast<size_t>(
            std::find(kAzureColumns.begin(), kAzureColumns.end(), fields[f].text) -
            kAzureColumns.begin());
        if (k == kAzureColumns.size()) {
          throw fail(fields[f].at,
                     fmt::format("unknown column '{}' in the Azure CSV header{}", fields[f].text,
                                 did_you_mean(fields[f].text, kAzureColumns)));
        }
        if (column[k] != SIZE_MAX) {
          throw fail(fields[f].at,
                     fmt::format("column '{}' appears twice in the header", fields[f].text));
        }
        column[k] = f;
      }
      for (size_t k = 0; k < kAzureColumns.size(); ++k) {
        if (column[k] == SIZE_MAX) {
          throw fail(first_char, fmt::format("the Azure CSV header lacks column '{}' (it needs "
                                             "TIMESTAMP, ContextTokens and GeneratedTokens)",
                                             kAzureColumns[k]));
        }
      }
      continue;
    }
    if (fields.size() != width) {
      const size_t at = fields.size() > width ? fields[width].at : end;
      throw fail(at, fmt::format("{} fields where the header has {}", fields.size(), width));
    }
    if (trace.requests.size() == kMaxRequests) {
      throw fail(first_char,
                 fmt::format("more than {} requests: the limit of a trace", kMaxRequests));
    }
    Request q;
    const Field& ts = fields[column[0]];
    Stamp stamp;
    std::string error;
    if (const size_t bad = parse_stamp(ts.text, stamp, error); !error.empty()) {
      throw fail(ts.at + bad, fmt::format("TIMESTAMP '{}': {}", ts.text, error));
    }
    if (trace.requests.empty()) first_stamp = stamp;
    // Days are bounded before they are multiplied out: a trace spans at most 26.7 days.
    if (std::abs(stamp.day - first_stamp.day) > 27) {
      throw fail(ts.at, fmt::format("TIMESTAMP '{}' is {} days from the first row's: a trace may "
                                    "span at most 26.7 days (2^61 ps)",
                                    ts.text, stamp.day - first_stamp.day));
    }
    q.arrival_ps = (stamp.day - first_stamp.day) * kPsPerDay + stamp.ps;
    const Field& ctx = fields[column[1]];
    const int64_t prompt = token_field(ctx, "ContextTokens", text, name);
    if (prompt < 1)
      throw fail(ctx.at, fmt::format("ContextTokens must be at least 1, got {}", prompt));
    const Field& gen = fields[column[2]];
    const int64_t out = token_field(gen, "GeneratedTokens", text, name);
    if (out < 0) throw fail(gen.at, fmt::format("GeneratedTokens must be >= 0, got {}", out));
    if (out == 0) ++zero_outputs;
    q.prompt_tokens = static_cast<uint32_t>(prompt);
    q.output_tokens = out == 0 ? 1 : static_cast<uint32_t>(out);
    const uint64_t blocks = blocks_for(q.prompt_tokens, trace.block_tokens);
    if (total_blocks + blocks > kMaxTraceBlocks) {
      throw fail(ctx.at, fmt::format("more than {} hash blocks in all: the limit of a trace",
                                     kMaxTraceBlocks));
    }
    // No prefix information: every block gets a hash of its own.
    q.blocks.resize(blocks);
    for (uint64_t b = 0; b < blocks; ++b) q.blocks[b] = total_blocks + b;
    total_blocks += blocks;
    trace.requests.push_back(std::move(q));
  }
  if (header)
    throw InputError::at(SourcePos{name}, "empty file: an Azure CSV needs a header and requests");
  if (zero_outputs > 0)
    trace.notes.push_back(zero_output_note(name, zero_outputs, "GeneratedTokens"));
  finish_trace(trace, o, name, /*note_order=*/true);
  return trace;
}

RequestTrace read_azure(const std::string& path, const TraceOptions& o) {
  const FileText file(path);
  return parse_azure(file.view(), path, o);
}

// --- sniffing and the common ending ------------------------------------------------------

RequestTrace read_request_trace(const std::string& path, const TraceOptions& o) {
  const FileText file(path);
  const std::string_view text = file.view();
  size_t i = text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  while (i < text.size() && is_blank(text[i])) ++i;
  if (i == text.size()) {
    throw InputError::at(SourcePos{path},
                         "empty file: a request trace is Mooncake JSON Lines or "
                         "an Azure LLM inference CSV");
  }
  if (text[i] == '{') return parse_mooncake(text, path, o);
  const std::string_view line = text.substr(i, text.find('\n', i) - i);
  for (const std::string_view column : kAzureColumns) {
    if (line.find(column) != std::string_view::npos) return parse_azure(text, path, o);
  }
  throw InputError(text_position(text, i, path),
                   "not a request trace: tierflow reads Mooncake JSON Lines (one object per line, "
                   "the first character '{') and Azure LLM inference CSV (a header with TIMESTAMP, "
                   "ContextTokens and GeneratedTokens)");
}

namespace {

double days(double ps) {
  return ps / static_cast<double>(kPsPerDay);
}

void check_scale_value(double rate_scale, const std::string& name) {
  if (!(rate_scale > 0) || !std::isfinite(rate_scale)) {
    throw InputError::at(SourcePos{name}, "rate scale {} is not a positive finite number",
                         rate_scale);
  }
}

}  // namespace

void split_blocks(RequestTrace& trace, uint32_t page_tokens, const std::string& name) {
  const uint32_t block = trace.block_tokens;
  if (page_tokens == block) return;
  if (page_tokens == 0 || page_tokens > block || block % page_tokens != 0) {
    throw InputError::at(SourcePos{name},
                         "block tokens {}: the trace's {}-token prefix blocks split only into "
                         "pages that divide them (e.g. 16, 32, 64, ... {})",
                         page_tokens, block, block);
  }
  const uint64_t pages = block / page_tokens;
  // Page k of block id h is h x pages + k: pages of one block stay together and ids of
  // different blocks stay apart; bit 63 stays clear (the engine's own output blocks).
  constexpr uint64_t kMaxId = (uint64_t{1} << 63) - 1;
  for (Request& q : trace.requests) {
    std::vector<uint64_t> split;
    split.reserve(static_cast<size_t>(blocks_for(q.prompt_tokens, page_tokens)));
    for (size_t b = 0; b < q.blocks.size(); ++b) {
      const uint64_t h = q.blocks[b];
      if (h > (kMaxId - (pages - 1)) / pages) {
        throw InputError::at(SourcePos{name},
                             "request {}: hash id {} is too large to split into {} pages (at "
                             "most {})",
                             q.id, h, pages, (kMaxId - (pages - 1)) / pages);
      }
      const uint64_t first = uint64_t{block} * b;
      const uint64_t tokens = std::min<uint64_t>(block, q.prompt_tokens - first);
      for (uint64_t k = 0; k < blocks_for(tokens, page_tokens); ++k) split.push_back(h * pages + k);
    }
    q.blocks = std::move(split);
  }
  trace.block_tokens = page_tokens;
}

void finish_trace(RequestTrace& trace, const TraceOptions& o, const std::string& name,
                  bool note_order) {
  check_scale_value(o.rate_scale, name);
  std::vector<Request>& rs = trace.requests;
  if (rs.empty()) throw InputError::at(SourcePos{name}, "no requests: a trace needs at least one");
  uint64_t out_of_order = 0;
  for (size_t i = 1; i < rs.size(); ++i) {
    if (rs[i].arrival_ps < rs[i - 1].arrival_ps) ++out_of_order;
  }
  if (out_of_order > 0) {
    std::stable_sort(rs.begin(), rs.end(), [](const Request& a, const Request& b) {
      return a.arrival_ps < b.arrival_ps;
    });
    if (note_order) {
      trace.notes.push_back(fmt::format("{}: {} timestamp{} out of order: sorted stably by arrival",
                                        name, out_of_order, out_of_order == 1 ? "" : "s"));
    }
  }
  if (o.first > 0 && o.first < rs.size()) rs.resize(o.first);
  const int64_t t0 = rs.front().arrival_ps;
  const int64_t span = rs.back().arrival_ps - t0;
  if (span > kMaxArrivalPs) {
    throw InputError::at(SourcePos{name},
                         "the trace spans {:.2f} days, more than the limit of 2^61 ps (about 26.7 "
                         "days)",
                         days(static_cast<double>(span)));
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    rs[i].arrival_ps -= t0;
    rs[i].id = i;
  }
  scale_arrivals(trace, o.rate_scale, name);
}

void check_rate_scale(const RequestTrace& trace, double rate_scale, const std::string& name) {
  check_scale_value(rate_scale, name);
  const std::vector<Request>& rs = trace.requests;
  const double span =
      rs.empty() ? 0.0 : static_cast<double>(rs.back().arrival_ps - rs.front().arrival_ps);
  const double scaled = span / rate_scale;
  if (scaled > static_cast<double>(kMaxArrivalPs)) {
    throw InputError::at(
        SourcePos{name},
        "the trace spans {:.2f} days at rate scale {}: more than the limit of 2^61 "
        "ps (about 26.7 days)",
        days(scaled), rate_scale);
  }
}

void scale_arrivals(RequestTrace& trace, double rate_scale, const std::string& name) {
  check_rate_scale(trace, rate_scale, name);
  if (rate_scale == 1.0) return;
  for (Request& r : trace.requests) {
    r.arrival_ps = std::llround(static_cast<double>(r.arrival_ps) / rate_scale);
  }
}

}  // namespace tierflow::traces
