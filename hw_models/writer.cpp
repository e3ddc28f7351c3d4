#include "hw_models/writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "core/json_writer.h"
#include "hw_models/params.h"

namespace tierflow::hw {
namespace {

/// Words YAML reads as something other than text.
bool special_word(std::string_view s) {
  static constexpr std::array<std::string_view, 11> kWords = {
      "true", "false", "yes", "no", "on", "off", "null", "y", "n", "~", ""};
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(kWords.begin(), kWords.end(), lower) != kWords.end();
}

/// Text as a double-quoted YAML scalar: YAML's double-quoted style takes JSON's escapes.
std::string quoted(std::string_view s) { return json_string(s); }

/// Text plain when YAML reads it back as the same text, else quoted.
std::string scalar(std::string_view s) {
  const bool plain = !s.empty() && !special_word(s) &&
                     std::isalnum(static_cast<unsigned char>(s[0])) &&
                     std::all_of(s.begin(), s.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                              c == '-' || c == '/' || c == '+';
                     });
  return plain ? std::string(s) : quoted(s);
}

template <class Obj>
class ObjectWriter {
 public:
  ObjectWriter(const Obj& o, const schema::Schema<Obj>& s, const Topology& t)
      : o_(o), s_(s), t_(t) {}

  /// The lines of the fields under `prefix`, each indented by `indent` spaces.
  [[nodiscard]] std::string body(const std::string& prefix, int indent) const {
    std::string y;
    const std::string pad(static_cast<size_t>(indent), ' ');
    for (const std::string& head : s_.keys_under(prefix)) {
      const std::string full = prefix.empty() ? head : prefix + "." + head;
      if (s_.is_group(full)) {
        const std::string inner = body(full, indent + 2);
        if (!inner.empty()) y += fmt::format("{}{}:\n{}", pad, head, inner);
        continue;
      }
      const schema::Field<Obj>* f = s_.find(full);
      const std::string text = f->get(o_);
      const schema::Origin* origin = o_.origins.find(full);
      // A number is written when it was given (a derived one, such as a write latency
      // that defaults to the read latency, was not); text, names and choices also when
      // they differ from their default.
      const bool given = origin != nullptr || f->required;
      if (text.empty() || (!given && (schema::is_number(f->type) || text == f->default_text))) {
        continue;
      }
      y += fmt::format("{}{}: {}\n", pad, head, value(*f, text, origin));
    }
    return y;
  }

 private:
  [[nodiscard]] std::string value(const schema::Field<Obj>& f, const std::string& text,
                                  const schema::Origin* origin) const {
    using schema::ValueType;
    const bool raw =
        schema::is_number(f.type) || f.type == ValueType::kRefPair || f.type == ValueType::kRefList;
    const std::string v = raw ? text : scalar(text);
    if (origin == nullptr) return v;
    const bool cited = !origin->source.empty() && t_.sources.count(origin->source) != 0;
    if (!cited && origin->note.empty()) return v;
    std::string out = "{value: " + v;
    if (cited) out += ", source: " + scalar(origin->source);
    if (!origin->note.empty()) out += ", note: " + quoted(origin->note);
    return out + "}";
  }

  const Obj& o_;
  const schema::Schema<Obj>& s_;
  const Topology& t_;
};

/// A list of objects under `key`, each as a `- ` item; nothing when the list is empty.
template <class Obj>
void write_list(std::string& y, std::string_view key, const std::vector<Obj>& list,
                const schema::Schema<Obj>& s, const Topology& t) {
  if (list.empty()) return;
  y += fmt::format("\n{}:\n", key);
  for (const Obj& o : list) {
    const std::string b = ObjectWriter<Obj>(o, s, t).body("", 4);
    y += "  - " + b.substr(4);
  }
}

}  // namespace

void cite(schema::Origins& origins, const std::string& key, const std::string& source,
          const std::string& note) {
  schema::Origin& o = origins.fields[key];
  o.source = source;
  o.note = note;
}

std::string topology_yaml(const Topology& t, const std::vector<std::string>& header) {
  std::string y;
  for (const std::string& line : header) y += line.empty() ? "#\n" : "# " + line + "\n";
  y += fmt::format("tierflow: {}\n", kFormatTag);
  y += fmt::format("name: {}\n", scalar(t.name));
  if (!t.description.empty()) y += fmt::format("description: {}\n", scalar(t.description));
  if (!t.sources.empty()) {
    y += "\nsources:\n";
    for (const auto& [key, text] : t.sources) y += fmt::format("  {}: {}\n", key, quoted(text));
  }
  const std::string system = ObjectWriter<System>(t.system, system_schema(), t).body("", 2);
  if (!system.empty()) y += "\nsystem:\n" + system;
  write_list(y, "devices", t.devices, device_schema(), t);
  write_list(y, "tiers", t.tiers, tier_schema(), t);
  write_list(y, "switches", t.switches, switch_schema(), t);
  write_list(y, "links", t.links, link_schema(), t);
  write_list(y, "routes", t.pins, route_schema(), t);
  return y;
}

}  // namespace tierflow::hw
