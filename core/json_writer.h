// Writing JSON, one way for every output: a streaming writer that appends to a string, and
// the one function that turns text into a JSON string literal. Reading JSON is
// core/json_reader.h.
//
// Glossary
//   layout   how one object or array spaces its members:
//              compact  {"a":1,"b":[1,2]}
//              spaced   {"a": 1, "b": [1, 2]}
//              lines    one member a line, indented two spaces for each open container
//                       of line layout; an empty container is `{}` or `[]`
//            A container's layout is chosen when it is opened, so a file can list one
//            record a line with each record spaced (plans, reports).
//   raw      JSON text written elsewhere (a value already formatted, an embedded document),
//            emitted as it is.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tierflow {

/// Appends `s` to `out` as a JSON string literal: `"`, `\` and control characters escaped
/// (`\n`, `\t`, `\r`, the others `\u00xx`), each byte that does not start well-formed UTF-8
/// replaced by U+FFFD (core/utf8.h): a reader rejects a whole file over one bad string.
void append_json_string(std::string& out, std::string_view s);

/// `s` as a JSON string literal (append_json_string).
std::string json_string(std::string_view s);

/// Appends `v` in the shortest form that reads back the same, as fmt's "{}" writes it
/// (`3`, `0.25`, `1e+20`). JSON has no infinity or NaN: callers write null for them.
void append_json_double(std::string& out, double v);

enum class JsonLayout {
  kCompact,
  kSpaced,
  kLines,
  /// As kLines, and an empty container still closes on a line of its own (`[` newline `]`),
  /// as the simulator's report writes its lists.
  kLinesAlwaysBreak,
};

/// Appends one JSON document (or several, one after another: JSON Lines) to a string. Keys
/// and values are written in call order; the writer adds the separators and the layout.
///
///   JsonWriter w(out);
///   w.begin_object(JsonLayout::kLines);
///   w.key("name").string(name);
///   w.key("wait").begin_array().integer(3).integer(5).end_array();
///   w.end_object();
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  /// Opens an object or array as the next value. In an array of line layout, `per_line`
  /// items share a line (spaced).
  JsonWriter& begin_object(JsonLayout layout = JsonLayout::kSpaced);
  JsonWriter& end_object();
  JsonWriter& begin_array(JsonLayout layout = JsonLayout::kSpaced, uint32_t per_line = 1);
  JsonWriter& end_array();

  /// The key of the next member of the open object.
  JsonWriter& key(std::string_view k);

  JsonWriter& string(std::string_view s);
  template <std::integral Int>
  requires(!std::same_as<Int, bool>) JsonWriter& integer(Int v) {
    if constexpr (std::is_signed_v<Int>) {
      return signed_integer(static_cast<int64_t>(v));
    } else {
      return unsigned_integer(static_cast<uint64_t>(v));
    }
  }
  /// Shortest round trip, as fmt's "{}" (append_json_double); `v` finite.
  JsonWriter& number(double v);
  /// As number(), with ".0" after an integral value (`3.0`), so that a reader that tells
  /// integers from floating-point numbers (Python's) reads it back as one, and scientific
  /// notation from 1e15 on (`1.979e+15`) instead of from 1e16; `v` finite.
  JsonWriter& real(double v);
  /// Fixed notation with `decimals` digits after the point, as fmt's "{:.Nf}"; `v` finite.
  JsonWriter& fixed(double v, int decimals);
  JsonWriter& boolean(bool v);
  JsonWriter& null();
  /// JSON text written elsewhere, as the next value.
  JsonWriter& raw(std::string_view json);

  /// True when every container opened has been closed.
  [[nodiscard]] bool done() const { return frames_.empty(); }

 private:
  struct Frame {
    JsonLayout layout;
    bool object;
    uint32_t per_line;
    uint32_t items = 0;
  };

  /// Writes what comes before the next value: nothing after a key, else the separator of
  /// the open container.
  void before_value();
  /// Writes the separator of the open container before its next member.
  void separate();
  void begin(bool object, JsonLayout layout, uint32_t per_line);
  void end(bool object);
  void newline(size_t level);
  JsonWriter& signed_integer(int64_t v);
  JsonWriter& unsigned_integer(uint64_t v);

  std::string& out_;
  std::vector<Frame> frames_;
  size_t line_levels_ = 0;  ///< open containers of line layout
  bool after_key_ = false;
};

}  // namespace tierflow
