// Unit tests for core/units: parsing, printing and time arithmetic of unit-bearing quantities.
// Every expected number here is hand-checkable; the arithmetic is spelled out where it is not
// obvious.
#include "core/units.h"

#include <doctest/doctest.h>

#include <cmath>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>

namespace tierflow {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr uint64_t kKi = 1024;
constexpr uint64_t kMi = kKi * 1024;
constexpr uint64_t kGi = kMi * 1024;
constexpr uint64_t kTi = kGi * 1024;
constexpr uint64_t kPi = kTi * 1024;
constexpr uint64_t kEi = kPi * 1024;

// CHECK(text.find(needle) != npos), evaluating `text` once and printing it on failure.
#define CHECK_CONTAINS(text, needle)                                       \
  do {                                                                     \
    const std::string checked_text_ = (text);                              \
    CHECK_MESSAGE(checked_text_.find(needle) != std::string::npos,         \
                  "'" << checked_text_ << "' lacks '" << (needle) << "'"); \
  } while (false)

// Parse helpers: the value on success (failing the test otherwise), or the error text.
uint64_t bytes(std::string_view text) {
  const auto r = parse_bytes(text);
  REQUIRE_MESSAGE(r.ok(), "'" << text << "': " << r.error);
  return r.value.value;
}
double bandwidth(std::string_view text) {
  const auto r = parse_bandwidth(text);
  REQUIRE_MESSAGE(r.ok(), "'" << text << "': " << r.error);
  return r.value.bytes_per_s;
}
int64_t ps(std::string_view text) {
  const auto r = parse_duration(text);
  REQUIRE_MESSAGE(r.ok(), "'" << text << "': " << r.error);
  return r.value.ps;
}
double flops(std::string_view text) {
  const auto r = parse_flop_rate(text);
  REQUIRE_MESSAGE(r.ok(), "'" << text << "': " << r.error);
  return r.value.flop_per_s;
}

// On failure the value must be left untouched (zero-initialised).
std::string bytes_error(std::string_view text) {
  const auto r = parse_bytes(text);
  CHECK_MESSAGE(!r.ok(), "'" << text << "' parsed as " << r.value.value);
  CHECK(r.value.value == 0);
  return r.error;
}
std::string bandwidth_error(std::string_view text) {
  const auto r = parse_bandwidth(text);
  CHECK_MESSAGE(!r.ok(), "'" << text << "' parsed as " << r.value.bytes_per_s);
  CHECK(r.value.bytes_per_s == 0.0);
  return r.error;
}
std::string duration_error(std::string_view text) {
  const auto r = parse_duration(text);
  CHECK_MESSAGE(!r.ok(), "'" << text << "' parsed as " << r.value.ps);
  CHECK(r.value.ps == 0);
  return r.error;
}
std::string flop_rate_error(std::string_view text) {
  const auto r = parse_flop_rate(text);
  CHECK_MESSAGE(!r.ok(), "'" << text << "' parsed as " << r.value.flop_per_s);
  CHECK(r.value.flop_per_s == 0.0);
  return r.error;
}

// ---------------------------------------------------------------------------------------------
// Counts

int64_t count(std::string_view text) {
  const auto r = parse_count(text);
  REQUIRE_MESSAGE(r.ok(), "'" << text << "': " << r.error);
  return r.value;
}
std::string count_error(std::string_view text) {
  const auto r = parse_count(text);
  CHECK_MESSAGE(!r.ok(), "'" << text << "' parsed as " << r.value);
  CHECK(r.value == 0);
  return r.error;
}

TEST_CASE("parse_real: the whole text one number, or nothing") {
  CHECK(parse_real("1.2") == 1.2);
  CHECK(parse_real("5e-3") == 5e-3);
  CHECK(parse_real("-2") == -2.0);
  CHECK(std::isinf(*parse_real("inf")));
  CHECK(std::isnan(*parse_real("nan")));
  for (const char* bad : {"", "1.2x", "x", " 1", "1 ", "1e999999"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_real(bad).has_value());
  }
}

TEST_CASE("parse_count: bare numbers, SI and binary prefixes") {
  CHECK(count("0") == 0);
  CHECK(count("8192") == 8192);
  CHECK(count("8k") == 8000);
  CHECK(count("8Ki") == 8192);
  CHECK(count("128Ki") == 131072);
  CHECK(count("1.5M") == 1'500'000);
  CHECK(count("1Mi") == 1'048'576);
  CHECK(count("2G") == 2'000'000'000);
  CHECK(count("1T") == 1'000'000'000'000);
  CHECK(count("1e6") == 1'000'000);
  CHECK(count("0.5Ki") == 512);
  CHECK(count("8 k") == 8000);  // one space before the prefix, as for units
  CHECK(count("9223372036854775807") == kI64Max);
}

TEST_CASE("parse_count: errors name the text and what would be right") {
  CHECK_CONTAINS(count_error("8K"), "did you mean 'k'? (1000; Ki is 1024)");
  CHECK_CONTAINS(count_error("1m"), "did you mean 'M'? (a million)");
  CHECK_CONTAINS(count_error("1.5"), "'1.5' is not a whole number");
  CHECK_CONTAINS(count_error("1.0001k"), "is not a whole number");
  CHECK_CONTAINS(count_error("-3"), "negative value '-3'");
  CHECK_CONTAINS(count_error("9223372036854775808"), "is too large");
  CHECK_CONTAINS(count_error("10Ti0"), "unknown unit");
  CHECK_CONTAINS(count_error("lots"), "malformed number in 'lots'");
  CHECK_CONTAINS(count_error(""), "empty value");
  CHECK_CONTAINS(count_error("8kB"), "unknown unit 'kB' in '8kB'");
}

// ---------------------------------------------------------------------------------------------
// Bytes parsing

TEST_CASE("parse_bytes: plain, SI and IEC byte units") {
  CHECK(bytes("0B") == 0);
  CHECK(bytes("1B") == 1);
  CHECK(bytes("512B") == 512);
  CHECK(bytes("64kB") == 64'000);
  CHECK(bytes("1MB") == 1'000'000);
  CHECK(bytes("80GB") == 80'000'000'000);
  CHECK(bytes("1TB") == 1'000'000'000'000);
  CHECK(bytes("1PB") == 1'000'000'000'000'000);
  CHECK(bytes("1EB") == 1'000'000'000'000'000'000);
  CHECK(bytes("1KiB") == 1024);
  CHECK(bytes("1MiB") == 1'048'576);
  CHECK(bytes("1GiB") == 1'073'741'824);
  CHECK(bytes("80GiB") == 85'899'345'920);
  CHECK(bytes("1TiB") == 1'099'511'627'776);
  CHECK(bytes("1PiB") == 1'125'899'906'842'624);
  CHECK(bytes("1EiB") == 1'152'921'504'606'846'976);
  CHECK(bytes("15EiB") == 15 * kEi);
  CHECK(bytes("00080GB") == 80'000'000'000);  // leading zeros are just digits
}

TEST_CASE("parse_bytes: bit units divide by 8") {
  CHECK(bytes("8b") == 1);
  CHECK(bytes("400Gb") == 50'000'000'000);
  CHECK(bytes("1kb") == 125);
  CHECK(bytes("1Mb") == 125'000);
  CHECK(bytes("1Tb") == 125'000'000'000);
  CHECK(bytes("1Pb") == 125'000'000'000'000);
  CHECK(bytes("1Eb") == 125'000'000'000'000'000);
  CHECK(bytes("1Kib") == 128);
  CHECK(bytes("8Kib") == 1024);
  CHECK(bytes("1Mib") == 131'072);
  CHECK(bytes("1Gib") == 134'217'728);
  CHECK(bytes("1Tib") == 137'438'953'472);
  CHECK(bytes("1Pib") == kPi / 8);
  CHECK(bytes("1Eib") == kEi / 8);
}

TEST_CASE("parse_bytes: optional single space, fractions and exponents") {
  CHECK(bytes("80 GiB") == 80 * kGi);
  CHECK(bytes("80 B") == 80);
  CHECK(bytes("0.5KiB") == 512);
  CHECK(bytes("1.5KiB") == 1536);
  CHECK(bytes("1.5kB") == 1500);
  CHECK(bytes("2.25GiB") == 2'415'919'104);  // 9 * 2^28
  CHECK(bytes("0.001kB") == 1);
  CHECK(bytes("1.000B") == 1);
  CHECK(bytes("0.125Kib") == 16);  // 128 bits
  CHECK(bytes("1e3B") == 1000);
  CHECK(bytes("1.5e3B") == 1500);
  CHECK(bytes("1e+3B") == 1000);
  CHECK(bytes("1e-3kB") == 1);
  CHECK(bytes("5e-1KiB") == 512);
  CHECK(bytes("1e0GB") == 1'000'000'000);
  CHECK(bytes("1.5e3 MB") == 1'500'000'000);
  CHECK(bytes("0e999999999999999B") == 0);  // zero stays zero at any exponent
  CHECK(bytes("0.0EiB") == 0);
  // 1000 zeros of fraction and a matching exponent: exact digit arithmetic, no doubles.
  CHECK(bytes("0." + std::string(999, '0') + "1e1000B") == 1);
  CHECK(bytes("1" + std::string(1000, '0') + "e-1000B") == 1);
}

TEST_CASE("parse_bytes: whole-number and range errors") {
  CHECK_CONTAINS(bytes_error("0.5B"), "'0.5B' is not a whole number of bytes");
  CHECK_CONTAINS(bytes_error("1b"), "not a whole number of bytes");
  CHECK_CONTAINS(bytes_error("12b"), "not a whole number of bytes");  // 1.5 bytes
  CHECK_CONTAINS(bytes_error("0.0001kB"), "not a whole number of bytes");
  CHECK_CONTAINS(bytes_error("0.3Kib"), "not a whole number of bytes");  // 38.4 bytes
  CHECK_CONTAINS(bytes_error("1e-1B"), "not a whole number of bytes");
  CHECK_CONTAINS(bytes_error("1e-99999999999999999999B"), "not a whole number of bytes");

  CHECK(bytes("18446744073709551615B") == kU64Max);
  CHECK(bytes("18.446744073709551615EB") == kU64Max);
  CHECK(bytes("147573952589676412920b") == kU64Max);  // 8 * (2^64 - 1) bits
  CHECK(bytes("1e19B") == 10'000'000'000'000'000'000U);
  for (const char* text : {"17EiB", "16EiB", "18446744073709551616B", "18.446744073709551616EB",
                           "147573952589676412928b", "1e20B", "100000000000000000000000B",
                           "1e999999999999999999999B", "20EB"}) {
    CAPTURE(text);
    const std::string e = bytes_error(text);
    CHECK_CONTAINS(e, "too large");
    CHECK_CONTAINS(e, "overflow");
  }
}

TEST_CASE("parse_bytes: malformed text") {
  CHECK_CONTAINS(bytes_error(""), "empty value");
  const std::string bare = bytes_error("80");
  CHECK_CONTAINS(bare, "missing unit in '80'");
  CHECK_CONTAINS(bare, "expected a byte size such as 80GiB");
  CHECK_CONTAINS(bytes_error("-1GB"), "negative value '-1GB'");
  CHECK_CONTAINS(bytes_error("-0B"), "negative value");
  for (const char* text : {"+5GB", ".5GB", "5.GB", "GB", "1e+GB", "1e-B", "1.2.3GB"}) {
    CAPTURE(text);
    CHECK_CONTAINS(bytes_error(text), "malformed number");
  }
  for (const char* text : {" 80GB", "80GB ", "80  GB", "80\tGB", "80 ", "80G B", "\n"}) {
    CAPTURE(text);
    CHECK_CONTAINS(bytes_error(text), "whitespace");
  }
  CHECK_CONTAINS(bytes_error("0x10B"), "unknown unit 'x10B'");
  CHECK_CONTAINS(bytes_error("inf B"), "malformed");
  CHECK_CONTAINS(bytes_error("nanB"), "malformed");
}

TEST_CASE("parse_bytes: unknown units, did-you-mean and the ambiguous K") {
  const std::string xyz = bytes_error("80XYZ");
  CHECK_CONTAINS(xyz, "unknown unit 'XYZ'");
  CHECK_CONTAINS(xyz, "expected a byte unit");
  CHECK_CONTAINS(xyz, "KiB");
  CHECK(xyz.find("did you mean") == std::string::npos);  // nothing is close to XYZ

  // Unit letters are case-sensitive; pure case confusion lists every match.
  CHECK_CONTAINS(bytes_error("80gb"), "unknown unit 'gb'");
  CHECK_CONTAINS(bytes_error("80gb"), "did you mean 'GB' or 'Gb'?");
  CHECK_CONTAINS(bytes_error("80mb"), "did you mean 'MB' or 'Mb'?");
  CHECK_CONTAINS(bytes_error("80gib"), "did you mean 'GiB' or 'Gib'?");
  CHECK_CONTAINS(bytes_error("80GIB"), "did you mean 'GiB' or 'Gib'?");
  CHECK_CONTAINS(bytes_error("80GiBs"), "did you mean 'GiB'?");
  CHECK_CONTAINS(bytes_error("80bytes"), "did you mean 'B'?");
  CHECK_CONTAINS(bytes_error("1eB"), "unknown unit 'eB'");  // 'e' is only an exponent before digits
  CHECK_CONTAINS(bytes_error("80GB/s"), "did you mean 'GB'?");
  CHECK_CONTAINS(bytes_error("1EiB/s"), "unknown unit 'EiB/s'");
  CHECK_CONTAINS(bytes_error("1x"), "unknown unit 'x'");
  CHECK(bytes_error("1x").find("did you mean") == std::string::npos);

  CHECK(bytes_error("64KB") == "ambiguous unit 'KB': write kB (1000 B) or KiB (1024 B)");
  CHECK(bytes_error("64 KB") == "ambiguous unit 'KB': write kB (1000 B) or KiB (1024 B)");
  CHECK(bytes_error("64Kb") == "ambiguous unit 'Kb': write kb (1000 b) or Kib (1024 b)");
}

// ---------------------------------------------------------------------------------------------
// Bandwidth parsing

TEST_CASE("parse_bandwidth: byte and bit rates") {
  CHECK(bandwidth("64GB/s") == 64e9);
  CHECK(bandwidth("64 GB/s") == 64e9);
  CHECK(bandwidth("3.35TB/s") == 3.35e12);  // rounded once, same double as the literal
  CHECK(bandwidth("52.8GB/s") == 52.8e9);
  CHECK(bandwidth("25GiB/s") == 26'843'545'600.0);
  CHECK(bandwidth("400Gb/s") == 50e9);
  CHECK(bandwidth("1B/s") == 1.0);
  CHECK(bandwidth("8b/s") == 1.0);
  CHECK(bandwidth("1b/s") == 0.125);  // rates need not be whole
  CHECK(bandwidth("0B/s") == 0.0);
  CHECK(bandwidth("1kB/s") == 1e3);
  CHECK(bandwidth("1MB/s") == 1e6);
  CHECK(bandwidth("1PB/s") == 1e15);
  CHECK(bandwidth("1EB/s") == 1e18);
  CHECK(bandwidth("1KiB/s") == 1024.0);
  CHECK(bandwidth("1MiB/s") == 1'048'576.0);
  CHECK(bandwidth("1TiB/s") == 1'099'511'627'776.0);
  CHECK(bandwidth("1EiB/s") == 1'152'921'504'606'846'976.0);
  CHECK(bandwidth("1Kib/s") == 128.0);
  CHECK(bandwidth("1.5e3MB/s") == 1.5e9);
  CHECK(bandwidth("0.5kB/s") == 500.0);
  CHECK(bandwidth("1e30B/s") == 1e30);
  CHECK(bandwidth("1000000EiB/s") == 1e6 * 1'152'921'504'606'846'976.0);
}

TEST_CASE("parse_bandwidth: errors") {
  CHECK_CONTAINS(bandwidth_error("64"), "missing unit in '64'");
  CHECK_CONTAINS(bandwidth_error("64"), "bandwidth");
  CHECK_CONTAINS(bandwidth_error("-1GB/s"), "negative value");
  CHECK_CONTAINS(bandwidth_error("+1GB/s"), "malformed");
  CHECK_CONTAINS(bandwidth_error(""), "empty value");
  for (const char* text : {"1.1e30B/s", "1e31B/s", "1e13EB/s", "1e999GB/s", "2e30Gb/s"}) {
    CAPTURE(text);
    CHECK_CONTAINS(bandwidth_error(text), "too large");
  }
  // A byte size is not a bandwidth.
  CHECK_CONTAINS(bandwidth_error("64GB"), "unknown unit 'GB'");
  CHECK_CONTAINS(bandwidth_error("64GB"), "did you mean 'GB/s'?");
  // "bps" spellings are rejected; the case of b/B picks bits or bytes.
  CHECK_CONTAINS(bandwidth_error("400Gbps"), "unknown unit 'Gbps'");
  CHECK_CONTAINS(bandwidth_error("400Gbps"), "did you mean 'Gb/s'?");
  CHECK_CONTAINS(bandwidth_error("64GBps"), "did you mean 'GB/s'?");
  CHECK_CONTAINS(bandwidth_error("25GiBps"), "did you mean 'GiB/s'?");
  CHECK_CONTAINS(bandwidth_error("64gb/s"), "did you mean 'GB/s' or 'Gb/s'?");
  CHECK(bandwidth_error("1KB/s") ==
        "ambiguous unit 'KB/s': write kB/s (1000 B/s) or KiB/s (1024 B/s)");
  CHECK(bandwidth_error("1Kb/s") ==
        "ambiguous unit 'Kb/s': write kb/s (1000 b/s) or Kib/s (1024 b/s)");
  const std::string e = bandwidth_error("1furlong/s");
  CHECK_CONTAINS(e, "unknown unit 'furlong/s'");
  CHECK_CONTAINS(e, "expected a bandwidth unit");
}

// ---------------------------------------------------------------------------------------------
// Duration parsing

TEST_CASE("parse_duration: units, fractions, exponents, micro signs") {
  CHECK(ps("0ps") == 0);
  CHECK(ps("7ps") == 7);
  CHECK(ps("250ns") == 250'000);
  CHECK(ps("1.5us") == 1'500'000);
  CHECK(ps("1.5 us") == 1'500'000);
  CHECK(ps("60\xC2\xB5s") == 60'000'000);  // U+00B5 MICRO SIGN
  CHECK(ps("60\xCE\xBCs") == 60'000'000);  // U+03BC GREEK SMALL LETTER MU
  CHECK(ps("2ms") == 2'000'000'000);
  CHECK(ps("1s") == 1'000'000'000'000);
  CHECK(ps("1.5e3ns") == 1'500'000);
  CHECK(ps("0.001ns") == 1);
  CHECK(ps("1e-12s") == 1);
  CHECK(ps("3600s") == 3'600'000'000'000'000);
  CHECK(ps("9223372036854775807ps") == kI64Max);
  CHECK(ps("9223372.036854775807s") == kI64Max);
}

TEST_CASE("parse_duration: errors") {
  CHECK_CONTAINS(duration_error("0.1ps"), "'0.1ps' is below picosecond resolution");
  CHECK_CONTAINS(duration_error("1.5ps"), "below picosecond resolution");
  CHECK_CONTAINS(duration_error("1.0000000000001s"), "below picosecond resolution");
  CHECK_CONTAINS(duration_error("1e-13s"), "below picosecond resolution");
  // 1e7 s = 1e19 ps > INT64_MAX (about 9.22e18 ps, 106 days).
  for (const char* text :
       {"10000000s", "1e7s", "9223372036854775808ps", "9223372.036854775808s", "1e99999999999s"}) {
    CAPTURE(text);
    const std::string e = duration_error(text);
    CHECK_CONTAINS(e, "too large");
    CHECK_CONTAINS(e, "overflow");
  }
  CHECK_CONTAINS(duration_error("5"), "missing unit in '5'");
  CHECK_CONTAINS(duration_error("5"), "duration");
  CHECK_CONTAINS(duration_error("-5ns"), "negative value");
  CHECK_CONTAINS(duration_error("5sec"), "unknown unit 'sec'");
  CHECK_CONTAINS(duration_error("5sec"), "did you mean 's'?");
  CHECK_CONTAINS(duration_error("5seconds"), "did you mean 's'?");
  CHECK_CONTAINS(duration_error("5min"), "unknown unit 'min'");
  CHECK_CONTAINS(duration_error("5min"), "did you mean 's'?");  // not 'ms': minutes are seconds
  CHECK_CONTAINS(duration_error("2h"), "did you mean 's'?");
  CHECK_CONTAINS(duration_error("5msec"), "did you mean 'ms'?");
  CHECK_CONTAINS(duration_error("5usec"), "did you mean 'us'?");
  CHECK_CONTAINS(duration_error("5Ms"), "did you mean 'ms'?");
  CHECK_CONTAINS(duration_error("5NS"), "did you mean 'ns'?");
  const std::string e = duration_error("5GB");
  CHECK_CONTAINS(e, "unknown unit 'GB'");
  CHECK_CONTAINS(e, "expected a duration unit");
}

// ---------------------------------------------------------------------------------------------
// FlopRate parsing

TEST_CASE("parse_flop_rate: SI prefixes") {
  CHECK(flops("989TFLOP/s") == 989e12);
  CHECK(flops("989.4TFLOP/s") == 989.4e12);
  CHECK(flops("989.4 TFLOP/s") == 989.4e12);
  CHECK(flops("2.5PFLOP/s") == 2.5e15);
  CHECK(flops("1FLOP/s") == 1.0);
  CHECK(flops("1kFLOP/s") == 1e3);
  CHECK(flops("1MFLOP/s") == 1e6);
  CHECK(flops("1GFLOP/s") == 1e9);
  CHECK(flops("1EFLOP/s") == 1e18);
  CHECK(flops("0FLOP/s") == 0.0);
  CHECK(flops("1.979e3TFLOP/s") == 1.979e15);
}

TEST_CASE("parse_flop_rate: errors") {
  for (const char* text : {"989TFLOPS", "989TFLOPs", "989tflops", "989TFLOP", "989Tflop/s"}) {
    CAPTURE(text);
    CHECK_CONTAINS(flop_rate_error(text), "did you mean 'TFLOP/s'?");
  }
  CHECK_CONTAINS(flop_rate_error("989TFLOPS"), "unknown unit 'TFLOPS'");
  CHECK_CONTAINS(flop_rate_error("1FLOPS"), "did you mean 'FLOP/s'?");
  const std::string iec = flop_rate_error("1TiFLOP/s");
  CHECK_CONTAINS(iec, "binary prefix 'Ti'");
  CHECK_CONTAINS(iec, "did you mean 'TFLOP/s'?");
  CHECK_CONTAINS(flop_rate_error("1KiFLOP/s"), "did you mean 'kFLOP/s'?");
  CHECK_CONTAINS(flop_rate_error("1KFLOP/s"), "did you mean 'kFLOP/s'?");
  CHECK_CONTAINS(flop_rate_error("1e31FLOP/s"), "too large");
  CHECK_CONTAINS(flop_rate_error("2e12EFLOP/s"), "too large");
  CHECK_CONTAINS(flop_rate_error("989"), "missing unit");
  CHECK_CONTAINS(flop_rate_error("-1TFLOP/s"), "negative value");
  const std::string e = flop_rate_error("1GB/s");
  CHECK_CONTAINS(e, "unknown unit 'GB/s'");
  CHECK_CONTAINS(e, "FLOP/s");
}

// ---------------------------------------------------------------------------------------------
// Printing

TEST_CASE("to_string(Bytes): exact, largest unit, shorter of IEC and SI") {
  CHECK(to_string(Bytes{85'899'345'920}) == "80GiB");
  CHECK(to_string(Bytes{80'000'000'000}) == "80GB");
  CHECK(to_string(Bytes{1536}) == "1.5KiB");
  CHECK(to_string(Bytes{1500}) == "1.5kB");
  CHECK(to_string(Bytes{0}) == "0B");
  CHECK(to_string(Bytes{1}) == "1B");
  CHECK(to_string(Bytes{512}) == "512B");      // below 1KiB and 1kB
  CHECK(to_string(Bytes{1023}) == "1.023kB");  // an exact candidate beats the "NB" fallback
  CHECK(to_string(Bytes{1024}) == "1KiB");
  CHECK(to_string(Bytes{1000}) == "1kB");
  CHECK(to_string(Bytes{49'152'000'000'000}) == "49.152TB");
  CHECK(to_string(Bytes{1'024'000}) == "1000KiB");  // ties "1.024MB": IEC wins
  CHECK(to_string(Bytes{1152}) == "1.152kB");       // shorter than "1.125KiB"
  CHECK(to_string(Bytes{1025}) == "1.025kB");       // SI candidate beats the "NB" fallback
  CHECK(to_string(Bytes{1'234'567}) == "1234.567kB");
  CHECK(to_string(Bytes{5'905'580'032}) == "5.5GiB");
  CHECK(to_string(Bytes{kTi}) == "1TiB");
  CHECK(to_string(Bytes{kEi}) == "1EiB");
  CHECK(to_string(Bytes{kEi + kEi / 2}) == "1.5EiB");
  CHECK(to_string(Bytes{1'000'000'000'000'000'000}) == "1EB");
  CHECK(to_string(Bytes{kU64Max}) == "18446744073709551.615kB");
  CHECK(to_string(Bytes{kU64Max - 1}) == "18446744073709551.614kB");
  CHECK(to_string(Bytes{1'000'001}) == "1000.001kB");
  CHECK(to_string(Bytes{10'000'001}) == "10000.001kB");
  CHECK(to_string(Bytes{999}) == "999B");  // any value >= 1000 has an exact kB form
}

TEST_CASE("to_string_approx(Bytes): three significant digits in IEC units") {
  CHECK(to_string_approx(Bytes{80'000'000'000}) == "74.5GiB");
  CHECK(to_string_approx(Bytes{0}) == "0B");
  CHECK(to_string_approx(Bytes{1000}) == "1000B");
  CHECK(to_string_approx(Bytes{1023}) == "1023B");
  CHECK(to_string_approx(Bytes{1024}) == "1KiB");
  CHECK(to_string_approx(Bytes{1536}) == "1.5KiB");
  CHECK(to_string_approx(Bytes{85'899'345'920}) == "80GiB");
  CHECK(to_string_approx(Bytes{1'234'567}) == "1.18MiB");         // 1.1773 MiB
  CHECK(to_string_approx(Bytes{12'345'678}) == "11.8MiB");        // 11.774 MiB
  CHECK(to_string_approx(Bytes{1'000'000'000'000}) == "931GiB");  // 931.32 GiB
  CHECK(to_string_approx(Bytes{1'024'000}) == "1000KiB");
  CHECK(to_string_approx(Bytes{kMi - 1}) == "1MiB");  // 1023.999KiB rounds up a unit
  CHECK(to_string_approx(Bytes{kU64Max}) == "16EiB");
}

TEST_CASE("to_string(Bandwidth): SI, up to 3 decimals") {
  CHECK(to_string(Bandwidth{3.35e12}) == "3.35TB/s");
  CHECK(to_string(Bandwidth{64e9}) == "64GB/s");
  CHECK(to_string(Bandwidth{52.8e9}) == "52.8GB/s");
  CHECK(to_string(Bandwidth{50e9}) == "50GB/s");
  CHECK(to_string(Bandwidth{0.0}) == "0B/s");
  CHECK(to_string(Bandwidth{1.0}) == "1B/s");
  CHECK(to_string(Bandwidth{999.0}) == "999B/s");
  CHECK(to_string(Bandwidth{1000.0}) == "1kB/s");
  CHECK(to_string(Bandwidth{123.4567e6}) == "123.457MB/s");
  CHECK(to_string(Bandwidth{26'843'545'600.0}) == "26.844GB/s");  // 25GiB/s
  CHECK(to_string(Bandwidth{999.9996e9}) == "1TB/s");             // rounds into the next prefix
  CHECK(to_string(Bandwidth{0.5}) == "0.5B/s");
  CHECK(to_string(Bandwidth{2e21}) == "2000EB/s");
}

TEST_CASE("to_string(Duration): exact, largest unit with at most 3 decimals") {
  CHECK(to_string(Duration{1'500'000}) == "1.5us");
  CHECK(to_string(Duration{250'000}) == "250ns");
  CHECK(to_string(Duration{7}) == "7ps");
  CHECK(to_string(Duration{1'234'567}) == "1234.567ns");
  CHECK(to_string(Duration{0}) == "0ps");
  CHECK(to_string(Duration{999}) == "999ps");
  CHECK(to_string(Duration{1001}) == "1.001ns");
  CHECK(to_string(Duration{1'000'001}) == "1000.001ns");
  CHECK(to_string(Duration{60'000'000}) == "60us");
  CHECK(to_string(Duration{kPsPerS}) == "1s");
  CHECK(to_string(Duration{1'500'000'000'000}) == "1.5s");
  CHECK(to_string(Duration{3'600'000'000'000'000}) == "3600s");
  CHECK(to_string(Duration{2 * kPsPerMs + 5 * kPsPerUs}) == "2.005ms");
  CHECK(to_string(Duration{-1'500'000}) == "-1.5us");
  CHECK(to_string(Duration{-7}) == "-7ps");
  CHECK(to_string(Duration{kI64Max}) == "9223372036854775.807ns");
  CHECK(to_string(Duration{kI64Min}) == "-9223372036854775.808ns");
}

TEST_CASE("to_string(FlopRate): SI, up to 4 significant digits") {
  CHECK(to_string(FlopRate{989.4e12}) == "989.4TFLOP/s");
  CHECK(to_string(FlopRate{989e12}) == "989TFLOP/s");
  CHECK(to_string(FlopRate{2.5e15}) == "2.5PFLOP/s");
  CHECK(to_string(FlopRate{312e12}) == "312TFLOP/s");
  CHECK(to_string(FlopRate{1.2345678e12}) == "1.235TFLOP/s");
  CHECK(to_string(FlopRate{999.96e12}) == "1PFLOP/s");  // rounds into the next prefix
  CHECK(to_string(FlopRate{1e3}) == "1kFLOP/s");
  CHECK(to_string(FlopRate{1.0}) == "1FLOP/s");
  CHECK(to_string(FlopRate{0.0}) == "0FLOP/s");
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST_CASE("round trip: parse(to_string(x)) == x for Bytes") {
  const auto check = [](uint64_t v) {
    const std::string text = to_string(Bytes{v});
    CAPTURE(text);
    const auto r = parse_bytes(text);
    REQUIRE_MESSAGE(r.ok(), r.error);
    CHECK(r.value.value == v);
    const size_t dot = text.find('.');
    if (dot != std::string::npos) {
      CHECK(text.find_first_not_of("0123456789", dot + 1) - dot - 1 <= 3);
    }
  };
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{512}, uint64_t{1000}, uint64_t{1024},
                     uint64_t{1536}, uint64_t{1500}, uint64_t{80'000'000'000}, 80 * kGi, kTi, kPi,
                     kEi, 15 * kEi, kU64Max, kU64Max - 1, kU64Max / 2, uint64_t{49'152'000'000'000},
                     uint64_t{1'234'567}, uint64_t{1'000'000'000'000'000'000}}) {
    check(v);
  }
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 3000; ++i) {
    const uint64_t raw = rng();
    check(raw);
    check(raw >> (rng() % 64));
    // "Nice" values: a small count of a random SI or IEC unit, as configs write them.
    const uint64_t count = rng() % 100'000;
    const uint64_t power = rng() % 5;
    uint64_t unit = 1;
    for (uint64_t p = 0; p < power; ++p) unit *= (rng() % 2 == 0) ? 1000U : 1024U;
    check(count * unit);
  }
}

TEST_CASE("round trip: parse(to_string(x)) == x for Duration") {
  const auto check = [](int64_t v) {
    const std::string text = to_string(Duration{v});
    CAPTURE(text);
    const auto r = parse_duration(text);
    REQUIRE_MESSAGE(r.ok(), r.error);
    CHECK(r.value.ps == v);
  };
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{999}, int64_t{1000},
                    int64_t{1'500'000}, int64_t{1'234'567}, kPsPerS, kI64Max, kI64Max - 1}) {
    check(v);
  }
  std::mt19937_64 rng(0x7153);
  for (int i = 0; i < 3000; ++i) {
    const auto raw = static_cast<int64_t>(rng() >> 1);
    check(raw);
    check(raw >> (rng() % 63));
    int64_t nice = static_cast<int64_t>(rng() % 100'000);
    for (uint64_t p = rng() % 5; p > 0; --p) nice *= 1000;
    check(nice);
  }
}

TEST_CASE("round trip: printed rates parse back for values with short decimals") {
  for (double v : {64e9, 3.35e12, 52.8e9, 50e9, 1.0, 1e3, 2e21}) {
    CAPTURE(v);
    CHECK(parse_bandwidth(to_string(Bandwidth{v})).value.bytes_per_s == v);
  }
  for (double v : {989.4e12, 989e12, 2.5e15, 312e12, 1.0, 1e3, 1.979e15}) {
    CAPTURE(v);
    CHECK(parse_flop_rate(to_string(FlopRate{v})).value.flop_per_s == v);
  }
}

// ---------------------------------------------------------------------------------------------
// Time arithmetic

TEST_CASE("transfer_time: exact cases, rounding up and saturation") {
  CHECK(transfer_time(Bytes{1}, Bandwidth{1e9}).ps == 1000);  // 1 B at 1 B/ns
  CHECK(transfer_time(Bytes{64'000'000'000}, Bandwidth{64e9}).ps == kPsPerS);
  // 2^30 B / 64e9 B/s = 16.777216 ms = 16777216000 ps.
  CHECK(transfer_time(Bytes{kGi}, Bandwidth{64e9}).ps == 16'777'216'000);
  CHECK(transfer_time(Bytes{kTi}, Bandwidth{static_cast<double>(kTi)}).ps == kPsPerS);
  CHECK(transfer_time(Bytes{50'000'000'000}, Bandwidth{50e9}).ps == kPsPerS);
  CHECK(transfer_time(Bytes{0}, Bandwidth{64e9}).ps == 0);
  // Inexact quotients round up: 1/3 ps -> 1, 1000/7 ps = 142.86 -> 143, 333333.3 -> 333334.
  CHECK(transfer_time(Bytes{1}, Bandwidth{3e12}).ps == 1);
  CHECK(transfer_time(Bytes{1}, Bandwidth{7e9}).ps == 143);
  CHECK(transfer_time(Bytes{1000}, Bandwidth{3e9}).ps == 333'334);
  // Large inexact quotients still round up: 1 B at 3 B/s is 333333333333.33 ps, and
  // 80 GiB at 3.35 TB/s is 25641595797.01 ps.
  CHECK(transfer_time(Bytes{1}, Bandwidth{3.0}).ps == 333'333'333'334);
  CHECK(transfer_time(Bytes{80ULL << 30}, Bandwidth{3.35e12}).ps == 25'641'595'798);
  // Saturates instead of overflowing.
  CHECK(transfer_time(Bytes{kU64Max}, Bandwidth{1.0}).ps == kI64Max);
  CHECK(transfer_time(Bytes{kU64Max}, Bandwidth{1e-300}).ps == kI64Max);
  CHECK(transfer_time(Bytes{9'223'372}, Bandwidth{1.0}).ps == 9'223'372'000'000'000'000);
}

TEST_CASE("compute_time: same rounding policy") {
  CHECK(compute_time(989.4e12, FlopRate{989.4e12}).ps == kPsPerS);
  CHECK(compute_time(1e9, FlopRate{1e12}).ps == kPsPerMs);
  CHECK(compute_time(2e12, FlopRate{1e15}).ps == 2 * kPsPerMs);
  CHECK(compute_time(1.0, FlopRate{1e12}).ps == 1);
  CHECK(compute_time(1.0, FlopRate{3e12}).ps == 1);  // 0.33 ps rounds up
  CHECK(compute_time(1000.0, FlopRate{7e12}).ps == 143);
  CHECK(compute_time(0.0, FlopRate{1e12}).ps == 0);
  CHECK(compute_time(1e30, FlopRate{1.0}).ps == kI64Max);
}

// The rounding written with the library's round and ceil on long double, as a reference for
// transfer_time's and compute_time's own.
int64_t reference_ceil_ps(long double ps) {
  constexpr long double kTwo63 = 9223372036854775808.0L;
  if (std::isnan(ps) || ps >= kTwo63) return kI64Max;
  if (ps <= 0) return 0;
  const long double nearest = std::round(ps);
  const long double r = std::fabs(ps - nearest) <= 1e-3L ? nearest : std::ceil(ps);
  if (r >= kTwo63) return kI64Max;
  return static_cast<int64_t>(r);
}

TEST_CASE("transfer_time and compute_time round as round() and ceil() would") {
  std::mt19937_64 rng(7);
  auto check = [](uint64_t bytes, double rate) {
    CAPTURE(bytes);
    CAPTURE(rate);
    const long double ps = static_cast<long double>(bytes) * 1e12L / static_cast<long double>(rate);
    REQUIRE(transfer_time(Bytes{bytes}, Bandwidth{rate}).ps == reference_ceil_ps(ps));
    REQUIRE(compute_time(static_cast<double>(bytes), FlopRate{rate}).ps ==
            reference_ceil_ps(static_cast<long double>(static_cast<double>(bytes)) * 1e12L /
                              static_cast<long double>(rate)));
  };
  for (int i = 0; i < 200000; ++i) {
    // Sizes and rates over many magnitudes, exact quotients and halves among them.
    const uint64_t bytes = rng() >> (rng() % 64);
    const double rate = std::ldexp(1.0 + static_cast<double>(rng() % 1000) / 1000.0,
                                   static_cast<int>(rng() % 90) - 20);
    check(bytes, rate);
    check(bytes, 1e12);       // whole picoseconds
    check(bytes, 2e12);       // halves
    check(bytes * 1000, 3e9);  // thirds
  }
  // Around 2^63 ps, where the integer part is the largest int64_t.
  for (const double rate : {1e12 / 9.223372036854775807e18, 1.0, 1e-300}) {
    for (const uint64_t bytes : {kU64Max, kU64Max / 2, uint64_t{9'223'372}, uint64_t{9'223'373}}) {
      check(bytes, rate);
    }
  }
}

}  // namespace
}  // namespace tierflow

TEST_CASE("to_string_approx(Duration): 4 significant digits for tables") {
  using namespace tierflow;
  CHECK(to_string_approx(Duration{8'395'258'000}) == "8.395ms");
  CHECK(to_string_approx(Duration{250'000}) == "250ns");
  CHECK(to_string_approx(Duration{1'073'741'979'000'000}) == "1074s");
  CHECK(to_string_approx(Duration{6'650'000}) == "6.65us");
  CHECK(to_string_approx(Duration{999}) == "999ps");
  CHECK(to_string_approx(Duration{0}) == "0ps");
  CHECK(to_string_approx(Duration{-1'500'000}) == "-1.5us");
}

TEST_CASE("canonical_quantity: two spellings of one value alike, different values apart") {
  struct Pair {
    std::string a, b;
    bool same;
  };
  const std::vector<Pair> pairs = {
      {"1000", "1k", true},     {"1024", "1Ki", true},     {"1", "01", true},
      {"1GB/s", "8Gb/s", true}, {"1GiB", "1024MiB", true}, {"0.5", ".5", true},
      {"2ms", "2000us", true},  {"1e6", "1M", true},       {"llama-3-8b", "llama-3-8b", true},
      {"1.5", "1.4", false},    {"1000", "1001", false},   {"1GB/s", "1GiB/s", false},
      {"1GB", "1GiB", false},   {"0.1", "0.10001", false}, {"8K", "8k", false},
      {"a", "A", false},        {"1ms", "1us", false},     {"lru:1GB", "lru:1000MB", false}};
  for (const Pair& p : pairs) {
    CAPTURE(p.a);
    CAPTURE(p.b);
    CHECK((canonical_quantity(p.a) == canonical_quantity(p.b)) == p.same);
  }
}
