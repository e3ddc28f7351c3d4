// JSON form of plans: `tierflow.plan/1` (docs/formats.md).
#pragma once

#include <string>
#include <string_view>

#include "core/plan.h"

namespace tierflow {

inline constexpr std::string_view kPlanFormat = "tierflow.plan/1";

struct LoadedPlan {
  Plan plan;
  Workload workload;  ///< inline, or read from the referenced file
};

/// Reads a plan and its workload (inline, or the referenced file relative to the plan's
/// folder, whose SHA-256 must match), then verifies the plan. Errors are InputErrors at
/// the JSON position of the fault.
/// With `verify` false the §6 rules are left to the caller (the simulator checks them
/// itself to report when a broken step is reached); the format is still checked.
LoadedPlan read_plan(const std::string& path, bool verify = true);
LoadedPlan read_plan_text(std::string_view text, const std::string& name,
                          const std::string& base_dir, bool verify = true);

/// Deterministic JSON; the workload is embedded when `inline_workload` is given,
/// otherwise referenced by plan.workload_ref.
std::string write_plan(const Plan& plan, const Workload* inline_workload);

}  // namespace tierflow
