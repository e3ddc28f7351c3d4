// JSON form of workloads: `tierflow.workload/1` (docs/formats.md).
#pragma once

#include <string>
#include <string_view>

#include "core/workload.h"

namespace tierflow {

inline constexpr std::string_view kWorkloadFormat = "tierflow.workload/1";

/// Reads and verifies a workload; every error is an InputError at its JSON position.
Workload read_workload(const std::string& path);
Workload read_workload_text(std::string_view text, const std::string& name);

class JsonReader;
/// Reads a `meta` object (string, number or boolean values; duplicate keys are errors).
void read_meta(JsonReader& r, Meta& meta);
/// Appends a `meta` object, keys sorted.
void append_meta(std::string& out, const Meta& meta);

/// Reads one workload object at the reader's position (e.g. inside a plan), verified.
Workload read_workload_from(JsonReader& r);

/// Deterministic JSON text: one tensor or op per line, fields in documented order,
/// optional fields omitted at their defaults.
std::string write_workload(const Workload& w);
/// The same, indented by `indent` more spaces and without the final newline, to embed.
std::string write_workload_embedded(const Workload& w, int indent);

}  // namespace tierflow
