// Checks of a replay against the §6 rules and the simulator, shared by the executor's
// tests on the CPU backend (executor_test.cpp) and on the CUDA backend
// (cuda_backend_test.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "sim/simulator.h"
#include "tools/replay/executor.h"

namespace tierflow::testing {

/// Checks the recorded order against the §6 rules:
/// - every step ran, with issue <= start <= end;
/// - compute steps start in program order, each after the previous one ended and after
///   the events it waits on completed (their transfers' last byte);
/// - host steps start after their anchor and the previous host step ended, and after
///   their events completed, holding back no device step;
/// - a cache step is issued after its anchor (the compute step before it) ended and after
///   its events completed; cache steps on one tensor issue in program order.
void check_order(const Plan& plan, const replay::ReplayResult& r);

/// The simulator's peak of tier instance `arena` ("hbm[0]"), 0 when it has none.
uint64_t simulated_peak(const sim::SimResult& s, const std::string& arena);

size_t steps_of(const Plan& p);

/// True when no cache step waits on an event. Then, with one program, every allocation
/// and free happens at a point that program order alone fixes: a prefetch allocates right
/// after its anchor ends, outputs and workspace when their op starts (after the previous
/// op ended and the cache steps anchored on it ran), the workspace is freed when the op
/// ends, and a detach frees right after its anchor. Nothing stays pending, so no
/// allocation depends on when a transfer lands; the simulator runs the same sequence, and
/// the two peaks (sums of the same live sizes) are equal byte for byte. A detach waiting
/// on a store would free whenever that store lands, before or after the next op starts,
/// and the peak could then differ with timing.
bool allocation_order_fixed(const Plan& p);

/// Every device arena's logical peak is the simulator's peak of its tier instance, and
/// nothing is left in use but logical bytes; `unshifted`: the arena holds the plan's own
/// sizes (no size shift), so its peak is the logical one too.
void check_peaks_equal(const replay::ReplayResult& r, const sim::SimResult& s,
                       bool unshifted = false);

}  // namespace tierflow::testing
