// A strict, streaming JSON reader that knows where it is: every error names
// FILE:LINE:COL. Values are pulled in document order by the caller (no tree is built),
// so a file of a million ops reads in one pass with memory for the result only.
//
// Glossary
//   offset   a byte offset into the text; turned into line:col only when an error is
//            reported (a position costs 8 bytes to keep, not a string).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.h"
#include "core/io.h"

namespace tierflow {

/// The deepest nesting of objects and arrays any JSON input may have (docs/cli.md,
/// "Limits"). Deeper documents are refused at the bracket that goes too deep.
inline constexpr size_t kMaxJsonDepth = 256;

class JsonReader {
 public:
  enum class Kind { kObject, kArray, kString, kNumber, kBool, kNull, kEnd, kInvalid };

  /// `text` must outlive the reader; `file` names it in positions.
  JsonReader(std::string_view text, std::string file);

  /// The kind of the next value (skips white space). kEnd at the end of the text.
  Kind peek();
  /// Byte offset of the next token.
  size_t offset();
  /// 1-based line and column of a byte offset.
  [[nodiscard]] SourcePos pos_at(size_t offset) const;
  [[nodiscard]] SourcePos pos() { return pos_at(offset()); }

  /// Consumes '{'. Then loop `while (next_key(key))` and read each value.
  void begin_object(std::string_view what);
  /// Reads the next key and its ':' (true), or the closing '}' (false).
  bool next_key(std::string& key);
  /// The same, without a copy: `key` views the text, or (a key with escapes) a buffer of
  /// the reader that the next read overwrites.
  bool next_key(std::string_view& key);
  /// Byte offset of the key last read by next_key().
  [[nodiscard]] size_t key_offset() const { return key_at_; }
  /// Consumes '['. Then loop `while (next_item())` and read each value.
  void begin_array(std::string_view what);
  /// True when another item follows (its ',' consumed), false at the closing ']'.
  bool next_item();

  std::string read_string(std::string_view what);
  /// The same, without a copy: a view of the text, or (a string with escapes) of a buffer
  /// of the reader that the next read overwrites.
  std::string_view read_string_view(std::string_view what);
  /// An integer in [min, max]; a fraction, exponent or out-of-range value is an error.
  int64_t read_int(std::string_view what, int64_t min, int64_t max);
  uint64_t read_uint(std::string_view what, uint64_t max);
  /// Any finite JSON number.
  double read_number(std::string_view what);
  bool read_bool(std::string_view what);
  /// A string, number or boolean, returned as its JSON text (strings re-quoted).
  std::string read_scalar_json(std::string_view what);
  /// Consumes 'null' if it is next.
  bool read_null();
  /// Skips one value of any kind.
  void skip_value();
  /// Requires that only white space remains.
  void expect_end();

  template <class... Args>
  [[noreturn]] void fail_at(size_t offset, fmt::format_string<Args...> f, Args&&... args) const {
    throw InputError(pos_at(offset), fmt::format(f, std::forward<Args>(args)...));
  }

  [[nodiscard]] const std::string& file() const { return file_; }
  [[nodiscard]] std::string_view text() const { return text_; }
  /// Moves to `offset` (an offset previously returned by offset()).
  void seek(size_t offset);
  /// Moves to `offset`, the end of the value at offset() as another reader of the same
  /// text read it; unlike seek(), the open objects and arrays stay open.
  void skip_to(size_t offset) { i_ = offset; }

 private:
  void skip_ws() {
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (c != ' ' && c != '\n' && c != '\t' && c != '\r') break;
      ++i_;
    }
  }
  [[noreturn]] void unexpected(std::string_view expected);
  /// Consumes the '{' or '[' at i_ and opens it; refused past kMaxJsonDepth.
  void open_container();
  std::string_view number_token();
  /// Fast path of the integer readers: a run of at most 19 digits that the general path
  /// would accept as is (no sign, fraction, exponent or leading zero). False, consuming
  /// nothing, for anything else.
  bool plain_uint(uint64_t& v);
  /// Decodes the string at i_ (escapes and all) into scratch_; every malformed case throws.
  std::string_view decode_string();

  std::string_view text_;
  std::string file_;
  size_t i_ = 0;
  size_t key_at_ = 0;
  std::string scratch_;  ///< the last string or key that held escapes, decoded
  // One entry per open container: true once its first member has been read.
  std::vector<bool> started_;
};

}  // namespace tierflow
