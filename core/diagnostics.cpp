#include "core/diagnostics.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

namespace tierflow {

std::string SourcePos::str() const {
  if (line <= 0) return file;
  if (col <= 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, col);
}

InputError::InputError(SourcePos pos, std::string message)
    : std::runtime_error(pos.file.empty() ? message : pos.str() + ": " + message),
      pos_(std::move(pos)),
      message_(std::move(message)) {}

int edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  // Three rolling rows are enough for the optimal-string-alignment recurrence.
  std::vector<int> prev2(m + 1), prev(m + 1), cur(m + 1);
  std::iota(prev.begin(), prev.end(), 0);
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      }
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <class Str>
std::string nearest_impl(std::string_view word, std::span<const Str> candidates) {
  std::string best;
  int best_d = 1 << 30;
  const std::string lw = lower(word);
  for (const auto& c : candidates) {
    std::string_view cv(c);
    int d = lower(cv) == lw ? 0 : edit_distance(word, cv);
    // Strictly-less keeps the first of equally close candidates: declaration order.
    if (d < best_d) {
      best_d = d;
      best = std::string(cv);
    }
  }
  const int limit = std::max(1, static_cast<int>(word.size()) / 3);
  return best_d <= limit ? best : std::string();
}

}  // namespace

std::string nearest(std::string_view word, std::span<const std::string> candidates) {
  return nearest_impl(word, candidates);
}
std::string nearest(std::string_view word, std::span<const std::string_view> candidates) {
  return nearest_impl(word, candidates);
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  std::string n = nearest(word, candidates);
  return n.empty() ? std::string() : fmt::format("; did you mean '{}'?", n);
}
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
  std::string n = nearest(word, candidates);
  return n.empty() ? std::string() : fmt::format("; did you mean '{}'?", n);
}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "internal error: %s:%d: assertion '%s' failed: %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

}  // namespace tierflow
