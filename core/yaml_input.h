// Strict YAML reading of declared objects (see core/schema.h).
//
// Every error names file:line:col (yaml-cpp marks are 0-based; we add 1). A missing key
// is reported at its parent's position. Unknown keys suggest the nearest valid one.
#pragma once

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>

#include "core/schema.h"

namespace tierflow::schema {

/// Flow collections (`[`, `{`) nested deeper than this are refused at the first bracket
/// past it, as JSON deeper than kMaxJsonDepth is.
inline constexpr size_t kMaxYamlDepth = 256;

/// Parses a YAML file; a syntax error becomes an InputError at its position.
YAML::Node load_yaml_file(const std::string& path);
/// Parses YAML text; `name` is used in positions.
YAML::Node load_yaml_text(const std::string& text, const std::string& name);

/// Where a document's aliases are written, by the path of the value each stands for:
/// "tiers[1]" (the second item of the top-level list `tiers`), "base.model". yaml-cpp gives
/// an alias's node the position of its anchor; this is the use's. Empty when the text has
/// no alias (or does not parse: load_yaml_text says why).
using AliasSites = std::map<std::string, SourcePos>;
AliasSites alias_sites(const std::string& text, const std::string& name);

/// Throws InputError at the second of two equal keys in any mapping under `node`
/// (yaml-cpp keeps both, and a lookup finds the first: the other would be ignored
/// unnoticed). Visits at most `budget` nodes (aliases are visited at each use).
void check_unique_keys(const YAML::Node& node, const std::string& file, size_t budget = 1'000'000);

/// The 1-based position of a node (line 0 when yaml-cpp has none).
SourcePos pos_of(const YAML::Node& node, const std::string& file);

/// "a mapping", "a list", "a scalar", "nothing".
std::string_view node_kind(const YAML::Node& node);

/// Throws unless `node` is a mapping; `what` names it ("tier 'hbm'").
void expect_map(const YAML::Node& node, const std::string& file, std::string_view what);
/// Throws unless `node` is a sequence.
void expect_list(const YAML::Node& node, const std::string& file, std::string_view what);

/// Reads the value of one field: a scalar, a list of scalars, or the cited form
/// {value: X, source: KEY, note: TEXT}. Fills `origin` with position and citation.
Input read_input(const YAML::Node& value, const SourcePos& key_pos, const std::string& file,
                 std::string_view key, std::string_view what, ValueType type, Origin& origin);

/// Reads a top-level `sources:` mapping (citation key -> text) into `out`.
void read_sources(const YAML::Node& node, std::map<std::string, std::string>& out,
                  const std::string& file);

/// The scalar text of `map[key]` if present (used to name an object before reading it).
std::string peek_scalar(const YAML::Node& map, const char* key);

/// A top-level key the file's reader ignores: `x-` and a name, a place to define YAML
/// anchors for later aliases and merges (`x-pcie: &pcie {kind: pcie, duplex: full}`).
inline bool is_extension_key(std::string_view key) {
  return key.size() > 2 && key.starts_with("x-");
}

/// How a mapping's entry came to be in it: written there, through an alias (`key: *anchor`:
/// its value is written before its key) or merged (`<<: *defaults`: its key is written
/// before the mapping).
enum class Reached { kInPlace, kAlias, kMerge };
Reached reached(const YAML::Node& map, const YAML::Node& key, const YAML::Node& value);

/// An error about an entry that came through an alias or a merge, moved to where the mapping
/// uses it (`at`: the key, or the mapping), with where the text is written.
InputError at_use_site(const InputError& e, Reached how, const SourcePos& at, std::string_view key);

/// How a mapping's entry got there, and where the mapping uses it: its key, or for a merged
/// entry the mapping (the merged key is written elsewhere).
struct EntryUse {
  Reached how = Reached::kInPlace;
  SourcePos at;
  [[nodiscard]] bool moved() const { return how != Reached::kInPlace; }
};
EntryUse entry_use(const YAML::Node& map, const YAML::Node& key, const YAML::Node& value,
                   const std::string& file);

/// Runs `read` for one entry; an InputError about an entry that came through an alias or a
/// merge is moved to its use (at_use_site): the anchor may belong to another object.
template <class F>
void read_entry(const EntryUse& use, std::string_view key, F&& read) {
  if (!use.moved()) return read();
  try {
    read();
  } catch (const InputError& e) {
    throw at_use_site(e, use.how, use.at, key);
  }
}

/// Places the fields of `o` whose keys start with `prefix` at `at` (with no prefix, the
/// object too): an object or a group that came whole through an alias is where it is used,
/// for the checks after reading.
void place_fields(Origins& o, const SourcePos& at, std::string_view prefix = "");

/// Applies every field's declared default.
template <class Obj>
void apply_defaults(Obj& obj, const Schema<Obj>& s) {
  for (const auto& f : s.fields) {
    if (!f.default_text.empty()) f.set(obj, Input{{f.default_text}, {}, SourcePos{"<default>"}});
  }
}

/// Reads one object mapping into `obj`: defaults first, then each key the user wrote;
/// unknown or duplicate keys, wrong shapes and bad values are errors; required keys
/// that are missing are reported at the mapping's position.
template <class Obj>
void read_object(const YAML::Node& node, const Schema<Obj>& s, Obj& obj, const std::string& file,
                 const std::string& what, const std::string& prefix = "") {
  expect_map(node, file, what);
  if (prefix.empty()) {
    obj.origins.pos = pos_of(node, file);
    apply_defaults(obj, s);
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const SourcePos key_pos = pos_of(it->first, file);
    if (!it->first.IsScalar()) {
      throw InputError::at(key_pos, "keys of {} must be plain words", what);
    }
    const std::string key = it->first.Scalar();
    const std::string full = prefix.empty() ? key : prefix + "." + key;
    if (!seen.insert(key).second) {
      throw InputError::at(key_pos, "duplicate key '{}' in {}", full, what);
    }
    const EntryUse use = entry_use(node, it->first, it->second, file);
    read_entry(use, key, [&] {
      if (s.is_group(full)) {
        read_object(it->second, s, obj, file, what + " " + key, full);
        if (use.moved()) place_fields(obj.origins, use.at, full + ".");
        return;
      }
      const Field<Obj>* f = s.find(full);
      if (f == nullptr) {
        const auto keys = s.keys_under(prefix);
        throw InputError::at(key_pos, "unknown key '{}' in {}{}", full, what,
                             did_you_mean(key, keys));
      }
      Origin origin;
      Input in = read_input(it->second, key_pos, file, full, what, f->type, origin);
      f->set(obj, in);
      origin.items = in.item_pos;
      if (use.moved()) origin.pos = use.at;
      obj.origins.fields[full] = std::move(origin);
    });
  }
  if (prefix.empty()) {
    for (const auto& f : s.fields) {
      if (f.required && obj.origins.find(f.key) == nullptr) {
        throw InputError::at(obj.origins.pos, "{} is missing required key '{}' ({})", what, f.key,
                             f.description);
      }
    }
  }
}

/// One `--set PATH=VALUE` argument, split, with the positions of both halves
/// (`--set:N:COL`, N counting the --set arguments from 1).
struct SetArg {
  std::string path;
  std::string value;
  SourcePos key_pos;
  SourcePos value_pos;
};
/// Splits argument number `index` (1-based) of `flag` (positions are `FLAG:N:COL`: the CLI's
/// `--set`, `--model-set`, Python's `set`); `example` shows the expected form.
SetArg split_set(const std::string& arg, int index, std::string_view example,
                 std::string_view flag = "--set");

/// The value of an override for a list field: `[a, b]` or `a,b`, each id with its column.
Input list_override(const Input& in);

/// Applies `--set KEY=VALUE` to one object: the key must be declared (an unknown key is
/// an error with a suggestion, never a new field).
template <class Obj>
void apply_override(Obj& obj, const Schema<Obj>& s, const std::string& key,
                    const SourcePos& key_pos, const Input& in, const std::string& what) {
  const Field<Obj>* f = s.find(key);
  if (f == nullptr) {
    std::vector<std::string> keys;
    for (const auto& fld : s.fields) keys.push_back(fld.key);
    // With no close key, the keys it has (`size` is no typo of `capacity`).
    const std::string hint = did_you_mean(key, keys);
    throw InputError::at(
        key_pos, "unknown key '{}' in {}{}", key, what,
        hint.empty() ? fmt::format(" (its keys: {})", fmt::join(keys, ", ")) : hint);
  }
  const bool list = f->type == ValueType::kRefPair || f->type == ValueType::kRefList;
  f->set(obj, list ? list_override(in) : in);
  obj.origins.fields[key] = Origin{in.pos, "--set", {}};
}

}  // namespace tierflow::schema
