#include "core/diagnostics.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

namespace tierflow {

SourcePos text_position(std::string_view text, size_t offset, std::string file) {
  int line = 1;
  size_t line_start = 0;
  const size_t end = std::min(offset, text.size());
  for (size_t k = 0; k < end; ++k) {
    if (text[k] == '\n') {
      ++line;
      line_start = k + 1;
    }
  }
  int col = 1;
  for (size_t k = line_start; k < end; ++k) {
    col += (static_cast<unsigned char>(text[k]) & 0xC0U) != 0x80U ? 1 : 0;
  }
  return SourcePos{std::move(file), line, col};
}

std::string option_name(std::string_view field, bool cli) {
  std::string name(field);
  if (!cli) return name;
  std::replace(name.begin(), name.end(), '_', '-');
  return "--" + name;
}

std::string SourcePos::str() const {
  if (line <= 0) return file;
  if (col <= 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, col);
}

InputError::InputError(SourcePos pos, std::string message)
    : std::runtime_error(pos.file.empty() ? message : pos.str() + ": " + message),
      pos_(std::move(pos)),
      message_(std::move(message)) {}

int edit_distance(std::string_view a, std::string_view b, int bound) {
  const size_t n = a.size();
  const size_t m = b.size();
  // Three rolling rows are enough for the optimal-string-alignment recurrence. A row's
  // cells are at least the smaller of the previous row's minimum and the one before's
  // plus 1 (its first cell grows too), so once both exceed `bound` the distance does.
  std::vector<int> prev2(m + 1), prev(m + 1), cur(m + 1);
  std::iota(prev.begin(), prev.end(), 0);
  int prev2_min = 1 << 30;
  int prev_min = 0;
  for (size_t i = 1; i <= n; ++i) {
    if (prev_min > bound && prev2_min + 1 > bound) return bound + 1;
    cur[0] = static_cast<int>(i);
    int cur_min = cur[0];
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      }
      cur_min = std::min(cur_min, cur[j]);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
    prev2_min = prev_min;
    prev_min = cur_min;
  }
  return std::min(prev[m], bound + 1);
}

namespace {

/// The lengths' difference: a lower bound of their edit distance.
size_t length_gap(std::string_view a, std::string_view b) {
  return a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
}

}  // namespace

bool within_edit_distance(std::string_view a, std::string_view b, int limit) {
  return limit >= 0 && length_gap(a, b) <= static_cast<size_t>(limit) &&
         edit_distance(a, b, limit) <= limit;
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// `s` cut at '-', '_', '.' and ' ', empty pieces dropped.
std::vector<std::string_view> components(std::string_view s) {
  std::vector<std::string_view> out;
  size_t from = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '-' || s[i] == '_' || s[i] == '.' || s[i] == ' ') {
      if (i > from) out.push_back(s.substr(from, i - from));
      from = i + 1;
    }
  }
  return out;
}

/// The edit distance a typo of `word` may have.
int typo_limit(std::string_view word) {
  return std::max(1, static_cast<int>(word.size()) / 3);
}

/// How `word` (lower case) relates to `candidate` (lower case), lower is closer; kNoMatch
/// when it does not. Ranks 0..2 follow `suggestions`' order after the typo rule.
constexpr int kNoMatch = -1;
int partial_rank(std::string_view word, std::string_view candidate) {
  constexpr size_t kMinPart = 3;
  const std::vector<std::string_view> mine = components(word);
  const std::vector<std::string_view> theirs = components(candidate);
  const auto has = [&](std::string_view part) {
    return std::find(theirs.begin(), theirs.end(), part) != theirs.end();
  };
  if (!mine.empty() && std::all_of(mine.begin(), mine.end(), has)) return 0;
  // One inside the other, making at least half of it ('link' in 'nvlink'; 'node' is too
  // little of 'supernode' to mean it).
  const std::string_view shorter = word.size() <= candidate.size() ? word : candidate;
  const std::string_view longer = word.size() <= candidate.size() ? candidate : word;
  if (shorter.size() >= kMinPart && shorter.size() * 2 >= longer.size() &&
      longer.find(shorter) != std::string_view::npos) {
    return 1;
  }
  for (std::string_view m : mine) {
    if (m.size() < kMinPart) continue;
    for (std::string_view t : theirs) {
      if (t.size() >= kMinPart && within_edit_distance(m, t, typo_limit(m))) return 2;
    }
  }
  return kNoMatch;
}

template <class Str>
std::vector<std::string> suggestions_impl(std::string_view word, std::span<const Str> candidates,
                                          size_t limit) {
  std::vector<std::string> out;
  // A word this long is no typo of a name (and measuring it against a long candidate would
  // cost its length squared): nothing is suggested.
  constexpr size_t kLongestWord = 256;
  if (limit == 0 || candidates.empty() || word.size() > kLongestWord) return out;
  const std::string lw = lower(word);
  // The word as a name's leading part (`h200` of `h200-sxm-8gpu`): those names first, before
  // a typo of another (`gh200`), which still follows them.
  if (lw.size() >= 2) {
    for (const auto& c : candidates) {
      const std::string lc = lower(std::string_view(c));
      if (lc.size() > lw.size() && lc.starts_with(lw) &&
          std::string_view("-_.:").find(lc[lw.size()]) != std::string_view::npos &&
          std::find(out.begin(), out.end(), std::string_view(c)) == out.end()) {
        out.emplace_back(std::string_view(c));
        if (out.size() == limit) return out;
      }
    }
  }
  // The whole word: a case-insensitive match, else the closest typo. Strictly-less keeps
  // the first of equally close candidates: declaration order. A candidate whose length
  // alone puts it beyond a typo is not measured (a long key costs no more than a short one).
  const int typo = typo_limit(word);
  int best_d = 1 << 30;
  std::string_view best;
  for (const auto& c : candidates) {
    const std::string_view cv(c);
    const int bound = std::min(typo, best_d - 1);  // closer than the best, and a typo
    if (bound < 0) break;
    if (length_gap(lw, cv) > static_cast<size_t>(bound)) continue;
    const int d = edit_distance(lw, lower(cv), bound);
    if (d <= bound) {
      best_d = d;
      best = cv;
    }
  }
  if (best_d <= typo) {
    if (best_d == 0) out.clear();  // the word itself, whatever its case
    if (std::find(out.begin(), out.end(), best) == out.end()) out.emplace_back(best);
    return out;
  }
  if (!out.empty()) return out;
  // Parts of it: by rank, then declaration order.
  std::vector<std::pair<int, size_t>> found;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int rank = partial_rank(lw, lower(std::string_view(candidates[i])));
    if (rank != kNoMatch) found.emplace_back(rank, i);
  }
  std::sort(found.begin(), found.end());
  for (const auto& [rank, i] : found) {
    const std::string_view cv(candidates[i]);
    if (std::find(out.begin(), out.end(), cv) != out.end()) continue;  // listed twice
    out.emplace_back(cv);
    if (out.size() == limit) break;
  }
  return out;
}

std::string did_you_mean_text(const std::vector<std::string>& s) {
  if (s.empty()) return {};
  std::string list = fmt::format("'{}'", s.front());
  for (size_t i = 1; i < s.size(); ++i) {
    list += fmt::format("{}'{}'", i + 1 == s.size() ? " or " : ", ", s[i]);
  }
  return fmt::format("; did you mean {}?", list);
}

}  // namespace

std::vector<std::string> suggestions(std::string_view word, std::span<const std::string> candidates,
                                     size_t limit) {
  return suggestions_impl(word, candidates, limit);
}
std::vector<std::string> suggestions(std::string_view word,
                                     std::span<const std::string_view> candidates, size_t limit) {
  return suggestions_impl(word, candidates, limit);
}

std::string nearest(std::string_view word, std::span<const std::string> candidates) {
  std::vector<std::string> s = suggestions(word, candidates, 1);
  return s.empty() ? std::string() : s.front();
}
std::string nearest(std::string_view word, std::span<const std::string_view> candidates) {
  std::vector<std::string> s = suggestions(word, candidates, 1);
  return s.empty() ? std::string() : s.front();
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  return did_you_mean_text(suggestions(word, candidates));
}
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
  return did_you_mean_text(suggestions(word, candidates));
}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "internal error: %s:%d: assertion '%s' failed: %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

}  // namespace tierflow
