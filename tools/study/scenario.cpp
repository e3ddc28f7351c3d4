#include "tools/study/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/diagnostics.h"
#include "core/kinds.h"
#include "core/units.h"
#include "traces/arch_loader.h"
#include "traces/hf_import.h"

#ifndef TIERFLOW_CONFIG_DIR
#define TIERFLOW_CONFIG_DIR "configs"
#endif

namespace tierflow::study {

std::string config_dir() {
  const char* env = std::getenv("TIERFLOW_CONFIG_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(TIERFLOW_CONFIG_DIR);
}

std::string default_topology() {
  return config_dir() + "/hw/h100-sxm-8gpu.yaml";
}

std::string topology_label(const std::string& file) {
  const std::filesystem::path p = std::filesystem::path(file).lexically_normal();
  const std::filesystem::path shipped =
      (std::filesystem::path(config_dir()) / "hw").lexically_normal();
  if (p.extension() == ".yaml" && p.parent_path() == shipped) return p.stem().string();
  return file;
}

std::vector<std::string> shipped_topology_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(config_dir() + "/hw", ec)) {
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string find_topology(const std::string& name, std::string_view source) {
  if (name.find('/') != std::string::npos || name.ends_with(".yaml") || name.ends_with(".yml")) {
    return name;
  }
  std::error_code ec;
  if (std::filesystem::exists(name, ec)) return name;
  const std::vector<std::string> names = shipped_topology_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    return config_dir() + "/hw/" + name + ".yaml";
  }
  throw InputError::at(SourcePos{std::string(source)}, "unknown topology '{}' (shipped: {}){}",
                       name, fmt::join(names, ", "), did_you_mean(name, names));
}

namespace {

// Topology paths start with one of these (hw_models/loader.h, LoadOptions::overrides).
constexpr std::string_view kTopologyRoots[] = {"system.", "devices.", "tiers.", "switches.",
                                               "links."};

/// A count field: "8192", "8k", "32Ki" (core/units.h, parse_count).
int64_t parse_int(std::string_view path, std::string_view text, const SourcePos& at, int64_t lo,
                  int64_t hi = INT64_MAX) {
  const ParseResult<int64_t> r = parse_count(text);
  if (!r.ok()) throw InputError::at(at, "{}: {}", path, r.error);
  const int64_t v = r.value;
  if (v < lo) throw InputError::at(at, "{}: {} is below {}", path, v, lo);
  if (v > hi) throw InputError::at(at, "{}: '{}' is too large: at most {}", path, text, hi);
  return v;
}

template <size_t N>
size_t parse_word(std::string_view path, std::string_view text,
                  const std::array<std::string_view, N>& names, const SourcePos& at) {
  const auto i = index_of(names, text);
  if (!i) {
    throw InputError::at(at, "{}: '{}' is not one of {}{}", path, text, fmt::join(names, ", "),
                         did_you_mean(text, std::span<const std::string_view>(names)));
  }
  return *i;
}

/// A finite number from `lo` to `hi`.
double parse_fraction(std::string_view path, std::string_view text, const SourcePos& at,
                      double lo, double hi) {
  const std::optional<double> v = parse_real(text);
  if (!v || !std::isfinite(*v)) throw InputError::at(at, "{}: '{}' is not a number", path, text);
  if (*v < lo || *v > hi) throw InputError::at(at, "{}: {} is not from {} to {}", path, *v, lo, hi);
  return *v;
}

bool parse_bool(std::string_view path, std::string_view text, const SourcePos& at) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw InputError::at(at, "{}: '{}' is not true or false", path, text);
}

/// parse(), its error prefixed with the field's name unless it came from `flag` (whose
/// messages name the flag): a `--vary` or a spec names the field.
template <class F>
auto as_field(std::string_view path, std::string_view source, std::string_view flag, F&& parse) {
  try {
    return parse();
  } catch (const InputError& e) {
    if (source == flag) throw;
    throw InputError(e.pos(), fmt::format("{}: {}", path, e.message()));
  }
}

Request& request_of(Scenario& s) {
  if (!s.request) s.request = Request{};
  return *s.request;
}

}  // namespace

const std::vector<std::string_view>& field_names() {
  static const std::vector<std::string_view> names = {"batch",
                                                      "seq",
                                                      "context",
                                                      "tokens",
                                                      "prompt",
                                                      "generate",
                                                      "tp",
                                                      "kv_block",
                                                      "layers",
                                                      "phase",
                                                      "weight_dtype",
                                                      "kv_dtype",
                                                      "act_dtype",
                                                      "compute_dtype",
                                                      "quant_group",
                                                      "quant_zeros",
                                                      "routing",
                                                      "seed",
                                                      "routing_skew",
                                                      "routing_repeat",
                                                      "expert_cache",
                                                      "routing_trace",
                                                      "micro_batches",
                                                      "checkpoint",
                                                      "model",
                                                      "hf_config",
                                                      "lenient",
                                                      "workload",
                                                      "hw",
                                                      "budget",
                                                      "policy",
                                                      "device",
                                                      "devices",
                                                      "pins",
                                                      "on_host"};
  return names;
}

std::string Scenario::name(std::string_view field) const {
  if (naming == Naming::kFlags && field == "pins") return "--pin";  // one flag per pin
  return option_name(field, naming == Naming::kFlags);
}

void set_field(Scenario& s, std::string_view path, std::string_view value,
               std::string_view source) {
  const SourcePos at{std::string(source)};
  if (is_topology_path(path)) {
    s.sets.push_back(fmt::format("{}={}", path, value));
    return;
  }
  if (path.starts_with("model.")) {
    s.workload.model_sets.push_back(fmt::format("{}={}", path.substr(6), value));
    return;
  }
  traces::GenOptions& g = s.workload.gen;
  const std::string v(value);
  if (path == "batch") {
    g.batch = parse_int(path, value, at, 1);
  } else if (path == "seq") {
    g.seq = parse_int(path, value, at, 1);
  } else if (path == "context") {
    g.context = parse_int(path, value, at, 0);
  } else if (path == "tokens") {
    g.tokens = parse_int(path, value, at, 1);
  } else if (path == "prompt") {
    request_of(s).prompt = parse_int(path, value, at, 1);
  } else if (path == "generate") {
    request_of(s).generate = parse_int(path, value, at, 1);
  } else if (path == "tp") {
    g.tp = static_cast<int>(parse_int(path, value, at, 1, INT32_MAX));
  } else if (path == "kv_block") {
    g.kv_block = parse_int(path, value, at, 1);
  } else if (path == "layers") {
    g.layers = static_cast<int>(parse_int(path, value, at, 0, INT32_MAX));
  } else if (path == "seed") {
    g.seed = static_cast<uint64_t>(parse_int(path, value, at, 0));
  } else if (path == "routing_skew") {
    g.routing_skew = parse_fraction(path, value, at, 0, traces::kMaxRoutingSkew);
  } else if (path == "routing_repeat") {
    g.routing_repeat = parse_fraction(path, value, at, 0, 1);
  } else if (path == "micro_batches") {
    g.micro_batches = parse_int(path, value, at, 1);
  } else if (path == "routing_trace") {
    g.routing_trace = v;
  } else if (path == "expert_cache") {
    s.expert_cache = as_field(path, source, "--expert-cache",
                              [&] { return planner::parse_expert_cache(value, source); });
  } else if (path == "on_host") {
    s.on_host =
        as_field(path, source, "--on-host", [&] { return planner::parse_host_ops(value, source); });
  } else if (path == "phase") {
    g.phase = static_cast<traces::Phase>(parse_word(path, value, traces::kPhaseNames, at));
  } else if (path == "routing") {
    const size_t mode = parse_word(path, value, kRoutingModeNames, at);
    g.routing = mode == 0 ? traces::Routing::kExpected : traces::Routing::kSeeded;
    s.realistic_routing = mode == 2;
    s.routing_given = true;
  } else if (path == "weight_dtype") {
    g.weight_dtype = static_cast<Dtype>(parse_word(path, value, kDtypeNames, at));
  } else if (path == "kv_dtype") {
    g.kv_dtype = static_cast<Dtype>(parse_word(path, value, kDtypeNames, at));
  } else if (path == "act_dtype") {
    g.act_dtype = static_cast<Dtype>(parse_word(path, value, kDtypeNames, at));
  } else if (path == "compute_dtype") {
    // Empty: the activation dtype (what get_field prints for the default).
    g.compute_dtype.reset();
    if (!value.empty())
      g.compute_dtype = static_cast<Dtype>(parse_word(path, value, kDtypeNames, at));
  } else if (path == "quant_group") {
    // Empty: the weight dtype's default group.
    g.quant_group = value.empty() ? -1 : parse_int(path, value, at, 0);
  } else if (path == "quant_zeros") {
    g.quant_zeros = parse_bool(path, value, at);
  } else if (path == "checkpoint") {
    g.checkpoint = parse_bool(path, value, at);
  } else if (path == "model") {
    s.workload.model = v;
    s.workload.hf_config.clear();
    s.workload.file.clear();
  } else if (path == "hf_config") {
    s.workload.hf_config = v;
    s.workload.model.clear();
    s.workload.file.clear();
  } else if (path == "lenient") {
    s.workload.hf_lenient = parse_bool(path, value, at);
  } else if (path == "workload") {
    s.workload.file = v;
  } else if (path == "hw") {
    s.hw = v;
  } else if (path == "budget") {
    const auto b = parse_bytes(value);
    if (!b.ok()) throw InputError::at(at, "budget: {}", b.error);
    s.budget = b.value.value;
  } else if (path == "policy") {
    s.policy = v;
  } else if (path == "device") {
    s.device = v;
  } else if (path == "devices") {
    // 0: every device of the class, as --devices 0 (and within a count: 2^32 wrapped to 0).
    s.devices = static_cast<uint32_t>(parse_int(path, value, at, 0, UINT32_MAX));
  } else if (path == "pins") {
    // KIND=TIER pins, ';'-separated as the study row writes them; empty: none.
    s.pins.clear();
    for (std::string_view rest = value; !rest.empty();) {
      const auto semi = rest.find(';');
      const std::string_view pin = rest.substr(0, semi);
      if (pin.find('=') == std::string_view::npos) {
        throw InputError::at(at, "pins: '{}' is not KIND=TIER", pin);
      }
      s.pins.emplace_back(pin);
      rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
    }
  } else {
    check_field(path, source);
  }
}

bool is_topology_path(std::string_view path) {
  for (std::string_view root : kTopologyRoots) {
    if (path.starts_with(root)) return true;
  }
  return path == "name" || path == "description";
}

void check_field(std::string_view path, std::string_view source) {
  if (is_topology_path(path) || path.starts_with("model.") ||
      std::ranges::find(field_names(), path) != field_names().end()) {
    return;
  }
  throw InputError::at(SourcePos{std::string(source)},
                       "unknown field '{}' (a topology path such as tiers.ID.capacity, "
                       "model.KEY, or one of: {}){}",
                       path, fmt::join(field_names(), ", "),
                       did_you_mean(path, std::span<const std::string_view>(field_names())));
}

std::string get_field(const Scenario& s, std::string_view path) {
  const traces::GenOptions& g = s.workload.gen;
  if (path == "batch") return std::to_string(g.batch);
  if (path == "seq") return std::to_string(g.seq);
  if (path == "context") return std::to_string(g.context);
  if (path == "tokens") return std::to_string(g.tokens);
  if (path == "prompt") return s.request ? std::to_string(s.request->prompt) : "";
  if (path == "generate") return s.request ? std::to_string(s.request->generate) : "";
  if (path == "tp") return std::to_string(g.tp);
  if (path == "kv_block") return std::to_string(g.kv_block);
  if (path == "layers") return std::to_string(g.layers);
  if (path == "seed") return std::to_string(g.seed);
  if (path == "routing_skew") return fmt::format("{}", g.routing_skew);
  if (path == "routing_repeat") return fmt::format("{}", g.routing_repeat);
  if (path == "expert_cache") return planner::to_string(s.expert_cache);
  if (path == "on_host") return planner::host_ops_text(s.on_host);
  if (path == "routing_trace") return g.routing_trace;
  if (path == "micro_batches") return std::to_string(g.micro_batches);
  if (path == "phase") return std::string(traces::kPhaseNames[static_cast<size_t>(g.phase)]);
  if (path == "routing") {
    return s.realistic()                           ? "realistic"
           : g.routing == traces::Routing::kSeeded ? "oracle"
                                                   : "expected";
  }
  if (path == "weight_dtype") return std::string(name_of(g.weight_dtype));
  if (path == "kv_dtype") return std::string(name_of(g.kv_dtype));
  if (path == "act_dtype") return std::string(name_of(g.act_dtype));
  if (path == "compute_dtype") return g.compute_dtype ? std::string(name_of(*g.compute_dtype)) : "";
  if (path == "quant_group") return g.quant_group < 0 ? "" : std::to_string(g.quant_group);
  if (path == "quant_zeros") return g.quant_zeros ? "true" : "false";
  if (path == "checkpoint") return g.checkpoint ? "true" : "false";
  if (path == "model") return s.workload.model;
  if (path == "hf_config") return s.workload.hf_config;
  if (path == "lenient") return s.workload.hf_lenient ? "true" : "false";
  if (path == "workload") return s.workload.file;
  if (path == "hw") return s.hw;
  if (path == "pins") return fmt::format("{}", fmt::join(s.pins, ";"));
  if (path == "budget") return s.budget == 0 ? "" : to_string(Bytes{s.budget});
  if (path == "policy") return s.policy;
  if (path == "device") return s.device;
  if (path == "devices") return std::to_string(s.devices);
  // The last override of a topology or model path.
  const bool model = path.starts_with("model.");
  const std::string prefix = fmt::format("{}=", model ? path.substr(6) : path);
  const auto& list = model ? s.workload.model_sets : s.sets;
  for (auto it = list.rbegin(); it != list.rend(); ++it) {
    if (it->starts_with(prefix)) return it->substr(prefix.size());
  }
  return "";
}

Axis parse_axis(std::string_view text, std::string_view source) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    throw InputError::at(SourcePos{std::string(source)}, "'{}' is not PATH=V1,V2,...", text);
  }
  Axis a{std::string(text.substr(0, eq)), {}};
  std::string_view rest = text.substr(eq + 1);
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view v = rest.substr(0, comma);
    if (v.empty())
      throw InputError::at(SourcePos{std::string(source)}, "'{}': an empty value", text);
    // The same value spelled twice ("1k" and "1000") too.
    const auto same = std::find_if(a.values.begin(), a.values.end(), [&](const std::string& x) {
      return canonical_quantity(x) == canonical_quantity(v);
    });
    if (same != a.values.end()) {
      throw InputError::at(SourcePos{std::string(source)},
                           "'{}': {} appears twice{}: its points would run twice", text, v,
                           *same == v ? "" : fmt::format(" (as {})", *same));
    }
    a.values.emplace_back(v);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  // Checks the path and every value now, before any work.
  Scenario probe;
  for (const std::string& v : a.values) set_field(probe, a.path, v, source);
  return a;
}

std::vector<std::pair<Scenario, std::vector<std::string>>> expand_grid(
    const Scenario& base, const std::vector<Axis>& axes) {
  std::vector<std::pair<Scenario, std::vector<std::string>>> out = {{base, {}}};
  for (const Axis& a : axes) {
    std::vector<std::pair<Scenario, std::vector<std::string>>> next;
    for (const auto& [s, values] : out) {
      for (const std::string& v : a.values) {
        auto point = std::pair{s, values};
        set_field(point.first, a.path, v, "--vary");
        point.second.push_back(v);
        next.push_back(std::move(point));
      }
    }
    out = std::move(next);
  }
  return out;
}

void check_lenient(const WorkloadSource& w) {
  if (!w.hf_lenient || !w.hf_config.empty()) return;
  throw InputError::at(SourcePos{"lenient"}, "applies to an hf_config import, not to {}",
                       w.file.empty() ? fmt::format("model '{}'", model_label(w))
                                      : fmt::format("workload file '{}'", w.file));
}

traces::Arch load_model(const WorkloadSource& w) {
  check_lenient(w);
  if (!w.hf_config.empty()) {
    return traces::import_hf_config(w.hf_config, {w.hf_lenient, nullptr, w.lenient_flag});
  }
  const std::string file = traces::find_arch(w.model.empty() ? std::string(kDefaultModel) : w.model,
                                             config_dir(), w.model_flag);
  return traces::load_arch(file, w.model_sets, false, w.sets_flag);
}

namespace {

/// ", source KEY" for a model field that cites one, else empty.
std::string source_of(const traces::Arch& a, const std::string& field) {
  const auto src = a.origins.fields.find(field);
  if (src == a.origins.fields.end() || src->second.source.empty()) return "";
  return fmt::format(", source {}", src->second.source);
}

}  // namespace

std::string weights_warning(const traces::Arch& a, const Scenario& s) {
  if (!s.workload.file.empty()) return "";
  return weights_warning(a, s.workload.gen.weight_dtype, s.naming);
}

std::string weights_warning(const traces::Arch& a, Dtype w, Naming naming) {
  const int bits = kDtypeBits[static_cast<size_t>(w)];
  const int shipped = kDtypeBits[static_cast<size_t>(a.checkpoint_dtype)];
  if (bits <= shipped) return "";
  const std::string cite = source_of(a, "checkpoint_dtype");
  return fmt::format(
      "{}'s checkpoint holds {} weights (checkpoint_dtype{}); these are {}, {}x its bytes: {} "
      "plans them as shipped",
      a.name, name_of(a.checkpoint_dtype), cite, name_of(w), bits / shipped,
      naming == Naming::kFields ? fmt::format("weight_dtype='{}'", name_of(a.checkpoint_dtype))
                                : fmt::format("--weight-dtype {}", name_of(a.checkpoint_dtype)));
}

std::vector<std::string> model_warnings(const Scenario& s) {
  if (!s.workload.file.empty()) return {};
  return model_warnings(load_model(s.workload), s);
}

std::vector<std::string> model_warnings(const traces::Arch& a, const Scenario& s) {
  std::vector<std::string> out;
  for (std::string w : {context_warning(a, s), weights_warning(a, s)}) {
    if (!w.empty()) out.push_back(std::move(w));
  }
  return out;
}

std::string context_warning(const Scenario& s) {
  if (!s.workload.file.empty()) return "";
  return context_warning(load_model(s.workload), s);
}

std::string context_warning(const traces::Arch& a, const Scenario& s) {
  if (a.max_context <= 0) return "";
  const traces::GenOptions& g = s.workload.gen;
  int64_t positions = 0;
  std::string what;
  if (s.request) {
    positions = s.request->prompt + s.request->generate;
    what = fmt::format("a prompt of {} tokens and {} generated", s.request->prompt,
                       s.request->generate);
  } else if (g.phase == traces::Phase::kDecode) {
    positions = g.context + g.tokens;
    what = fmt::format("a context of {} tokens and {} generated", g.context, g.tokens);
  } else {
    positions = g.seq;
    what = fmt::format("a sequence of {} tokens", g.seq);
  }
  if (positions <= a.max_context) return "";
  return fmt::format(
      "{}: {} positions, more than {}; results past it assume the model runs that far", what,
      positions, max_context_text(a));
}

std::string max_context_text(const traces::Arch& a) {
  return fmt::format("the {} that {} declares (max_context{})", a.max_context, a.name,
                     source_of(a, "max_context"));
}

std::string model_label(const WorkloadSource& w) {
  if (!w.hf_config.empty()) return w.hf_config;
  return w.model.empty() ? std::string(kDefaultModel) : w.model;
}

void set_command_defaults(traces::GenOptions& g, Command c) {
  g.batch = c == Command::kWhatIf ? 16 : 1;
  g.context = c == Command::kWhatIf ? 32768 : 4096;
  g.tokens = 8;
}

void cut_default_context(Scenario& s) {
  const WorkloadSource& w = s.workload;
  if (!w.file.empty() || s.request || w.gen.phase != traces::Phase::kDecode) return;
  cut_default_context(s, load_model(w));
}

void cut_default_context(Scenario& s, const traces::Arch& a) {
  WorkloadSource& w = s.workload;
  if (!w.file.empty() || s.request || w.gen.phase != traces::Phase::kDecode) return;
  const int64_t room = int64_t{a.max_context} - w.gen.tokens;
  if (a.max_context <= 0 || room < 1 || w.gen.context <= room) return;
  w.context_cut_from = w.gen.context;
  w.gen.context = room;
}

std::string context_note(const Scenario& s, std::string_view model_name) {
  const WorkloadSource& w = s.workload;
  if (w.context_cut_from == 0) return "";
  const std::string model = model_name.empty() ? model_label(w) : std::string(model_name);
  return fmt::format(
      "context {} tokens: the default {} cut to the {} positions that {} declares "
      "(max_context) with {} generated; {} past it",
      w.gen.context, w.context_cut_from, w.gen.context + w.gen.tokens, model, w.gen.tokens,
      s.naming == Naming::kFields ? "give context= to go" : "give --context to go");
}

std::string describe_workload(const Scenario& s, std::string_view searched) {
  const WorkloadSource& w = s.workload;
  if (!w.file.empty()) return w.file;
  const std::string model = model_label(w);
  const traces::GenOptions& g = w.gen;
  // A searched field is the search's start, not the workload's size.
  const std::string batch = searched == "batch" ? fmt::format("batch searched from {}", g.batch)
                                                : fmt::format("batch {}", g.batch);
  if (s.request) {
    return fmt::format("{}, {}: prefill of {} tokens, then {} generated", model, batch,
                       searched == "prompt"
                           ? fmt::format("a prompt searched from {}", s.request->prompt)
                           : std::to_string(s.request->prompt),
                       s.request->generate);
  }
  switch (g.phase) {
    case traces::Phase::kPrefill:
      return fmt::format("{} prefill, {}, {} tokens", model, batch, g.seq);
    case traces::Phase::kTrain:
      return fmt::format("{} training step, {}, {} tokens{}", model, batch, g.seq,
                         g.checkpoint ? ", checkpointed" : "");
    case traces::Phase::kDecode:
      break;
  }
  return fmt::format(
      "{} decode, {}, {} token{} from {}", model, batch, g.tokens, g.tokens == 1 ? "" : "s",
      searched == "context" ? fmt::format("a context searched from {} tokens", g.context)
                            : fmt::format("a {}-token context", g.context));
}

}  // namespace tierflow::study
