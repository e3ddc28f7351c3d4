// What every fuzz target shares: the input as text, and the one rule they check besides
// the sanitizers': bad input is an InputError naming a position, nothing else escapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/diagnostics.h"

namespace tierflow::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Aborts (a finding) with the two texts when a property of the loader does not hold.
[[noreturn]] inline void fail(const char* what, const std::string& a, const std::string& b) {
  std::fprintf(stderr, "fuzz property failed: %s\n--- first:\n%s\n--- second:\n%s\n", what,
               a.c_str(), b.c_str());
  std::abort();
}

/// An InputError must name the file it was given (positions are the user's only guide).
inline void check_error(const InputError& e, const std::string& name) {
  if (e.pos().file != name) fail("InputError without the input's name", e.what(), name);
  if (e.message().empty()) fail("InputError without a message", e.what(), name);
}

}  // namespace tierflow::fuzz
