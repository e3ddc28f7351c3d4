#include "core/units.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/diagnostics.h"

namespace tierflow {
namespace {

// ---------------------------------------------------------------------------------------------
// Characters. Locale-free ASCII helpers: <cctype> is locale-dependent and UB on negative chars.

constexpr bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
constexpr bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
constexpr char to_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_lower(c);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Unit tables. A unit scales the written number by 1024^iec_power * 10^dec_shift, then by 1/8
// when it counts bits. Every multiplier is built from 2s and 5s, which is what lets the exact
// parser below work on decimal digit strings.

struct Unit {
  std::string name;
  int iec_power = 0;
  int dec_shift = 0;
  bool bits = false;
};

/// A common misspelling that edit distance would not map well ("seconds", "min").
struct Alias {
  std::string_view name;
  std::string_view suggestion;
  std::string_view note;  ///< appended after the suggestion, may be empty
};

/// Everything the parser needs to know about one kind of quantity.
struct Family {
  std::string_view noun;      ///< "a byte size"
  std::string_view examples;  ///< "80GiB or 64kB"
  std::string_view accepted;  ///< what units are accepted, for unknown-unit errors
  std::vector<Unit> units;    ///< in suggestion-preference order
  std::vector<Alias> aliases;
  bool unitless = false;  ///< a bare number is allowed (the unit named "")
};

constexpr std::array<std::string_view, 7> kSiPrefixes = {"", "k", "M", "G", "T", "P", "E"};
constexpr std::array<std::string_view, 7> kIecPrefixes = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};

/// B, kB..EB, KiB..EiB, then the same for bits, each followed by `suffix` ("" or "/s").
std::vector<Unit> byte_units(std::string_view suffix) {
  std::vector<Unit> units;
  for (bool bits : {false, true}) {
    const std::string base = std::string(bits ? "b" : "B") + std::string(suffix);
    units.push_back({base, 0, 0, bits});
    for (int p = 1; p <= 6; ++p) {
      units.push_back({std::string(kSiPrefixes[static_cast<size_t>(p)]) + base, 0, 3 * p, bits});
    }
    for (int p = 1; p <= 6; ++p) {
      units.push_back({std::string(kIecPrefixes[static_cast<size_t>(p)]) + base, p, 0, bits});
    }
  }
  return units;
}

const Family& bytes_family() {
  static const Family kFamily{
      "a byte size",
      "80GiB or 64kB",
      "a byte unit: B, kB MB GB TB PB EB (powers of 1000), KiB MiB GiB TiB PiB EiB (powers of "
      "1024), or the bit forms b, kb..Eb, Kib..Eib",
      byte_units(""),
      {{"byte", "B", ""}, {"bytes", "B", ""}, {"bit", "b", ""}, {"bits", "b", ""}}};
  return kFamily;
}

const Family& bandwidth_family() {
  static const Family kFamily{
      "a bandwidth",
      "64GB/s or 400Gb/s",
      "a bandwidth unit: a byte unit (B, kB..EB, KiB..EiB) or bit unit (b, kb..Eb, Kib..Eib) "
      "followed by /s, e.g. GB/s, GiB/s, Gb/s",
      byte_units("/s"),
      {}};
  return kFamily;
}

const Family& duration_family() {
  static const Family kFamily{[] {
    // "us" comes before the micro signs so that suggestions stay ASCII.
    Family g{"a duration",
             "1.5us or 250ns",
             "a duration unit: ps, ns, us (also \xC2\xB5s or \xCE\xBCs), ms, s",
             {{"ps", 0, 0, false},
              {"ns", 0, 3, false},
              {"us", 0, 6, false},
              {"\xC2\xB5s", 0, 6, false},  // U+00B5 MICRO SIGN
              {"\xCE\xBCs", 0, 6, false},  // U+03BC GREEK SMALL LETTER MU
              {"ms", 0, 9, false},
              {"s", 0, 12, false}},
             {}};
    // Spelled-out seconds, and longer units that must be written in seconds: edit distance
    // alone would turn "min" into "ms".
    for (std::string_view name : {"sec", "secs", "second", "seconds"}) {
      g.aliases.push_back({name, "s", ""});
    }
    for (std::string_view name : {"min", "mins", "minute", "minutes"}) {
      g.aliases.push_back({name, "s", " (write minutes in seconds, e.g. 60s for 1min)"});
    }
    for (std::string_view name : {"h", "hr", "hrs", "hour", "hours", "d", "day", "days"}) {
      g.aliases.push_back({name, "s", " (write hours and days in seconds, e.g. 3600s for 1h)"});
    }
    return g;
  }()};
  return kFamily;
}

const Family& flop_rate_family() {
  static const Family kFamily{[] {
    Family g{"a FLOP rate",
             "989TFLOP/s or 2.5PFLOP/s",
             "a FLOP rate unit: FLOP/s with an optional SI prefix k, M, G, T, P or E (e.g. "
             "TFLOP/s)",
             {},
             {}};
    for (int p = 0; p <= 6; ++p) {
      g.units.push_back(
          {std::string(kSiPrefixes[static_cast<size_t>(p)]) + "FLOP/s", 0, 3 * p, false});
    }
    return g;
  }()};
  return kFamily;
}

/// Counts (tokens, sequences): a bare number, or an SI or binary prefix alone.
const Family& count_family() {
  static const Family kFamily{[] {
    Family g{"a count",
             "8192, 8k or 32Ki",
             "no unit, or a prefix: k M G T (powers of 1000), Ki Mi Gi Ti (powers of 1024)",
             {{"", 0, 0, false}},
             {{"K", "k", " (1000; Ki is 1024)"},
              {"m", "M", " (a million)"},
              {"g", "G", " (a billion)"},
              {"t", "T", ""}},
             true};
    for (int p = 1; p <= 4; ++p) {
      g.units.push_back({std::string(kSiPrefixes[static_cast<size_t>(p)]), 0, 3 * p, false});
      g.units.push_back({std::string(kIecPrefixes[static_cast<size_t>(p)]), p, 0, false});
    }
    return g;
  }()};
  return kFamily;
}

// ---------------------------------------------------------------------------------------------
// Unit errors.

/// "; did you mean 'X'?" (or "'X' or 'Y'" for pure case confusion), or "" when nothing is close.
std::string suggestion(const Family& fam, std::string_view unit) {
  for (const Alias& a : fam.aliases) {
    if (a.name == unit) return fmt::format("; did you mean '{}'?{}", a.suggestion, a.note);
  }
  // Rank by case-insensitive distance first ("tflops" is one edit from "TFLOP/s"), then by
  // case-sensitive distance ("Gbps" -> "Gb/s", "GBps" -> "GB/s"), then table order.
  const std::string lu = lower(unit);
  std::vector<std::string_view> case_only;  // candidates equal to `unit` ignoring case
  const Unit* best = nullptr;
  size_t best_ci = 0, best_cs = 0;
  bool tied = false;
  for (const Unit& u : fam.units) {
    const auto ci = static_cast<size_t>(edit_distance(lu, lower(u.name)));
    const auto cs = static_cast<size_t>(edit_distance(unit, u.name));
    if (ci == 0) case_only.push_back(u.name);
    // A suggestion must share something with the input: "x" is not a typo of "B".
    if (ci > 2 || ci >= std::max(unit.size(), u.name.size())) continue;
    if (best == nullptr || ci < best_ci || (ci == best_ci && cs < best_cs)) {
      best = &u;
      best_ci = ci;
      best_cs = cs;
      tied = false;
    } else if (ci == best_ci && cs == best_cs) {
      tied = true;  // "XB" is as close to B as to kB, MB, ...: no single good guess
    }
  }
  if (case_only.size() > 1) {
    return fmt::format("; did you mean '{}'?", fmt::join(case_only, "' or '"));
  }
  return best == nullptr || tied ? std::string() : fmt::format("; did you mean '{}'?", best->name);
}

std::string unit_error(const Family& fam, std::string_view text, std::string_view unit) {
  const auto valid = [&](const std::string& name) {
    return std::any_of(fam.units.begin(), fam.units.end(),
                       [&](const Unit& u) { return u.name == name; });
  };
  // "KB" could mean either kB or KiB; refuse to guess.
  if (unit.size() >= 2 && unit[0] == 'K' && unit[1] != 'i') {
    const std::string rest(unit.substr(1));
    if (valid("k" + rest) && valid("Ki" + rest)) {
      return fmt::format("ambiguous unit '{0}': write k{1} (1000 {1}) or Ki{1} (1024 {1})", unit,
                         rest);
    }
  }
  // Binary prefixes exist for the byte families only: "TiFLOP/s" is a unit error of its own.
  if (unit.size() >= 3 && unit[1] == 'i' &&
      std::string_view("kKMGTPE").find(unit[0]) != std::string_view::npos) {
    const std::string si =
        std::string(1, unit[0] == 'K' ? 'k' : unit[0]) + std::string(unit.substr(2));
    if (valid(si) && !valid(std::string(unit))) {
      return fmt::format(
          "binary prefix '{}' is not allowed in '{}': {} uses SI prefixes only; "
          "did you mean '{}'?",
          unit.substr(0, 2), text, unit.substr(2), si);
    }
  }
  return fmt::format("unknown unit '{}' in '{}': expected {}{}", unit, text, fam.accepted,
                     suggestion(fam, unit));
}

// ---------------------------------------------------------------------------------------------
// Lexing: NUMBER [' '] UNIT.

/// The written number as digits * 10^exp10. `digits` has no leading zeros; "" is zero.
struct Decimal {
  std::string digits;
  int64_t exp10 = 0;
};

// Exponents are clamped here: any nonzero value beyond it overflows or is below resolution,
// and the clamp keeps every later exponent computation far from int64 overflow.
constexpr int64_t kExponentClamp = 1'000'000'000;

/// Splits `text` into a number and a known unit of `fam`; returns an error message or "".
std::string lex(std::string_view text, const Family& fam, Decimal& num, const Unit*& unit) {
  const auto expected = [&] {
    return fmt::format("expected {} such as {}", fam.noun, fam.examples);
  };
  if (text.empty()) return "empty value: " + expected();
  if (is_space(text.front()) || is_space(text.back())) {
    return fmt::format("unexpected whitespace around '{}': {}", text, expected());
  }
  if (text.front() == '-') {
    return fmt::format("negative value '{}': {} cannot be negative", text, fam.noun);
  }
  const auto malformed = [&] {
    return fmt::format("malformed number in '{}': {}", text, expected());
  };
  size_t pos = 0;
  const auto digit_run = [&] {
    const size_t start = pos;
    while (pos < text.size() && is_digit(text[pos])) ++pos;
    return text.substr(start, pos - start);
  };
  const std::string_view int_part = digit_run();
  if (int_part.empty()) return malformed();  // also "+5GB", ".5GB", "GB"
  std::string_view frac_part;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    frac_part = digit_run();
    if (frac_part.empty()) return malformed();
  }
  int64_t exponent = 0;
  // Only a lowercase 'e' followed by a sign or digit starts an exponent: "1EB" is an exabyte.
  if (pos + 1 < text.size() && text[pos] == 'e' &&
      (is_digit(text[pos + 1]) || text[pos + 1] == '+' || text[pos + 1] == '-')) {
    ++pos;
    const bool neg = text[pos] == '-';
    if (!is_digit(text[pos])) ++pos;
    const std::string_view exp_digits = digit_run();
    if (exp_digits.empty()) return malformed();
    for (char c : exp_digits) {
      exponent = std::min(kExponentClamp, exponent * 10 + (c - '0'));
    }
    if (neg) exponent = -exponent;
  }
  if (pos < text.size() && text[pos] == ' ') ++pos;  // one optional space before the unit
  const std::string_view unit_text = text.substr(pos);
  if (unit_text.empty() && !fam.unitless) {
    return fmt::format("missing unit in '{}': {}", text, expected());
  }
  if (std::any_of(unit_text.begin(), unit_text.end(), is_space)) {
    return fmt::format("unexpected whitespace in '{}': {}", text, expected());
  }
  const char first = unit_text.empty() ? 'x' : unit_text.front();
  if (is_digit(first) || first == '.' || first == '+' || first == '-') return malformed();

  const auto it = std::find_if(fam.units.begin(), fam.units.end(),
                               [&](const Unit& u) { return u.name == unit_text; });
  if (it == fam.units.end()) return unit_error(fam, text, unit_text);
  unit = &*it;

  num.digits = std::string(int_part) + std::string(frac_part);
  num.digits.erase(0, std::min(num.digits.find_first_not_of('0'), num.digits.size()));
  num.exp10 = exponent - static_cast<int64_t>(frac_part.size());
  return "";
}

// ---------------------------------------------------------------------------------------------
// Exact integer conversion (Bytes, Duration).

/// digits *= m, in place, for a small multiplier.
void multiply_digits(std::string& digits, unsigned m) {
  unsigned carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    const unsigned d = static_cast<unsigned>(*it - '0') * m + carry;
    *it = static_cast<char>('0' + d % 10);
    carry = d / 10;
  }
  for (; carry != 0; carry /= 10) {
    digits.insert(digits.begin(), static_cast<char>('0' + carry % 10));
  }
}

enum class Exact { kOk, kNotWhole, kOverflow };

/// num * unit as an integer count of the base unit, if it is whole and at most `limit`.
/// Works on the decimal digits: binary prefixes multiply by 1024, bits by 125/1000, SI and
/// time prefixes shift the decimal exponent; the value is whole iff no nonzero digit is left
/// after the decimal point.
Exact to_exact(Decimal num, const Unit& unit, uint64_t limit, uint64_t& out) {
  if (num.digits.empty()) {
    out = 0;
    return Exact::kOk;
  }
  for (int i = 0; i < unit.iec_power; ++i) multiply_digits(num.digits, 1024);
  if (unit.bits) {
    multiply_digits(num.digits, 125);  // x/8 == x*125/1000
    num.exp10 -= 3;
  }
  num.exp10 += unit.dec_shift;
  const size_t last = num.digits.find_last_not_of('0');  // exists: digits is nonzero
  num.exp10 += static_cast<int64_t>(num.digits.size() - 1 - last);
  num.digits.resize(last + 1);
  if (num.exp10 < 0) return Exact::kNotWhole;
  if (num.exp10 > 20 || num.digits.size() + static_cast<size_t>(num.exp10) > 20) {
    return Exact::kOverflow;  // 2^64 has 20 digits
  }
  num.digits.append(static_cast<size_t>(num.exp10), '0');
  uint64_t v = 0;
  for (char c : num.digits) {
    const auto d = static_cast<uint64_t>(c - '0');
    if (v > (limit - d) / 10) return Exact::kOverflow;
    v = v * 10 + d;
  }
  out = v;
  return Exact::kOk;
}

// ---------------------------------------------------------------------------------------------
// Floating conversion (Bandwidth, FlopRate).

constexpr double kMaxRate = 1e30;

/// num * unit as a double, rounded once; returns an error message or "".
std::string to_double(const Decimal& num, const Unit& unit, std::string_view text,
                      std::string_view base, double& out) {
  if (num.digits.empty()) {
    out = 0.0;
    return "";
  }
  // Decimal exponent of the leading digit. Binary prefixes and bits move the value by less
  // than 10^19, so the upper bound rejects only what fails the final range check anyway; the
  // lower bound rejects absurdly small rates rather than letting them round to zero.
  const int64_t order = static_cast<int64_t>(num.digits.size()) - 1 + num.exp10 + unit.dec_shift;
  const auto too_large = [&] {
    return fmt::format("'{}' is too large: values above 1e30 {} are not accepted", text, base);
  };
  if (order > 40) return too_large();
  if (order < -280) {
    return fmt::format("'{}' is too small: nonzero values below 1e-280 {} are not accepted", text,
                       base);
  }
  // Fold the SI prefix into the exponent so that "3.35TB/s" is exactly the double 3.35e12;
  // powers of two (binary prefixes, bits) then scale exactly.
  const std::string s = fmt::format("{}e{}", num.digits, num.exp10 + unit.dec_shift);
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return too_large();
  v = std::ldexp(v, 10 * unit.iec_power - (unit.bits ? 3 : 0));
  if (!std::isfinite(v) || v > kMaxRate) return too_large();
  out = v;
  return "";
}

// ---------------------------------------------------------------------------------------------
// Printing helpers.

/// "12" or "12.5" from a whole part and thousandths, with trailing zeros trimmed.
std::string fixed3(uint64_t whole, uint64_t thousandths) {
  if (thousandths == 0) return fmt::format("{}", whole);
  std::string s = fmt::format("{}.{:03}", whole, thousandths);
  s.erase(s.find_last_not_of('0') + 1);
  return s;
}

/// value / unit with at most three decimals, or "" if value < unit or more decimals are needed.
std::string exact_in_unit(uint64_t value, uint64_t unit, std::string_view name) {
  if (value < unit) return "";
  // value/unit has <= 3 decimals iff (value % unit) * 1000 is a multiple of unit, i.e. iff the
  // remainder is a multiple of unit / gcd(unit, 1000); this avoids overflowing the product.
  const uint64_t g = std::gcd(unit, uint64_t{1000});
  const uint64_t rem = value % unit;
  if (rem % (unit / g) != 0) return "";
  return fixed3(value / unit, rem / (unit / g) * (1000 / g)) + std::string(name);
}

/// Trims "12.500" to "12.5" and "3.000" to "3"; leaves exponent forms alone.
std::string trim_zeros(std::string s) {
  if (s.find('.') == std::string::npos || s.find('e') != std::string::npos) return s;
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

/// v with an SI prefix that puts it in [1, 1000). `sig4`: 4 significant digits, else 3
/// decimals. Below 1 with no prefix left, prints 3 or 4 significant digits.
std::string si_text(double v, std::string_view unit, bool sig4) {
  if (!std::isfinite(v) || v == 0.0) return fmt::format("{}{}", v == 0.0 ? 0.0 : v, unit);
  const std::string sign = v < 0 ? "-" : "";
  const double m = std::fabs(v);
  constexpr std::array<double, 7> kScale = {1.0, 1e3, 1e6, 1e9, 1e12, 1e15, 1e18};
  size_t p = 0;
  while (p + 1 < kScale.size() && m >= kScale[p + 1]) ++p;
  const auto render = [&](double x) {
    if (sig4) return fmt::format("{:.4g}", x);
    return x < 1.0 ? fmt::format("{:.3g}", x) : trim_zeros(fmt::format("{:.3f}", x));
  };
  std::string s = render(m / kScale[p]);
  // Rounding can reach 1000 ("999.9996" -> "1000"): move to the next prefix instead.
  if (p + 1 < kScale.size() && std::min(s.find_first_not_of("0123456789"), s.size()) >= 4) {
    ++p;
    s = render(m / kScale[p]);
  }
  return sign + s + std::string(kSiPrefixes[p]) + std::string(unit);
}

// Distance (in ps) from an integer within which a computed time counts as that integer.
// long double carries ~19 significant digits, so the floating noise of a quotient stays far
// below 1e-3 ps for any time under ~1e15 ps (1000 s); beyond that the snap only matters for
// results that are within a thousandth of a picosecond of an integer anyway.
constexpr long double kSnapTolerance = 1e-3L;

/// Rounds a picosecond count up to a whole number, except that results within kSnapTolerance
/// of an integer are that integer, so that floating noise cannot add a picosecond to exact
/// quotients like 64e9 B / 64e9 B/s. Saturates at INT64_MAX; NaN means "never".
Duration ceil_ps(long double ps) {
  constexpr long double kTwo63 = 9223372036854775808.0L;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (std::isnan(ps) || ps >= kTwo63) return {kMax};
  if (ps <= 0) return {0};
  // ps lies in (0, 2^63): its integer part fits and is exact in a long double (64-bit
  // mantissa), so rounding and ceiling follow from it without the library's roundl and
  // ceill (this runs for every op and copy time the planner and simulator compute).
  const auto whole = static_cast<int64_t>(ps);  // truncation: the floor, ps being positive
  if (whole == kMax) return {kMax};
  const long double frac = ps - static_cast<long double>(whole);
  const int64_t nearest = frac >= 0.5L ? whole + 1 : whole;  // round(): halves away from 0
  if (std::fabs(ps - static_cast<long double>(nearest)) <= kSnapTolerance) return {nearest};
  return {frac > 0 ? whole + 1 : whole};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parsing.

namespace {

/// Lexes `text` as a quantity of `fam`, then `convert(num, unit, value)` returns an error
/// message or "" after setting `value`; on any error the result's value stays untouched.
template <class T, class Convert>
ParseResult<T> parse_quantity(std::string_view text, const Family& fam, Convert convert) {
  ParseResult<T> r;
  Decimal num;
  const Unit* unit = nullptr;
  r.error = lex(text, fam, num, unit);
  // lex() names a unit whenever it succeeds.
  if (r.ok() && unit != nullptr) r.error = convert(num, *unit, r.value);
  return r;
}

}  // namespace

ParseResult<Bytes> parse_bytes(std::string_view text) {
  const auto convert = [&](const Decimal& n, const Unit& u, Bytes& out) {
    switch (to_exact(n, u, std::numeric_limits<uint64_t>::max(), out.value)) {
      case Exact::kOk:
        return std::string();
      case Exact::kNotWhole:
        return fmt::format("'{}' is not a whole number of bytes", text);
      case Exact::kOverflow:
        break;
    }
    return fmt::format(
        "'{}' is too large: it overflows the 64-bit byte count (max "
        "18446744073709551615B, just under 16EiB)",
        text);
  };
  return parse_quantity<Bytes>(text, bytes_family(), convert);
}

std::optional<double> parse_real(std::string_view text) {
  // std::stod skips leading white space; a number given as text has none.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())) != 0) {
    return std::nullopt;
  }
  const std::string s(text);
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != s.size()) return std::nullopt;
  return v;
}

ParseResult<int64_t> parse_count(std::string_view text) {
  const auto convert = [&](const Decimal& n, const Unit& u, int64_t& out) {
    uint64_t v = 0;
    switch (to_exact(n, u, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), v)) {
      case Exact::kOk:
        out = static_cast<int64_t>(v);
        return std::string();
      case Exact::kNotWhole:
        return fmt::format("'{}' is not a whole number", text);
      case Exact::kOverflow:
        break;
    }
    return fmt::format("'{}' is too large: counts go up to 9223372036854775807 (about 9.2e18)",
                       text);
  };
  return parse_quantity<int64_t>(text, count_family(), convert);
}

ParseResult<Bandwidth> parse_bandwidth(std::string_view text) {
  const auto convert = [&](const Decimal& n, const Unit& u, Bandwidth& out) {
    return to_double(n, u, text, "B/s", out.bytes_per_s);
  };
  return parse_quantity<Bandwidth>(text, bandwidth_family(), convert);
}

ParseResult<Duration> parse_duration(std::string_view text) {
  const auto convert = [&](const Decimal& n, const Unit& u, Duration& out) {
    uint64_t v = 0;
    switch (to_exact(n, u, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), v)) {
      case Exact::kOk:
        out.ps = static_cast<int64_t>(v);
        return std::string();
      case Exact::kNotWhole:
        return fmt::format("'{}' is below picosecond resolution", text);
      case Exact::kOverflow:
        break;
    }
    return fmt::format(
        "'{}' is too large: it overflows the 64-bit picosecond count (max "
        "9223372036854775807ps, about 106 days)",
        text);
  };
  return parse_quantity<Duration>(text, duration_family(), convert);
}

ParseResult<FlopRate> parse_flop_rate(std::string_view text) {
  const auto convert = [&](const Decimal& n, const Unit& u, FlopRate& out) {
    return to_double(n, u, text, "FLOP/s", out.flop_per_s);
  };
  return parse_quantity<FlopRate>(text, flop_rate_family(), convert);
}

// ---------------------------------------------------------------------------------------------
// Printing.

std::string to_string(Bytes b) {
  std::string iec, si;
  for (int p = 6; p >= 1 && iec.empty(); --p) {
    iec = exact_in_unit(b.value, uint64_t{1} << (10 * p),
                        std::string(kIecPrefixes[static_cast<size_t>(p)]) + "B");
  }
  uint64_t unit = 1'000'000'000'000'000'000;
  for (int p = 6; p >= 1 && si.empty(); --p, unit /= 1000) {
    si = exact_in_unit(b.value, unit, std::string(kSiPrefixes[static_cast<size_t>(p)]) + "B");
  }
  if (iec.empty() && si.empty()) return fmt::format("{}B", b.value);
  if (iec.empty()) return si;
  if (si.empty()) return iec;
  return si.size() < iec.size() ? si : iec;  // ties prefer IEC
}

std::string to_string_approx(Bytes b) {
  if (b.value < 1024) return fmt::format("{}B", b.value);
  size_t p = 1;
  while (p < 6 && b.value >= uint64_t{1} << (10 * (p + 1))) ++p;
  // Three significant digits; [1000, 1024) keeps its integer digits rather than "1.02e3".
  const auto render = [&](size_t q) {
    const double x = std::ldexp(static_cast<double>(b.value), -10 * static_cast<int>(q));
    return trim_zeros(fmt::format("{:.{}f}", x, x < 10 ? 2 : x < 100 ? 1 : 0));
  };
  std::string s = render(p);
  if (p < 6 && s == "1024") s = render(++p);  // 1023.7KiB rounds to the next unit
  return s + std::string(kIecPrefixes[p]) + "B";
}

std::string to_string(Bandwidth bw) {
  return si_text(bw.bytes_per_s, "B/s", false);
}

std::string to_string(FlopRate r) {
  return si_text(r.flop_per_s, "FLOP/s", true);
}

std::string to_string(Duration d) {
  // Magnitude as uint64 so that INT64_MIN does not overflow on negation.
  const uint64_t m =
      d.ps < 0 ? uint64_t{0} - static_cast<uint64_t>(d.ps) : static_cast<uint64_t>(d.ps);
  const std::string_view sign = d.ps < 0 ? "-" : "";
  constexpr std::array<std::pair<int64_t, std::string_view>, 4> kUnits = {
      {{kPsPerS, "s"}, {kPsPerMs, "ms"}, {kPsPerUs, "us"}, {kPsPerNs, "ns"}}};
  for (const auto& [unit, name] : kUnits) {
    std::string s = exact_in_unit(m, static_cast<uint64_t>(unit), name);
    if (!s.empty()) return std::string(sign) + s;
  }
  return fmt::format("{}{}ps", sign, m);
}

// ---------------------------------------------------------------------------------------------
// Time arithmetic.

Duration transfer_time(Bytes bytes, Bandwidth bw) {
  assert(bw.bytes_per_s > 0 && "transfer_time needs a positive bandwidth");
  if (!(bw.bytes_per_s > 0)) return {std::numeric_limits<int64_t>::max()};
  return ceil_ps(static_cast<long double>(bytes.value) * 1e12L /
                 static_cast<long double>(bw.bytes_per_s));
}

Duration compute_time(double flops, FlopRate rate) {
  assert(rate.flop_per_s > 0 && "compute_time needs a positive FLOP rate");
  assert(!(flops < 0) && "compute_time needs a non-negative FLOP count");
  if (!(rate.flop_per_s > 0)) return {std::numeric_limits<int64_t>::max()};
  return ceil_ps(static_cast<long double>(flops) * 1e12L /
                 static_cast<long double>(rate.flop_per_s));
}

std::string to_string_approx(Duration d) {
  static constexpr std::array<std::pair<int64_t, std::string_view>, 5> kUnits = {
      {{kPsPerS, "s"}, {kPsPerMs, "ms"}, {kPsPerUs, "us"}, {kPsPerNs, "ns"}, {1, "ps"}}};
  const int64_t mag = d.ps < 0 ? -(d.ps + 1) + 1 : d.ps;
  for (const auto& [scale, name] : kUnits) {
    if (mag < scale && scale != 1) continue;
    const double v = static_cast<double>(d.ps) / static_cast<double>(scale);
    // 4 significant digits, trailing zeros trimmed.
    const double a = std::fabs(v);
    const int decimals = a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : 3;
    std::string s = fmt::format("{:.{}f}", v, scale == 1 ? 0 : decimals);
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s + std::string(name);
  }
  return "0ps";
}

std::string count_text(uint64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

std::string canonical_quantity(std::string_view text) {
  if (const auto n = parse_count(text); n.ok()) return fmt::format("count:{}", n.value);
  if (const auto b = parse_bytes(text); b.ok()) return fmt::format("bytes:{}", b.value.value);
  if (const auto r = parse_bandwidth(text); r.ok()) {
    return fmt::format("bandwidth:{}", r.value.bytes_per_s);
  }
  if (const auto d = parse_duration(text); d.ok()) return fmt::format("duration:{}", d.value.ps);
  if (const auto f = parse_flop_rate(text); f.ok())
    return fmt::format("flops:{}", f.value.flop_per_s);
  if (const auto x = parse_real(text)) return fmt::format("real:{}", *x);
  return fmt::format("text:{}", text);
}

}  // namespace tierflow
