#include "tools/study/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/checked.h"
#include "core/io.h"
#include "core/json_reader.h"
#include "core/sha256.h"
#include "core/yaml_input.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "tools/study/result_db.h"
#include "tools/study/serve_row.h"
#include "tools/study/study.h"
#include "tools/study/target.h"
#include "traces/arch_loader.h"

namespace tierflow::study {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSpecKeys[] = {"name", "description", "kind", "base", "axes"};
constexpr std::string_view kKinds[] = {"step", "serve"};

/// Fields whose value is a file: relative paths are taken from the spec's folder.
bool is_file_field(std::string_view path, std::string_view value) {
  if (path == "hw" || path == "hf_config" || path == "workload" || path == "trace" ||
      path == "routing_trace") {
    return true;
  }
  // A model is a shipped name or a model YAML.
  return path == "model" && (value.find('/') != std::string_view::npos || value.ends_with(".yaml"));
}

/// Keeps a file field's value as the spec wrote it, for the rows (Scenario::written); any
/// other value of the field forgets it.
void keep_written(WrittenFiles& written, std::string_view path, const std::string& value) {
  if (is_file_field(path, value) && !value.empty()) {
    written.insert_or_assign(std::string(path), value);
  } else if (const auto it = written.find(path); it != written.end()) {
    written.erase(it);
  }
}

/// A value as set_field() takes it: file fields resolved against the spec's folder, a bare
/// topology name (`h100-sxm-8gpu`) as the shipped file.
std::string resolve(std::string_view path, const std::string& value, const std::string& dir,
                    const SourcePos& at) {
  if (!is_file_field(path, value) || value.empty()) return value;
  if (path == "hw" && value.find('/') == std::string::npos && !value.ends_with(".yaml")) {
    try {
      std::string file = find_topology(value, "hw");
      guard_file(file, "a file the sweep spec names");
      return file;
    } catch (const InputError& e) {
      throw InputError(at, e.message());
    }
  }
  // Absolute: the same point wherever the sweep is started from.
  const fs::path p(value);
  std::string file =
      fs::absolute(p.is_absolute() ? p : fs::path(dir) / p).lexically_normal().string();
  // Found now, at the value: a missing file would otherwise be found as the database is made.
  std::error_code ec;
  if (!fs::exists(file, ec)) throw InputError::at(at, "{}: no such file", file);
  if (fs::is_directory(file, ec)) throw InputError::at(at, "{}: is a directory, not a file", file);
  // An input of the sweep from now: an output naming it is refused before the database is
  // made, not after every point has run.
  guard_file(file, "a file the sweep spec names");
  return file;
}

/// The text of a scalar value node; null is the empty value (e.g. no pins).
std::string scalar_text(const YAML::Node& n, const std::string& file, std::string_view what) {
  if (n.IsNull()) return "";
  if (!n.IsScalar()) {
    throw InputError::at(schema::pos_of(n, file), "{} must be a single value, not {}", what,
                         schema::node_kind(n));
  }
  return n.Scalar();
}

/// set_field() with its error moved to the spec's position.
void set_at(Scenario& s, const std::string& path, const std::string& value, const SourcePos& at) {
  try {
    set_field(s, path, value, at.file);
  } catch (const InputError& e) {
    throw InputError(at, e.message());
  }
}

/// set_serve_field() with its error moved to the spec's position.
void set_serve_at(ServeSettings& s, const std::string& path, const std::string& value,
                  const SourcePos& at) {
  try {
    set_serve_field(s, path, value, at.file);
  } catch (const InputError& e) {
    throw InputError(at, e.message());
  }
}

/// Throws InputError at `at` unless set_serve_field() knows `path` (with "did you mean").
void check_serve_field(const std::string& path, const SourcePos& at) {
  if (is_topology_path(path) || path.starts_with("model.") ||
      std::ranges::find(serve_field_names(), path) != serve_field_names().end()) {
    return;
  }
  ServeSettings probe;
  set_serve_at(probe, path, "", at);  // throws: unknown, with the names and "did you mean"
}

/// Fields that change what the topology, target or pins resolve to.
bool is_topology_field(std::string_view path) {
  return is_topology_path(path) || path == "hw" || path == "device" || path == "devices" ||
         path == "pins";
}

bool is_model_field(std::string_view path) {
  return path == "model" || path == "hf_config" || path.starts_with("model.");
}

/// An error from loading a point's inputs, for a message at the spec's position: an
/// override's own position (`--set:1:7`; `set:1:7` and `model_set:1:8` as fields and
/// Python name them) says nothing there; a file's does.
std::string cause(const InputError& e) {
  const std::string& f = e.pos().file;
  const bool override = f.empty() || f.starts_with("--") || f == "set" || f == "model_set";
  return override ? e.message() : e.what();
}

/// An error of one point of the spec, naming the point and the values it took, at the
/// first axis group.
InputError point_error(const SweepSpec& spec, const SweepPoint& p, const InputError& e) {
  std::vector<std::string> values;
  const auto paths = spec.axis_paths();
  for (size_t i = 0; i < paths.size(); ++i) values.push_back(paths[i] + "=" + p.values[i]);
  return InputError::at(spec.groups.empty() ? SourcePos{spec.file} : spec.groups.front().pos,
                        "point {} ({}): {}", p.index, fmt::join(values, ", "), cause(e));
}

/// Loads what a scenario's topology and target need; throws InputError.
void check_topology(const Scenario& s) {
  const std::string hw = s.hw.empty() ? default_topology() : s.hw;
  const hw::Topology topo = hw::load_topology(hw, hw::LoadOptions{s.sets, false, s.name("set")});
  make_target(topo, s.device, s.devices, "devices");
  parse_pins(s.pins, topo);
}

void check_model(const Scenario& s) {
  const WorkloadSource& w = s.workload;
  if (!w.file.empty()) {
    check_lenient(w);  // load_model checks it for a model
    if (!fs::exists(w.file)) throw InputError::at(SourcePos{w.file}, "no such workload file");
    return;
  }
  (void)load_model(w);
}

std::string topology_key(const Scenario& s) {
  return fmt::format("{}\n{}\n{}\n{}\n{}", s.hw, fmt::join(s.sets, "\n"), s.device, s.devices,
                     fmt::join(s.pins, ";"));
}

std::string model_key(const Scenario& s) {
  return fmt::format("{}\n{}\n{}\n{}\n{}", s.workload.model, s.workload.hf_config,
                     fmt::join(s.workload.model_sets, "\n"), s.workload.file,
                     s.workload.hf_lenient);
}

/// Every input of a scenario, one per line: equal keys, equal trials.
std::string scenario_key(const Scenario& s) {
  std::string k = fmt::format("hw={}\n", s.hw.empty() ? default_topology() : s.hw);
  for (const std::string& set : s.sets) k += "set " + set + "\n";
  for (const std::string& m : s.workload.model_sets) k += "model." + m + "\n";
  for (std::string_view f : field_names()) {
    // Fields added later are left out at their defaults: earlier sweeps keep their ids.
    const std::string v = get_field(s, f);
    if ((f == "routing_skew" || f == "routing_repeat") && v == "0") continue;
    if ((f == "expert_cache" && v == "none") || (f == "routing_trace" && v.empty()) ||
        (f == "micro_batches" && v == "1") || (f == "on_host" && v.empty())) {
      continue;
    }
    k += fmt::format("{}={}\n", f, v);
  }
  k += fmt::format("request={}\n", s.request.has_value());
  return k;
}

/// What decides a point's workloads: points with equal keys share them.
std::string workload_key(const Scenario& s) {
  std::string k = model_key(s);
  constexpr std::string_view kGen[] = {"batch",     "seq",           "context",      "tokens",
                                       "prompt",    "generate",      "tp",           "kv_block",
                                       "layers",    "phase",         "weight_dtype", "kv_dtype",
                                       "act_dtype", "compute_dtype", "quant_group",  "quant_zeros",
                                       "routing",   "seed",          "checkpoint",
                                       "routing_skew", "routing_repeat", "routing_trace",
                                       "micro_batches"};
  for (std::string_view f : kGen) {
    k += '|';
    k += get_field(s, f);
  }
  return k;
}

/// Checks the topology or model that `value` of the axis `path` gives alone on `base`; an
/// error sits at `at` (the value's place: its spec position, or `--vary`), not at the
/// position of the override it became (`--set:1:7`).
void check_axis_value(const Scenario& base, const std::string& path, const std::string& value,
                      const SourcePos& at) {
  const bool topo = is_topology_field(path), model = is_model_field(path);
  if (!topo && !model) return;
  Scenario s = base;
  set_field(s, path, value, at.file);
  try {
    if (topo) check_topology(s);
    if (model) check_model(s);
  } catch (const InputError& e) {
    // Some errors name the path already ("'links.x.bandwidth': no link ...").
    const std::string why = cause(e);
    throw InputError::at(at, "{}{}", why.find(path) == std::string::npos ? path + ": " : "", why);
  }
}

/// Checks every distinct topology and model the points use, each once; an error names the
/// point and sits at the value of the axis most likely at fault.
void check_points(const SweepSpec& spec, const std::vector<SweepPoint>& points) {
  // Each axis value alone on the base first: most mistakes sit in one value.
  for (const AxisGroup& g : spec.groups) {
    for (size_t k = 0; k < g.axes.size(); ++k) {
      const Axis& a = g.axes[k];
      for (size_t i = 0; i < a.values.size(); ++i) {
        check_axis_value(spec.base, a.path,
                         resolve(a.path, a.values[i], spec.dir, g.value_pos[k][i]),
                         g.value_pos[k][i]);
      }
    }
  }
  std::set<std::string> topologies, models;
  for (const SweepPoint& p : points) {
    const Scenario& s = p.scenario;
    try {
      if (topologies.insert(topology_key(s)).second) check_topology(s);
      if (models.insert(model_key(s)).second) check_model(s);
      check_policy(s.policy, "policy");
      if (s.request && !s.workload.file.empty()) {
        throw InputError::at(SourcePos{"prompt"},
                             "a request is generated from a model: give model or hf_config, not a workload file");
      }
    } catch (const InputError& e) {
      throw point_error(spec, p, e);
    }
  }
}

/// Every input of a serving point, one per line: equal keys, equal runs.
std::string serve_key(const ServeSettings& s) {
  std::string k = fmt::format("hw={}\n", s.hw.empty() ? default_topology() : s.hw);
  for (const std::string& set : s.sets) k += "set " + set + "\n";
  for (const std::string& m : s.model.model_sets) k += "model." + m + "\n";
  for (std::string_view f : serve_field_names()) {
    if (f != "hw") k += fmt::format("{}={}\n", f, get_serve_field(s, f));
  }
  return k;
}

/// Prepares a serving point and checks that it can serve; a model that does not fit is a
/// result of the point (infeasible), not an error of the spec.
void check_serve_point(const ServeSettings& s, ServeTraceCache& traces) {
  try {
    check_serve(prepare_serve(s, &traces));
  } catch (const serve::DoesNotFit&) {
  }
}

/// check_points() for a serving spec: each axis value on the base (a zipped group's values
/// together, as its points take them: one may need another, such as spec_accept its
/// spec_tokens), then every distinct point.
void check_serve_points(const SweepSpec& spec, const std::vector<SweepPoint>& points) {
  ServeTraceCache traces;
  std::set<std::string> seen;
  for (const AxisGroup& g : spec.groups) {
    const size_t n = g.axes.front().values.size();
    for (size_t i = 0; i < n; ++i) {
      ServeSettings s = spec.serve_base;
      for (size_t k = 0; k < g.axes.size(); ++k) {
        const Axis& a = g.axes[k];
        set_serve_field(s, a.path, resolve(a.path, a.values[i], spec.dir, g.value_pos[k][i]),
                        spec.file);
      }
      if (!seen.insert(serve_key(s)).second) continue;
      try {
        check_serve_point(s, traces);
      } catch (const InputError& e) {
        // The axis whose value the error names (the group's first when none), else a field
        // of the base it names.
        const std::string why = cause(e);
        size_t k = 0;
        for (size_t j = 0; j < g.axes.size(); ++j) {
          if (e.pos().file == g.axes[j].path) k = j;
        }
        const Axis& a = g.axes[k];
        const auto base = spec.base_pos.find(e.pos().file);
        if (e.pos().file != a.path && base != spec.base_pos.end()) {
          throw InputError::at(base->second, "{}: {}", e.pos().file, e.message());
        }
        throw InputError::at(g.value_pos[k][i], "{}{}",
                             why.find(a.path) == std::string::npos ? a.path + ": " : "", why);
      }
    }
  }
  for (const SweepPoint& p : points) {
    if (!seen.insert(serve_key(p.serve)).second) continue;
    try {
      check_serve_point(p.serve, traces);
    } catch (const InputError& e) {
      throw point_error(spec, p, e);
    }
  }
}

/// Runs a serving point: its row and exit class (0 ok, 1 the model does not fit, 2 bad
/// input, 3 internal error).
std::pair<Row, int> run_serve_point(const ServeSettings& s, ServeTraceCache& traces) {
  ServeOutcome o;
  o.settings = s;
  std::optional<ServeSetup> setup;
  std::optional<ServeStudy> run;
  int exit_class = 0;
  try {
    setup.emplace(prepare_serve(s, &traces));
    o.setup = &*setup;
    run.emplace(run_serve(*setup));
    o.run = &*run;
  } catch (const serve::DoesNotFit& e) {
    o.status = "infeasible";
    o.reason = e.what();
    exit_class = 1;
  } catch (const InputError& e) {
    o.status = "failed";
    o.reason = e.what();
    exit_class = 2;
  } catch (const std::exception& e) {
    o.status = "failed";
    o.reason = fmt::format("internal error: {}", e.what());
    exit_class = 3;
  }
  return {serve_row_of(o), exit_class};
}

/// A trial that threw: its row carries the scenario and the error.
Trial failed_trial(const Scenario& s, std::string reason) {
  Trial t;
  t.scenario = s;
  t.phases.emplace_back();
  t.reason = std::move(reason);
  return t;
}

}  // namespace

void check_axes(const Scenario& base, const std::vector<Axis>& axes, std::string_view source) {
  for (const Axis& a : axes) {
    for (const std::string& v : a.values)
      check_axis_value(base, a.path, v, SourcePos{std::string(source)});
  }
}

std::vector<std::string> SweepSpec::axis_paths() const {
  std::vector<std::string> out;
  for (const AxisGroup& g : groups) {
    for (const Axis& a : g.axes) out.push_back(a.path);
  }
  return out;
}

int64_t SweepSpec::size() const {
  uint64_t n = 1;
  for (const AxisGroup& g : groups) n = saturating_mul(n, g.axes.front().values.size());
  return static_cast<int64_t>(std::min<uint64_t>(n, INT64_MAX));
}

std::string Shard::text() const { return fmt::format("{}/{}", index, count); }

Shard parse_shard(std::string_view text, std::string_view source) {
  const SourcePos at{std::string(source)};
  const auto slash = text.find('/');
  Shard s;
  auto number = [&](std::string_view t, int64_t& out) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return ec == std::errc() && end == t.data() + t.size();
  };
  if (slash == std::string_view::npos || !number(text.substr(0, slash), s.index) ||
      !number(text.substr(slash + 1), s.count)) {
    throw InputError::at(at, "'{}' is not I/N (shard I of N, counting from 0)", text);
  }
  if (s.count < 1 || s.index < 0 || s.index >= s.count) {
    throw InputError::at(at, "'{}': a shard is I/N with 0 <= I < N (e.g. 0/4 .. 3/4)", text);
  }
  return s;
}

SweepSpec parse_sweep_spec(const std::string& text, const std::string& name, const std::string& dir) {
  const YAML::Node root = schema::load_yaml_text(text, name);
  schema::check_unique_keys(root, name);
  schema::expect_map(root, name, "a sweep spec");
  SweepSpec spec;
  // Errors and notes name the fields, as the spec writes them (not the CLI's flags).
  spec.serve_base.names = SettingNames::kFields;
  spec.base.naming = Naming::kFields;
  spec.file = name;
  spec.text = text;
  spec.name = fs::path(name).stem().string();
  bool has_axes = false;
  // The kind decides what the fields of `base` and `axes` are, wherever it is written.
  if (const YAML::Node kind = root["kind"]; kind) {
    const std::string k = scalar_text(kind, name, "kind");
    if (std::ranges::find(kKinds, k) == std::end(kKinds)) {
      throw InputError::at(schema::pos_of(kind, name),
                           "unknown kind '{}': step (plan and simulate each point, the default) "
                           "or serve (serve a request trace){}",
                           k, did_you_mean(k, std::span<const std::string_view>(kKinds)));
    }
    spec.kind = k == "serve" ? SweepSpec::Kind::kServe : SweepSpec::Kind::kStep;
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    const YAML::Node key_node = it->first;
    const SourcePos key_pos = schema::pos_of(key_node, name);
    const std::string key = key_node.Scalar();
    if (schema::is_extension_key(key)) continue;
    if (std::ranges::find(kSpecKeys, key) == std::end(kSpecKeys)) {
      throw InputError::at(key_pos, "unknown key '{}' in a sweep spec (keys: name, description, kind, base, axes){}",
                           key, did_you_mean(key, std::span<const std::string_view>(kSpecKeys)));
    }
    const YAML::Node v = it->second;
    if (key == "kind") {
      continue;  // read first
    } else if (key == "name") {
      spec.name = scalar_text(v, name, "name");
    } else if (key == "description") {
      spec.description = scalar_text(v, name, "description");
    } else if (key == "base") {
      schema::expect_map(v, name, "base");
      for (auto f = v.begin(); f != v.end(); ++f) {
        const YAML::Node field = f->first, val = f->second;
        const std::string path = field.Scalar();
        // A value written elsewhere (an anchor, a merged mapping) is reported where base uses
        // it, with where it is written, as a topology's fields are (schema::read_object).
        const schema::EntryUse use = schema::entry_use(v, field, val, name);
        schema::read_entry(use, path, [&] {
          const SourcePos at = schema::pos_of(val, name);
          std::string value;
          if (val.IsSequence()) {
            if (path != "pins" || spec.serving()) {
              throw InputError::at(at, "base '{}' takes one value; vary it under axes", path);
            }
            std::vector<std::string> pins;
            for (const YAML::Node& p : val) pins.push_back(scalar_text(p, name, "a pin"));
            value = fmt::format("{}", fmt::join(pins, ";"));
          } else {
            value = scalar_text(val, name, "a base value");
          }
          if (spec.serving()) {
            set_serve_at(spec.serve_base, path, resolve(path, value, dir, at), at);
            keep_written(spec.serve_base.written, path, value);
            spec.base_pos.emplace(path, use.moved() ? use.at : at);
          } else {
            set_at(spec.base, path, resolve(path, value, dir, at), schema::pos_of(field, name));
            keep_written(spec.base.written, path, value);
          }
        });
      }
    } else {
      has_axes = true;
      schema::expect_list(v, name, "axes");
      for (const YAML::Node& item : v) {
        AxisGroup g;
        g.pos = schema::pos_of(item, name);
        schema::expect_map(item, name, "an axis (PATH: [values], or several PATHs zipped)");
        for (auto a = item.begin(); a != item.end(); ++a) {
          const YAML::Node axis_key = a->first, vals = a->second;
          Axis axis{axis_key.Scalar(), {}};
          // Values written elsewhere (an anchor's list, a merged mapping's axis) are reported
          // where this axis uses them: at its key, or at the merging item.
          const schema::EntryUse use = schema::entry_use(item, axis_key, vals, name);
          const SourcePos at = use.at;
          if (spec.serving()) check_serve_field(axis.path, at);
          if (axis.path == "policy" && vals.IsScalar() && vals.Scalar() == "all") {
            for (const planner::Policy& p : planner::policies()) axis.values.emplace_back(p.name);
          } else if (vals.IsSequence()) {
            for (const YAML::Node& x : vals) axis.values.push_back(scalar_text(x, name, "an axis value"));
          } else {
            throw InputError::at(at, "axis '{}' needs a list of values ([v1, v2, ...]){}", axis.path,
                                 axis.path == "policy" ? " or 'all'" : "");
          }
          if (axis.values.empty()) throw InputError::at(at, "axis '{}' has no values", axis.path);
          if (!spec.serving()) {
            try {
              check_field(axis.path, name);
            } catch (const InputError& e) {
              throw InputError(at, e.message());
            }
          }
          for (const std::string& p : spec.axis_paths()) {
            if (p == axis.path) throw InputError::at(at, "axis '{}' appears twice", axis.path);
          }
          for (const Axis& other : g.axes) {
            if (other.path == axis.path) throw InputError::at(at, "axis '{}' appears twice", axis.path);
          }
          // Each value as set_field() reads it, at its own position.
          std::vector<SourcePos> value_pos;
          for (size_t i = 0; i < axis.values.size(); ++i) {
            const bool here = !use.moved() && vals.IsSequence();
            value_pos.push_back(here ? schema::pos_of(vals[i], name) : at);
            if (spec.serving()) {
              ServeSettings probe = spec.serve_base;
              set_serve_at(probe, axis.path,
                           resolve(axis.path, axis.values[i], dir, value_pos.back()),
                           value_pos.back());
              continue;
            }
            Scenario probe = spec.base;
            set_at(probe, axis.path, resolve(axis.path, axis.values[i], dir, value_pos.back()),
                   value_pos.back());
            if (axis.path == "policy") {
              try {
                check_policy(axis.values[i], "policy");
              } catch (const InputError& e) {
                throw InputError(value_pos.back(), e.message());
              }
            }
          }
          g.value_pos.push_back(std::move(value_pos));
          if (!g.axes.empty() && g.axes.front().values.size() != axis.values.size()) {
            throw InputError::at(at, "zipped axes advance together: '{}' has {} values, '{}' has {}",
                                 axis.path, axis.values.size(), g.axes.front().path,
                                 g.axes.front().values.size());
          }
          g.axes.push_back(std::move(axis));
        }
        if (g.axes.empty()) throw InputError::at(g.pos, "an empty axis");
        // A value given twice (the same tuple, for zipped axes) would run its points twice.
        std::map<std::vector<std::string>, size_t> seen;
        for (size_t i = 0; i < g.axes.front().values.size(); ++i) {
          std::vector<std::string> tuple;
          // Two spellings of one value ("1k" and "1000") are the same point.
          for (const Axis& a : g.axes) {
            tuple.push_back(a.path + "=" + canonical_quantity(a.values[i]));
          }
          const auto [first, fresh] = seen.emplace(tuple, i);
          if (!fresh) {
            std::vector<std::string> given;
            for (const Axis& a : g.axes) given.push_back(a.path + "=" + a.values[i]);
            throw InputError::at(g.value_pos.front()[i],
                                 "{} appears twice in the axis (first at {}): its points would "
                                 "run twice",
                                 fmt::join(given, ", "), g.value_pos.front()[first->second].str());
          }
        }
        spec.groups.push_back(std::move(g));
      }
    }
  }
  if (!has_axes) {
    throw InputError::at(schema::pos_of(root, name), "a sweep spec needs 'axes' (a list of PATH: [values])");
  }
  // Counted before any point is made: a grid's size is the product of its axes' lengths.
  if (spec.size() > kMaxSweepPoints) {
    std::vector<std::string> lengths;
    for (const AxisGroup& g : spec.groups) lengths.push_back(std::to_string(g.axes.front().values.size()));
    throw InputError::at(spec.groups.front().pos,
                         "the grid has {} points ({}), above the largest sweep, {}; split it into "
                         "several specs",
                         spec.size() == INT64_MAX ? std::string("more than 9.2e18")
                                                  : std::to_string(spec.size()),
                         fmt::join(lengths, " x "), kMaxSweepPoints);
  }
  // Axis values stay as written (the axis columns); file values resolve when points are made.
  spec.dir = dir;
  if (spec.serving()) {
    check_serve_points(spec, sweep_points(spec));
  } else {
    check_points(spec, sweep_points(spec));
  }
  return spec;
}

SweepSpec load_sweep_spec(const std::string& path) {
  const FileText text(path);
  const std::string dir = fs::path(path).parent_path().string();
  return parse_sweep_spec(std::string(text.view()), path, dir.empty() ? "." : dir);
}

std::vector<SweepPoint> sweep_points(const SweepSpec& spec) {
  std::vector<SweepPoint> out = {SweepPoint{0, spec.base, spec.serve_base, {}}};
  for (const AxisGroup& g : spec.groups) {
    std::vector<SweepPoint> next;
    next.reserve(out.size() * g.axes.front().values.size());
    for (const SweepPoint& p : out) {
      for (size_t i = 0; i < g.axes.front().values.size(); ++i) {
        SweepPoint q = p;
        for (const Axis& a : g.axes) {
          const std::string v = resolve(a.path, a.values[i], spec.dir, g.pos);
          if (spec.serving()) {
            set_serve_field(q.serve, a.path, v, spec.file);
            keep_written(q.serve.written, a.path, a.values[i]);
          } else {
            set_field(q.scenario, a.path, v, spec.file);
            keep_written(q.scenario.written, a.path, a.values[i]);
          }
          q.values.push_back(a.values[i]);
        }
        next.push_back(std::move(q));
      }
    }
    out = std::move(next);
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].index = static_cast<int64_t>(i);
  return out;
}

std::string sweep_id(const SweepSpec& spec) {
  // Files stand in by their bytes, not their paths: a spec run from another folder, or a
  // shard run on another machine, has the same id; an edited topology or model has another.
  std::map<std::string, std::string> hashes;
  auto hash = [&](const std::string& path) -> const std::string& {
    auto it = hashes.find(path);
    if (it == hashes.end()) it = hashes.emplace(path, "sha256:" + sha256_hex(FileText(path).view())).first;
    return it->second;
  };
  std::string all = "tierflow.sweep/1\n";
  if (spec.serving()) all += "kind serve\n";
  for (const std::string& p : spec.axis_paths()) all += "axis " + p + "\n";
  for (const SweepPoint& p : sweep_points(spec)) {
    if (spec.serving()) {
      ServeSettings s = p.serve;
      s.hw = hash(s.hw.empty() ? default_topology() : find_topology(s.hw, "hw"));
      if (!s.trace.empty()) s.trace = hash(s.trace);
      if (!s.model.hf_config.empty()) {
        s.model.hf_config = hash(s.model.hf_config);
      } else {
        const std::string model = s.model.model.empty() ? std::string(kDefaultModel) : s.model.model;
        s.model.model = hash(traces::find_arch(model, config_dir(), "model"));
      }
      all += fmt::format("point {}\n{}", p.index, serve_key(s));
      continue;
    }
    Scenario s = p.scenario;
    s.hw = hash(s.hw.empty() ? default_topology() : s.hw);
    WorkloadSource& w = s.workload;
    if (!w.gen.routing_trace.empty()) w.gen.routing_trace = hash(w.gen.routing_trace);
    if (!w.file.empty()) {
      w.file = hash(w.file);
    } else if (!w.hf_config.empty()) {
      w.hf_config = hash(w.hf_config);
    } else {
      const std::string model = w.model.empty() ? std::string(kDefaultModel) : w.model;
      w.model = hash(traces::find_arch(model, config_dir(), "model"));
    }
    all += fmt::format("point {}\n{}", p.index, scenario_key(s));
  }
  return sha256_hex(all);
}

SweepSummary run_sweep(const SweepSpec& spec, ResultDb& db, const SweepOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const std::vector<SweepPoint> points = sweep_points(spec);
  const std::map<int64_t, int> before = db.recorded();

  SweepSummary sum;
  SweepProgress prog;
  std::vector<const SweepPoint*> todo;
  for (const SweepPoint& p : points) {
    if (!o.shard.holds(p.index)) continue;
    ++sum.points;
    const auto it = before.find(p.index);
    if (it != before.end() && (it->second <= 1 || !o.retry_failed)) {
      ++sum.skipped;
      (it->second == 0 ? prog.ok : it->second == 1 ? prog.infeasible : prog.failed) += 1;
      continue;
    }
    todo.push_back(&p);
  }
  prog.total = sum.points;
  prog.done = sum.skipped;

  // Points that share a workload run next to each other, in grid order of their first;
  // within a workload the tierflow policy's first (its search takes several times a
  // baseline's), so that the sweep does not end on one long point while the other jobs idle.
  std::map<std::string, size_t> first;
  struct Turn {
    size_t group;
    bool later;  ///< not a tierflow-policy point
    const SweepPoint* point;
  };
  std::vector<Turn> turns;
  for (const SweepPoint* p : todo) {
    const std::string key = spec.serving() ? p->serve.trace + "\n" + p->serve.arrivals
                                           : workload_key(p->scenario);
    const size_t f = first.try_emplace(key, first.size()).first->second;
    turns.push_back({f, spec.serving() || p->scenario.policy != "tierflow", p});
  }
  std::ranges::stable_sort(turns, [](const Turn& a, const Turn& b) {
    return a.group != b.group ? a.group < b.group : a.later < b.later;
  });

  const unsigned hw_threads = std::max(1u, std::thread::hardware_concurrency());
  unsigned jobs = o.jobs == 0 ? hw_threads : o.jobs;
  jobs = static_cast<unsigned>(std::min<size_t>(jobs, std::max<size_t>(turns.size(), 1)));
  Study study;
  study.probe_with_last_winner();
  ServeTraceCache traces;  // serving points: each trace read once
  // Each running point holds its workloads; a few more stay cached for the next points.
  study.limit_workloads(2 * static_cast<size_t>(jobs) + 2);
  const unsigned plan_threads = std::max(1u, hw_threads / jobs);

  // The turns are taken in order, but for one case: while a workload's first tierflow-
  // policy point runs, a second one of the same workload waits (the other jobs take the
  // baselines after it, when there are any), so that it starts from the winner of its own
  // workload (Study::probe_with_last_winner) instead of one of another workload, or none.
  std::mutex mu;
  std::vector<bool> taken(turns.size(), false);
  size_t first_open = 0;  // every turn before it is taken
  // Per workload group: tierflow-policy points running, and whether one has finished.
  std::vector<size_t> searching(first.size(), 0);
  std::vector<bool> searched(first.size(), false);
  auto take = [&]() -> std::optional<size_t> {
    while (first_open < turns.size() && taken[first_open]) ++first_open;
    if (first_open == turns.size()) return std::nullopt;
    size_t i = first_open;
    const size_t g = turns[i].group;
    if (!turns[i].later && searching[g] > 0 && !searched[g]) {
      size_t j = i;
      while (j < turns.size() && (taken[j] || !turns[j].later)) ++j;
      if (j < turns.size()) i = j;
    }
    taken[i] = true;
    if (!turns[i].later) ++searching[turns[i].group];
    return i;
  };
  std::exception_ptr fatal;  // a database error stops the sweep
  const std::vector<Column>& row_cols = spec.serving() ? serve_columns() : columns();
  const auto notes_column = static_cast<size_t>(
      std::ranges::find(row_cols, std::string_view("notes"), &Column::name) - row_cols.begin());
  TF_ASSERT(notes_column < row_cols.size(), "the row columns have no 'notes'");
  auto worker = [&] {
    while (true) {
      size_t i = 0;
      {
        std::lock_guard lock(mu);
        if (fatal) return;
        const std::optional<size_t> next = take();
        if (!next) return;
        i = *next;
      }
      const SweepPoint& p = *turns[i].point;
      const auto t0 = Clock::now();
      Row row;
      int exit_class = 0;
      if (spec.serving()) {
        std::tie(row, exit_class) = run_serve_point(p.serve, traces);
      } else {
        Scenario s = p.scenario;
        s.threads = plan_threads;
        Trial t;
        try {
          t = study.run(s);
          exit_class = t.ok ? 0 : t.infeasible ? 1 : 3;
        } catch (const InputError& e) {
          t = failed_trial(p.scenario, e.what());
          exit_class = 2;
        } catch (const std::exception& e) {
          t = failed_trial(p.scenario, fmt::format("internal error: {}", e.what()));
          exit_class = 3;
        }
        row = row_of(t);
      }
      const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
      std::lock_guard lock(mu);
      if (!turns[i].later) {
        --searching[turns[i].group];
        searched[turns[i].group] = true;
      }
      if (fatal) return;
      try {
        db.record(p, row, exit_class, wall);
      } catch (...) {
        fatal = std::current_exception();
        return;
      }
      if (const auto& notes = std::get<std::string>(row.cells[notes_column]); !notes.empty()) {
        ++sum.noted;
        if (sum.first_noted < 0 || p.index < sum.first_noted) {
          sum.first_noted = p.index;
          sum.first_notes = notes;
        }
      }
      ++sum.ran;
      ++prog.ran;
      ++prog.done;
      (exit_class == 0 ? prog.ok : exit_class == 1 ? prog.infeasible : prog.failed) += 1;
      prog.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
      if (o.progress) o.progress(prog);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned j = 1; j < jobs; ++j) threads.emplace_back(worker);
  worker();
  for (std::thread& th : threads) th.join();
  if (fatal) std::rethrow_exception(fatal);

  sum.ok = prog.ok;
  sum.infeasible = prog.infeasible;
  sum.failed = prog.failed;
  sum.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return sum;
}

namespace {

std::string clock_text(double s) {
  const auto t = static_cast<int64_t>(std::lround(s));
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

std::string sweep_progress_line(const SweepProgress& p) {
  constexpr int kWidth = 24;
  const double frac = p.total > 0 ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1;
  const int full = static_cast<int>(frac * kWidth);
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.ran) / p.elapsed_s : 0;
  const int64_t left = p.total - p.done;
  return fmt::format("[{}{}] {}/{}  ok {}  infeasible {}  failed {}  {:.1f} points/s  ETA {}",
                     std::string(static_cast<size_t>(full), '#'),
                     std::string(static_cast<size_t>(kWidth - full), '.'), p.done, p.total, p.ok,
                     p.infeasible, p.failed, rate,
                     rate > 0 ? clock_text(static_cast<double>(left) / rate) : "?");
}

std::string sweep_dry_run_text(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                               const Shard& shard) {
  int64_t in_shard = 0;
  for (const auto& p : points) in_shard += shard.holds(p.index) ? 1 : 0;
  std::string out = fmt::format("sweep '{}' (id {}): {} points, shard {} holds {}\n", spec.name,
                                sweep_id(spec).substr(0, 12), points.size(), shard.text(), in_shard);
  for (const AxisGroup& g : spec.groups) {
    for (const Axis& a : g.axes) {
      out += fmt::format("  {}{}: {}\n", a.path, g.axes.size() > 1 ? " (zipped)" : "",
                         fmt::join(a.values, ", "));
    }
  }
  return out;
}

std::string sweep_summary_text(const SweepSpec& spec, const ResultDb& db, const SweepSummary& s,
                               const Shard& shard, size_t points, unsigned jobs,
                               const std::string& output) {
  std::string out = fmt::format(
      "sweep '{}' (id {}): {} points{}\n", spec.name, db.meta("sweep_id").substr(0, 12), s.points,
      shard.count > 1 ? fmt::format(" in shard {} of {}", shard.text(), points) : "");
  out += fmt::format("  ran {} ({} already recorded) in {:.1f} s", s.ran, s.skipped, s.seconds);
  if (s.ran > 0 && s.seconds > 0) {
    out += fmt::format(", {:.0f} points/min on {} job{}",
                       60.0 * static_cast<double>(s.ran) / s.seconds, jobs, jobs == 1 ? "" : "s");
  }
  out += fmt::format("\n  {} ok, {} infeasible, {} failed\n", s.ok, s.infeasible, s.failed);
  if (s.noted > 0) {
    out += fmt::format("  {} point{} run ha{} notes (the 'notes' column); point {}'s: {}\n",
                       s.noted, s.noted == 1 ? "" : "s", s.noted == 1 ? "s" : "ve", s.first_noted,
                       s.first_notes);
  }
  out += fmt::format("  results: {}\n", output);
  return out;
}

void export_results(const ResultDb& db, const std::string& csv, const std::string& jsonl) {
  if (csv.empty() && jsonl.empty()) return;
  const ResultDb::Table t = db.table();
  OutputSet outputs;  // both tables appear together
  if (!csv.empty()) outputs.add(csv, table_csv(t));
  if (!jsonl.empty()) outputs.add(jsonl, table_jsonl(t));
  outputs.publish();
}

}  // namespace tierflow::study
