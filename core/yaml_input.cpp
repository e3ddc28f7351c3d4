#include "core/yaml_input.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "core/json_reader.h"
#include "core/utf8.h"

namespace tierflow::schema {

SourcePos pos_of(const YAML::Node& node, const std::string& file) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0 || m.column < 0) return SourcePos{file, 0, 0};
  return SourcePos{file, m.line + 1, m.column + 1};
}

namespace {
bool before(const YAML::Mark& a, const YAML::Mark& b) {
  return a.line >= 0 && b.line >= 0 &&
         (a.line < b.line || (a.line == b.line && a.column < b.column));
}

/// Nodes already walked, by identity: an alias is the node it names, so a walk that meets
/// one again (an alias used many times, or one inside the mapping it names) does not walk
/// it again. Hashed by the node's position in the text, then compared by identity.
class Walked {
 public:
  /// False when `n` was walked already.
  bool insert(const YAML::Node& n) {
    std::vector<YAML::Node>& same = by_pos_[n.Mark().pos];
    for (const YAML::Node& m : same) {
      if (m.is(n)) return false;
    }
    same.push_back(n);
    return true;
  }

 private:
  std::unordered_map<int, std::vector<YAML::Node>> by_pos_;
};
}  // namespace

Reached reached(const YAML::Node& map, const YAML::Node& key, const YAML::Node& value) {
  // An anchor is written before its aliases, and a key before its value.
  if (before(key.Mark(), map.Mark())) return Reached::kMerge;
  if (value.IsDefined() && !value.IsNull() && before(value.Mark(), key.Mark())) {
    return Reached::kAlias;
  }
  return Reached::kInPlace;
}

InputError at_use_site(const InputError& e, Reached how, const SourcePos& at,
                       std::string_view key) {
  if (e.pos() == at) return e;
  const std::string written = e.pos().line > 0 ? e.pos().str() : std::string("the anchor");
  return InputError(
      at, how == Reached::kMerge
              ? fmt::format("{} ('{}' merged by '<<', written at {})", e.message(), key, written)
              : fmt::format("{} (through an alias: written at {})", e.message(), written));
}

EntryUse entry_use(const YAML::Node& map, const YAML::Node& key, const YAML::Node& value,
                   const std::string& file) {
  const Reached how = reached(map, key, value);
  return EntryUse{how, pos_of(how == Reached::kMerge ? map : key, file)};
}

void place_fields(Origins& o, const SourcePos& at, std::string_view prefix) {
  if (prefix.empty()) o.pos = at;
  for (auto& [field, origin] : o.fields) {
    if (field.starts_with(prefix)) origin.pos = at;
  }
}

std::string_view node_kind(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return "a scalar";
}

namespace {

/// Calls `at(c, pos)` for each flow bracket ('[', ']', '{', '}') of `text` outside quoted
/// text and comments, in order, until it returns false.
template <class At>
void for_each_bracket(const std::string& text, const std::string& name, At at) {
  int line = 1;
  int col = 0;
  char quote = 0;
  bool comment = false;
  char prev = '\n';
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++col;
    if (c == '\n') {
      ++line;
      col = 0;
      comment = false;
      prev = c;
      continue;
    }
    if (comment) continue;
    if (quote != 0) {
      if (quote == '"' && c == '\\') {
        ++i;
        ++col;
      } else if (c == quote) {
        quote = 0;
      }
    } else if (c == '#' && (prev == ' ' || prev == '\t' || prev == '\n')) {
      comment = true;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == ']' || c == '{' || c == '}') {
      if (!at(c, SourcePos{name, line, col})) return;
    }
    prev = c;
  }
}

/// The position of the innermost flow bracket (`open`) that is never closed, skipping
/// quoted text and comments. yaml-cpp reports such errors where it gave up (often the end
/// of the file); the opening bracket is where the user must look.
std::optional<SourcePos> unclosed_bracket(const std::string& text, char open,
                                          const std::string& name) {
  const char close = open == '[' ? ']' : '}';
  std::vector<SourcePos> stack;
  for_each_bracket(text, name, [&](char c, const SourcePos& pos) {
    if (c == open) {
      stack.push_back(pos);
    } else if (c == close && !stack.empty()) {
      stack.pop_back();
    }
    return true;
  });
  if (stack.empty()) return std::nullopt;
  return stack.back();
}

/// The first flow bracket that opens a collection nested deeper than kMaxYamlDepth.
std::optional<SourcePos> too_deep(const std::string& text, const std::string& name) {
  std::optional<SourcePos> out;
  size_t depth = 0;
  for_each_bracket(text, name, [&](char c, const SourcePos& pos) {
    if (c == '[' || c == '{') {
      if (++depth > kMaxYamlDepth) {
        out = pos;
        return false;
      }
    } else if (depth > 0) {
      --depth;
    }
    return true;
  });
  return out;
}

/// Where a document starts, and where its first node is; nothing else.
class FirstEvent : public YAML::EventHandler {
 public:
  YAML::Mark start = YAML::Mark::null_mark();
  YAML::Mark node = YAML::Mark::null_mark();

  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override { first(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override { first(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                const std::string& /*value*/) override {
    first(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& /*tag*/,
                       YAML::anchor_t /*anchor*/, YAML::EmitterStyle::value /*style*/) override {
    first(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                  YAML::EmitterStyle::value /*style*/) override {
    first(mark);
  }
  void OnMapEnd() override {}

 private:
  void first(const YAML::Mark& mark) {
    if (node.is_null()) node = mark;
  }
};

/// YAML's merge key, which yaml-cpp 0.7 reads as a plain key named '<<' (YAML 1.1's
/// merge type): `<<: *defaults` or `<<: [*a, *b]` adds each merged mapping's entries to the
/// mapping it is written in, unless that mapping has the key already (its own keys win,
/// then the earlier merged mapping's), and '<<' goes. The added entries are the anchor's
/// own nodes, with their positions. `depth` and `budget` bound hostile nesting and alias
/// fan-out: a '<<' past them is left, and read as the unknown key it then is.
void expand_merges(YAML::Node node, const std::string& file, int depth, size_t& budget,
                   Walked& walked) {
  if (depth > 200 || budget == 0) return;
  --budget;
  if (!node.IsSequence() && !node.IsMap()) return;
  // Each mapping once: its merges are expanded the first time (a mapping that merges
  // itself, or an alias met again, adds nothing then).
  if (!walked.insert(node)) return;
  if (node.IsSequence()) {
    for (YAML::Node item : node) expand_merges(item, file, depth + 1, budget, walked);
    return;
  }
  YAML::Node merge_key, merged;
  bool merges = false;  // a default-constructed node counts as defined
  std::set<std::string> have;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    if (it->first.Scalar() == "<<" && it->first.Tag() != "!") {
      merge_key = it->first;
      merged = it->second;
      merges = true;
    } else {
      have.insert(it->first.Scalar());
    }
  }
  if (merges) {
    std::vector<YAML::Node> sources;
    if (merged.IsMap()) {
      sources.push_back(merged);
    } else if (merged.IsSequence()) {
      for (YAML::Node m : merged) {
        if (!m.IsMap()) {
          throw InputError::at(pos_of(m, file), "'<<' merges mappings; this item of its list is {}",
                               node_kind(m));
        }
        sources.push_back(m);
      }
    } else {
      throw InputError::at(
          pos_of(merged.IsDefined() && !merged.IsNull() ? merged : merge_key, file),
          "'<<' merges a mapping or a list of mappings (e.g. '<<: *defaults'), "
          "got {}",
          node_kind(merged));
    }
    node.remove(merge_key);
    for (YAML::Node m : sources) {
      expand_merges(m, file, depth + 1, budget, walked);
      for (auto it = m.begin(); it != m.end(); ++it) {
        if (it->first.IsScalar() && !have.insert(it->first.Scalar()).second) continue;
        node.force_insert(it->first, it->second);
      }
    }
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    expand_merges(it->second, file, depth + 1, budget, walked);
  }
}

/// Records where each alias stands, by its value's path (see alias_sites()).
class AliasFinder : public YAML::EventHandler {
 public:
  AliasFinder(const std::string& file, AliasSites& out) : file_(file), out_(out) {}

  void OnDocumentStart(const YAML::Mark& /*mark*/) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& /*mark*/, YAML::anchor_t /*anchor*/) override { place(nullptr); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override {
    std::string path = place(nullptr);
    if (!path.empty() && path.front() != '?') {  // the root or a key is no value's place
      out_.emplace(std::move(path), SourcePos{file_, mark.line + 1, mark.column + 1});
    }
  }
  void OnScalar(const YAML::Mark& /*mark*/, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                const std::string& value) override {
    place(&value);
  }
  void OnSequenceStart(const YAML::Mark& /*mark*/, const std::string& /*tag*/,
                       YAML::anchor_t /*anchor*/, YAML::EmitterStyle::value /*style*/) override {
    stack_.push_back(Frame{place(nullptr), false});
  }
  void OnSequenceEnd() override { stack_.pop_back(); }
  void OnMapStart(const YAML::Mark& /*mark*/, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                  YAML::EmitterStyle::value /*style*/) override {
    stack_.push_back(Frame{place(nullptr), true});
  }
  void OnMapEnd() override { stack_.pop_back(); }

 private:
  struct Frame {
    std::string path;
    bool map = false;
    bool key_next = true;  ///< a mapping: the next node is a key
    size_t index = 0;      ///< a list: the next item's
    std::string key;       ///< a mapping: the key of the value to come
  };

  /// Places one node in its container: its path ("" for the root; "?" under a key that is
  /// itself a list or a mapping, which names no value).
  std::string place(const std::string* scalar) {
    if (stack_.empty()) return "";
    Frame& f = stack_.back();
    if (!f.map) return fmt::format("{}[{}]", f.path, f.index++);
    if (f.key_next) {
      f.key_next = false;
      f.key = scalar != nullptr ? *scalar : "?";
      return "?";
    }
    f.key_next = true;
    return f.path.empty() ? f.key : f.path + "." + f.key;
  }

  const std::string& file_;
  AliasSites& out_;
  std::vector<Frame> stack_;
};

}  // namespace

AliasSites alias_sites(const std::string& text, const std::string& name) {
  AliasSites out;
  if (text.find('*') == std::string::npos) return out;
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    AliasFinder finder(name, out);
    parser.HandleNextDocument(finder);
  } catch (const YAML::Exception&) {
    out.clear();  // load_yaml_text reports the syntax error
  }
  return out;
}

YAML::Node load_yaml_text(const std::string& text, const std::string& name) {
  // YAML is Unicode text (YAML 1.2 §5.2): a byte that starts no UTF-8 sequence would be
  // carried into names and written back out as it is.
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    throw InputError(text_position(text, bad, name),
                     fmt::format("the byte 0x{:02X} is not UTF-8 text; YAML files are UTF-8",
                                 static_cast<unsigned char>(text[bad])));
  }
  if (const auto deep = too_deep(text, name)) {
    throw InputError(*deep, fmt::format("YAML nested deeper than {} levels", kMaxYamlDepth));
  }
  try {
    YAML::Node doc = YAML::Load(text);
    // Is there a second document? Not YAML::LoadAll: yaml-cpp 0.7 reads a token that cannot
    // start a node (a ',' at the start of a line) as an empty document without consuming
    // it, so LoadAll never returns. Two documents at most are read here.
    std::istringstream in(text);
    YAML::Parser parser(in);
    FirstEvent first;
    FirstEvent second;
    if (parser.HandleNextDocument(first) && parser.HandleNextDocument(second)) {
      const YAML::Mark& m = second.node.is_null() ? second.start : second.node;
      const SourcePos pos{name, m.line + 1, m.column + 1};
      const auto at = static_cast<size_t>(std::max(m.pos, 0));
      if (text.compare(static_cast<size_t>(std::max(second.start.pos, 0)), 3, "---") == 0) {
        throw InputError(pos,
                         "a file holds one YAML document; remove the second one (after '---')");
      }
      throw InputError::at(pos, "malformed YAML: '{}' cannot start a key, a value or a list item",
                           at < text.size() ? text.substr(at, 1) : std::string("end of file"));
    }
    size_t budget = 1'000'000;
    Walked walked;
    expand_merges(doc, name, 0, budget, walked);
    return doc;
  } catch (const YAML::DeepRecursion& e) {
    // Block collections nested past yaml-cpp's own limit (flow ones are caught above).
    throw InputError(SourcePos{name, e.mark.line + 1, e.mark.column + 1},
                     "YAML nested deeper than its parser reads");
  } catch (const YAML::ParserException& e) {
    SourcePos pos{name, e.mark.line + 1, e.mark.column + 1};
    std::string msg = "malformed YAML: " + e.msg;
    for (char open : {'[', '{'}) {
      const bool seq = open == '[';
      if (e.msg.find(seq ? "end of sequence flow not found" : "end of map flow not found") ==
          std::string::npos) {
        continue;
      }
      if (auto p = unclosed_bracket(text, open, name)) {
        pos = *p;
        msg += fmt::format(": this '{}' is never closed", open);
      }
    }
    if (e.msg == "illegal map value") {
      msg += " (check this line's indentation, or quote a value that contains ': ')";
    }
    throw InputError(pos, msg);
  } catch (const YAML::Exception& e) {
    throw InputError(SourcePos{name, e.mark.line + 1, e.mark.column + 1},
                     "malformed YAML: " + e.msg);
  }
}

YAML::Node load_yaml_file(const std::string& path) {
  return load_yaml_text(read_text_file(path), path);
}

void expect_map(const YAML::Node& node, const std::string& file, std::string_view what) {
  if (!node.IsMap()) {
    throw InputError::at(pos_of(node, file), "expected a mapping for {}, got {}", what,
                         node_kind(node));
  }
}

void expect_list(const YAML::Node& node, const std::string& file, std::string_view what) {
  if (!node.IsSequence()) {
    throw InputError::at(pos_of(node, file), "expected a list for {}, got {}", what,
                         node_kind(node));
  }
}

void read_sources(const YAML::Node& node, std::map<std::string, std::string>& out,
                  const std::string& file) {
  expect_map(node, file, "sources");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const SourcePos kp = pos_of(it->first, file);
    if (!it->first.IsScalar() || !it->second.IsScalar()) {
      throw InputError::at(kp, "each entry of 'sources' must be KEY: \"citation text\"");
    }
    if (!out.emplace(it->first.Scalar(), it->second.Scalar()).second) {
      throw InputError::at(kp, "duplicate source key '{}'", it->first.Scalar());
    }
  }
}

SetArg split_set(const std::string& arg, int index, std::string_view example,
                 std::string_view flag) {
  const std::string file(flag);
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError::at(SourcePos{file, index, 1}, "expected {} (e.g. {}), got '{}'",
                         example.substr(0, example.find(' ')),
                         example.substr(example.find(' ') + 1), arg);
  }
  return SetArg{arg.substr(0, eq), arg.substr(eq + 1), SourcePos{file, index, 1},
                SourcePos{file, index, static_cast<int>(eq) + 2}};
}

void check_unique_keys(const YAML::Node& node, const std::string& file, size_t budget) {
  std::vector<YAML::Node> todo{node};
  Walked walked;
  while (!todo.empty() && budget > 0) {
    const YAML::Node n = todo.back();
    todo.pop_back();
    --budget;
    if ((n.IsSequence() || n.IsMap()) && !walked.insert(n)) continue;
    if (n.IsSequence()) {
      for (const YAML::Node& item : n) todo.push_back(item);
    } else if (n.IsMap()) {
      std::set<std::string> seen;
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (it->first.IsScalar() && !seen.insert(it->first.Scalar()).second) {
          throw InputError::at(pos_of(it->first, file), "duplicate key '{}'", it->first.Scalar());
        }
        todo.push_back(it->second);
      }
    }
  }
}

Input list_override(const Input& in) {
  if (in.items.size() != 1) return in;
  const std::string& text = in.items.front();
  size_t begin = 0, end = text.size();
  if (end >= 2 && text.front() == '[' && text.back() == ']') {
    ++begin;
    --end;
  }
  Input out{{}, {}, in.pos};
  while (begin <= end) {
    const size_t comma = std::min(text.find(',', begin), end);
    size_t a = begin, b = comma;
    while (a < b && std::isspace(static_cast<unsigned char>(text[a])) != 0) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(text[b - 1])) != 0) --b;
    if (a < b || comma < end) {  // `[]` and `` are no items; `a,,b` has an empty one
      out.items.push_back(text.substr(a, b - a));
      SourcePos p = in.pos;
      p.col += static_cast<int>(a);
      out.item_pos.push_back(p);
    }
    begin = comma + 1;
  }
  return out;
}

std::string peek_scalar(const YAML::Node& map, const char* key) {
  if (!map.IsMap()) return {};
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key && it->second.IsScalar()) {
      return it->second.Scalar();
    }
  }
  return {};
}

namespace {

std::string_view expected_text(ValueType type) {
  switch (type) {
    case ValueType::kBytes:
      return "a byte size such as 80GiB";
    case ValueType::kBandwidth:
      return "a bandwidth such as 64GB/s";
    case ValueType::kDuration:
      return "a duration such as 1.5us";
    case ValueType::kFlopRate:
      return "a rate such as 989TFLOP/s";
    case ValueType::kInt:
      return "an integer";
    case ValueType::kFraction:
      return "a fraction in (0, 1]";
    case ValueType::kRefPair:
      return "a list of two ids such as [hbm, ddr]";
    case ValueType::kRefList:
      return "a list of ids";
    default:
      return "a single value";
  }
}

bool is_list_type(ValueType t) {
  return t == ValueType::kRefPair || t == ValueType::kRefList;
}

}  // namespace

Input read_input(const YAML::Node& value, const SourcePos& key_pos, const std::string& file,
                 std::string_view key, std::string_view what, ValueType type, Origin& origin) {
  Input in;
  in.pos = value.IsNull() || !value.IsDefined() ? key_pos : pos_of(value, file);
  if (in.pos.line == 0) in.pos = key_pos;
  origin.pos = in.pos;
  if (!value.IsDefined() || value.IsNull()) {
    throw InputError::at(key_pos, "missing value for '{}' in {}: expected {}", key, what,
                         expected_text(type));
  }
  if (value.IsMap() && !is_list_type(type)) {
    // The cited form: {value: X, source: KEY, note: TEXT}.
    YAML::Node v;
    bool has_value = false;  // a default-constructed node counts as defined
    std::set<std::string> seen;
    static const std::vector<std::string> kCited = {"value", "source", "note"};
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : std::string();
      const SourcePos kp = pos_of(it->first, file);
      if (!seen.insert(k).second) {
        throw InputError::at(kp, "duplicate key '{}' in the value of '{}'", k, key);
      }
      if (k == "value") {
        v = it->second;
        has_value = true;
      } else if (k == "source" || k == "note") {
        if (!it->second.IsScalar()) {
          throw InputError::at(pos_of(it->second, file), "'{}' of '{}' must be text", k, key);
        }
        (k == "source" ? origin.source : origin.note) = it->second.Scalar();
        if (k == "source") origin.source_pos = pos_of(it->second, file);
      } else {
        throw InputError::at(kp,
                             "unknown key '{}' in the value of '{}' (a cited value is written "
                             "{{value: ..., source: KEY, note: TEXT}}){}",
                             k, key, did_you_mean(k, kCited));
      }
    }
    if (!has_value) {
      throw InputError::at(in.pos, "the value of '{}' in {} has no 'value' key", key, what);
    }
    if (v.IsMap()) {
      throw InputError::at(pos_of(v, file),
                           "the 'value' of '{}' in {} must be a plain value, "
                           "not a mapping",
                           key, what);
    }
    Origin inner;
    Input got = read_input(v, pos_of(v, file), file, key, what, type, inner);
    origin.pos = got.pos;
    return got;
  }
  if (value.IsSequence()) {
    if (!is_list_type(type)) {
      throw InputError::at(in.pos, "'{}' in {} expects {}, got a list", key, what,
                           expected_text(type));
    }
    for (const auto& item : value) {
      if (!item.IsScalar()) {
        throw InputError::at(pos_of(item, file), "items of '{}' in {} must be ids, got {}", key,
                             what, node_kind(item));
      }
      in.items.push_back(item.Scalar());
      in.item_pos.push_back(pos_of(item, file));
    }
    return in;
  }
  if (value.IsMap()) {
    throw InputError::at(in.pos, "'{}' in {} expects {}, got a mapping", key, what,
                         expected_text(type));
  }
  if (is_list_type(type)) {
    throw InputError::at(in.pos, "'{}' in {} expects {}, got a scalar", key, what,
                         expected_text(type));
  }
  in.items.push_back(value.Scalar());
  in.item_pos.push_back(in.pos);
  return in;
}

}  // namespace tierflow::schema
