// Writing a topology back as a `tierflow: hw/1` file, from the same declared parameters
// (hw_models/params.h) that the loader reads: the one place that knows how a topology is
// spelled in YAML. `tierflow calibrate` writes the topology it measured through it.
#pragma once

#include <string>
#include <vector>

#include "hw_models/topology.h"

namespace tierflow::hw {

/// `t` as a topology file that load_topology() reads back to the same numbers (bandwidths
/// and FLOP rates as precisely as tierflow prints them: four significant digits at
/// least). Written: the name, description and sources; then each object's fields in
/// declaration order: the numbers that were given (have an origin: read from a file, set by
/// `--set`, or cite()d), text and choices also where they differ from their default; a
/// number with the citation and note of its origin as `{value: V, source: KEY, note: "N"}`
/// (a citation key that `sources` does not define, such as `--set`, is left out).
/// `header` lines come first, each as a comment.
std::string topology_yaml(const Topology& t, const std::vector<std::string>& header = {});

/// Records that `key` of an object was given, with its citation and note (for topologies
/// built in code, so that topology_yaml() writes them as a loaded file would).
void cite(schema::Origins& origins, const std::string& key, const std::string& source,
          const std::string& note = {});

}  // namespace tierflow::hw
