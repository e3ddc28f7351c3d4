// UTF-8 as the writers of user-visible text need it: names come from user files, and a
// viewer (a browser, a trace viewer) may reject a whole file over one malformed string.
//
// Glossary
//   well formed  a sequence of Unicode table 3-7: no overlong forms, no surrogates, nothing
//                above U+10FFFF.
//   repair       replacing each byte that does not start a well-formed sequence by U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tierflow {

/// U+FFFD REPLACEMENT CHARACTER in UTF-8.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

/// Length of the well-formed UTF-8 sequence starting at s[i] (1 for ASCII), or 0 where none
/// starts there.
size_t utf8_length(std::string_view s, size_t i);

/// Whether all of `s` is well-formed UTF-8.
bool is_utf8(std::string_view s);

/// The offset of the first byte of `s` that starts no well-formed sequence, or
/// std::string_view::npos when all of `s` is well formed.
size_t first_invalid_utf8(std::string_view s);

/// Appends the sequence starting at s[i] to `out`, or U+FFFD where none starts there;
/// returns the bytes of `s` it consumed (at least 1).
size_t append_repaired(std::string& out, std::string_view s, size_t i);

/// `s` with every byte that does not start a well-formed sequence replaced by U+FFFD.
std::string repair_utf8(std::string_view s);

}  // namespace tierflow
