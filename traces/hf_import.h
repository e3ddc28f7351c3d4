// Importing a Hugging Face `config.json` as an Arch.
//
// Strict by design: every key of the config must be either read (it shapes the
// graph) or on the family's list of keys known not to change it (rope_theta, token
// ids, dropout, ...). Other keys are an error that lists all of them at once, each with
// what it would change when tierflow knows; with `lenient`, keys that no family reads as
// changing counts are warnings instead. Values that select a structure tierflow does not
// model (Qwen sliding-window layers, OPT post-norm, non-empty mlp_only_layers, ...) are
// errors that say so, never silently ignored.
//
// Supported model_type: traces/arch_params.h kFamilyNames, plus the multimodal wrappers
// gemma3 and llama4, whose text_config is imported (the vision tower is not counted).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "traces/arch.h"

namespace tierflow::traces {

struct HfImportOptions {
  /// Unknown keys that no family reads as changing counts become warnings.
  bool lenient = false;
  /// Where those warnings go ("FILE:LINE:COL: warning: ..."); nullptr drops them.
  std::vector<std::string>* warnings = nullptr;
  /// How messages name the leniency: the CLI's --lenient, Python's lenient=True.
  std::string_view lenient_flag = "--lenient";
};

/// Reads `path`; errors are InputError at FILE:LINE:COL of the offending key (JSON
/// syntax errors at the character where parsing failed; several unknown keys: the first,
/// with the LINE:COL of each in the message).
Arch import_hf_config(const std::string& path, const HfImportOptions& opts = {});
/// The same from JSON text; `name` stands for the file in positions.
Arch import_hf_config_text(const std::string& text, const std::string& name,
                           const HfImportOptions& opts = {});
/// The model_type values import_hf_config accepts, sorted.
std::vector<std::string> hf_model_types();

}  // namespace tierflow::traces
