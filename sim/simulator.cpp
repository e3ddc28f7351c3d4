#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "core/diagnostics.h"
#include "hw_models/cost.h"
#include "sim/models/fabric.h"
#include "sim/models/flows.h"
#include "sim/models/ledger.h"
#include "sim/recorder.h"

namespace tierflow::sim {
namespace {

enum Tag : uint32_t { kComputeDone, kSetupDone, kFlowDone };
enum class Cause : uint8_t { kNone, kTransfer, kMemory };

inline constexpr uint32_t kNone = UINT32_MAX;

struct EventState {
  bool done = false;
  uint32_t transfer = kNone;
  std::vector<uint32_t> waiters;  ///< programs with a step blocked on it (may repeat)
};

struct Transfer {
  TransferRecord rec;
  const Path* path = nullptr;
  uint32_t dense_event = 0;
  uint32_t flow = kNoFlow;
  uint64_t flow_event = 0;
  uint32_t lanes = kNone;  ///< recorder handle while running
  TrackId track = 0;       ///< where the recorder drew it
  bool arrowed = false;
};

struct ProgramState {
  const Program* prog = nullptr;
  int device = 0;
  size_t next = 0;
  size_t end = 0;  ///< steps.size(), or the first step that breaks a rule
  bool busy = false;
  bool done = false;
  Cause cause = Cause::kNone;
  Time since = 0;
  uint32_t wait_event = kNone;
  Time wait_since = 0;
  /// When the compute step began waiting on wait_event, for the recorder's waits:
  /// wait_since restarts each time the program is woken while the event is still due.
  Time wait_begin = 0;
  uint64_t woken = 0;                ///< wake stamp, to run a program once per wake-up
  std::vector<uint32_t> pending;     ///< cache steps whose anchor finished, not yet issued
  std::vector<uint16_t> pending_on;  ///< per tensor: cache steps of it in `pending`
  uint32_t dev_slot = 0;
  uint32_t workspace = kNoRecord;
  Time op_start = 0;
  std::vector<uint32_t> dev_rec;  ///< per tensor: ledger record of the device copy
  std::vector<uint64_t> copies;   ///< per tensor: plan tiers holding an allocated copy
  DeviceResult res;
};

class Simulator {
 public:
  Simulator(const Plan& plan, const Workload& w, const hw::Topology& t, const SimOptions& o)
      : plan_(plan),
        w_(w),
        t_(t),
        o_(o),
        fabric_(t, net_),
        rec_(o.timeline, o.series, fabric_, w, plan) {}

  SimResult run();

 private:
  bool setup();
  void start_programs();
  void loop();
  void dispatch(const Event& ev);
  void advance(uint32_t p);
  bool wait_ready(uint32_t p, const Step& s, bool compute);
  bool try_issue(uint32_t p, size_t step);
  void retry_pending(uint32_t p);
  void wake(const std::vector<uint32_t>& programs);
  bool reserve(uint32_t p, uint32_t slot, uint64_t bytes, size_t step);
  void block(ProgramState& st, Cause c);
  void unblock(ProgramState& st);
  void issue_transfer(uint32_t p, const Step& s, size_t step);
  bool try_start(uint32_t x);
  void complete_transfer(uint32_t x);
  void resolve();
  void fail(SimError::Kind kind, int program, int step, int tensor, std::string message);
  Time op_time(uint32_t p, uint32_t op);
  void wake_memory();
  /// The ledger's allocate and release, telling the recorder what the bytes are.
  uint32_t allocate(uint32_t slot, uint64_t bytes, uint32_t what, uint32_t p, Time now) {
    if (rec_.on()) rec_.held(slot, what, bytes, /*add=*/true);
    return ledger_->allocate(slot, bytes, what, p, now);
  }
  void release(uint32_t record, Time now) {
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
  std::string tensor_name(uint32_t t) const {
    return fmt::format("tensor {} '{}'", t, w_.tensors[t].name);
  }

  const Plan& plan_;
  const Workload& w_;
  const hw::Topology& t_;
  const SimOptions& o_;
  EventQueue q_;
  FlowNetwork net_;
  Fabric fabric_;
  Recorder rec_;
  std::unique_ptr<MemoryLedger> ledger_;
  std::vector<size_t> tier_map_;  ///< plan tier -> topology tier
  size_t dev_tier_ = 0;           ///< topology tier of the plan's device tier
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
  std::vector<uint32_t> flow_owner_;
  struct EngineState {
    int free = 0;
    std::deque<uint32_t> queue;
  };
  std::vector<EngineState> engines_;
  std::vector<std::vector<Time>> op_time_;  ///< per device class, per op; -1 = not yet
  std::vector<std::vector<uint32_t>> mem_waiters_;
  std::vector<uint32_t> freed_slots_;
  std::vector<uint8_t> slot_changed_;
  std::vector<uint32_t> changed_slots_;
  std::vector<uint32_t> blocked_tensors_;  ///< scratch of retry_pending
  uint64_t wake_stamp_ = 0;
  std::vector<std::vector<uint64_t>> static_by_kind_;
  std::optional<SimError> error_;
  uint64_t steps_ = 0;
  uint64_t solves_ = 0;
  uint64_t events_processed_ = 0;
};

void Simulator::fail(SimError::Kind kind, int program, int step, int tensor, std::string message) {
  const Time now = q_.now();
  if (error_ && error_->time <= now) return;
  error_ = SimError{kind, program, step, tensor, now, std::move(message)};
  if (program >= 0) rec_.error(program, now, error_->message);
}

bool Simulator::setup() {
  const PlanCheck check = verify_plan_programs(plan_, w_);
  if (check.global) {
    error_ = SimError{SimError::Kind::kPlanRule, -1, -1,
                      check.global->tensor,      -1, check.global->message};
    return false;
  }
  issues_ = check.programs;
  for (const std::string& id : plan_.tiers) {
    const auto ti = t_.tier_index(id);
    if (!ti) {
      std::vector<std::string> ids;
      for (const hw::Tier& x : t_.tiers) ids.push_back(x.id);
      error_ = SimError{SimError::Kind::kTopology,
                        -1,
                        -1,
                        -1,
                        -1,
                        fmt::format("the plan's tier '{}' is not in topology '{}'{}", id, t_.name,
                                    did_you_mean(id, ids))};
      return false;
    }
    tier_map_.push_back(*ti);
  }
  dev_tier_ = tier_map_[plan_.device_tier];
  if (t_.tiers[dev_tier_].per != hw::Scope::kDevice) {
    error_ = SimError{SimError::Kind::kTopology,
                      -1,
                      -1,
                      -1,
                      -1,
                      fmt::format("the plan's device tier '{}' is not a per-device tier in '{}'",
                                  t_.tiers[dev_tier_].id, t_.name)};
    return false;
  }
  std::vector<uint64_t> capacity(fabric_.tier_slots());
  for (uint32_t s = 0; s < capacity.size(); ++s) {
    capacity[s] = t_.usable(fabric_.slot_tier(s).first);
  }
  ledger_ = std::make_unique<MemoryLedger>(std::move(capacity));
  static_by_kind_.assign(fabric_.tier_slots(), std::vector<uint64_t>(kKindSlots));
  mem_waiters_.resize(fabric_.tier_slots());
  slot_changed_.assign(fabric_.tier_slots(), 0);
  engines_.resize(fabric_.engines().size());
  for (size_t g = 0; g < engines_.size(); ++g) engines_[g].free = fabric_.engines()[g].capacity;
  op_time_.resize(t_.devices.size());

  std::vector<bool> used(size_t(fabric_.devices()));
  progs_.resize(plan_.programs.size());
  for (size_t p = 0; p < plan_.programs.size(); ++p) {
    const Program& prog = plan_.programs[p];
    if (prog.device >= uint32_t(fabric_.devices()) || used[prog.device]) {
      error_ = SimError{SimError::Kind::kTopology,
                        int(p),
                        -1,
                        -1,
                        -1,
                        prog.device >= uint32_t(fabric_.devices())
                            ? fmt::format("program {} runs on device {}, but '{}' has {} devices",
                                          p, prog.device, t_.name, fabric_.devices())
                            : fmt::format("program {} runs on device {}, which another program "
                                          "already uses",
                                          p, prog.device)};
      return false;
    }
    used[prog.device] = true;
    ProgramState& st = progs_[p];
    st.prog = &prog;
    st.device = int(prog.device);
    st.res.device = st.device;
    st.end = prog.steps.size();
    if (issues_[p] && issues_[p]->step >= 0) st.end = size_t(issues_[p]->step);
    st.dev_slot = fabric_.tier_slot(dev_tier_, st.device);
    st.dev_rec.assign(w_.tensors.size(), kNoRecord);
    st.copies.assign(w_.tensors.size(), 0);
    st.pending_on.assign(w_.tensors.size(), 0);
  }
  // Events: dense numbering in plan order.
  uint32_t max_id = 0;
  for (const Program& prog : plan_.programs) {
    for (const Step& s : prog.steps) {
      if (s.event != kNoEvent) {
        max_id = std::max(max_id, s.event);
        events_.emplace_back();
      }
    }
  }
  const bool table = size_t{max_id} < 4 * events_.size() + 1024;
  if (table) event_table_.assign(size_t{max_id} + 1, kNone);
  uint32_t next = 0;
  for (const Program& prog : plan_.programs) {
    for (const Step& s : prog.steps) {
      if (s.event == kNoEvent) continue;
      if (!table) {
        event_map_.emplace(s.event, next);
      } else if (event_table_[s.event] == kNone) {
        event_table_[s.event] = next;
      }
      ++next;
    }
  }
  if (rec_.on()) rec_.begin(tier_map_);
  // Home copies present from time zero.
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    ProgramState& st = progs_[p];
    for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
      const Tensor& x = w_.tensors[t];
      if (x.origin != kExternal) continue;
      const uint32_t home = plan_.home[t];
      if (home == plan_.device_tier) {
        if (!ledger_->fits(st.dev_slot, x.bytes)) {
          fail(SimError::Kind::kCapacity, int(p), -1, int(t),
               fmt::format("'{}' is full before the step starts: the device-resident {} ({}) "
                           "does not fit in the {} left of {}; live: {}",
                           fabric_.slot_name(st.dev_slot), tensor_name(t),
                           to_string_approx(Bytes{x.bytes}),
                           to_string_approx(Bytes{ledger_->stats(st.dev_slot).capacity -
                                                  ledger_->stats(st.dev_slot).level}),
                           to_string_approx(Bytes{ledger_->stats(st.dev_slot).capacity}),
                           largest_live(st.dev_slot)));
          return false;
        }
        st.dev_rec[t] = allocate(st.dev_slot, x.bytes, t, p, 0);
      } else {
        const uint32_t slot = fabric_.tier_slot(tier_map_[home], st.device);
        ledger_->add_static(slot, x.bytes);
        if (rec_.on()) rec_.held(slot, t, x.bytes, /*add=*/true);
        static_by_kind_[slot][size_t(x.kind)] += x.bytes;
        st.copies[t] |= uint64_t{1} << home;
      }
    }
  }
  for (uint32_t s = 0; s < ledger_->slots(); ++s) {
    const SlotStats& x = ledger_->stats(s);
    if (x.level > x.capacity) {
      fail(SimError::Kind::kCapacity, -1, -1, -1,
           fmt::format("'{}' is over capacity before the step starts: the home copies take {} "
                       "of {}; largest: {}",
                       fabric_.slot_name(s), to_string_approx(Bytes{x.level}),
                       to_string_approx(Bytes{x.capacity}), largest_live(s)));
      return false;
    }
  }
  return true;
}

Time Simulator::op_time(uint32_t p, uint32_t op) {
  const size_t cls = fabric_.device_class(progs_[p].device);
  auto& cache = op_time_[cls];
  if (cache.empty()) cache.assign(w_.ops.size(), -1);
  Time& slot = cache[op];
  if (slot >= 0) return slot;
  const Op& o = w_.ops[op];
  const auto roof = hw::op_time(t_, cls, dev_tier_, w_, op);
  if (!roof) {
    fail(SimError::Kind::kTopology, int(p), -1, -1,
         fmt::format("op {} '{}' computes in {}, which device '{}' has no peak rate for (it "
                     "has: {})",
                     op, o.name, name_of(o.dtype), t_.devices[cls].id,
                     t_.devices[cls].peak_dtypes()));
    return slot = 0;
  }
  return slot = roof->ps;
}

void Simulator::block(ProgramState& st, Cause c) {
  if (st.cause == c) return;
  unblock(st);
  st.cause = c;
  st.since = q_.now();
}

void Simulator::unblock(ProgramState& st) {
  if (st.cause == Cause::kNone) return;
  const Time d = q_.now() - st.since;
  if (d > 0) {
    (st.cause == Cause::kMemory ? st.res.stall_memory_ps : st.res.stall_transfer_ps) += d;
    if (rec_.on()) {
      rec_.stall(int(&st - progs_.data()), uint32_t(st.next), st.since, q_.now(),
                 st.cause == Cause::kMemory, st.cause == Cause::kMemory ? "memory" : "transfer");
    }
  }
  st.cause = Cause::kNone;
}

bool Simulator::wait_ready(uint32_t p, const Step& s, bool compute) {
  ProgramState& st = progs_[p];
  for (uint32_t e : s.wait) {
    const uint32_t d = dense_event(e);
    if (events_[d].done) continue;
    events_[d].waiters.push_back(p);
    if (compute) {
      block(st, Cause::kTransfer);
      if (st.wait_event != d) st.wait_begin = q_.now();
      st.wait_event = d;
      st.wait_since = q_.now();
    }
    return false;
  }
  return true;
}

bool Simulator::reserve(uint32_t p, uint32_t slot, uint64_t bytes, size_t step) {
  if (ledger_->fits(slot, bytes)) return true;
  ProgramState& st = progs_[p];
  const Step& s = st.prog->steps[step];
  if (o_.on_full == OnFull::kWait && bytes <= ledger_->stats(slot).capacity) {
    if (s.kind == StepKind::kCompute) block(st, Cause::kMemory);
    mem_waiters_[slot].push_back(p);
    return false;
  }
  const SlotStats& x = ledger_->stats(slot);
  fail(SimError::Kind::kCapacity, int(p), int(step),
       s.kind == StepKind::kCompute ? -1 : int(s.target),
       fmt::format("'{}' is over capacity: {} step {} needs {}, {} of {} is free; largest live: {}",
                   fabric_.slot_name(slot), kStepKindNames[size_t(s.kind)], step,
                   to_string_approx(Bytes{bytes}),
                   to_string_approx(Bytes{x.capacity - std::min(x.capacity, x.level)}),
                   to_string_approx(Bytes{x.capacity}), largest_live(slot)));
  st.done = true;  // this program stops here
  return false;
}

bool Simulator::try_issue(uint32_t p, size_t step) {
  ProgramState& st = progs_[p];
  const Step& s = st.prog->steps[step];
  const Time now = q_.now();
  if (!s.wait.empty() && !wait_ready(p, s, /*compute=*/false)) return false;
  switch (s.kind) {
    case StepKind::kPrefetch: {
      const uint64_t bytes = w_.tensors[s.target].bytes;
      if (!reserve(p, st.dev_slot, bytes, step)) return false;
      st.dev_rec[s.target] = allocate(st.dev_slot, bytes, s.target, p, now);
      touch_slot(st.dev_slot);
      issue_transfer(p, s, step);
      break;
    }
    case StepKind::kStore: {
      const uint64_t bit = uint64_t{1} << s.tier;
      if ((st.copies[s.target] & bit) == 0) {
        const uint32_t slot = fabric_.tier_slot(tier_map_[s.tier], st.device);
        const uint64_t bytes = w_.tensors[s.target].bytes;
        if (!reserve(p, slot, bytes, step)) return false;
        allocate(slot, bytes, s.target, p, now);
        touch_slot(slot);
        st.copies[s.target] |= bit;
      }
      issue_transfer(p, s, step);
      break;
    }
    case StepKind::kDetach: {
      release(st.dev_rec[s.target], now);
      st.dev_rec[s.target] = kNoRecord;
      touch_slot(st.dev_slot);
      if (!mem_waiters_[st.dev_slot].empty()) freed_slots_.push_back(st.dev_slot);
      break;
    }
    case StepKind::kCompute:
      TF_ASSERT(false, "try_issue of a compute step");
  }
  if (StepTime* at = step_time(p, step)) {
    at->start = now;
    if (s.kind == StepKind::kDetach) at->end = now;
  }
  ++steps_;
  return true;
}

void Simulator::retry_pending(uint32_t p) {
  ProgramState& st = progs_[p];
  if (st.pending.empty()) return;
  // Steps on one tensor issue in program order; steps on different tensors need not.
  blocked_tensors_.clear();
  size_t keep = 0;
  for (size_t i = 0; i < st.pending.size(); ++i) {
    const size_t step = st.pending[i];
    const uint32_t t = st.prog->steps[step].target;
    const bool behind =
        std::find(blocked_tensors_.begin(), blocked_tensors_.end(), t) != blocked_tensors_.end();
    if (!st.done && !behind && try_issue(p, step)) {
      --st.pending_on[t];
      continue;
    }
    if (!behind) blocked_tensors_.push_back(t);
    st.pending[keep++] = static_cast<uint32_t>(step);
  }
  st.pending.resize(keep);
}

void Simulator::advance(uint32_t p) {
  ProgramState& st = progs_[p];
  const Time now = q_.now();
  retry_pending(p);
  while (!st.done && !st.busy && st.next < st.end) {
    const Step& s = st.prog->steps[st.next];
    if (s.kind != StepKind::kCompute) {
      // A cache step whose anchor finished: issue it now, or keep it pending without
      // holding back the steps after it.
      if (st.pending_on[s.target] > 0 || !try_issue(p, st.next)) {
        if (st.done) return;
        st.pending.push_back(static_cast<uint32_t>(st.next));
        ++st.pending_on[s.target];
      }
      ++st.next;
      continue;
    }
    if (!s.wait.empty() && !wait_ready(p, s, /*compute=*/true)) return;
    const Op& op = w_.ops[s.target];
    uint64_t need = op.workspace;
    for (uint32_t t : op.outputs) need += w_.tensors[t].bytes;
    if (!reserve(p, st.dev_slot, need, st.next)) return;
    unblock(st);
    for (uint32_t t : op.outputs) {
      st.dev_rec[t] = allocate(st.dev_slot, w_.tensors[t].bytes, t, p, now);
    }
    if (op.workspace > 0) {
      st.workspace = allocate(st.dev_slot, op.workspace, s.target | kWorkspaceBit, p, now);
    }
    if (need > 0) touch_slot(st.dev_slot);
    if (rec_.drawing()) {
      for (uint32_t e : s.wait) {
        Transfer& x = transfers_[events_[dense_event(e)].transfer];
        if (x.rec.kind == StepKind::kPrefetch && x.rec.program == p && !x.arrowed) {
          x.arrowed = true;  // one arrow per prefetch: to its first consumer
          rec_.arrow(x.track, x.rec.start, e, int(p));
        }
      }
    }
    st.busy = true;
    st.op_start = now;
    if (StepTime* at = step_time(p, st.next)) at->start = now;
    q_.schedule(now + op_time(p, s.target), kComputeDone, p);
    ++st.next;
    ++steps_;
    return;
  }
  if (st.busy || st.done || !st.pending.empty() || st.next < st.end) return;
  st.done = true;
  if (issues_[p]) {
    const PlanIssue& issue = *issues_[p];
    fail(SimError::Kind::kPlanRule, int(p), issue.step, issue.tensor, issue.message);
  }
}

void Simulator::wake(const std::vector<uint32_t>& programs) {
  const uint64_t stamp = ++wake_stamp_;
  for (uint32_t p : programs) {
    if (progs_[p].woken == stamp) continue;
    progs_[p].woken = stamp;
    advance(p);
  }
}

void Simulator::issue_transfer(uint32_t p, const Step& s, size_t step) {
  ProgramState& st = progs_[p];
  const bool prefetch = s.kind == StepKind::kPrefetch;
  const size_t from = prefetch ? tier_map_[s.tier] : dev_tier_;
  const size_t to = prefetch ? dev_tier_ : tier_map_[s.tier];
  const Path* path = fabric_.path(from, to, st.device);
  if (path == nullptr) {
    fail(SimError::Kind::kTopology, int(p), int(step), int(s.target),
         fmt::format("'{}' has no route from '{}' to '{}' for the {} of {}", t_.name,
                     t_.tiers[from].id, t_.tiers[to].id, kStepKindNames[size_t(s.kind)],
                     tensor_name(s.target)));
    st.done = true;
    return;
  }
  const uint32_t x = uint32_t(transfers_.size());
  Transfer& tr = transfers_.emplace_back();
  tr.rec = TransferRecord{p,
                          uint32_t(step),
                          s.kind,
                          s.target,
                          s.event,
                          w_.tensors[s.target].bytes,
                          uint32_t(from),
                          uint32_t(to),
                          q_.now()};
  tr.path = path;
  tr.dense_event = dense_event(s.event);
  events_[tr.dense_event].transfer = x;
  ++st.res.transfers;
  (prefetch ? st.res.bytes_in : st.res.bytes_out) += tr.rec.bytes;
  for (uint32_t g : path->engines) engines_[g].queue.push_back(x);
  try_start(x);
}

bool Simulator::try_start(uint32_t x) {
  Transfer& tr = transfers_[x];
  for (uint32_t g : tr.path->engines) {
    if (engines_[g].free == 0 || engines_[g].queue.front() != x) return false;
  }
  for (uint32_t g : tr.path->engines) {
    --engines_[g].free;
    engines_[g].queue.pop_front();
  }
  tr.rec.start = q_.now();
  if (rec_.drawing()) tr.lanes = rec_.transfer_start(int(tr.rec.program), *tr.path);
  q_.schedule(q_.now() + tr.path->setup, kSetupDone, x);
  return true;
}

void Simulator::complete_transfer(uint32_t x) {
  Transfer& tr = transfers_[x];
  tr.rec.end = q_.now();
  if (StepTime* at = step_time(tr.rec.program, tr.rec.step)) at->end = q_.now();
  for (uint32_t g : tr.path->engines) ++engines_[g].free;
  for (uint32_t g : tr.path->engines) {
    while (!engines_[g].queue.empty() && try_start(engines_[g].queue.front())) {
    }
  }
  if (rec_.drawing()) tr.track = rec_.transfer_end(tr.lanes, tr.rec);
  ProgramState& owner = progs_[tr.rec.program];
  owner.res.end = std::max(owner.res.end, q_.now());
  EventState& ev = events_[tr.dense_event];
  ev.done = true;
  std::vector<uint32_t> waiters;
  waiters.swap(ev.waiters);
  for (uint32_t p : waiters) {
    ProgramState& st = progs_[p];
    if (st.wait_event != tr.dense_event) continue;
    tr.rec.exposed += q_.now() - st.wait_since;  // its compute step waited for this one
    if (rec_.on()) rec_.waited(int(p), uint32_t(st.next), x, st.wait_begin, q_.now());
    st.wait_event = kNone;
  }
  wake(waiters);
}

void Simulator::dispatch(const Event& ev) {
  switch (ev.tag) {
    case kComputeDone: {
      ProgramState& st = progs_[ev.data];
      st.busy = false;
      const Time dur = q_.now() - st.op_start;
      st.res.compute_ps += dur;
      ++st.res.ops;
      st.res.compute_end = q_.now();
      st.res.end = std::max(st.res.end, q_.now());
      // Nothing issues while the op runs: the step before `next` is the one that ended.
      const Step& s = st.prog->steps[st.next - 1];
      if (st.workspace != kNoRecord) {
        release(st.workspace, q_.now());
        st.workspace = kNoRecord;
        touch_slot(st.dev_slot);
        if (!mem_waiters_[st.dev_slot].empty()) freed_slots_.push_back(st.dev_slot);
      }
      if (rec_.on()) {
        rec_.compute(int(ev.data), st.op_start, q_.now(), s.target, uint32_t(st.next - 1));
      }
      if (StepTime* at = step_time(ev.data, st.next - 1)) at->end = q_.now();
      if (o_.op_end != nullptr && ev.data == 0) (*o_.op_end)[s.target] = q_.now();
      advance(ev.data);
      break;
    }
    case kSetupDone: {
      Transfer& tr = transfers_[ev.data];
      tr.rec.active = q_.now();
      if (tr.rec.bytes == 0) {
        complete_transfer(ev.data);
        break;
      }
      tr.flow = net_.start(tr.path->resources, double(tr.rec.bytes), q_.now());
      if (flow_owner_.size() <= tr.flow) flow_owner_.resize(tr.flow + 1, kNone);
      flow_owner_[tr.flow] = ev.data;
      break;
    }
    case kFlowDone: {
      const uint32_t x = flow_owner_[ev.data];
      Transfer& tr = transfers_[x];
      net_.finish(tr.flow, q_.now());
      flow_owner_[ev.data] = kNone;
      tr.flow = kNoFlow;
      complete_transfer(x);
      break;
    }
    default:
      TF_ASSERT(false, "unknown event tag {}", ev.tag);
  }
}

void Simulator::wake_memory() {
  while (!freed_slots_.empty()) {
    const uint32_t slot = freed_slots_.back();
    freed_slots_.pop_back();
    std::vector<uint32_t> waiting;
    waiting.swap(mem_waiters_[slot]);
    wake(waiting);
  }
}

void Simulator::resolve() {
  const Time now = q_.now();
  net_.solve(now);
  ++solves_;
  for (uint32_t f : net_.changed_flows()) {
    Transfer& tr = transfers_[flow_owner_[f]];
    if (tr.flow_event != 0) q_.cancel(tr.flow_event - 1);
    tr.flow_event = q_.schedule(net_.completion(f), kFlowDone, f) + 1;
  }
  if (rec_.on()) {
    for (uint32_t r : net_.changed_resources()) rec_.link_rate(r, now, net_.load(r));
  }
}

void Simulator::loop() {
  Event ev;
  while (!error_ && q_.pop(ev)) {
    dispatch(ev);
    ++events_processed_;
    wake_memory();
    const auto next = q_.next_time();
    if (next && *next == ev.time) continue;
    // Every event of this instant has run: re-solve rates once, sample levels once.
    if (net_.dirty()) resolve();
    for (uint32_t s : changed_slots_) {
      rec_.tier_level(s, ev.time, ledger_->stats(s).level);
      slot_changed_[s] = 0;
    }
    changed_slots_.clear();
  }
}

void Simulator::start_programs() {
  for (uint32_t p = 0; p < progs_.size() && !error_; ++p) advance(p);
  wake_memory();
  if (net_.dirty()) resolve();
  // Levels at time 0: the home copies and what the first steps allocated (sampled here,
  // not at the first event's time, which may be much later).
  if (rec_.on()) {
    for (uint32_t s = 0; s < ledger_->slots(); ++s) {
      rec_.tier_level(s, 0, ledger_->stats(s).level);
      slot_changed_[s] = 0;
    }
    changed_slots_.clear();
  }
}

std::string Simulator::largest_live(uint32_t slot) const {
  struct Item {
    uint64_t bytes;
    uint32_t what;
    uint32_t program;
  };
  std::vector<Item> live;
  for (const Allocation& a : ledger_->live_now(slot)) live.push_back({a.bytes, a.what, a.program});
  // Home copies in this instance.
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
      const Tensor& x = w_.tensors[t];
      if (x.origin == kExternal && plan_.home[t] != plan_.device_tier &&
          fabric_.tier_slot(tier_map_[plan_.home[t]], progs_[p].device) == slot) {
        live.push_back({x.bytes, t, p});
      }
    }
  }
  std::stable_sort(live.begin(), live.end(),
                   [](const Item& a, const Item& b) { return a.bytes > b.bytes; });
  std::string out;
  for (size_t i = 0; i < live.size() && i < 5; ++i) {
    const Item& a = live[i];
    if (!out.empty()) out += ", ";
    if (a.what & kWorkspaceBit) {
      out += fmt::format("workspace of op {}", a.what & ~kWorkspaceBit);
    } else {
      out += fmt::format("'{}'", w_.tensors[a.what].name);
    }
    if (progs_.size() > 1) out += fmt::format(" of program {}", a.program);
    out += fmt::format(" ({})", to_string_approx(Bytes{a.bytes}));
  }
  if (live.size() > 5) out += fmt::format(" and {} more", live.size() - 5);
  return out.empty() ? "nothing" : out;
}

void Simulator::finish(SimResult& r) {
  const Time end = q_.now();
  r.events = events_processed_;
  r.steps = steps_;
  r.solves = solves_;
  for (ProgramState& st : progs_) {
    r.makespan = std::max(r.makespan, st.res.end);
    r.devices.push_back(st.res);
  }
  // Tiers: every instance that held bytes.
  std::vector<uint32_t> by_size(w_.tensors.size());
  for (uint32_t t = 0; t < by_size.size(); ++t) by_size[t] = t;
  std::stable_sort(by_size.begin(), by_size.end(), [this](uint32_t a, uint32_t b) {
    return w_.tensors[a].bytes > w_.tensors[b].bytes;
  });
  // Home copies by plan tier, largest first, at most live_top each: what a program can
  // list for the instance its home tier maps to.
  std::vector<std::vector<uint32_t>> homed(plan_.tiers.size());
  for (uint32_t t : by_size) {
    const uint32_t h = plan_.home[t];
    if (w_.tensors[t].origin == kExternal && h != plan_.device_tier &&
        homed[h].size() < o_.live_top) {
      homed[h].push_back(t);
    }
  }
  // Per program, the instance of each plan tier.
  std::vector<std::vector<uint32_t>> slot_of(progs_.size());
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    for (size_t h = 0; h < plan_.tiers.size(); ++h) {
      slot_of[p].push_back(fabric_.tier_slot(tier_map_[h], progs_[p].device));
    }
  }
  for (uint32_t s = 0; s < ledger_->slots(); ++s) {
    const SlotStats& x = ledger_->stats(s);
    if (x.peak == 0) continue;
    TierResult tr;
    tr.name = fabric_.slot_name(s);
    std::tie(tr.tier, tr.instance) = fabric_.slot_tier(s);
    tr.capacity = x.capacity;
    tr.peak = x.peak;
    tr.peak_time = x.peak_time;
    tr.average = ledger_->average(s, std::max(end, r.makespan));
    tr.final_level = x.level;
    tr.peak_by_kind = static_by_kind_[s];
    std::vector<LiveTensor> live;
    for (const Allocation& a : ledger_->live_at_peak(s)) {
      const bool ws = (a.what & kWorkspaceBit) != 0;
      tr.peak_by_kind[ws ? kWorkspaceKind : size_t(w_.tensors[a.what].kind)] += a.bytes;
      live.push_back(LiveTensor{a.program, a.what, a.bytes, false});
    }
    tr.live_count = live.size();
    // Home copies: the largest few of each program whose instance this is (the largest
    // few of each of its plan tiers on this instance hold them; the list is cut below).
    for (uint32_t p = 0; p < progs_.size(); ++p) {
      for (size_t h = 0; h < homed.size(); ++h) {
        if (slot_of[p][h] != s) continue;
        for (uint32_t t : homed[h]) live.push_back(LiveTensor{p, t, w_.tensors[t].bytes, true});
      }
    }
    std::stable_sort(live.begin(), live.end(), [](const LiveTensor& a, const LiveTensor& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes
                                : std::tie(a.program, a.what) < std::tie(b.program, b.what);
    });
    if (live.size() > o_.live_top) live.resize(o_.live_top);
    tr.largest = std::move(live);
    r.tiers.push_back(std::move(tr));
  }
  // Resources that carried bytes.
  std::vector<uint64_t> count(fabric_.resources().size());
  std::vector<Time> queue(count.size()), max_queue(count.size());
  for (const Transfer& x : transfers_) {
    for (uint32_t res : x.path->resources) {
      ++count[res];
      queue[res] += x.rec.start - x.rec.issue;
      max_queue[res] = std::max(max_queue[res], x.rec.start - x.rec.issue);
    }
  }
  for (uint32_t res = 0; res < fabric_.resources().size(); ++res) {
    const ResourceStats st = net_.stats(res, end);
    if (st.bytes <= 0) continue;
    const ResourceInfo& info = fabric_.resources()[res];
    LinkResult lr;
    lr.name = info.name;
    lr.kind = info.kind;
    lr.index = info.index;
    lr.instance = info.instance;
    lr.forward = info.forward;
    lr.capacity = net_.capacity(res);
    lr.bytes = st.bytes;
    lr.busy_ps = st.busy_ps;
    lr.mean_concurrency = st.busy_ps > 0 ? st.flow_ps / double(st.busy_ps) : 0;
    lr.peak_rate = st.peak_rate;
    lr.transfers = count[res];
    lr.queue_ps = queue[res];
    lr.max_queue_ps = max_queue[res];
    r.links.push_back(std::move(lr));
  }
  if (o_.keep_transfers) {
    r.transfers.reserve(transfers_.size());
    for (const Transfer& x : transfers_) r.transfers.push_back(x.rec);
  }
}

SimResult Simulator::run() {
  SimResult r;
  if (setup()) {
    start_programs();
    loop();
    if (!error_) {
      for (uint32_t p = 0; p < progs_.size(); ++p) {
        const ProgramState& st = progs_[p];
        if (st.done) continue;
        // The earliest step that cannot issue: a pending cache step, else the compute step.
        const size_t step = st.pending.empty() ? st.next : st.pending.front();
        const Step& s = st.prog->steps[step];
        uint32_t undone = kNone;
        for (uint32_t e : s.wait) {
          if (!events_[dense_event(e)].done) {
            undone = e;
            break;
          }
        }
        const bool memory = undone == kNone;
        const std::string why =
            memory ? fmt::format(
                         "waits for memory on '{}', which nothing will free; live: {}",
                         fabric_.slot_name(s.kind == StepKind::kStore
                                               ? fabric_.tier_slot(tier_map_[s.tier], st.device)
                                               : st.dev_slot),
                         largest_live(st.dev_slot))
                   : fmt::format(
                         "waits on event {}, which never completes: the step completing "
                         "it is itself blocked",
                         undone);
        error_ = SimError{memory ? SimError::Kind::kCapacity : SimError::Kind::kDeadlock,
                          int(p),
                          int(step),
                          s.kind == StepKind::kCompute ? -1 : int(s.target),
                          q_.now(),
                          fmt::format("program {} is stuck at its {} step {}: it {}", p,
                                      kStepKindNames[size_t(s.kind)], step, why)};
        break;
      }
    }
  }
  r.error = error_;
  if (ledger_) finish(r);
  if (rec_.on()) rec_.finish(net_);
  return r;
}

}  // namespace

SimResult simulate(const Plan& plan, const Workload& w, const hw::Topology& t,
                   const SimOptions& options) {
  if (options.op_end != nullptr) options.op_end->assign(w.ops.size(), -1);
  if (options.step_times != nullptr) {
    options.step_times->assign(plan.programs.size(), {});
    for (size_t p = 0; p < plan.programs.size(); ++p) {
      (*options.step_times)[p].assign(plan.programs[p].steps.size(), StepTime{});
    }
  }
  Simulator sim(plan, w, t, options);
  return sim.run();
}

}  // namespace tierflow::sim
