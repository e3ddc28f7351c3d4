// Checked arithmetic for sizes and times computed from user numbers: byte and element counts
// saturate at UINT64_MAX, picosecond times at INT64_MAX, instead of wrapping, so a value too
// large to hold always compares above the limits checked after it (kMaxTensorBytes,
// kMaxSimTimePs).
#pragma once

#include <cmath>
#include <cstdint>

namespace tierflow {

/// a * b, or UINT64_MAX when the product does not fit.
constexpr uint64_t saturating_mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/// a + b, or UINT64_MAX when the sum does not fit.
constexpr uint64_t saturating_add(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/// ceil(v) as a byte or element count: 0 for negative or NaN values, UINT64_MAX for values
/// of 2^64 and more (a plain cast is undefined behaviour there).
inline uint64_t saturating_count(double v) {
  if (!(v > 0)) return 0;
  const double c = std::ceil(v);
  return c >= 18446744073709551616.0 ? UINT64_MAX : static_cast<uint64_t>(c);
}

/// a + b for non-negative picosecond counts, saturating at INT64_MAX.
constexpr int64_t saturating_add_ps(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/// floor(v) as picoseconds: 0 for negative or NaN values, INT64_MAX for values of 2^63
/// and more (a plain cast is undefined behaviour there).
inline int64_t saturating_floor_ps(double v) {
  if (!(v > 0)) return 0;
  return v >= 9223372036854775808.0 ? INT64_MAX : static_cast<int64_t>(std::floor(v));
}

/// ps x factor (factor >= 0), saturating at INT64_MAX.
constexpr int64_t scaled_ps(int64_t ps, double factor) {
  const double v = static_cast<double>(ps) * factor;
  return v >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(v);
}

}  // namespace tierflow
