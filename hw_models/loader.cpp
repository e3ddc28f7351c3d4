#include "hw_models/loader.h"

#include <algorithm>
#include <limits>
#include <set>

#include "core/io.h"
#include "core/yaml_input.h"
#include "hw_models/params.h"
#include "hw_models/routes.h"

namespace tierflow::hw {
namespace {

using schema::Input;
using schema::Origins;

std::string label(std::string_view what, const std::string& id, size_t index) {
  return id.empty() ? fmt::format("{} #{}", what, index + 1) : fmt::format("{} '{}'", what, id);
}

template <class Obj>
void read_list(const YAML::Node& node, const schema::Schema<Obj>& s, std::vector<Obj>& out,
               const std::string& file, const schema::AliasSites& aliases) {
  schema::expect_list(node, file, s.list_key);
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    Obj obj;
    const std::string what = label(s.object_name, schema::peek_scalar(item, "id"), i);
    const auto alias = aliases.find(fmt::format("{}[{}]", s.list_key, i));
    // A whole item written as an alias (`- *gpu`) is where the list uses it, every field
    // with it (the anchor may be another item).
    const schema::EntryUse use = alias == aliases.end()
                                     ? schema::EntryUse{}
                                     : schema::EntryUse{schema::Reached::kAlias, alias->second};
    schema::read_entry(use, "", [&] { schema::read_object(item, s, obj, file, what); });
    if (use.moved()) schema::place_fields(obj.origins, use.at);
    out.push_back(std::move(obj));
  }
}

// ---- --set overrides ----

using schema::SetArg;

template <class Obj>
bool try_set_in_list(std::vector<Obj>& list, const schema::Schema<Obj>& s, const SetArg& a,
                     std::string_view rest) {
  const auto dot = rest.find('.');
  if (dot == std::string_view::npos) {
    throw InputError::at(a.key_pos, "'{}' names no field: write {}.ID.KEY", a.path, s.list_key);
  }
  const std::string id(rest.substr(0, dot));
  const std::string key(rest.substr(dot + 1));
  if (key == "id") {
    SourcePos key_pos = a.key_pos;
    key_pos.col += static_cast<int>(a.path.size() - key.size());
    throw InputError::at(key_pos,
                         "'{}': an id is not changed by an override (what names it would "
                         "no longer find it): edit the file",
                         a.path);
  }
  std::vector<std::string> ids;
  for (auto& obj : list) {
    ids.push_back(obj.id);
    if (obj.id == id) {
      SourcePos key_pos = a.key_pos;
      key_pos.col += static_cast<int>(a.path.size() - key.size());
      schema::apply_override(obj, s, key, key_pos, Input{{a.value}, {a.value_pos}, a.value_pos},
                             label(s.object_name, id, 0));
      return true;
    }
  }
  SourcePos id_pos = a.key_pos;
  id_pos.col += static_cast<int>(a.path.size() - rest.size());
  throw InputError::at(id_pos, "'{}': no {} with id '{}'{}", a.path, s.object_name, id,
                       did_you_mean(id, ids));
}

void apply_overrides(Topology& t, const std::vector<std::string>& overrides,
                     std::string_view flag) {
  for (size_t i = 0; i < overrides.size(); ++i) {
    const SetArg a = schema::split_set(overrides[i], static_cast<int>(i) + 1,
                                       "PATH=VALUE tiers.ddr.capacity=2TiB", flag);
    const auto dot = a.path.find('.');
    const std::string head = a.path.substr(0, dot);
    const std::string rest = dot == std::string::npos ? std::string() : a.path.substr(dot + 1);
    if (head == "name" && rest.empty()) {
      t.name = schema::parse_name(Input{{a.value}, {}, a.value_pos}, "name");
    } else if (head == "description" && rest.empty()) {
      t.description = a.value;
    } else if (head == "system") {
      SourcePos key_pos = a.key_pos;
      key_pos.col += static_cast<int>(a.path.size() - rest.size());
      schema::apply_override(t.system, system_schema(), rest, key_pos,
                             Input{{a.value}, {a.value_pos}, a.value_pos}, "system");
    } else if (head == "devices") {
      try_set_in_list(t.devices, device_schema(), a, rest);
    } else if (head == "tiers") {
      try_set_in_list(t.tiers, tier_schema(), a, rest);
    } else if (head == "switches") {
      try_set_in_list(t.switches, switch_schema(), a, rest);
    } else if (head == "links") {
      try_set_in_list(t.links, link_schema(), a, rest);
    } else {
      static const std::vector<std::string> kHeads = {"name",  "description", "system", "devices",
                                                      "tiers", "switches",    "links"};
      // An object's id without its list (`hbm.capacity`): the path it meant.
      std::string hint = did_you_mean(head, kHeads);
      const auto in = [&](const auto& list, std::string_view name) {
        for (const auto& x : list) {
          if (x.id == head) hint = fmt::format("; did you mean '{}.{}'?", name, a.path);
        }
      };
      in(t.tiers, "tiers");
      in(t.devices, "devices");
      in(t.links, "links");
      in(t.switches, "switches");
      throw InputError::at(a.key_pos, "unknown path '{}'{}{}", a.path, hint,
                           head == "routes" ? " (route pins are edited in the file)" : "");
    }
  }
}

// ---- validation ----

/// The citation key that covers field `key` of an object whose value cites none: the
/// object's own `source`.
template <class Obj>
const std::string& covering_source(const Obj& obj, std::string_view /*key*/) {
  return obj.source;
}

/// The host CPU's fields (`cpu.*`) are covered by the CPU's `source`, else the system's.
const std::string& covering_source(const System& s, std::string_view key) {
  const bool cpu = key.substr(0, 4) == "cpu.";
  return cpu && !s.cpu.source.empty() ? s.cpu.source : s.source;
}

/// The host CPU field given first (by position); nullptr when none was.
const schema::Origin* first_cpu_field(const System& s) {
  const schema::Origin* first = nullptr;
  for (const auto& [key, origin] : s.origins.fields) {
    if (key.substr(0, 4) != "cpu.") continue;
    if (first == nullptr ||
        std::pair(origin.pos.line, origin.pos.col) < std::pair(first->pos.line, first->pos.col)) {
      first = &origin;
    }
  }
  return first;
}

class Validator {
 public:
  Validator(Topology& t, const LoadOptions& o) : t_(t), opt_(o) {
    for (const auto& [k, v] : t.sources) source_keys_.push_back(k);
  }

  void run() {
    check_unique_ids();
    check_sources(t_.system, system_schema(), "system");
    for (auto& d : t_.devices) check_sources(d, device_schema(), label("device", d.id, 0));
    for (auto& x : t_.tiers) check_sources(x, tier_schema(), label("tier", x.id, 0));
    for (auto& x : t_.switches) check_sources(x, switch_schema(), label("switch", x.id, 0));
    for (auto& x : t_.links) check_sources(x, link_schema(), label("link", x.id, 0));
    if (t_.system.hosts % t_.system.supernodes != 0) {
      throw InputError::at(t_.system.origins.pos_of("supernodes"),
                           "system: {} hosts do not divide evenly over {} supernodes",
                           t_.system.hosts, t_.system.supernodes);
    }
    for (auto& d : t_.devices) check_device(d);
    for (auto& x : t_.tiers) check_tier(x);
    for (auto& x : t_.links) check_link(x);
    check_host_cpu();
    check_switches_used();
  }

 private:
  void check_unique_ids() {
    std::map<std::string, std::pair<SourcePos, std::string>> seen;
    auto add = [&](const std::string& id, const Origins& o, std::string_view what) {
      auto [it, fresh] = seen.emplace(id, std::pair(o.pos_of("id"), std::string(what)));
      if (!fresh) {
        throw InputError::at(o.pos_of("id"),
                             "duplicate id '{}': already used by the {} at line {} (ids must be "
                             "unique across devices, tiers, switches and links)",
                             id, it->second.second, it->second.first.line);
      }
    };
    for (const auto& d : t_.devices) add(d.id, d.origins, "device");
    for (const auto& x : t_.tiers) add(x.id, x.origins, "tier");
    for (const auto& x : t_.switches) add(x.id, x.origins, "switch");
    for (const auto& x : t_.links) add(x.id, x.origins, "link");
  }

  void check_source_key(const std::string& key, const SourcePos& pos) {
    if (key.empty() || key == "--set") return;
    if (t_.sources.count(key) == 0) {
      throw InputError::at(pos, "unknown source '{}': not defined under 'sources'{}", key,
                           did_you_mean(key, source_keys_));
    }
  }

  template <class Obj>
  void check_sources(const Obj& obj, const schema::Schema<Obj>& s, const std::string& what) {
    check_source_key(obj.source, obj.origins.pos_of("source"));
    // Report the first problem in file order, not in key order.
    std::vector<std::pair<std::string, schema::Origin>> fields(obj.origins.fields.begin(),
                                                               obj.origins.fields.end());
    std::stable_sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) {
      return std::pair(a.second.pos.line, a.second.pos.col) <
             std::pair(b.second.pos.line, b.second.pos.col);
    });
    for (const auto& [key, origin] : fields) {
      check_source_key(origin.source, origin.source_pos.line ? origin.source_pos : origin.pos);
      const auto* f = s.find(key);
      if (opt_.require_sources && f && schema::is_number(f->type) && origin.source.empty() &&
          covering_source(obj, key).empty()) {
        throw InputError::at(origin.pos,
                             "'{}' of {} has no source: write {{value: ..., source: KEY}} or give "
                             "the {} a 'source:'",
                             key, what, s.object_name);
      }
    }
  }

  std::optional<size_t> node_of(const std::string& id) const {
    if (auto i = t_.tier_index(id)) return *i;
    if (auto i = t_.switch_index(id)) return t_.tiers.size() + *i;
    return std::nullopt;
  }

  std::vector<std::string> node_ids() const {
    std::vector<std::string> ids;
    for (const auto& x : t_.tiers) ids.push_back(x.id);
    for (const auto& x : t_.switches) ids.push_back(x.id);
    return ids;
  }

  std::vector<std::string> tier_ids() const {
    std::vector<std::string> ids;
    for (const auto& x : t_.tiers) ids.push_back(x.id);
    return ids;
  }

  void check_device(const Device& d) {
    const std::string what = label("device", d.id, 0);
    const auto ti = t_.tier_index(d.local_tier);
    if (!ti) {
      throw InputError::at(d.origins.pos_of("local_tier"), "{}: local_tier '{}' is not a tier{}",
                           what, d.local_tier, did_you_mean(d.local_tier, tier_ids()));
    }
    if (t_.tiers[*ti].per != Scope::kDevice) {
      throw InputError::at(d.origins.pos_of("local_tier"),
                           "{}: local_tier '{}' must be a 'per: device' tier, it is 'per: {}'",
                           what, d.local_tier, kScopeNames[static_cast<size_t>(t_.tiers[*ti].per)]);
    }
    const Tier& local = t_.tiers[*ti];
    if (local.capacity.value == 0) {
      throw InputError::at(local.origins.pos_of("capacity"),
                           "{}: local_tier '{}' has capacity 0B: a device needs memory of its own",
                           what, d.local_tier);
    }
    if (d.reserved.value >= local.capacity.value) {
      throw InputError::at(
          d.origins.pos_of("reserved"),
          "{}: reserved {} leaves nothing of local_tier '{}' ({}) to plans; "
          "lower it ({})",
          what, to_string(d.reserved), d.local_tier, to_string(local.capacity),
          override_hint(opt_.sets_flag, fmt::format("devices.{}.reserved=0B", d.id)));
    }
    if (d.count % t_.system.hosts != 0) {
      throw InputError::at(d.origins.pos_of("count"),
                           "{}: count {} does not divide evenly over {} hosts", what, d.count,
                           t_.system.hosts);
    }
    if (std::all_of(d.peak.begin(), d.peak.end(), [](FlopRate r) { return r.flop_per_s == 0; })) {
      throw InputError::at(d.origins.pos,
                           "{} declares no peak rate: add e.g. 'peak: {{bf16: "
                           "989TFLOP/s}}'",
                           what);
    }
  }

  void check_tier(Tier& x) {
    if (x.origins.find("write_latency") == nullptr) x.write_latency = x.latency;
    const auto n = static_cast<uint64_t>(t_.instances(x.per));
    if (x.capacity.value > std::numeric_limits<uint64_t>::max() / n) {
      throw InputError::at(x.origins.pos_of("capacity"),
                           "tier '{}': {} instances of {} overflow a 64-bit byte count", x.id, n,
                           to_string(x.capacity));
    }
    if (!x.attach.empty() && !t_.switch_index(x.attach)) {
      std::vector<std::string> ids;
      for (const auto& s : t_.switches) ids.push_back(s.id);
      throw InputError::at(x.origins.pos_of("attach"), "tier '{}': attach '{}' is not a switch{}",
                           x.id, x.attach, did_you_mean(x.attach, ids));
    }
  }

  void check_link(const Link& l) {
    const auto ids = node_ids();
    for (size_t i = 0; i < 2; ++i) {
      if (!node_of(l.endpoints[i])) {
        SourcePos p = l.origins.item_pos("endpoints", i);
        throw InputError::at(p, "link '{}': endpoint '{}' is not a tier or switch{}", l.id,
                             l.endpoints[i], did_you_mean(l.endpoints[i], ids));
      }
    }
    if (l.endpoints[0] == l.endpoints[1]) {
      const auto ti = t_.tier_index(l.endpoints[0]);
      if (!ti || t_.tiers[*ti].per != Scope::kDevice || l.per != Scope::kDevice) {
        throw InputError::at(l.origins.pos_of("endpoints"),
                             "link '{}': both endpoints are '{}'; a loop is only meaningful as a "
                             "'per: device' link on a 'per: device' tier (a direct peer link)",
                             l.id, l.endpoints[0]);
      }
    }
    if (l.duplex == Duplex::kHalf && l.origins.find("duplex_efficiency")) {
      throw InputError::at(l.origins.pos_of("duplex_efficiency"),
                           "link '{}': duplex_efficiency is for a full-duplex link; a half-duplex "
                           "link already shares one capacity between directions",
                           l.id);
    }
    if (l.duplex == Duplex::kHalf && l.origins.find("bandwidth_reverse")) {
      throw InputError::at(l.origins.pos_of("bandwidth_reverse"),
                           "link '{}': a half-duplex link shares one capacity between directions "
                           "and cannot have bandwidth_reverse",
                           l.id);
    }
  }

  /// A described host CPU (one with a peak rate) names a shared tier to compute next to;
  /// CPU fields without a peak rate describe nothing and are refused.
  void check_host_cpu() {
    const System& s = t_.system;
    const HostCpu& cpu = s.cpu;
    check_source_key(cpu.source, s.origins.pos_of("cpu.source"));
    if (!cpu.present()) {
      if (first_cpu_field(s) != nullptr) {
        throw InputError::at(cpu.origins.pos,
                             "system cpu declares no peak rate: a host CPU needs one, e.g. "
                             "'peak: {{fp32: 2TFLOP/s}}' (or remove 'cpu')");
      }
      return;
    }
    if (cpu.tier.empty()) {
      throw InputError::at(cpu.origins.pos,
                           "system cpu is missing required key 'tier' (the 'per: socket', "
                           "'per: host' or 'per: supernode' tier its ops read and write)");
    }
    const auto ti = t_.tier_index(cpu.tier);
    if (!ti) {
      throw InputError::at(s.origins.pos_of("cpu.tier"), "system cpu: tier '{}' is not a tier{}",
                           cpu.tier, did_you_mean(cpu.tier, tier_ids()));
    }
    if (t_.tiers[*ti].per == Scope::kDevice) {
      throw InputError::at(s.origins.pos_of("cpu.tier"),
                           "system cpu: tier '{}' is a 'per: device' tier; the CPU computes next "
                           "to a 'per: socket', 'per: host' or 'per: supernode' tier",
                           cpu.tier);
    }
  }

  void check_switches_used() {
    for (const auto& s : t_.switches) {
      bool used = std::any_of(t_.links.begin(), t_.links.end(), [&](const Link& l) {
        return l.endpoints[0] == s.id || l.endpoints[1] == s.id;
      });
      if (!used) {
        throw InputError::at(s.origins.pos, "switch '{}' is not an endpoint of any link", s.id);
      }
    }
  }

  Topology& t_;
  const LoadOptions& opt_;
  std::vector<std::string> source_keys_;
};

/// The position of key `key` of mapping `node`; an empty position when it has none.
SourcePos key_pos(const YAML::Node& node, std::string_view key, const std::string& file) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return schema::pos_of(it->first, file);
  }
  return {};
}

/// Where messages about the host CPU point: its `cpu:` key in the file, else its first field
/// set by `--set`, else the system.
void place_host_cpu(System& s) {
  if (!s.cpu.origins.pos.file.empty()) return;
  const schema::Origin* first = first_cpu_field(s);
  s.cpu.origins.pos = first != nullptr ? first->pos : s.origins.pos;
}

void check_reachable(const Topology& t) {
  for (size_t ti = 0; ti < t.tiers.size(); ++ti) {
    bool to = false;
    bool back = false;
    std::string local;
    for (const auto& d : t.devices) {
      const size_t li = *t.tier_index(d.local_tier);
      if (li == ti) {
        to = back = true;
        break;
      }
      local = d.local_tier;
      to = to || t.route(li, ti) != nullptr;
      back = back || t.route(ti, li) != nullptr;
    }
    const Tier& x = t.tiers[ti];
    if (!to) {
      throw InputError::at(x.origins.pos,
                           "tier '{}' cannot be reached from any device's local tier (no path "
                           "from '{}'); connect it with a link",
                           x.id, local);
    }
    if (!back) {
      throw InputError::at(x.origins.pos,
                           "tier '{}' has no path back to any device's local tier (to '{}'); "
                           "check the link endpoints",
                           x.id, local);
    }
  }
}

Topology parse(const YAML::Node& root, const std::string& file, const LoadOptions& opt,
               const schema::AliasSites& aliases) {
  Topology t;
  t.file = file;
  if (!root.IsDefined() || root.IsNull()) {
    throw InputError::at(SourcePos{file, 1, 1},
                         "empty topology file: expected a mapping with "
                         "'tierflow: {}'",
                         kFormatTag);
  }
  schema::expect_map(root, file, "the topology");
  std::vector<std::string> known;
  for (const auto& k : top_level_keys()) known.emplace_back(k.key);
  std::set<std::string> seen;
  // Default-constructed YAML nodes count as defined, so presence is kept separately.
  std::optional<YAML::Node> devices, tiers, switches, links, routes;
  std::string tag;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const SourcePos kp = schema::pos_of(it->first, file);
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string();
    if (!seen.insert(key).second) throw InputError::at(kp, "duplicate key '{}'", key);
    const YAML::Node v = it->second;  // the iterator yields temporaries: copy the handle
    const SourcePos vp = v.IsNull() ? kp : schema::pos_of(v, file);
    auto scalar = [&](std::string_view what) {
      if (!v.IsScalar()) {
        throw InputError::at(vp, "'{}' expects {}, got {}", key, what, schema::node_kind(v));
      }
      return v.Scalar();
    };
    if (schema::is_extension_key(key)) continue;
    if (key == "tierflow") {
      tag = scalar("the format tag hw/1");
      if (tag != kFormatTag) {
        throw InputError::at(vp, "unsupported format '{}': this version of tierflow reads '{}'",
                             tag, kFormatTag);
      }
    } else if (key == "name") {
      t.name = schema::parse_name(Input{{scalar("a name")}, {}, vp}, "name");
    } else if (key == "description") {
      t.description = scalar("text");
    } else if (key == "sources") {
      schema::read_sources(v, t.sources, file);
    } else if (key == "system") {
      schema::read_object(v, system_schema(), t.system, file, "system");
      t.system.cpu.origins.pos = key_pos(v, "cpu", file);
    } else if (key == "devices") {
      devices = v;
    } else if (key == "tiers") {
      tiers = v;
    } else if (key == "switches") {
      switches = v;
    } else if (key == "links") {
      links = v;
    } else if (key == "routes") {
      routes = v;
    } else {
      throw InputError::at(kp, "unknown top-level key '{}'{}", key, did_you_mean(key, known));
    }
  }
  const SourcePos top = schema::pos_of(root, file);
  if (tag.empty()) {
    throw InputError::at(top,
                         "missing required key 'tierflow' (the format tag: write 'tierflow: "
                         "{}')",
                         kFormatTag);
  }
  if (t.name.empty()) throw InputError::at(top, "missing required key 'name'");
  if (!seen.count("system")) schema::apply_defaults(t.system, system_schema());
  t.system.origins.pos = t.system.origins.pos.file.empty() ? top : t.system.origins.pos;
  if (!devices) throw InputError::at(top, "missing required key 'devices'");
  if (!tiers) throw InputError::at(top, "missing required key 'tiers'");
  read_list(*devices, device_schema(), t.devices, file, aliases);
  read_list(*tiers, tier_schema(), t.tiers, file, aliases);
  if (switches) read_list(*switches, switch_schema(), t.switches, file, aliases);
  if (links) read_list(*links, link_schema(), t.links, file, aliases);
  if (routes) read_list(*routes, route_schema(), t.pins, file, aliases);
  if (t.devices.empty()) throw InputError::at(schema::pos_of(*devices, file), "'devices' is empty");
  if (t.tiers.empty()) throw InputError::at(schema::pos_of(*tiers, file), "'tiers' is empty");

  apply_overrides(t, opt.overrides, opt.sets_flag);
  place_host_cpu(t.system);
  Validator(t, opt).run();
  resolve_routes(t);
  check_reachable(t);
  return t;
}

}  // namespace

Topology load_topology(const std::string& path, const LoadOptions& options) {
  const std::string text = read_text_file(path);
  const YAML::Node root = schema::load_yaml_text(text, path);  // syntax errors first
  return parse(root, path, options, schema::alias_sites(text, path));
}

std::string override_hint(std::string_view flag, std::string_view assignment) {
  return fmt::format("{}{}{}", flag, flag.starts_with("--") ? " " : "=", assignment);
}

Topology load_topology_text(const std::string& text, const std::string& name,
                            const LoadOptions& options) {
  const YAML::Node root = schema::load_yaml_text(text, name);  // syntax errors first
  return parse(root, name, options, schema::alias_sites(text, name));
}

}  // namespace tierflow::hw
