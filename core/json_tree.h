// JSON documents built as nlohmann::json trees (the command outputs the Python bindings
// also return as dicts: `hw show --json`, `trace info --json`, `compare --json`, `whatif
// --json`, calibration and replay reports), written by the one JSON writer
// (core/json_writer.h): one member a line, indented two spaces a level.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/json_writer.h"

namespace tierflow {

/// Writes `j` as the next value: members in the tree's order, containers in line layout,
/// numbers as the tree holds them (a floating-point one keeps a decimal point, so that it
/// reads back as one; infinity and NaN as null), strings through append_json_string.
void write_json_tree(JsonWriter& out, const nlohmann::json& j);
void write_json_tree(JsonWriter& out, const nlohmann::ordered_json& j);

/// `j` as a document: write_json_tree, then a newline.
std::string json_text(const nlohmann::json& j);
std::string json_text(const nlohmann::ordered_json& j);

}  // namespace tierflow
