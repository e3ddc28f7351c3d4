#include "core/json_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/json_writer.h"
#include "core/utf8.h"

namespace tierflow {

namespace {
/// A byte a string holds as it is, with nothing to check: printable ASCII but '"' and '\\'.
bool plain(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b >= 0x20 && b < 0x80 && c != '"' && c != '\\';
}
}  // namespace

JsonReader::JsonReader(std::string_view text, std::string file)
    : text_(text), file_(std::move(file)) {
  // A UTF-8 byte-order mark is allowed (RFC 8259 §8.1) and skipped.
  if (text_.substr(0, 3) == "\xEF\xBB\xBF") i_ = 3;
}

size_t JsonReader::offset() {
  skip_ws();
  return i_;
}

void JsonReader::seek(size_t offset) {
  i_ = offset;
  started_.clear();
}

SourcePos JsonReader::pos_at(size_t offset) const { return text_position(text_, offset, file_); }

JsonReader::Kind JsonReader::peek() {
  skip_ws();
  if (i_ >= text_.size()) return Kind::kEnd;
  switch (text_[i_]) {
    case '{':
      return Kind::kObject;
    case '[':
      return Kind::kArray;
    case '"':
      return Kind::kString;
    case 't':
    case 'f':
      return Kind::kBool;
    case 'n':
      return Kind::kNull;
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9':
      return Kind::kNumber;
    default:
      return Kind::kInvalid;
  }
}

void JsonReader::unexpected(std::string_view expected) {
  skip_ws();
  if (i_ >= text_.size())
    fail_at(i_, "malformed JSON: expected {}, got the end of the file", expected);
  const char c = text_[i_];
  std::string got;
  switch (peek()) {
    case Kind::kObject:
      got = "an object";
      break;
    case Kind::kArray:
      got = "an array";
      break;
    case Kind::kString:
      got = "a string";
      break;
    case Kind::kBool:
      got = "true/false";
      break;
    case Kind::kNull:
      got = "null";
      break;
    case Kind::kNumber:
      got = "a number";
      break;
    default:
      got = static_cast<unsigned char>(c) < 0x80 && static_cast<unsigned char>(c) >= 0x20
                ? fmt::format("'{}'", c)
                : fmt::format("the byte 0x{:02X}", static_cast<unsigned char>(c));
      break;
  }
  fail_at(i_, "expected {}, got {}", expected, got);
}

void JsonReader::open_container() {
  if (started_.size() >= kMaxJsonDepth) fail_at(i_, "JSON nested deeper than {} levels", kMaxJsonDepth);
  ++i_;
  started_.push_back(false);
}

void JsonReader::begin_object(std::string_view what) {
  if (peek() != Kind::kObject) unexpected(fmt::format("an object for {}", what));
  open_container();
}

bool JsonReader::next_key(std::string_view& key) {
  skip_ws();
  if (i_ < text_.size() && text_[i_] == '}') {
    ++i_;
    started_.pop_back();
    return false;
  }
  if (started_.back()) {
    if (i_ >= text_.size() || text_[i_] != ',') unexpected("',' or '}'");
    const size_t comma = i_;
    ++i_;
    skip_ws();
    if (i_ < text_.size() && text_[i_] == '}')
      fail_at(comma, "malformed JSON: trailing comma before '}}'");
  }
  started_.back() = true;
  if (i_ >= text_.size() || text_[i_] != '"') unexpected("a key in double quotes");
  key_at_ = i_;
  // Keys almost never hold escapes: take them straight from the text up to the first '"'
  // when only printable ASCII comes before it.
  size_t close = i_ + 1;
  while (close < text_.size() && plain(text_[close])) ++close;
  if (close < text_.size() && text_[close] == '"') {
    key = text_.substr(i_ + 1, close - i_ - 1);
    i_ = close + 1;
  } else {
    key = read_string_view("a key");
  }
  skip_ws();
  if (i_ >= text_.size() || text_[i_] != ':') unexpected("':' after the key");
  ++i_;
  return true;
}

bool JsonReader::next_key(std::string& key) {
  std::string_view view;
  if (!next_key(view)) return false;
  key.assign(view);
  return true;
}

void JsonReader::begin_array(std::string_view what) {
  if (peek() != Kind::kArray) unexpected(fmt::format("an array for {}", what));
  open_container();
}

bool JsonReader::next_item() {
  skip_ws();
  if (i_ < text_.size() && text_[i_] == ']') {
    ++i_;
    started_.pop_back();
    return false;
  }
  if (started_.back()) {
    if (i_ >= text_.size() || text_[i_] != ',') unexpected("',' or ']'");
    const size_t comma = i_;
    ++i_;
    skip_ws();
    if (i_ < text_.size() && text_[i_] == ']')
      fail_at(comma, "malformed JSON: trailing comma before ']'");
  }
  started_.back() = true;
  return true;
}

namespace {
void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}
}  // namespace

std::string JsonReader::read_string(std::string_view what) {
  return std::string(read_string_view(what));
}

std::string_view JsonReader::read_string_view(std::string_view what) {
  if (peek() != Kind::kString) unexpected(fmt::format("a string for {}", what));
  // Fast path: no escape and no control character before the closing quote.
  size_t k = i_ + 1;
  while (k < text_.size() && plain(text_[k])) ++k;
  if (k < text_.size() && text_[k] == '"') {
    const std::string_view out = text_.substr(i_ + 1, k - i_ - 1);
    i_ = k + 1;
    return out;
  }
  return decode_string();
}

std::string_view JsonReader::decode_string() {
  const size_t start = i_;
  ++i_;
  std::string& out = scratch_;
  out.clear();
  while (true) {
    const size_t run = i_;
    while (i_ < text_.size() && plain(text_[i_])) ++i_;
    out.append(text_.substr(run, i_ - run));
    if (i_ >= text_.size()) fail_at(start, "malformed JSON: this string is never closed");
    const char c = text_[i_];
    if (static_cast<unsigned char>(c) >= 0x80) {
      // RFC 8259 §8.1: JSON text is UTF-8; a name that is not would corrupt every output.
      const size_t n = utf8_length(text_, i_);
      if (n == 0) {
        fail_at(i_, "malformed JSON: byte 0x{:02X} in a string is not well-formed UTF-8",
                static_cast<unsigned char>(c));
      }
      out.append(text_.substr(i_, n));
      i_ += n;
      continue;
    }
    if (c == '"') {
      ++i_;
      return out;
    }
    if (c == '\n' || c == '\r') fail_at(start, "malformed JSON: this string is never closed");
    if (c != '\\') fail_at(i_, "malformed JSON: control character in a string");
    if (i_ + 1 >= text_.size()) fail_at(start, "malformed JSON: this string is never closed");
    const char e = text_[i_ + 1];
    i_ += 2;
    switch (e) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        auto hex4 = [&](size_t at) -> uint32_t {
          uint32_t v = 0;
          if (at + 4 > text_.size()) fail_at(at, "malformed JSON: bad \\u escape");
          auto [p, ec] = std::from_chars(text_.data() + at, text_.data() + at + 4, v, 16);
          if (ec != std::errc() || p != text_.data() + at + 4) {
            fail_at(at, "malformed JSON: bad \\u escape");
          }
          return v;
        };
        const size_t escape = i_ - 2;
        uint32_t cp = hex4(i_);
        i_ += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && i_ + 6 <= text_.size() && text_[i_] == '\\' &&
            text_[i_ + 1] == 'u') {
          const uint32_t lo = hex4(i_ + 2);
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i_ += 6;
          }
        }
        if (cp >= 0xD800 && cp < 0xE000) {
          fail_at(escape, "malformed JSON: \\u{:04X} is half of a surrogate pair", cp);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        fail_at(i_ - 2, "malformed JSON: unknown escape '\\{}'", e);
    }
  }
}

namespace {

/// Whether `t` is a number as JSON's grammar writes it, -?[0-9]+(.[0-9]+)?([eE][+-]?[0-9]+)?
/// (std::from_chars also takes "6.", "1.e5" and "1e"); leading zeros, which the grammar
/// also rules out, are refused before this with their own message.
bool json_number(std::string_view t) {
  size_t k = 0;
  auto digits = [&] {
    const size_t from = k;
    while (k < t.size() && t[k] >= '0' && t[k] <= '9') ++k;
    return k > from;
  };
  if (k < t.size() && t[k] == '-') ++k;
  if (!digits()) return false;
  if (k < t.size() && t[k] == '.') {
    ++k;
    if (!digits()) return false;
  }
  if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
    ++k;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
    if (!digits()) return false;
  }
  return k == t.size();
}

}  // namespace

std::string_view JsonReader::number_token() {
  skip_ws();
  const size_t start = i_;
  while (i_ < text_.size()) {
    const char c = text_[i_];
    if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
      ++i_;
    } else {
      break;
    }
  }
  const std::string_view t = text_.substr(start, i_ - start);
  const size_t digits = !t.empty() && t[0] == '-' ? 1 : 0;
  if (t.size() > digits + 1 && t[digits] == '0' && t[digits + 1] >= '0' && t[digits + 1] <= '9') {
    fail_at(start, "malformed JSON: numbers have no leading zeros, got {}", t);
  }
  if (!t.empty() && !json_number(t)) {
    fail_at(start,
            "malformed JSON: {} is not a number (JSON needs digits before and after a '.', "
            "and after an 'e')",
            t);
  }
  return t;
}

namespace {
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr bool is_number_char(char c) {
  return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}
}  // namespace

bool JsonReader::plain_uint(uint64_t& v) {
  // 19 digits always fit in 64 bits; longer numbers take the general path.
  const size_t end = std::min(text_.size(), i_ + 19);
  size_t k = i_;
  uint64_t acc = 0;
  while (k < end && is_digit(text_[k])) {
    acc = acc * 10 + static_cast<uint64_t>(text_[k] - '0');
    ++k;
  }
  if (k == i_ || (text_[i_] == '0' && k - i_ > 1)) return false;
  if (k < text_.size() && is_number_char(text_[k])) return false;
  v = acc;
  i_ = k;
  return true;
}

int64_t JsonReader::read_int(std::string_view what, int64_t min, int64_t max) {
  if (peek() != Kind::kNumber) unexpected(fmt::format("an integer for {}", what));
  const size_t start = i_;
  int64_t v = 0;
  if (uint64_t u = 0; plain_uint(u) && u <= static_cast<uint64_t>(INT64_MAX)) {
    v = static_cast<int64_t>(u);
    if (v < min || v > max) fail_at(start, "{}: {} is out of range [{}, {}]", what, v, min, max);
    return v;
  }
  i_ = start;
  const std::string_view t = number_token();
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) fail_at(start, "{}: {} is out of range", what, t);
  if (ec != std::errc() || p != t.data() + t.size()) {
    fail_at(start, "{}: expected an integer, got {}", what, t.empty() ? "nothing" : t);
  }
  if (v < min || v > max) {
    fail_at(start, "{}: {} is out of range [{}, {}]", what, v, min, max);
  }
  return v;
}

uint64_t JsonReader::read_uint(std::string_view what, uint64_t max) {
  if (peek() != Kind::kNumber) unexpected(fmt::format("an integer for {}", what));
  const size_t start = i_;
  uint64_t v = 0;
  if (plain_uint(v)) {
    if (v > max) fail_at(start, "{}: {} is larger than {}", what, v, max);
    return v;
  }
  const std::string_view t = number_token();
  if (!t.empty() && t[0] == '-') fail_at(start, "{}: must not be negative, got {}", what, t);
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) fail_at(start, "{}: {} is out of range", what, t);
  if (ec != std::errc() || p != t.data() + t.size()) {
    fail_at(start, "{}: expected a whole number, got {}", what, t.empty() ? "nothing" : t);
  }
  if (v > max) fail_at(start, "{}: {} is larger than {}", what, v, max);
  return v;
}

double JsonReader::read_number(std::string_view what) {
  if (peek() != Kind::kNumber) unexpected(fmt::format("a number for {}", what));
  const size_t start = i_;
  // A whole number converts exactly as from_chars would: both round the same integer once.
  if (uint64_t u = 0; plain_uint(u)) return static_cast<double>(u);
  const std::string_view t = number_token();
  double v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v)) {
    fail_at(start, "{}: expected a finite number, got {}", what, t.empty() ? "nothing" : t);
  }
  return v;
}

bool JsonReader::read_bool(std::string_view what) {
  if (peek() != Kind::kBool) unexpected(fmt::format("true or false for {}", what));
  if (text_.substr(i_, 4) == "true") {
    i_ += 4;
    return true;
  }
  if (text_.substr(i_, 5) == "false") {
    i_ += 5;
    return false;
  }
  fail_at(i_, "malformed JSON: expected true or false");
}

std::string JsonReader::read_scalar_json(std::string_view what) {
  switch (peek()) {
    case Kind::kString: {
      std::string out;
      append_json_string(out, read_string(what));
      return out;
    }
    case Kind::kBool:
      return read_bool(what) ? "true" : "false";
    case Kind::kNumber: {
      const size_t start = offset();
      read_number(what);
      return std::string(text_.substr(start, i_ - start));
    }
    default:
      unexpected(fmt::format("a string, number or boolean for {}", what));
  }
}

bool JsonReader::read_null() {
  if (peek() != Kind::kNull) return false;
  if (text_.substr(i_, 4) != "null") unexpected("null");
  i_ += 4;
  return true;
}

void JsonReader::skip_value() {
  switch (peek()) {
    case Kind::kObject: {
      begin_object("a value");
      std::string k;
      while (next_key(k)) skip_value();
      return;
    }
    case Kind::kArray:
      begin_array("a value");
      while (next_item()) skip_value();
      return;
    case Kind::kString:
      read_string("a value");
      return;
    case Kind::kBool:
      read_bool("a value");
      return;
    case Kind::kNull:
      read_null();
      return;
    case Kind::kNumber:
      read_number("a value");
      return;
    case Kind::kEnd:
    case Kind::kInvalid:
      unexpected("a value");
  }
}

void JsonReader::expect_end() {
  if (peek() != Kind::kEnd) fail_at(i_, "malformed JSON: unexpected text after the document");
}

}  // namespace tierflow
