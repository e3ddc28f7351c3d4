// The simulator's engine, internal to sim/: its state and the Simulator class, whose
// members are defined in simulator.cpp (stepping and events) and simulator_state.cpp
// (the state before the first event and the results after the last).
#pragma once

#include <fmt/format.h>

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/diagnostics.h"
#include "core/stepper.h"
#include "hw_models/bind.h"
#include "hw_models/fabric.h"
#include "hw_models/flows.h"
#include "sim/models/ledger.h"
#include "sim/recorder.h"
#include "sim/simulator.h"

namespace tierflow::sim::detail {

enum Tag : uint32_t { kComputeDone, kSetupDone, kFlowDone, kHostIssued, kHostComputeDone };
enum class Cause : uint8_t { kNone, kTransfer, kMemory };

inline constexpr uint32_t kNone = UINT32_MAX;

struct EventState {
  bool done = false;
  uint32_t transfer = kNone;
  /// Programs with a step blocked on it (may repeat), in the order they came: the first
  /// here (most events have one at most, and need no allocation), the others after.
  uint32_t waiter = kNone;
  std::vector<uint32_t> more_waiters;
  void add_waiter(uint32_t p) {
    if (waiter == kNone) {
      waiter = p;
    } else {
      more_waiters.push_back(p);
    }
  }
  /// Calls f(p) for each waiter in order.
  template <class F>
  void for_each_waiter(F&& f) const {
    if (waiter == kNone) return;
    f(waiter);
    for (uint32_t p : more_waiters) f(p);
  }
};

/// A transfer while it runs; its record (SimResult::transfers) is kept apart, at the same
/// index, so that the records become the result without a copy.
struct Transfer {
  const hw::FabricPath* path = nullptr;
  uint32_t dense_event = 0;
  uint32_t flow = hw::kNoFlow;
  uint64_t flow_event = 0;
  uint32_t lanes = kNone;  ///< recorder handle while running
  TrackId track = 0;       ///< where the recorder drew it
  bool arrowed = false;
};

/// What the simulator keeps of a program beside its stepper cursor.
struct ProgramState {
  const Program* prog = nullptr;
  int device = 0;
  Cause cause = Cause::kNone;
  Time since = 0;
  uint32_t wait_event = kNone;
  /// When the compute step began waiting on wait_event: its transfer's exposed time and
  /// the recorder's wait run from here, however often the program is woken meanwhile.
  Time wait_begin = 0;
  uint64_t woken = 0;  ///< wake stamp, to run a program once per wake-up
  uint32_t dev_slot = 0;
  uint32_t workspace = kNoRecord;
  Time op_start = 0;
  uint32_t host_workspace = kNoRecord;  ///< of the running host step
  Time host_op_start = 0;
  /// With a dispatching runtime (hw::Device::dispatch_*), per step: when its host has
  /// issued it far enough for the device to start it (a compute step: when its host work
  /// begins; a cache step: when its call returns); empty without one.
  std::vector<Time> host;
  Time host_wake = -1;  ///< the latest kHostIssued wake-up scheduled
  std::vector<uint32_t> dev_rec;  ///< per tensor: ledger record of the device copy
  /// Per tensor: ledger record of a copy allocated on the host tier (by a store, a host
  /// prefetch or a host step), which a host detach frees; empty without a host tier.
  std::vector<uint32_t> host_rec;
  DeviceResult res;
};

/// A broken plan rule that stops every program (tiers, homes, events).
inline SimError rule_error(const PlanIssue& issue) {
  return SimError{SimError::Kind::kPlanRule, -1, -1, issue.tensor, -1, issue.message};
}

class Simulator {
 public:
  Simulator(const hw::BoundPlan& b, const SimOptions& o)
      : plan_(b.plan),
        w_(b.workload),
        t_(b.topology),
        o_(o),
        fabric_(b.fabric),
        tier_map_(b.tier_map),
        dev_tier_(b.device_tier),
        bound_(b),
        rec_(o.timeline, o.series, fabric_, w_, plan_),
        stepper_(plan_, w_, *this) {
    // One flow per transfer, over the fabric's resources (the same indices).
    for (const hw::ResourceInfo& r : fabric_.resources()) net_.add_resource(r.capacity);
  }

  SimResult run();

 private:
  friend class stepper::Stepper<Simulator>;
  // The stepper's driver (core/stepper.h): the mechanics of the §6 rules in simulated time.
  /// Not before the host of a dispatching runtime has issued the step (a wake-up then);
  /// else joins the waiters of the first undone event; for a compute step, a transfer stall.
  bool ready(uint32_t p, size_t step, const Step& s, bool compute);
  /// A full tier instance: with --on-full wait a memory waiter (a stall for a compute
  /// step) while the bytes could ever fit, else a capacity error.
  stepper::Fit reserve(uint32_t p, size_t step, uint32_t tier, uint64_t bytes);
  /// A ledger record; cache steps' levels are sampled now, a compute step's when it starts.
  bool allocate(uint32_t p, size_t step, uint32_t tier, uint32_t what, uint64_t bytes);
  /// Frees a ledger record and wakes the programs waiting for memory on its instance.
  void release(uint32_t p, uint32_t tier, uint32_t what);
  /// Queues the copy on the engines of its path (FIFO); no path is a topology error.
  bool transfer(uint32_t p, size_t step, const Step& s);
  /// Ends the program's stall.
  void compute_ready(uint32_t p, size_t /*step*/) { unblock(progs_[p]); }
  /// Schedules the op's end at its roofline time (a host step's on the host CPU).
  bool compute(uint32_t p, size_t step, const Step& s, uint64_t need);
  /// Records the issue time (and a detach's end) for exporters.
  void issued(uint32_t p, size_t step, const Step& s);
  /// A program that ran up to a broken rule reports it now, when the step is reached.
  void finished(uint32_t p);
  /// Never: a failed program stops itself, and the event loop stops at the first error.
  [[nodiscard]] bool halted() const { return false; }

  bool setup();
  void start_programs();
  void loop();
  void dispatch(const Event& ev);
  void wake(std::span<const uint32_t> programs);
  void block(ProgramState& st, Cause c);
  void unblock(ProgramState& st);
  bool try_start(uint32_t x);
  void complete_transfer(uint32_t x);
  /// Event d completed: its waiters are woken (a transfer's exposed time is counted by the
  /// caller first).
  void complete_event(uint32_t d);
  /// A host step of program p ended.
  void end_host_step(uint32_t p);
  void resolve();
  void fail(SimError::Kind kind, int program, int step, int tensor, std::string message);
  /// fail() with kTimeLimit: `what` ("a transfer of 1PiB") would end after kMaxSimTimePs.
  void past_time_limit(int program, int step, int tensor, const std::string& what);
  Time op_time(uint32_t p, uint32_t op);
  /// The op's time on the host CPU serving program p's device.
  Time host_op_time(uint32_t p, uint32_t op);
  /// Program p's time of op `op` in `table` (per device class, per op; -1: not yet), from
  /// `compute(device class)` the first time.
  template <class Compute>
  Time cached_time(std::vector<std::vector<Time>>& table, uint32_t p, uint32_t op,
                   Compute&& compute) {
    const size_t cls = fabric_.device_class(progs_[p].device);
    std::vector<Time>& cache = table[cls];
    if (cache.empty()) cache.assign(w_.ops.size(), -1);
    Time& slot = cache[op];
    if (slot < 0) slot = compute(cls);
    return slot;
  }
  void wake_memory();
  /// The ledger's allocate and release, telling the recorder what the bytes are.
  uint32_t ledger_allocate(uint32_t slot, uint64_t bytes, uint32_t what, uint32_t p, Time now) {
    if (rec_.on()) rec_.held(slot, what, bytes, /*add=*/true);
    return ledger_->allocate(slot, bytes, what, p, now);
  }
  void ledger_release(uint32_t record, Time now) {
    if (rec_.on()) {
      const Allocation& a = ledger_->record(record);
      rec_.held(a.slot, a.what, a.bytes, /*add=*/false);
    }
    ledger_->release(record, now);
  }
  void touch_slot(uint32_t s) {
    if (rec_.on() && !slot_changed_[s]) {
      slot_changed_[s] = 1;
      changed_slots_.push_back(s);
    }
  }
  void finish(SimResult& r);
  /// The caller's record of step `step` of program `p`, or null when not recording.
  StepTime* step_time(uint32_t p, size_t step) const {
    return o_.step_times == nullptr ? nullptr : &(*o_.step_times)[p][step];
  }
  std::string largest_live(uint32_t slot) const;
  /// The slot as capacity errors name it: the tier instance, "within the plan's budget"
  /// when a program's budget holds it below its capacity.
  std::string room_name(uint32_t slot) const;
  /// Program p's instance of plan tier `tier`.
  [[nodiscard]] uint32_t slot_of(uint32_t p, uint32_t tier) const {
    return tier == plan_.device_tier ? progs_[p].dev_slot
                                     : fabric_.tier_slot(tier_map_[tier], progs_[p].device);
  }
  [[nodiscard]] size_t next_step(uint32_t p) const { return stepper_.cursor(p).next; }

  const Plan& plan_;
  const Workload& w_;
  const hw::Topology& t_;
  const SimOptions& o_;
  const hw::Fabric& fabric_;
  const std::vector<size_t>& tier_map_;  ///< plan tier -> topology tier
  const size_t dev_tier_;                ///< topology tier of the plan's device tier
  const hw::BoundPlan& bound_;
  EventQueue q_;
  hw::FlowNetwork net_;
  Recorder rec_;
  stepper::Stepper<Simulator> stepper_;
  std::unique_ptr<MemoryLedger> ledger_;
  std::vector<ProgramState> progs_;
  std::vector<std::optional<PlanIssue>> issues_;
  /// Plan event id -> dense index: a table when the ids are compact (plans number them
  /// from 0), else a hash map.
  [[nodiscard]] uint32_t dense_event(uint32_t id) const {
    if (!event_map_.empty()) return event_map_.at(id);
    TF_ASSERT(id < event_table_.size() && event_table_[id] != kNone, "unknown event {}", id);
    return event_table_[id];
  }
  std::vector<uint32_t> event_table_;
  std::unordered_map<uint32_t, uint32_t> event_map_;
  std::vector<EventState> events_;
  std::vector<Transfer> transfers_;
  std::vector<TransferRecord> records_;  ///< per transfer
  std::vector<uint32_t> flow_owner_;
  struct EngineState {
    int free = 0;
    std::deque<uint32_t> queue;
  };
  std::vector<EngineState> engines_;
  /// Per engine group: the link direction's contended setup (hw::Link::contended_setup) and
  /// the group of the same link instance's other direction.
  std::vector<Time> contended_;
  std::vector<uint32_t> reverse_engine_;
  std::vector<std::vector<Time>> op_time_;  ///< per device class, per op; -1 = not yet
  std::vector<std::vector<Time>> host_op_time_;  ///< the same on the host CPU
  std::vector<std::vector<uint32_t>> mem_waiters_;
  std::vector<uint32_t> freed_slots_;
  std::vector<uint8_t> slot_changed_;
  std::vector<uint32_t> changed_slots_;
  uint64_t wake_stamp_ = 0;
  std::vector<std::vector<uint64_t>> static_by_kind_;
  std::optional<SimError> error_;
  uint64_t solves_ = 0;
  uint64_t events_processed_ = 0;
  /// SimOptions::stop_after: bytes of device prefetches program 0 has yet to begin, and
  /// whether the bound has passed the limit.
  uint64_t unbegun_fetch_ = 0;
  bool stopped_ = false;
  /// Whether program 0's unbegun prefetches alone end after SimOptions::stop_after.
  [[nodiscard]] bool past_stop() const {
    return static_cast<double>(q_.now()) + static_cast<double>(unbegun_fetch_) / o_.ingress * 1e12 >
           static_cast<double>(o_.stop_after);
  }
};

}  // namespace tierflow::sim::detail
