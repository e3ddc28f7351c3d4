// Importing a Hugging Face `config.json` as an Arch.
//
// Strict by design: every key of the config must be either read (it shapes the
// graph) or on the family's list of keys known not to change it (rope_theta, token
// ids, dropout, ...). Any other key is an error naming the field, because tierflow
// cannot tell whether it changes the weights or the ops. Values that select a
// structure tierflow does not model (Qwen sliding-window layers, OPT post-norm,
// non-empty mlp_only_layers, ...) are errors that say so, never silently ignored.
//
// Supported model_type: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe,
// deepseek_v2, deepseek_v3, opt, phi3 (traces/arch_params.h kFamilyNames).
#pragma once

#include <string>

#include "traces/arch.h"

namespace tierflow::traces {

/// Reads `path`; errors are InputError at FILE:LINE:COL of the offending key (JSON
/// syntax errors at the character where parsing failed).
Arch import_hf_config(const std::string& path);
/// The same from JSON text; `name` stands for the file in positions.
Arch import_hf_config_text(const std::string& text, const std::string& name);

}  // namespace tierflow::traces
