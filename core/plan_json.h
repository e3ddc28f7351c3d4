// JSON form of plans: `tierflow.plan/2`, or `tierflow.plan/3` for a plan with host steps
// (its `host_tier`, and `"on": "host"` on those steps) (docs/formats.md). `tierflow.plan/1`
// files still load: their meta "budget", "pipeline" and "routing" become the plan's typed
// fields.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "core/plan.h"

namespace tierflow {

inline constexpr std::string_view kPlanFormat = "tierflow.plan/2";
inline constexpr std::string_view kPlanFormatV1 = "tierflow.plan/1";
inline constexpr std::string_view kPlanFormatV3 = "tierflow.plan/3";
/// The values of a plan's `routing` field.
inline constexpr std::array<std::string_view, 3> kPlanRoutings = {"realistic", "oracle",
                                                                  "expected"};

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
