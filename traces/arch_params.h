// The declared fields of a model file (`tierflow: model/1`, core/schema.h): the single
// source of the YAML keys, their types, defaults and descriptions, for the loader,
// `--set`, `tierflow trace describe` and the schema docs.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "core/schema.h"
#include "traces/arch.h"

namespace tierflow::traces {

/// The Hugging Face `model_type`s whose graphs tierflow builds (Arch::family).
inline constexpr std::array<std::string_view, 15> kFamilyNames = {
    "llama",     "mistral",     "mixtral",     "qwen2",   "qwen2_moe",
    "qwen3_moe", "deepseek_v2", "deepseek_v3", "opt",     "qwen3",
    "phi3",      "gemma2",      "gemma3_text", "gpt_oss", "llama4_text"};

/// Every Arch field a model file may set, declared once.
const schema::Schema<Arch>& arch_schema();

/// The keys of a model file that are not Arch fields, with descriptions.
const std::vector<schema::TopKey>& model_top_level_keys();

/// The format tag a model file must carry (`tierflow: model/1`).
inline constexpr std::string_view kModelFormatTag = "model/1";

}  // namespace tierflow::traces
