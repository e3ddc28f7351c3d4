// Strict loading of model files (`tierflow: model/1`, configs/models/NAME.yaml).
//
// A model file holds the format tag, `name`, `description`, `sources` (citation key ->
// text), an optional default `source:`, and the Arch fields by their C++ names
// (traces/arch_params.cpp), each number optionally cited as {value: X, source: KEY}.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "traces/arch.h"

namespace tierflow::traces {

/// Loads and checks a model file. `overrides` are `KEY=VALUE` (`--set layers=2`),
/// applied after reading; an unknown KEY is an error at `SETS_FLAG:N:COL` (`--set:1:1`;
/// `--model-set` for the study's commands, `model_set` for Python). With
/// `require_sources`, every number must resolve to a citation. Throws InputError.
Arch load_arch(const std::string& path, const std::vector<std::string>& overrides = {},
               bool require_sources = false, std::string_view sets_flag = "--set");
/// The same from YAML text; `name` stands for the file in positions.
Arch load_arch_text(const std::string& text, const std::string& name,
                    const std::vector<std::string>& overrides = {}, bool require_sources = false,
                    std::string_view sets_flag = "--set");

/// Fills the defaults that depend on other fields (kv_heads = heads, head_dim =
/// hidden / heads; for MLA head_dim = qk_nope + qk_rope) and checks that the fields
/// describe one consistent, modelled architecture. Errors are reported at the
/// offending field's origin. Shared by the YAML loader and the config.json importer.
void resolve_arch(Arch& a);

/// The largest architecture sizes tierflow generates graphs for (docs/cli.md, "Limits").
inline constexpr int kMaxArchLayers = 4096;
inline constexpr int kMaxArchWidth = 1 << 24;
/// InputError at the field when a size is above them; resolve_arch calls it first.
void check_arch_sizes(const Arch& a);

/// Names of the shipped models: the stems of `configs_dir`/models/*.yaml, sorted.
std::vector<std::string> shipped_arch_names(const std::string& configs_dir);
/// `configs_dir`/models/NAME.yaml (whether or not it exists).
std::string arch_path(const std::string& name, const std::string& configs_dir);
/// The file for `name`: a path (anything with '/' or ending in .yaml) as is, else a
/// shipped model; an unknown name is an InputError at `source` (the setting that named it:
/// "--model", "model") with a suggestion.
std::string find_arch(const std::string& name, const std::string& configs_dir,
                      std::string_view source = "");

}  // namespace tierflow::traces
