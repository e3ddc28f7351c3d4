#include "core/json_writer.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <iterator>

#include "core/diagnostics.h"
#include "core/utf8.h"

namespace tierflow {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  size_t i = 0;
  // Fast path: printable ASCII with nothing to escape (every name tierflow generates).
  while (i < s.size()) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u >= 0x80 || u == '"' || u == '\\') break;
    ++i;
  }
  out.append(s.data(), i);
  while (i < s.size()) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      i += append_repaired(out, s, i);
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20) {
          fmt::format_to(std::back_inserter(out), FMT_COMPILE("\\u{:04x}"), unsigned{u});
        } else {
          out += c;
        }
    }
    ++i;
  }
  out += '"';
}

std::string json_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_string(out, s);
  return out;
}

void append_json_double(std::string& out, double v) {
  // An integer below 2^53 prints as its digits, as fmt's shortest form writes it (fixed
  // notation up to 16 digits); to_chars is much quicker for it.
  if (v >= 0 && v < 0x1p53 && !std::signbit(v) && v == std::floor(v)) {
    char buf[24];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, static_cast<uint64_t>(v)).ptr);
    return;
  }
  fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}"), v);
}

JsonWriter& JsonWriter::begin_object(JsonLayout layout) {
  begin(/*object=*/true, layout, /*per_line=*/1);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  end(/*object=*/true);
  return *this;
}

JsonWriter& JsonWriter::begin_array(JsonLayout layout, uint32_t per_line) {
  TF_ASSERT(per_line >= 1, "a JSON array with {} items a line", per_line);
  begin(/*object=*/false, layout, per_line);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  end(/*object=*/false);
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  TF_ASSERT(!frames_.empty() && frames_.back().object && !after_key_,
            "JSON key '{}' outside an object or after another key", k);
  separate();
  append_json_string(out_, k);
  out_ += frames_.back().layout == JsonLayout::kCompact ? ":" : ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::string(std::string_view s) {
  before_value();
  append_json_string(out_, s);
  return *this;
}

JsonWriter& JsonWriter::signed_integer(int64_t v) {
  before_value();
  char buf[24];
  out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return *this;
}

JsonWriter& JsonWriter::unsigned_integer(uint64_t v) {
  before_value();
  char buf[24];
  out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return *this;
}

JsonWriter& JsonWriter::number(double v) {
  before_value();
  append_json_double(out_, v);
  return *this;
}

JsonWriter& JsonWriter::real(double v) {
  before_value();
  const size_t at = out_.size();
  append_json_double(out_, v);
  if (out_.find('e', at) != std::string::npos) return *this;
  if (std::fabs(v) >= 1e15) {
    // 16 digits before the point (fmt writes fixed notation below 1e16): d.ddde+15.
    std::string digits;
    for (size_t i = at; i < out_.size(); ++i) {
      if (out_[i] >= '0' && out_[i] <= '9') digits += out_[i];
    }
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    out_.resize(v < 0 ? at + 1 : at);
    out_ += digits[0];
    if (digits.size() > 1) out_.append(".").append(digits, 1);
    out_ += "e+15";
    return *this;
  }
  if (out_.find('.', at) == std::string::npos) out_ += ".0";
  return *this;
}

JsonWriter& JsonWriter::fixed(double v, int decimals) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{:.{}f}", v, decimals);
  return *this;
}

JsonWriter& JsonWriter::boolean(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
  return *this;
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (frames_.empty()) return;
  TF_ASSERT(!frames_.back().object, "JSON value in an object without a key");
  separate();
}

void JsonWriter::separate() {
  Frame& f = frames_.back();
  switch (f.layout) {
    case JsonLayout::kCompact:
      if (f.items > 0) out_ += ',';
      break;
    case JsonLayout::kSpaced:
      if (f.items > 0) out_ += ", ";
      break;
    case JsonLayout::kLines:
    case JsonLayout::kLinesAlwaysBreak:
      if (f.items % f.per_line != 0) {
        out_ += ", ";
      } else {
        if (f.items > 0) out_ += ',';
        newline(line_levels_);
      }
      break;
  }
  ++f.items;
}

void JsonWriter::begin(bool object, JsonLayout layout, uint32_t per_line) {
  before_value();
  out_ += object ? '{' : '[';
  frames_.push_back(Frame{layout, object, per_line});
  if (layout == JsonLayout::kLines || layout == JsonLayout::kLinesAlwaysBreak) ++line_levels_;
}

void JsonWriter::end(bool object) {
  TF_ASSERT(!frames_.empty() && frames_.back().object == object && !after_key_,
            "JSON {} closed while it is not the innermost open container, or after a key",
            object ? "object" : "array");
  const Frame f = frames_.back();
  frames_.pop_back();
  if (f.layout == JsonLayout::kLines || f.layout == JsonLayout::kLinesAlwaysBreak) {
    --line_levels_;
    if (f.items > 0 || f.layout == JsonLayout::kLinesAlwaysBreak) newline(line_levels_);
  }
  out_ += object ? '}' : ']';
}

void JsonWriter::newline(size_t level) {
  out_ += '\n';
  out_.append(2 * level, ' ');
}

}  // namespace tierflow
