#include "traces/arch_loader.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>

#include "core/yaml_input.h"
#include "traces/arch_params.h"

namespace tierflow::traces {
namespace {

using schema::Input;

constexpr std::string_view kWhat = "the model";

void apply_overrides(Arch& a, const std::vector<std::string>& overrides, std::string_view flag) {
  for (size_t i = 0; i < overrides.size(); ++i) {
    const schema::SetArg arg =
        schema::split_set(overrides[i], static_cast<int>(i) + 1, "KEY=VALUE layers=2", flag);
    schema::apply_override(a, arch_schema(), arg.path, arg.key_pos,
                           Input{{arg.value}, {arg.value_pos}, arg.value_pos}, std::string(kWhat));
  }
}

void check_sources(const Arch& a, bool require_sources) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : a.sources) keys.push_back(k);
  auto check_key = [&](const std::string& key, const SourcePos& pos) {
    if (key.empty() || key == "--set" || a.sources.count(key) != 0) return;
    throw InputError::at(pos, "unknown source '{}': not defined under 'sources'{}", key,
                         did_you_mean(key, keys));
  };
  check_key(a.source, a.origins.pos_of("source"));
  // Report the first problem in file order, not in key order.
  std::vector<std::pair<std::string, schema::Origin>> fields(a.origins.fields.begin(),
                                                             a.origins.fields.end());
  std::stable_sort(fields.begin(), fields.end(), [](const auto& x, const auto& y) {
    return std::pair(x.second.pos.line, x.second.pos.col) <
           std::pair(y.second.pos.line, y.second.pos.col);
  });
  for (const auto& [key, origin] : fields) {
    check_key(origin.source, origin.source_pos.line ? origin.source_pos : origin.pos);
    const auto* f = arch_schema().find(key);
    if (require_sources && f != nullptr && schema::is_number(f->type) && origin.source.empty() &&
        a.source.empty()) {
      throw InputError::at(origin.pos,
                           "'{}' has no source: write {{value: ..., source: KEY}} or give the "
                           "model a 'source:'",
                           key);
    }
  }
}

Arch parse(const YAML::Node& root, const std::string& file,
           const std::vector<std::string>& overrides, bool require_sources,
           std::string_view sets_flag) {
  if (!root.IsDefined() || root.IsNull()) {
    throw InputError::at(SourcePos{file, 1, 1},
                         "empty model file: expected a mapping with 'tierflow: {}'",
                         kModelFormatTag);
  }
  schema::expect_map(root, file, kWhat);
  const auto& s = arch_schema();
  Arch a;
  a.origins.pos = schema::pos_of(root, file);
  schema::apply_defaults(a, s);

  std::vector<std::string> known;
  for (const auto& k : model_top_level_keys()) known.emplace_back(k.key);
  for (const auto& f : s.fields) known.push_back(f.key);
  std::set<std::string> seen;
  std::string tag;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const SourcePos kp = schema::pos_of(it->first, file);
    if (!it->first.IsScalar()) throw InputError::at(kp, "keys of {} must be plain words", kWhat);
    const std::string key = it->first.Scalar();
    if (!seen.insert(key).second) throw InputError::at(kp, "duplicate key '{}'", key);
    const YAML::Node v = it->second;  // the iterator yields temporaries: copy the handle
    if (schema::is_extension_key(key)) continue;
    if (key == "tierflow") {
      const SourcePos vp = v.IsNull() ? kp : schema::pos_of(v, file);
      if (!v.IsScalar()) {
        throw InputError::at(vp, "'tierflow' expects the format tag {}, got {}", kModelFormatTag,
                             schema::node_kind(v));
      }
      tag = v.Scalar();
      if (tag != kModelFormatTag) {
        throw InputError::at(vp, "unsupported format '{}': a model file reads '{}'", tag,
                             kModelFormatTag);
      }
      continue;
    }
    if (key == "sources") {
      schema::read_sources(v, a.sources, file);
      continue;
    }
    const schema::Field<Arch>* f = s.find(key);
    if (f == nullptr) {
      throw InputError::at(kp, "unknown key '{}' in {}{}", key, kWhat, did_you_mean(key, known));
    }
    // A value written elsewhere is reported where the model uses it, as read_object does.
    const schema::EntryUse use = schema::entry_use(root, it->first, v, file);
    schema::read_entry(use, key, [&] {
      schema::Origin origin;
      Input in = schema::read_input(v, kp, file, key, kWhat, f->type, origin);
      f->set(a, in);
      origin.items = in.item_pos;
      if (use.moved()) origin.pos = use.at;
      a.origins.fields[key] = std::move(origin);
    });
  }
  if (tag.empty()) {
    throw InputError::at(a.origins.pos,
                         "missing required key 'tierflow' (the format tag: write 'tierflow: {}')",
                         kModelFormatTag);
  }
  for (const auto& f : s.fields) {
    if (f.required && a.origins.find(f.key) == nullptr) {
      throw InputError::at(a.origins.pos, "{} is missing required key '{}' ({})", kWhat, f.key,
                           f.description);
    }
  }
  apply_overrides(a, overrides, sets_flag);
  check_sources(a, require_sources);
  resolve_arch(a);
  return a;
}

// ---- consistency ----

[[noreturn]] void fail(const Arch& a, std::string_view key, const std::string& message) {
  throw InputError(a.origins.pos_of(key), fmt::format("model '{}': {}", a.name, message));
}

void check_gqa(Arch& a) {
  if (a.kv_heads == 0) a.kv_heads = a.heads;
  if (a.head_dim == 0) {
    if (a.hidden % a.heads != 0) {
      fail(a, "heads",
           fmt::format("head_dim is not given and hidden {} is not a multiple of heads {}; "
                       "write head_dim",
                       a.hidden, a.heads));
    }
    a.head_dim = a.hidden / a.heads;
  }
  if (a.kv_heads > a.heads || a.heads % a.kv_heads != 0) {
    fail(a, "kv_heads",
         fmt::format("kv_heads {} must divide heads {} (each KV head serves a whole group of "
                     "query heads)",
                     a.kv_heads, a.heads));
  }
  const std::pair<const char*, int> mla[] = {{"q_lora_rank", a.q_lora_rank},
                                             {"kv_lora_rank", a.kv_lora_rank},
                                             {"qk_nope_head_dim", a.qk_nope_head_dim},
                                             {"qk_rope_head_dim", a.qk_rope_head_dim},
                                             {"v_head_dim", a.v_head_dim}};
  for (const auto& [k, v] : mla) {
    if (v != 0) fail(a, k, fmt::format("'{}' applies only to 'attention: mla'", k));
  }
}

void check_mla(Arch& a) {
  const std::pair<const char*, int> need[] = {{"kv_lora_rank", a.kv_lora_rank},
                                              {"qk_nope_head_dim", a.qk_nope_head_dim},
                                              {"qk_rope_head_dim", a.qk_rope_head_dim},
                                              {"v_head_dim", a.v_head_dim}};
  for (const auto& [k, v] : need) {
    if (v == 0) fail(a, "attention", fmt::format("'attention: mla' needs '{}' > 0", k));
  }
  // Only the q·k width means anything for MLA; keep head_dim equal to it.
  if (a.head_dim == 0) a.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
  if (a.kv_heads == 0) a.kv_heads = a.heads;
  const std::pair<const char*, bool> unmodelled[] = {
      {"qkv_bias", a.qkv_bias}, {"o_bias", a.o_bias}, {"qk_norm", a.qk_norm}};
  for (const auto& [k, on] : unmodelled) {
    if (on) {
      fail(a, k,
           fmt::format("'{}' is not modelled for 'attention: mla' (no released MLA "
                       "model uses it)",
                       k));
    }
  }
}

void check_moe(const Arch& a) {
  if (a.experts == 0) {
    // Fields that only mean something with experts must keep their defaults.
    const std::pair<const char*, bool> set[] = {{"experts_per_token", a.experts_per_token != 0},
                                                {"shared_experts", a.shared_experts != 0},
                                                {"moe_intermediate", a.moe_intermediate != 0},
                                                {"shared_intermediate", a.shared_intermediate != 0},
                                                {"router_bias", a.router_bias},
                                                {"shared_expert_gate", a.shared_expert_gate},
                                                {"first_dense_layers", a.first_dense_layers != 0},
                                                {"moe_layer_freq", a.moe_layer_freq != 1},
                                                {"moe_layer_offset", a.moe_layer_offset != 0}};
    for (const auto& [k, on] : set) {
      if (on) fail(a, k, fmt::format("'{}' needs 'experts' > 0", k));
    }
    return;
  }
  if (a.experts_per_token < 1 || a.experts_per_token > a.experts) {
    fail(a, "experts_per_token",
         fmt::format("experts_per_token must be in [1, experts = {}], got {}", a.experts,
                     a.experts_per_token));
  }
  if (a.moe_intermediate == 0) fail(a, "experts", "a MoE model needs 'moe_intermediate' > 0");
  if (a.shared_experts == 0 && a.shared_intermediate != 0) {
    fail(a, "shared_intermediate", "'shared_intermediate' needs 'shared_experts' > 0");
  }
  if (a.shared_experts == 0 && a.shared_expert_gate) {
    fail(a, "shared_expert_gate", "'shared_expert_gate' needs 'shared_experts' > 0");
  }
  if (a.mlp_bias && a.mlp != MlpKind::kGated) {
    fail(a, "mlp_bias", "MLP biases on plain (fc1, fc2) experts are not modelled");
  }
  if (a.moe_layer_offset >= a.moe_layer_freq) {
    fail(a, "moe_layer_offset",
         fmt::format("moe_layer_offset {} must be below moe_layer_freq {}", a.moe_layer_offset,
                     a.moe_layer_freq));
  }
  bool any_moe = false;
  for (int i = 0; i < a.layers && !any_moe; ++i) any_moe = a.is_moe_layer(i);
  if (!any_moe) {
    fail(a, "first_dense_layers",
         fmt::format("no layer is MoE: first_dense_layers {}, moe_layer_freq {}, "
                     "moe_layer_offset {} with {} layers",
                     a.first_dense_layers, a.moe_layer_freq, a.moe_layer_offset, a.layers));
  }
}

}  // namespace

void check_arch_sizes(const Arch& a) {
  // Every integer field of the schema is a size or a count: the largest (docs/cli.md,
  // "Limits") are far above any published model and small enough that the generator's
  // products of sizes and counts fit in 64 bits.
  for (const schema::Field<Arch>& f : arch_schema().fields) {
    if (f.type != schema::ValueType::kInt) continue;
    const std::string text = f.get(a);
    int64_t value = 0;
    std::from_chars(text.data(), text.data() + text.size(), value);
    const int64_t max = f.key == "layers" ? kMaxArchLayers : kMaxArchWidth;
    if (value > max) {
      fail(a, f.key, fmt::format("{} {} is above the largest allowed, {}", f.key, value, max));
    }
  }
}

void resolve_arch(Arch& a) {
  check_arch_sizes(a);
  if (a.attention == AttentionKind::kMla) {
    check_mla(a);
  } else {
    check_gqa(a);
  }
  check_moe(a);
  bool any_dense = false;
  for (int i = 0; i < a.layers && !any_dense; ++i) any_dense = !a.is_moe_layer(i);
  if (any_dense && a.intermediate == 0) {
    fail(a, "intermediate", "some layers have a dense FFN: 'intermediate' must be > 0");
  }
  if (!any_dense && a.intermediate != 0) {
    fail(a, "intermediate",
         "every layer is MoE, so 'intermediate' is unused (the expert width is "
         "'moe_intermediate'); remove it");
  }
  if (a.full_attention_every > 0 && a.sliding_window == 0) {
    fail(a, "full_attention_every",
         "'full_attention_every' needs 'sliding_window' > 0 (without a window every layer is "
         "full attention)");
  }
  if (a.full_attention_every == 1) {
    fail(a, "full_attention_every",
         "full_attention_every 1 makes every layer full attention; remove 'sliding_window' "
         "instead");
  }
  if (a.project_in_out == a.hidden) {
    fail(a, "project_in_out", "project_in_out equal to hidden means no projection; remove it");
  }
}

Arch load_arch(const std::string& path, const std::vector<std::string>& overrides,
               bool require_sources, std::string_view sets_flag) {
  return parse(schema::load_yaml_file(path), path, overrides, require_sources, sets_flag);
}

Arch load_arch_text(const std::string& text, const std::string& name,
                    const std::vector<std::string>& overrides, bool require_sources,
                    std::string_view sets_flag) {
  return parse(schema::load_yaml_text(text, name), name, overrides, require_sources, sets_flag);
}

std::vector<std::string> shipped_arch_names(const std::string& configs_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(configs_dir + "/models", ec)) {
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string arch_path(const std::string& name, const std::string& configs_dir) {
  return configs_dir + "/models/" + name + ".yaml";
}

std::string find_arch(const std::string& name, const std::string& configs_dir,
                      std::string_view source) {
  const bool is_path = name.find('/') != std::string::npos ||
                       (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0);
  if (is_path) return name;
  const auto names = shipped_arch_names(configs_dir);
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    return arch_path(name, configs_dir);
  }
  throw InputError::at(SourcePos{std::string(source)}, "unknown model '{}' (shipped: {}){}", name,
                       fmt::join(names, ", "), did_you_mean(name, names));
}

}  // namespace tierflow::traces
