// Turns residency runs into a plan (ARCHITECTURE §6): the steps of one program, copied to
// every device of the target with its events renumbered.
//
// Per slot j, in this order:
//   [store t (event s),] detach t [wait s]  runs released in slot j (stays that end there,
//                                           produced tensors past their last use), tensor order
//   prefetch t (event p) [wait ...]         runs allocated in slot j, first use first, then
//                                           tensor order
//   compute order[j] [wait p ...]           waits on its runs' prefetches
// A store's bytes are counted on the device until it lands (`Run::hold`); the compute and
// the prefetches of slot release+hold wait on it, so the device never holds more than
// memory_profile() says, whatever the store's real speed.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/plan.h"
#include "planner/state.h"

namespace tierflow::planner {

struct Emitted {
  Plan plan;
  /// Per event of program 0: the tensor and run index it moves (events of program k are
  /// these plus k x events_per_program).
  std::vector<std::pair<uint32_t, uint32_t>> event_run;
  uint32_t events_per_program = 0;
};

Emitted emit_plan(const PlanState& s, std::string_view policy);

}  // namespace tierflow::planner
