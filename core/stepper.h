// The plan rules for running a program (ARCHITECTURE §6), written once: when a compute or
// cache step may start, what it allocates and frees, and the errors that stop it. The
// simulator drives a stepper from its event queue, the replayer from its program threads;
// each supplies the mechanics (events, memory, copies, ops) as a Driver.
//
// Glossary
//   anchor      the compute step before a cache step: the cache step may issue once its
//               anchor has finished (it is reached by advance() only then).
//   pending     a cache step whose anchor finished but which could not issue yet (its
//               events, or room for its bytes). It does not hold back the steps after it,
//               except steps on the same tensor, which issue in program order; this is
//               what lets a detach free the memory an earlier prefetch waits for.
//   end         the first step a program does not run: its length, or the first step that
//               breaks a rule (the simulator runs up to it and reports it there).
//   host queue  the host steps (core/plan.h) reached but not started, in program order:
//               the program's host engine runs them one at a time, beside its device.
//
// Allocation points: a prefetch allocates its device copy (a host prefetch: its host tier
// copy) when it issues; a store
// allocates its destination copy when it issues unless that tier already holds one; a
// compute step allocates its outputs and workspace when it starts (a host step on the
// host tier), and its workspace is freed when it ends; a detach frees the device copy (a host
// detach: the host tier's). Home copies
// of external tensors exist from time 0 (the driver places them and tells the stepper with
// add_copy()).
//
// A Driver provides (p: program, step: its index, s: the step, tier: a plan tier):
//   bool ready(p, step, s, bool compute)     every event s waits on has completed (the
//                                            driver may note the wait, e.g. for stalls;
//                                            the simulator also waits for a dispatching
//                                            runtime's host to issue the step)
//   Fit reserve(p, step, tier, bytes)        room for `bytes` on p's instance of tier;
//                                            kFailed: it reported the error
//   bool allocate(p, step, tier, what, bytes) `what` is a tensor id or op | kWorkspaceBit;
//                                            false: it reported the error
//   void release(p, tier, what)              the device copy of a tensor, or a workspace
//   bool transfer(p, step, s)                issue a prefetch's or store's copy
//   void compute_ready(p, step)              a device compute step's events and bytes are
//                                            ready
//   bool compute(p, step, s, need)           start its op (outputs and workspace are
//                                            allocated: `need` bytes); s.host: on the host
//                                            engine (ready() was asked with compute false)
//   void issued(p, step, s)                  a cache step issued
//   void finished(p)                         every step up to `end` issued and completed
//   bool halted()                            an error stops every program now
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"
#include "core/units.h"
#include "core/workload.h"

namespace tierflow {

/// The `what` of a workspace allocation: its op id | kWorkspaceBit.
inline constexpr uint32_t kWorkspaceBit = 0x8000'0000U;

namespace stepper {

enum class Fit { kFits, kWait, kFailed };

/// One program's position: what the rules need to know to move it on.
struct Cursor {
  const Program* prog = nullptr;
  size_t next = 0;       ///< the next step advance() reaches
  size_t end = 0;        ///< see the glossary
  bool busy = false;     ///< a compute step runs
  bool host_busy = false;  ///< a host step runs
  bool stopped = false;  ///< an error stopped it
  bool done = false;     ///< every step up to `end` issued and completed
  bool workspace = false;
  bool host_workspace = false;
  std::vector<uint32_t> pending;     ///< see the glossary, in program order
  std::vector<uint32_t> host_queue;  ///< see the glossary, from host_next on
  size_t host_next = 0;
  std::vector<uint16_t> pending_on;  ///< per tensor: its steps in `pending`
  std::vector<uint64_t> copies;      ///< per tensor: plan tiers holding an allocated copy

  /// Whether a host step waits in the host queue.
  [[nodiscard]] bool host_waiting() const { return host_next < host_queue.size(); }
  /// The earliest step that cannot move: a pending cache step or a waiting host step, else
  /// the next step.
  [[nodiscard]] size_t blocked_step() const {
    size_t s = pending.empty() ? next : pending.front();
    if (host_waiting()) s = std::min<size_t>(s, host_queue[host_next]);
    return s;
  }
  /// Every step up to `end` issued (transfers may still run).
  [[nodiscard]] bool all_issued() const {
    return next >= end && pending.empty() && !busy && !host_busy && !host_waiting();
  }
};

template <class Driver>
class Stepper {
 public:
  Stepper(const Plan& plan, const Workload& w, Driver& d) : plan_(plan), w_(w), d_(d) {}

  /// Program p starts; it runs its steps before `end`.
  void start(uint32_t p, size_t end) {
    if (cursors_.size() <= p) cursors_.resize(size_t(p) + 1);
    Cursor& c = cursors_[p];
    c.prog = &plan_.programs[p];
    c.end = end;
    c.pending_on.assign(w_.tensors.size(), 0);
    c.copies.assign(w_.tensors.size(), 0);
  }
  void add_copy(uint32_t p, uint32_t tensor, uint32_t tier) {
    cursors_[p].copies[tensor] |= uint64_t{1} << tier;
  }
  [[nodiscard]] const Cursor& cursor(uint32_t p) const { return cursors_[p]; }
  [[nodiscard]] size_t programs() const { return cursors_.size(); }
  [[nodiscard]] uint64_t steps() const { return steps_; }

  /// Issues what program p may issue now: its pending cache steps, then steps in program
  /// order up to the next compute step, which starts if it can.
  void advance(uint32_t p) {
    Cursor& c = cursors_[p];
    if (d_.halted()) return;
    retry_pending(p);
    start_host(p);
    const std::vector<Step>& steps = c.prog->steps;
    while (!c.stopped && !d_.halted() && !c.busy && c.next < c.end) {
      const Step& s = steps[c.next];
      if (is_host_step(s)) {
        // Its anchor finished: it joins the host queue without holding back the steps after.
        c.host_queue.push_back(static_cast<uint32_t>(c.next));
        ++c.next;
        start_host(p);
        continue;
      }
      if (s.kind != StepKind::kCompute) {
        // Its anchor finished: issue it now, or keep it pending without holding back the
        // steps after it.
        if (c.pending_on[s.target] > 0 || !try_issue(p, c.next)) {
          if (c.stopped || d_.halted()) return;
          c.pending.push_back(static_cast<uint32_t>(c.next));
          ++c.pending_on[s.target];
        }
        ++c.next;
        continue;
      }
      if (!d_.ready(p, c.next, s, /*compute=*/true)) return;
      const Op& op = w_.ops[s.target];
      uint64_t need = op.workspace;
      for (uint32_t t : op.outputs) need += w_.tensors[t].bytes;
      const uint32_t dev = plan_.device_tier;
      if (!fits(c, d_.reserve(p, c.next, dev, need))) return;
      d_.compute_ready(p, c.next);
      for (uint32_t t : op.outputs) {
        if (!d_.allocate(p, c.next, dev, t, w_.tensors[t].bytes)) return stop(c);
        c.copies[t] |= uint64_t{1} << dev;
      }
      if (op.workspace > 0) {
        if (!d_.allocate(p, c.next, dev, s.target | kWorkspaceBit, op.workspace)) return stop(c);
        c.workspace = true;
      }
      if (!d_.compute(p, c.next, s, need)) return stop(c);
      c.busy = true;
      ++c.next;
      ++steps_;
      return;
    }
    if (c.busy || c.host_busy || c.host_waiting() || c.stopped || c.done || !c.pending.empty() ||
        c.next < c.end) {
      return;
    }
    c.done = true;
    d_.finished(p);
  }

  /// Program p's device compute step ended: its workspace is freed (advance() moves it on).
  void end_compute(uint32_t p) {
    Cursor& c = cursors_[p];
    c.busy = false;
    if (c.workspace) {
      d_.release(p, plan_.device_tier, c.prog->steps[c.next - 1].target | kWorkspaceBit);
      c.workspace = false;
    }
  }

  /// Program p's running host step ended: its workspace is freed (advance() starts the
  /// next). Returns the step.
  size_t end_host(uint32_t p) {
    Cursor& c = cursors_[p];
    c.host_busy = false;
    const size_t step = c.host_queue[c.host_next - 1];
    if (c.host_workspace) {
      d_.release(p, plan_.host_tier, c.prog->steps[step].target | kWorkspaceBit);
      c.host_workspace = false;
    }
    return step;
  }

 private:
  bool fits(Cursor& c, Fit f) {
    if (f == Fit::kFailed) c.stopped = true;
    return f == Fit::kFits;
  }
  void stop(Cursor& c) { c.stopped = true; }

  /// Starts the first host step of the host queue if the host engine is free and the step
  /// may start: its events completed, room on the host tier for its outputs and workspace.
  void start_host(uint32_t p) {
    Cursor& c = cursors_[p];
    if (c.host_busy || !c.host_waiting() || c.stopped || d_.halted()) return;
    const size_t step = c.host_queue[c.host_next];
    const Step& s = c.prog->steps[step];
    if (!d_.ready(p, step, s, /*compute=*/false)) return;
    const Op& op = w_.ops[s.target];
    uint64_t need = op.workspace;
    for (uint32_t t : op.outputs) need += w_.tensors[t].bytes;
    const uint32_t host = plan_.host_tier;
    if (!fits(c, d_.reserve(p, step, host, need))) return;
    for (uint32_t t : op.outputs) {
      if (!d_.allocate(p, step, host, t, w_.tensors[t].bytes)) return stop(c);
      c.copies[t] |= uint64_t{1} << host;
    }
    if (op.workspace > 0) {
      if (!d_.allocate(p, step, host, s.target | kWorkspaceBit, op.workspace)) return stop(c);
      c.host_workspace = true;
    }
    if (!d_.compute(p, step, s, need)) return stop(c);
    c.host_busy = true;
    ++c.host_next;
    ++steps_;
  }

  /// Issues cache step `step` of program p if it can issue now.
  bool try_issue(uint32_t p, size_t step) {
    Cursor& c = cursors_[p];
    const Step& s = c.prog->steps[step];
    if (!d_.ready(p, step, s, /*compute=*/false)) return false;
    const uint32_t t = s.target;
    const uint32_t dev = plan_.device_tier;
    switch (s.kind) {
      case StepKind::kPrefetch: {
        // Into the device tier, or (a host prefetch) into the host tier.
        const uint32_t to = s.host ? plan_.host_tier : dev;
        const uint64_t bit = uint64_t{1} << to;
        if ((c.copies[t] & bit) == 0) {
          const uint64_t bytes = w_.tensors[t].bytes;
          if (!fits(c, d_.reserve(p, step, to, bytes))) return false;
          if (!d_.allocate(p, step, to, t, bytes)) return stop(c), false;
          c.copies[t] |= bit;
        }
        if (!d_.transfer(p, step, s)) return stop(c), false;
        break;
      }
      case StepKind::kStore: {
        const uint64_t bit = uint64_t{1} << s.tier;
        if ((c.copies[t] & bit) == 0) {
          const uint64_t bytes = w_.tensors[t].bytes;
          if (!fits(c, d_.reserve(p, step, s.tier, bytes))) return false;
          if (!d_.allocate(p, step, s.tier, t, bytes)) return stop(c), false;
          c.copies[t] |= bit;
        }
        if (!d_.transfer(p, step, s)) return stop(c), false;
        break;
      }
      case StepKind::kDetach: {
        // The device copy, or (a host detach) the host tier's.
        const uint32_t from = s.host ? plan_.host_tier : dev;
        d_.release(p, from, t);
        c.copies[t] &= ~(uint64_t{1} << from);
        break;
      }
      case StepKind::kCompute:
        return false;  // advance() starts compute steps
    }
    d_.issued(p, step, s);
    ++steps_;
    return true;
  }

  void retry_pending(uint32_t p) {
    Cursor& c = cursors_[p];
    if (c.pending.empty()) return;
    // Steps on one tensor issue in program order; steps on different tensors need not.
    blocked_.clear();
    size_t keep = 0;
    for (size_t i = 0; i < c.pending.size(); ++i) {
      const uint32_t step = c.pending[i];
      const uint32_t t = c.prog->steps[step].target;
      const bool behind = std::find(blocked_.begin(), blocked_.end(), t) != blocked_.end();
      if (!c.stopped && !d_.halted() && !behind && try_issue(p, step)) {
        --c.pending_on[t];
        continue;
      }
      if (!behind) blocked_.push_back(t);
      c.pending[keep++] = step;
    }
    c.pending.resize(keep);
  }

  const Plan& plan_;
  const Workload& w_;
  Driver& d_;
  std::vector<Cursor> cursors_;
  std::vector<uint32_t> blocked_;  ///< scratch of retry_pending
  uint64_t steps_ = 0;
};

}  // namespace stepper

/// Calls f(p, t, home) for each program p and external tensor t, programs first: the home
/// copies present from time 0 (the device copy where home is the device tier). Stops, and
/// returns false, when f returns false.
template <class F>
bool for_each_home_copy(const Plan& plan, const Workload& w, F&& f) {
  for (uint32_t p = 0; p < plan.programs.size(); ++p) {
    for (uint32_t t = 0; t < w.tensors.size(); ++t) {
      if (w.tensors[t].origin == kExternal && !f(p, t, plan.home[t])) return false;
    }
  }
  return true;
}

/// The errors running a plan reports, worded once (the simulator's and replayer's).
namespace run_errors {

/// "tensor 3 'L0.wq'"
std::string tensor_name(const Workload& w, uint32_t t);
/// A step needs more than its tier instance has free.
std::string over_capacity(std::string_view place, StepKind kind, size_t step, uint64_t need,
                          uint64_t level, uint64_t capacity, std::string_view largest);
/// A device-resident home copy does not fit before the first step.
std::string home_does_not_fit(std::string_view place, const Workload& w, uint32_t t, uint64_t level,
                              uint64_t capacity, std::string_view largest);
/// The home copies alone overflow a tier instance.
std::string home_over_capacity(std::string_view place, uint64_t level, uint64_t capacity,
                               std::string_view largest);
/// A prefetch or store between tiers no route joins.
std::string no_route(std::string_view topology, std::string_view from, std::string_view to,
                     StepKind kind, const Workload& w, uint32_t t);
/// An op in a dtype its device has no peak rate for.
std::string no_peak(const Workload& w, uint32_t op, std::string_view device,
                    std::string_view peak_dtypes);
/// An op on the host in a dtype the host CPU of `topology` has no peak rate for.
std::string no_host_peak(const Workload& w, uint32_t op, std::string_view topology,
                         std::string_view peak_dtypes);
/// Why a program cannot move; `undone` is the event its step waits on, or kNoEvent.
std::string stuck(uint32_t program, const Step& s, size_t step, uint32_t undone,
                  std::string_view why_not_event);

/// One live allocation for a "largest live" list.
struct LiveItem {
  uint64_t bytes = 0;
  uint32_t what = 0;  ///< tensor id, or op | kWorkspaceBit
  uint32_t program = 0;
};
/// The five largest of `live` (stable by bytes), named, with " of program P" when there
/// are several programs, and how many more; "nothing" when empty.
std::string largest_live(std::vector<LiveItem> live, const Workload& w, bool several_programs);

}  // namespace run_errors
}  // namespace tierflow
