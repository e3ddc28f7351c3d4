#include "core/utf8.h"

namespace tierflow {

size_t utf8_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  unsigned lo = 0x80;  // range of the second byte; later ones are always 80..BF
  unsigned hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead == 0xE0) {
    n = 3;
    lo = 0xA0;
  } else if (lead == 0xED) {
    n = 3;
    hi = 0x9F;
  } else if (lead >= 0xE1 && lead <= 0xEF) {
    n = 3;
  } else if (lead == 0xF0) {
    n = 4;
    lo = 0x90;
  } else if (lead == 0xF4) {
    n = 4;
    hi = 0x8F;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

size_t first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

bool is_utf8(std::string_view s) { return first_invalid_utf8(s) == std::string_view::npos; }

size_t append_repaired(std::string& out, std::string_view s, size_t i) {
  const size_t n = utf8_length(s, i);
  if (n == 0) {
    out += kReplacementChar;
    return 1;
  }
  out += s.substr(i, n);
  return n;
}

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) i += append_repaired(out, s, i);
  return out;
}

}  // namespace tierflow
