// JSON form of workloads: `tierflow.workload/1` (docs/formats.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/workload.h"

namespace tierflow {

inline constexpr std::string_view kWorkloadFormat = "tierflow.workload/1";

/// How a workload text is read. The result and the errors never depend on it.
struct WorkloadReadOptions {
  /// From this many bytes after "tensors" on, a file in write_workload's layout has its
  /// ops read on a second thread while the tensors are read. Tests set 0 to take that
  /// path with small texts.
  size_t parallel_min_bytes = size_t{1} << 20;
  /// Tensors and ops written exactly as write_workload writes them are read without the
  /// general JSON reader. Tests turn it off to compare.
  bool shortcuts = true;
};

/// Reads and verifies a workload; every error is an InputError at its JSON position.
Workload read_workload(const std::string& path);
Workload read_workload_text(std::string_view text, const std::string& name,
                            const WorkloadReadOptions& options = {});

class JsonReader;
class JsonWriter;
/// Reads a `meta` object (string, number or boolean values; duplicate keys are errors).
/// The most tensor parallelism a workload's meta `tp` says (traces::kMaxTp).
inline constexpr int64_t kMaxMetaTp = 65536;
/// Reads a meta object; a `tp` that is not a whole number from 1 to kMaxMetaTp is refused
/// at its value.
void read_meta(JsonReader& r, Meta& meta);
/// Writes a `meta` object (spaced), keys sorted, as the next value of `w`.
void write_meta(JsonWriter& w, const Meta& meta);

/// Reads one workload object at the reader's position (e.g. inside a plan), verified.
Workload read_workload_from(JsonReader& r);

/// Deterministic JSON text: one tensor or op per line, fields in documented order,
/// optional fields omitted at their defaults.
std::string write_workload(const Workload& w);
/// The same, indented by `indent` more spaces and without the final newline, to embed.
std::string write_workload_embedded(const Workload& w, int indent);

}  // namespace tierflow
