// compare: every policy (or those named) on one scenario, for the CLI and the Python API
// alike. With realistic MoE routing each policy runs twice: realistic (what a runtime can
// run) and oracle (the plan sees the routing that runs, an upper bound), so that the cost
// of no foresight shows; the best is chosen among the trials a runtime can run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/study/study.h"

namespace tierflow::study {

struct Comparison {
  /// The resident plan on a device with unlimited memory: the fastest any plan can be.
  int64_t reference_ps = 0;
  std::vector<Trial> trials;        ///< per policy in order; realistic then oracle (see above)
  std::vector<std::string> labels;  ///< "tierflow", or "tierflow realistic", "tierflow oracle"
  std::vector<std::string> stems;   ///< plan file names: "tierflow", "tierflow-oracle"
  std::vector<bool> oracle;         ///< the trial knows the routing that runs
  /// The fastest trial that is not an oracle, ties to the lower device peak; none when no
  /// trial ran.
  std::optional<size_t> best;

  /// Some trial ran realistic routing (the MoE columns apply).
  [[nodiscard]] bool any_realized() const {
    return std::ranges::any_of(trials, [](const Trial& t) { return t.main().realized; });
  }
};

/// Runs `policies` (all of planner::policies() when empty) on `base`; `progress` is told
/// each policy before it runs (its index from 0, the count, its name). Bad input throws
/// InputError (an unknown policy at `source`); a plan that does not fit is a trial, not an
/// error.
Comparison compare(Study& study, const Scenario& base, std::vector<std::string> policies,
                   std::string_view source,
                   const std::function<void(size_t, size_t, const std::string&)>& progress = {});

enum class CompareFormat { kText, kJson, kCsv };

/// The comparison as `tierflow compare` prints it: the text tables (policies, then memory
/// per tier and bytes per link direction), `tierflow.compare/1` JSON, or one study row per
/// trial as CSV. `target` is the scenario's device target on `topo`.
std::string render_comparison(const Comparison& cmp, const Scenario& base, const hw::Topology& topo,
                              const planner::Target& target, CompareFormat format);

}  // namespace tierflow::study
