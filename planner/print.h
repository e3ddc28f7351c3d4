// Text forms of the planner's state for --print-after and golden tests: one line per plan
// step of a program, and one line per tensor whose runs differ from resident.
//
//   prefetch w1 from ddr -> e0
//   compute op1 wait e0
//   store a1 to ddr -> e1
//   detach a1 wait e1
#pragma once

#include <string>

#include "core/plan.h"
#include "core/workload.h"
#include "planner/state.h"

namespace tierflow::planner {

/// The steps of program `program`, one per line; home tiers off the device first.
std::string plan_text(const Plan& p, const Workload& w, size_t program = 0);

/// Offloaded tensors and their runs (positions and slots), one per line.
std::string runs_text(const PlanState& s);

}  // namespace tierflow::planner
