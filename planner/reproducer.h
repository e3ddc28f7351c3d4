// The reproducer `tierflow plan` writes when a pass fails unexpectedly (not an infeasible
// target): what to run again to see the failure.
//
// Glossary
//   reproducer  a small JSON file (tierflow.reproducer/1): the workload and topology as they
//               were named, the workload's SHA-256, the pipeline, the budget and the failure.
#pragma once

#include <cstdint>
#include <string>

namespace tierflow::planner {

struct Reproducer {
  std::string workload;  ///< the workload file as it was named
  std::string workload_sha256;
  std::string topology;  ///< the topology file as it was named
  std::string pipeline;
  uint64_t budget = 0;
  std::string failure;  ///< the pass's message; names in it come from user files
};

/// The reproducer as JSON, one member a line.
std::string reproducer_json(const Reproducer& r);

}  // namespace tierflow::planner
