#include "core/schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace tierflow::schema {

std::string_view type_name(ValueType t) {
  switch (t) {
    case ValueType::kString:
      return "text";
    case ValueType::kName:
      return "name";
    case ValueType::kRef:
      return "id";
    case ValueType::kRefPair:
      return "[id, id]";
    case ValueType::kRefList:
      return "[id, ...]";
    case ValueType::kEnum:
      return "enum";
    case ValueType::kInt:
      return "integer";
    case ValueType::kFraction:
      return "fraction";
    case ValueType::kBytes:
      return "bytes";
    case ValueType::kBandwidth:
      return "bandwidth";
    case ValueType::kDuration:
      return "duration";
    case ValueType::kFlopRate:
      return "FLOP rate";
  }
  return "?";
}

bool is_number(ValueType t) {
  switch (t) {
    case ValueType::kInt:
    case ValueType::kFraction:
    case ValueType::kBytes:
    case ValueType::kBandwidth:
    case ValueType::kDuration:
    case ValueType::kFlopRate:
      return true;
    default:
      return false;
  }
}

const Origin* Origins::find(std::string_view key) const {
  auto it = fields.find(std::string(key));
  return it == fields.end() ? nullptr : &it->second;
}

SourcePos Origins::pos_of(std::string_view key) const {
  const Origin* o = find(key);
  return o ? o->pos : pos;
}

SourcePos Origins::item_pos(std::string_view key, size_t i) const {
  const Origin* o = find(key);
  if (o != nullptr && i < o->items.size()) return o->items[i];
  return pos_of(key);
}

namespace {

void require_scalar(const Input& in, std::string_view key) {
  if (in.items.size() != 1) {
    throw InputError::at(in.pos, "'{}' expects a single value, got a list", key);
  }
}

template <class T>
T unwrap(const Input& in, ParseResult<T> r, std::string_view key) {
  if (!r.ok()) throw InputError::at(in.pos, "bad value for '{}': {}", key, r.error);
  return r.value;
}

bool valid_name(std::string_view s) {
  if (s.empty() || !(std::islower(static_cast<unsigned char>(s[0])) ||
                     std::isdigit(static_cast<unsigned char>(s[0])))) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return std::islower(u) || std::isdigit(u) || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

namespace detail {
void throw_not_positive(const Input& in, std::string_view key) {
  throw InputError::at(in.pos, "bad value for '{}': must be greater than zero, got '{}'", key,
                       in.text());
}
}  // namespace detail

std::string parse_string(const Input& in, std::string_view key) {
  require_scalar(in, key);
  return in.text();
}

std::string parse_name(const Input& in, std::string_view key) {
  require_scalar(in, key);
  if (!valid_name(in.text())) {
    throw InputError::at(in.pos,
                         "bad value for '{}': '{}' is not a valid id (lower-case letters, digits, "
                         "'-', '_' and '.', starting with a letter or digit)",
                         key, in.text());
  }
  return in.text();
}

int parse_int(const Input& in, std::string_view key, int min_value, int max_value) {
  require_scalar(in, key);
  const std::string& t = in.text();
  int v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) {
    throw InputError::at(in.pos, "bad value for '{}': {} is too large", key, t);
  }
  if (ec != std::errc() || ptr != t.data() + t.size()) {
    throw InputError::at(in.pos, "bad value for '{}': expected an integer, got '{}'", key, t);
  }
  if (v < min_value) {
    throw InputError::at(in.pos, "bad value for '{}': must be at least {}, got {}", key, min_value,
                         v);
  }
  if (v > max_value) {
    throw InputError::at(in.pos, "bad value for '{}': at most {}, got {}", key, max_value, v);
  }
  return v;
}

double parse_fraction(const Input& in, std::string_view key) {
  require_scalar(in, key);
  const std::string& t = in.text();
  double v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || ptr != t.data() + t.size()) {
    throw InputError::at(in.pos, "bad value for '{}': expected a fraction in (0, 1], got '{}'", key,
                         t);
  }
  if (!(v > 0.0 && v <= 1.0)) {
    throw InputError::at(in.pos, "bad value for '{}': must be in (0, 1], got {}", key, t);
  }
  return v;
}

Bytes parse_bytes_input(const Input& in, std::string_view key) {
  require_scalar(in, key);
  return unwrap(in, parse_bytes(in.text()), key);
}
Bandwidth parse_bandwidth_input(const Input& in, std::string_view key) {
  require_scalar(in, key);
  return unwrap(in, parse_bandwidth(in.text()), key);
}
Duration parse_duration_input(const Input& in, std::string_view key) {
  require_scalar(in, key);
  return unwrap(in, parse_duration(in.text()), key);
}
FlopRate parse_flop_rate_input(const Input& in, std::string_view key) {
  require_scalar(in, key);
  return unwrap(in, parse_flop_rate(in.text()), key);
}

size_t parse_choice(const Input& in, std::string_view key,
                    const std::vector<std::string>& choices) {
  require_scalar(in, key);
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i] == in.text()) return i;
  }
  throw InputError::at(in.pos, "bad value for '{}': '{}' is not one of: {}{}", key, in.text(),
                       fmt::join(choices, ", "), did_you_mean(in.text(), choices));
}

std::vector<std::string> parse_ref_list(const Input& in, std::string_view key, size_t min_n,
                                        size_t max_n) {
  if (in.items.size() < min_n || in.items.size() > max_n) {
    if (min_n == max_n) {
      throw InputError::at(in.pos, "bad value for '{}': expected a list of {} ids, got {}", key,
                           min_n, in.items.size());
    }
    throw InputError::at(in.pos, "bad value for '{}': expected a list of {} to {} ids, got {}", key,
                         min_n, max_n, in.items.size());
  }
  for (size_t i = 0; i < in.items.size(); ++i) {
    Input one{{in.items[i]}, {}, i < in.item_pos.size() ? in.item_pos[i] : in.pos};
    parse_name(one, key);
  }
  return in.items;
}

}  // namespace tierflow::schema
