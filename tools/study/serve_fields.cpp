// The serving fields by name: what the Python API's serve() arguments and the fields of a
// serving sweep set (tools/study/serve.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>
#include <variant>

#include "core/diagnostics.h"
#include "core/units.h"
#include "tools/study/serve.h"

namespace tierflow::study {
namespace {

/// What a message about `field` starts with: the field, unless `source` names it already
/// (Python's argument "kv_tiers", whatif's "--serve kv_tiers").
std::string lead_of(std::string_view field, std::string_view source) {
  return source.ends_with(field) ? "" : fmt::format("{}: ", field);
}

/// A count as the CLI reads its count flags (parse_count), within T.
template <class T>
void set_count(T& field, std::string_view name, const std::string& value, std::string_view source) {
  const std::string lead = lead_of(name, source);
  const auto c = parse_count(value);
  if (!c.ok()) throw InputError::at(SourcePos{std::string(source)}, "{}{}", lead, c.error);
  if (static_cast<uint64_t>(c.value) > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    throw InputError::at(SourcePos{std::string(source)}, "{}'{}' is too large: at most {}", lead,
                         value, std::numeric_limits<T>::max());
  }
  field = static_cast<T>(c.value);
}

/// The last `path=` override in `list`, or "".
std::string last_override(const std::vector<std::string>& list, std::string_view path) {
  for (auto it = list.rbegin(); it != list.rend(); ++it) {
    if (it->size() > path.size() && it->starts_with(path) && (*it)[path.size()] == '=') {
      return it->substr(path.size() + 1);
    }
  }
  return "";
}

/// Where a field lives in the settings, by its type: text as given (checked by
/// prepare_serve()), a count, a number or a flag.
using FieldRef = std::variant<std::string*, int*, int64_t*, uint64_t*, uint32_t*, double*, bool*>;

struct FieldDef {
  std::string_view name;
  FieldRef (*ref)(ServeSettings&);
  bool zero_is_unset = false;  ///< a count read back as "" when 0
};

// One row per field of serve_field_names(), in its order.
const std::array<FieldDef, 34> kFields = {{
    {"trace", [](ServeSettings& s) -> FieldRef { return &s.trace; }},
    {"arrivals", [](ServeSettings& s) -> FieldRef { return &s.arrivals; }},
    {"rate_scale", [](ServeSettings& s) -> FieldRef { return &s.trace_options.rate_scale; }},
    {"first", [](ServeSettings& s) -> FieldRef { return &s.trace_options.first; }, true},
    {"block_tokens", [](ServeSettings& s) -> FieldRef { return &s.trace_options.block_tokens; }},
    {"warmup", [](ServeSettings& s) -> FieldRef { return &s.warmup; }},
    {"hw", [](ServeSettings& s) -> FieldRef { return &s.hw; }},
    {"nodes", [](ServeSettings& s) -> FieldRef { return &s.nodes; }},
    {"device", [](ServeSettings& s) -> FieldRef { return &s.engine.device; }},
    {"model", [](ServeSettings& s) -> FieldRef { return &s.model.model; }},
    {"hf_config", [](ServeSettings& s) -> FieldRef { return &s.model.hf_config; }},
    {"tp", [](ServeSettings& s) -> FieldRef { return &s.model.gen.tp; }, true},
    {"pp", [](ServeSettings& s) -> FieldRef { return &s.engine.pp; }, true},
    {"replicas", [](ServeSettings& s) -> FieldRef { return &s.engine.replicas; }, true},
    {"prefill_replicas", [](ServeSettings& s) -> FieldRef { return &s.engine.prefill_replicas; }},
    {"prefill_tp", [](ServeSettings& s) -> FieldRef { return &s.engine.prefill_tp; }, true},
    {"router", [](ServeSettings& s) -> FieldRef { return &s.router; }},
    {"decode_router", [](ServeSettings& s) -> FieldRef { return &s.decode_router; }},
    {"token_budget", [](ServeSettings& s) -> FieldRef { return &s.engine.token_budget; }},
    {"max_seqs", [](ServeSettings& s) -> FieldRef { return &s.engine.max_seqs; }},
    {"device_policy", [](ServeSettings& s) -> FieldRef { return &s.device_policy; }},
    {"preemption", [](ServeSettings& s) -> FieldRef { return &s.preemption; }},
    {"swap_space", [](ServeSettings& s) -> FieldRef { return &s.swap_space; }},
    {"swap_tier", [](ServeSettings& s) -> FieldRef { return &s.swap_tier; }},
    {"spec_tokens", [](ServeSettings& s) -> FieldRef { return &s.engine.spec.tokens; }},
    {"spec_accept", [](ServeSettings& s) -> FieldRef { return &s.engine.spec.accept; }},
    {"spec_draft", [](ServeSettings& s) -> FieldRef { return &s.spec_draft; }},
    {"kv_tiers", [](ServeSettings& s) -> FieldRef { return &s.kv_tiers; }},
    {"load", [](ServeSettings& s) -> FieldRef { return &s.load; }},
    {"slo", [](ServeSettings& s) -> FieldRef { return &s.slo; }},
    {"weight_dtype", [](ServeSettings& s) -> FieldRef { return &s.weight_dtype; }},
    {"kv_dtype", [](ServeSettings& s) -> FieldRef { return &s.kv_dtype; }},
    {"act_dtype", [](ServeSettings& s) -> FieldRef { return &s.act_dtype; }},
    {"cache_only", [](ServeSettings& s) -> FieldRef { return &s.cache_only; }},
}};

const FieldDef* find_field(std::string_view name) {
  const auto it = std::find_if(kFields.begin(), kFields.end(),
                               [&](const FieldDef& f) { return f.name == name; });
  return it == kFields.end() ? nullptr : &*it;
}

}  // namespace

const std::vector<std::string_view>& serve_field_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const FieldDef& f : kFields) out.push_back(f.name);
    return out;
  }();
  return names;
}

void set_serve_field(ServeSettings& s, std::string_view field, const std::string& value,
                     std::string_view source) {
  const SourcePos at{std::string(source)};
  const std::string lead = lead_of(field, source);
  if (is_topology_path(field)) {
    s.sets.push_back(fmt::format("{}={}", field, value));
  } else if (field.starts_with("model.")) {
    s.model.model_sets.push_back(fmt::format("{}={}", field.substr(6), value));
  } else if (field == "set") {
    s.sets.push_back(value);
  } else if (field == "model_set") {
    s.model.model_sets.push_back(value);
  } else if (const FieldDef* f = find_field(field)) {
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::string>) {
            *p = value;
          } else if constexpr (std::is_same_v<T, bool>) {
            if (value != "true" && value != "false") {
              throw InputError::at(at, "{}expected true or false, got '{}'", lead, value);
            }
            *p = value == "true";
          } else if constexpr (std::is_same_v<T, double>) {
            const std::optional<double> v = parse_real(value);
            if (!v) throw InputError::at(at, "{}expected a number, got '{}'", lead, value);
            *p = *v;
          } else {
            set_count(*p, field, value, source);
          }
        },
        f->ref(s));
  } else {
    throw InputError::at(at,
                         "unknown serving field '{}' (a topology path such as tiers.ID.capacity, "
                         "model.KEY, or one of: {}){}",
                         field, fmt::join(serve_field_names(), ", "),
                         did_you_mean(field, std::span<const std::string_view>(serve_field_names())));
  }
}

std::string get_serve_field(const ServeSettings& s, std::string_view field) {
  if (is_topology_path(field)) return last_override(s.sets, field);
  if (field.starts_with("model.")) return last_override(s.model.model_sets, field.substr(6));
  const FieldDef* f = find_field(field);
  TF_ASSERT(f != nullptr, "get_serve_field of an unknown field '{}'", field);
  // The accessors take settings to write; reading goes through the same ones.
  return std::visit(
      [&](const auto* p) -> std::string {
        using T = std::remove_cvref_t<decltype(*p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return *p;
        } else if constexpr (std::is_same_v<T, bool>) {
          return *p ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return fmt::format("{}", *p);
        } else {
          return f->zero_is_unset && *p == 0 ? "" : std::to_string(*p);
        }
      },
      f->ref(const_cast<ServeSettings&>(s)));
}

}  // namespace tierflow::study
