// Unit-bearing quantities: the only way numbers with dimensions enter tierflow.
//
// Glossary
//   Bytes      an exact count of bytes (uint64). Text: "80GiB", "64KB", "512B", "400Gb".
//   Bandwidth  bytes per second (double). Text: "64GB/s", "400Gb/s", "25GiB/s".
//   Duration   an exact count of picoseconds (int64). Text: "1.5us", "250ns", "60µs".
//   FlopRate   floating-point operations per second (double). Text: "989TFLOP/s".
//
// Prefixes: SI (k M G T P E = 10^3k) and IEC (Ki Mi Gi Ti Pi Ei = 2^10k) are distinct;
// "K" alone is rejected as ambiguous. 'B' is a byte, 'b' a bit. A bare number, an
// unknown unit, a negative, non-finite or overflowing value, and a value that is not
// a whole number of the base unit (0.5B, 0.1ps) are errors.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tierflow {

/// An exact byte count.
struct Bytes {
  uint64_t value = 0;
  constexpr auto operator<=>(const Bytes&) const = default;
};

/// Bytes per second. Stored as double: only the flow solver does arithmetic on it.
struct Bandwidth {
  double bytes_per_s = 0.0;
  constexpr auto operator<=>(const Bandwidth&) const = default;
};

/// An exact span of time in integer picoseconds. Never a double.
struct Duration {
  int64_t ps = 0;
  constexpr auto operator<=>(const Duration&) const = default;
};

/// The latest simulated time (2^62 ps, about 53 days): a run that would pass it is refused
/// as implausible input rather than let its times overflow. docs/cli.md, "Limits".
inline constexpr int64_t kMaxSimTimePs = int64_t{1} << 62;

/// Floating-point operations per second.
struct FlopRate {
  double flop_per_s = 0.0;
  constexpr auto operator<=>(const FlopRate&) const = default;
};

inline constexpr int64_t kPsPerNs = 1'000;
inline constexpr int64_t kPsPerUs = 1'000'000;
inline constexpr int64_t kPsPerMs = 1'000'000'000;
inline constexpr int64_t kPsPerS = 1'000'000'000'000;

/// Picoseconds as seconds (for reports: rows, JSON, text).
[[nodiscard]] constexpr double to_seconds(int64_t ps) {
  return static_cast<double>(ps) / static_cast<double>(kPsPerS);
}

/// Result of parsing a quantity: on failure `error` says what was wrong with the text
/// (without position; the caller adds file:line:col) and `value` is untouched.
template <class T>
struct ParseResult {
  T value{};
  std::string error;  ///< empty on success
  [[nodiscard]] bool ok() const { return error.empty(); }
};

ParseResult<Bytes> parse_bytes(std::string_view text);
ParseResult<Bandwidth> parse_bandwidth(std::string_view text);
ParseResult<Duration> parse_duration(std::string_view text);
ParseResult<FlopRate> parse_flop_rate(std::string_view text);
/// A count (tokens, sequences): "8192", "8k" (8,000), "32Ki" (32,768), "1.5M", "1e6"; an SI
/// prefix (k M G T) or a binary one (Ki Mi Gi Ti); whole and at most INT64_MAX.
ParseResult<int64_t> parse_count(std::string_view text);
/// A plain number ("1.2", "5e-3", "inf", "nan"): nullopt unless the whole text is one
/// (callers decide whether infinities and NaN are allowed).
std::optional<double> parse_real(std::string_view text);
/// `text` as the quantity it spells, so that two spellings of one value compare equal
/// ("1k" and "1000", "1Ki" and "1024", "8Gb/s" and "1GB/s", "0.5" and ".5"): the first of a
/// count, bytes, a bandwidth, a duration, a FLOP rate and a plain number that parses it,
/// tagged with which; any other text as it is.
std::string canonical_quantity(std::string_view text);
/// "1 program", "2 programs": `n` and `noun`, plural (an `s`) unless n is 1.
std::string count_text(uint64_t n, std::string_view noun);

/// Exact text that parses back to the same value: the largest IEC or SI unit that
/// represents the value with at most three decimals, the shorter of the two, else "NB".
std::string to_string(Bytes b);
/// Human text with up to 3 significant decimals in SI bytes per second ("3.35TB/s").
std::string to_string(Bandwidth bw);
/// Exact text ("1.5us", "250ns", "7ps"); parses back to the same value.
std::string to_string(Duration d);
/// Human text with up to 4 significant digits in SI ("989.4TFLOP/s").
std::string to_string(FlopRate r);
/// Human text rounded to 3 significant digits in IEC units ("74.5GiB"), for tables.
std::string to_string_approx(Bytes b);
/// Human text rounded to 4 significant digits in the unit that puts it in [1, 1000)
/// ("8.395ms", "250ns"), for tables.
std::string to_string_approx(Duration d);

/// Time for `bytes` at `bw`, rounded up to a whole picosecond. `bw` must be positive.
Duration transfer_time(Bytes bytes, Bandwidth bw);
/// Time for `flops` at `rate`, rounded up to a whole picosecond. `rate` must be positive.
Duration compute_time(double flops, FlopRate rate);

}  // namespace tierflow
