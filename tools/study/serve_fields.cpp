// The serving fields by name: what the Python API's serve() arguments and the fields of a
// serving sweep set (tools/study/serve.h).
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/diagnostics.h"
#include "core/units.h"
#include "tools/study/serve.h"

namespace tierflow::study {
namespace {

/// A count as the CLI reads its count flags (parse_count), within T.
/// The message names the field unless `source` does already (Python's argument).
template <class T>
void set_count(T& field, std::string_view name, const std::string& value, std::string_view source) {
  const std::string lead = source == name ? "" : fmt::format("{}: ", name);
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

std::string number_text(double v) { return fmt::format("{}", v); }

}  // namespace

const std::vector<std::string_view>& serve_field_names() {
  static const std::vector<std::string_view> names = {
      "trace",        "arrivals",   "rate_scale", "first",         "block_tokens", "warmup",
      "hw",           "device",     "model",      "hf_config",     "tp",           "replicas",
      "router",       "token_budget", "max_seqs", "device_policy", "preemption",   "swap_space",
      "swap_tier",    "kv_tiers",   "load",       "slo",           "weight_dtype", "kv_dtype",
      "act_dtype",    "cache_only"};
  return names;
}

void set_serve_field(ServeSettings& s, std::string_view field, const std::string& value,
                     std::string_view source) {
  const SourcePos at{std::string(source)};
  if (is_topology_path(field)) {
    s.sets.push_back(fmt::format("{}={}", field, value));
  } else if (field.starts_with("model.")) {
    s.model.model_sets.push_back(fmt::format("{}={}", field.substr(6), value));
  } else if (field == "set") {
    s.sets.push_back(value);
  } else if (field == "model_set") {
    s.model.model_sets.push_back(value);
  } else if (field == "trace") {
    s.trace = value;
  } else if (field == "arrivals") {
    s.arrivals = value;
  } else if (field == "rate_scale") {
    const std::optional<double> v = parse_real(value);
    if (!v) {
      throw InputError::at(at, "{}expected a number, got '{}'",
                           source == field ? "" : "rate_scale: ", value);
    }
    s.trace_options.rate_scale = *v;
  } else if (field == "first") {
    set_count(s.trace_options.first, field, value, source);
  } else if (field == "block_tokens") {
    set_count(s.trace_options.block_tokens, field, value, source);
  } else if (field == "warmup") {
    s.warmup = value;
  } else if (field == "hw") {
    s.hw = value;
  } else if (field == "device") {
    s.engine.device = value;
  } else if (field == "model") {
    s.model.model = value;
  } else if (field == "hf_config") {
    s.model.hf_config = value;
  } else if (field == "tp") {
    set_count(s.model.gen.tp, field, value, source);
  } else if (field == "replicas") {
    set_count(s.engine.replicas, field, value, source);
  } else if (field == "router") {
    s.router = value;
  } else if (field == "token_budget") {
    set_count(s.engine.token_budget, field, value, source);
  } else if (field == "max_seqs") {
    set_count(s.engine.max_seqs, field, value, source);
  } else if (field == "device_policy") {
    s.device_policy = value;
  } else if (field == "preemption") {
    s.preemption = value;
  } else if (field == "swap_space") {
    s.swap_space = value;
  } else if (field == "swap_tier") {
    s.swap_tier = value;
  } else if (field == "kv_tiers") {
    s.kv_tiers = value;
  } else if (field == "load") {
    s.load = value;
  } else if (field == "slo") {
    s.slo = value;
  } else if (field == "weight_dtype") {
    s.weight_dtype = value;
  } else if (field == "kv_dtype") {
    s.kv_dtype = value;
  } else if (field == "act_dtype") {
    s.act_dtype = value;
  } else if (field == "cache_only") {
    if (value != "true" && value != "false") {
      throw InputError::at(at, "cache_only: expected true or false, got '{}'", value);
    }
    s.cache_only = value == "true";
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
  if (field == "trace") return s.trace;
  if (field == "arrivals") return s.arrivals;
  if (field == "rate_scale") return number_text(s.trace_options.rate_scale);
  if (field == "first") return s.trace_options.first == 0 ? "" : std::to_string(s.trace_options.first);
  if (field == "block_tokens") return std::to_string(s.trace_options.block_tokens);
  if (field == "warmup") return s.warmup;
  if (field == "hw") return s.hw;
  if (field == "device") return s.engine.device;
  if (field == "model") return s.model.model;
  if (field == "hf_config") return s.model.hf_config;
  if (field == "tp") return std::to_string(s.model.gen.tp);
  if (field == "replicas") return std::to_string(s.engine.replicas);
  if (field == "router") return s.router;
  if (field == "token_budget") return std::to_string(s.engine.token_budget);
  if (field == "max_seqs") return std::to_string(s.engine.max_seqs);
  if (field == "device_policy") return s.device_policy;
  if (field == "preemption") return s.preemption;
  if (field == "swap_space") return s.swap_space;
  if (field == "swap_tier") return s.swap_tier;
  if (field == "kv_tiers") return s.kv_tiers;
  if (field == "load") return s.load;
  if (field == "slo") return s.slo;
  if (field == "weight_dtype") return s.weight_dtype;
  if (field == "kv_dtype") return s.kv_dtype;
  if (field == "act_dtype") return s.act_dtype;
  if (field == "cache_only") return s.cache_only ? "true" : "false";
  TF_ASSERT(false, "get_serve_field of an unknown field '{}'", field);
  return "";
}

}  // namespace tierflow::study
