// Diagnostics for bad user input: one error type with a source position, exit codes,
// and "did you mean" suggestions.
//
// Glossary
//   SourcePos   a file name with a 1-based line and column (0 = unknown).
//   InputError  thrown only by loaders and the CLI for input a user can fix; caught
//               in main, printed as "error: FILE:LINE:COL: message", exit code 2.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tierflow {

/// Process exit codes of the `tierflow` binary (documented in docs/cli.md).
enum class ExitCode : int {
  kOk = 0,          ///< success
  kInfeasible = 1,  ///< a well-formed question whose answer is "does not fit"
  kBadInput = 2,    ///< the input (file, flag, override) is wrong: fix it and rerun
  kInternal = 3,    ///< a bug in tierflow: please report it
};

/// A position in a source file. Line and column are 1-based; 0 means unknown.
struct SourcePos {
  std::string file;
  int line = 0;
  int col = 0;

  /// "file:line:col", "file:line" or "file" depending on what is known.
  [[nodiscard]] std::string str() const;
  bool operator==(const SourcePos&) const = default;
};

/// The 1-based line and column of byte `offset` of `text` (a file's whole contents), in
/// `file`. Columns count UTF-8 code points, as editors show them.
SourcePos text_position(std::string_view text, size_t offset, std::string file);

/// Bad user input. `what()` is "file:line:col: message".
class InputError : public std::runtime_error {
 public:
  InputError(SourcePos pos, std::string message);

  template <class... Args>
  static InputError at(SourcePos pos, fmt::format_string<Args...> f, Args&&... args) {
    return InputError(std::move(pos), fmt::format(f, std::forward<Args>(args)...));
  }

  [[nodiscard]] const SourcePos& pos() const { return pos_; }
  [[nodiscard]] const std::string& message() const { return message_; }

 private:
  SourcePos pos_;
  std::string message_;
};

/// Damerau-Levenshtein (optimal string alignment) distance; with a `bound`, any distance
/// above it is returned as bound + 1 (and found sooner).
int edit_distance(std::string_view a, std::string_view b, int bound = 1 << 29);

/// Whether edit_distance(a, b) <= limit. A pair whose lengths alone differ by more is not
/// measured, so a long word costs no more than a short one.
bool within_edit_distance(std::string_view a, std::string_view b, int limit);

/// The candidates `word` plausibly stands for, best first, at most `limit`; case does
/// not matter. A match, or else the closest plausible typo (edit distance ≤ max(1, len/3);
/// the first declared wins ties), comes alone. Otherwise, in this order and
/// each in declaration order: candidates with every component of `word` among theirs
/// (components are split at '-', '_', '.' and ' ': `pcie` and `pcie-gpu` for `gpu-pcie`);
/// candidates that contain `word` or that `word` contains, the part at least 3 characters
/// and half the whole (`link` for `nvlink`, not `node` for `supernode`); candidates with a
/// component that is a plausible typo of one of `word`'s (3 characters or more: `pcei` for
/// `gpu-pcie`). Empty when nothing fits.
std::vector<std::string> suggestions(std::string_view word, std::span<const std::string> candidates,
                                     size_t limit = 3);
std::vector<std::string> suggestions(std::string_view word,
                                     std::span<const std::string_view> candidates,
                                     size_t limit = 3);

/// The best of `suggestions`; empty when there is none.
std::string nearest(std::string_view word, std::span<const std::string> candidates);
std::string nearest(std::string_view word, std::span<const std::string_view> candidates);

/// "; did you mean 'x'?", "; did you mean 'x' or 'y'?" or "; did you mean 'x', 'y' or
/// 'z'?" for the (up to three) `suggestions`, else "".
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates);

/// How a message names option `field` (e.g. "kv_block"): as the CLI's flag ("--kv-block"),
/// or, for Python's arguments and study and sweep specs, as the field itself.
std::string option_name(std::string_view field, bool cli);

/// Programmer-error check: prints the message with its location and aborts.
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace tierflow

/// Asserts an invariant that no user input can break. Never use it for input checks.
#define TF_ASSERT(cond, ...)                                                                   \
  do {                                                                                         \
    if (!(cond)) ::tierflow::assert_fail(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (false)
