// Declared parameters: each field of a user-facing object is declared once (key, type,
// unit, default, description, how to set and read it) and that one declaration drives
// the YAML loader, `--set` overrides, source checks, `describe` and the schema docs.
//
// Glossary
//   Field    one declared parameter of an object type, e.g. tier.capacity.
//   Group    dotted keys share a group: "peak.bf16" lives in the YAML mapping `peak:`.
//   Origin   where a value came from: its position, its citation key, or a default.
//   Input    a value as the user wrote it: one or more text items with positions.
#pragma once

#include <fmt/ranges.h>

#include <array>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/diagnostics.h"
#include "core/units.h"

namespace tierflow::schema {

enum class ValueType {
  kString,     ///< free text
  kName,       ///< an identifier: [a-z0-9][a-z0-9_.-]*
  kRef,        ///< the id of another object (checked after loading)
  kRefPair,    ///< two ids, written [a, b]
  kRefList,    ///< one or more ids, written [a, b, ...]
  kEnum,       ///< one of a fixed set of words
  kInt,        ///< a positive integer
  kFraction,   ///< a number in (0, 1]
  kBytes,      ///< e.g. 80GiB
  kBandwidth,  ///< e.g. 64GB/s
  kDuration,   ///< e.g. 1.5us
  kFlopRate,   ///< e.g. 989TFLOP/s
};

std::string_view type_name(ValueType t);
/// Numbers must carry a citation in shipped files; text and references need none.
bool is_number(ValueType t);

/// Where a value came from.
struct Origin {
  SourcePos pos;                 ///< where it was written: a file position, or "--set"
  std::string source;            ///< citation key given beside the value; empty if none
  SourcePos source_pos;          ///< where that key was written
  std::vector<SourcePos> items;  ///< positions of list items
  std::string note;              ///< free text given beside the value
};

/// Positions and citations of one object's fields.
struct Origins {
  SourcePos pos;                         ///< the object itself: missing keys are reported here
  std::map<std::string, Origin> fields;  ///< by dotted key; only fields the user wrote

  [[nodiscard]] const Origin* find(std::string_view key) const;
  /// The field's position if it was written, else the object's.
  [[nodiscard]] SourcePos pos_of(std::string_view key) const;
  /// The position of item `i` of a list field, else pos_of(key).
  [[nodiscard]] SourcePos item_pos(std::string_view key, size_t i) const;
};

/// A value as written: one item for scalars, several for lists.
struct Input {
  std::vector<std::string> items;
  std::vector<SourcePos> item_pos;
  SourcePos pos;
  [[nodiscard]] const std::string& text() const { return items.front(); }
};

template <class Obj>
struct Field {
  std::string key;  ///< dotted key, e.g. "capacity" or "peak.bf16"
  ValueType type = ValueType::kString;
  bool required = false;
  std::string default_text;  ///< shown by describe; empty means "none"
  std::string description;
  std::vector<std::string> choices;  ///< for kEnum
  /// Parses and stores the value; throws InputError naming the input's position.
  std::function<void(Obj&, const Input&)> set;
  /// The stored value as text; empty when unset.
  std::function<std::string(const Obj&)> get;
};

template <class Obj>
struct Schema {
  std::string object_name;  ///< "tier"
  std::string list_key;     ///< "tiers"; empty for a single object
  std::string description;
  std::vector<Field<Obj>> fields;

  [[nodiscard]] const Field<Obj>* find(std::string_view key) const {
    for (const auto& f : fields) {
      if (f.key == key) return &f;
    }
    return nullptr;
  }
  /// True when some field key starts with "group.".
  [[nodiscard]] bool is_group(std::string_view group) const {
    for (const auto& f : fields) {
      if (f.key.size() > group.size() && f.key.compare(0, group.size(), group) == 0 &&
          f.key[group.size()] == '.') {
        return true;
      }
    }
    return false;
  }
  /// The keys directly below `prefix` ("" for the top level), groups as their name.
  [[nodiscard]] std::vector<std::string> keys_under(std::string_view prefix) const {
    std::vector<std::string> out;
    for (const auto& f : fields) {
      std::string_view k = f.key;
      if (!prefix.empty()) {
        if (k.size() <= prefix.size() + 1 || k.compare(0, prefix.size(), prefix) != 0 ||
            k[prefix.size()] != '.') {
          continue;
        }
        k.remove_prefix(prefix.size() + 1);
      }
      std::string head(k.substr(0, k.find('.')));
      bool seen = false;
      for (const auto& o : out) seen = seen || o == head;
      if (!seen) out.push_back(head);
    }
    return out;
  }
};

/// A top-level key of a file format (not a declared field), with its description.
struct TopKey {
  std::string_view key;
  std::string_view description;
};

// ---- Value parsers: each throws InputError at the input's position. ----

std::string parse_string(const Input& in, std::string_view key);
std::string parse_name(const Input& in, std::string_view key);
int parse_int(const Input& in, std::string_view key, int min_value,
              int max_value = std::numeric_limits<int>::max());
double parse_fraction(const Input& in, std::string_view key);
Bytes parse_bytes_input(const Input& in, std::string_view key);
Bandwidth parse_bandwidth_input(const Input& in, std::string_view key);
Duration parse_duration_input(const Input& in, std::string_view key);
FlopRate parse_flop_rate_input(const Input& in, std::string_view key);
size_t parse_choice(const Input& in, std::string_view key, const std::vector<std::string>& choices);
std::vector<std::string> parse_ref_list(const Input& in, std::string_view key, size_t min_n,
                                        size_t max_n);

}  // namespace tierflow::schema

namespace tierflow::schema {

/// Options of one declared field.
struct Spec {
  ValueType type = ValueType::kString;
  bool required = false;
  std::string def;  ///< default as text; applied before the user's values are read
  std::string desc;
  int min_int = 1;      ///< for kInt
  int max_int = std::numeric_limits<int>::max();  ///< for kInt: more is refused
  bool zero_bytes = false;  ///< for sizes: 0 is a value (a reserve of none), not an error
  size_t min_refs = 1;  ///< for kRefList
  size_t max_refs = 64;
};

namespace detail {
[[noreturn]] void throw_not_positive(const Input& in, std::string_view key);

template <class T>
T parse_as(const Input& in, std::string_view key, const Spec& spec) {
  // Sizes and rates of zero make no physical sense anywhere in a topology (but a reserve).
  if constexpr (std::is_same_v<T, Bytes>) {
    Bytes v = parse_bytes_input(in, key);
    if (v.value == 0 && !spec.zero_bytes) throw_not_positive(in, key);
    return v;
  } else if constexpr (std::is_same_v<T, Bandwidth>) {
    Bandwidth v = parse_bandwidth_input(in, key);
    if (v.bytes_per_s <= 0.0) throw_not_positive(in, key);
    return v;
  } else if constexpr (std::is_same_v<T, Duration>) {
    return parse_duration_input(in, key);
  } else if constexpr (std::is_same_v<T, FlopRate>) {
    FlopRate v = parse_flop_rate_input(in, key);
    if (v.flop_per_s <= 0.0) throw_not_positive(in, key);
    return v;
  } else if constexpr (std::is_same_v<T, int>) {
    return parse_int(in, key, spec.min_int, spec.max_int);
  } else if constexpr (std::is_same_v<T, double>) {
    return parse_fraction(in, key);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return parse_ref_list(in, key, spec.min_refs, spec.max_refs);
  } else {
    static_assert(std::is_same_v<T, std::string>);
    return spec.type == ValueType::kString ? parse_string(in, key) : parse_name(in, key);
  }
}

template <class T>
std::string text_of(const T& v) {
  if constexpr (std::is_same_v<T, int>) {
    return std::to_string(v);
  } else if constexpr (std::is_same_v<T, double>) {
    return v == 0.0 ? std::string() : fmt::format("{}", v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return v.empty() ? std::string() : fmt::format("[{}]", fmt::join(v, ", "));
  } else if constexpr (std::is_same_v<T, Bandwidth>) {
    return v.bytes_per_s == 0.0 ? std::string() : to_string(v);
  } else if constexpr (std::is_same_v<T, FlopRate>) {
    return v.flop_per_s == 0.0 ? std::string() : to_string(v);
  } else {
    return to_string(v);
  }
}

template <class T>
constexpr ValueType type_for(ValueType given) {
  if constexpr (std::is_same_v<T, Bytes>) return ValueType::kBytes;
  if constexpr (std::is_same_v<T, Bandwidth>) return ValueType::kBandwidth;
  if constexpr (std::is_same_v<T, Duration>) return ValueType::kDuration;
  if constexpr (std::is_same_v<T, FlopRate>) return ValueType::kFlopRate;
  if constexpr (std::is_same_v<T, int>) return ValueType::kInt;
  if constexpr (std::is_same_v<T, double>) return ValueType::kFraction;
  return given;
}
}  // namespace detail

namespace detail {
/// The declaration part shared by every field kind.
template <class Obj>
Field<Obj> describe_field(std::string key, ValueType type, const Spec& spec) {
  Field<Obj> f;
  f.key = std::move(key);
  f.type = type;
  f.required = spec.required;
  f.default_text = spec.def;
  f.description = spec.desc;
  return f;
}
}  // namespace detail

/// A field stored in a data member.
template <class Obj, class T>
Field<Obj> declare(std::string key, T Obj::*member, Spec spec) {
  spec.type = detail::type_for<T>(spec.type);
  Field<Obj> f = detail::describe_field<Obj>(std::move(key), spec.type, spec);
  f.set = [member, spec, k = f.key](Obj& o, const Input& in) {
    o.*member = detail::parse_as<T>(in, k, spec);
  };
  f.get = [member](const Obj& o) { return detail::text_of(o.*member); };
  return f;
}

/// A field stored in one element of an array member (e.g. peak[bf16]).
template <class Obj, class T, size_t N>
Field<Obj> declare_at(std::string key, std::array<T, N> Obj::*member, size_t index, Spec spec) {
  spec.type = detail::type_for<T>(spec.type);
  Field<Obj> f = detail::describe_field<Obj>(std::move(key), spec.type, spec);
  f.set = [member, index, spec, k = f.key](Obj& o, const Input& in) {
    (o.*member)[index] = detail::parse_as<T>(in, k, spec);
  };
  f.get = [member, index](const Obj& o) { return detail::text_of((o.*member)[index]); };
  return f;
}

/// A field holding one of a fixed set of words, stored as an enum.
template <class Obj, class E, size_t N>
Field<Obj> declare_enum(std::string key, E Obj::*member,
                        const std::array<std::string_view, N>& names, Spec spec) {
  Field<Obj> f = detail::describe_field<Obj>(std::move(key), ValueType::kEnum, spec);
  for (auto n : names) f.choices.emplace_back(n);
  f.set = [member, choices = f.choices, k = f.key](Obj& o, const Input& in) {
    o.*member = static_cast<E>(parse_choice(in, k, choices));
  };
  f.get = [member, names](const Obj& o) {
    return std::string(names[static_cast<size_t>(o.*member)]);
  };
  return f;
}

}  // namespace tierflow::schema
