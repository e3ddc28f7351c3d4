#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/checked.h"
#include "hw_models/cost.h"
#include "sim/engine.h"

namespace tierflow::sim {
namespace detail {

void Simulator::fail(SimError::Kind kind, int program, int step, int tensor, std::string message) {
  const Time now = q_.now();
  if (error_ && error_->time <= now) return;
  error_ = SimError{kind, program, step, tensor, now, std::move(message)};
  if (program >= 0) rec_.error(program, now, error_->message);
}

void Simulator::past_time_limit(int program, int step, int tensor, const std::string& what) {
  fail(SimError::Kind::kTimeLimit, program, step, tensor,
       fmt::format("{} would end after the simulator's time limit of {}: the workload's sizes "
                   "are implausibly large for this topology",
                   what, to_string_approx(Duration{kMaxSimTimePs})));
}

Time Simulator::op_time(uint32_t p, uint32_t op) {
  return cached_time(op_time_, p, op, [&](size_t cls) -> Time {
    if (const auto roof = hw::op_time(t_, cls, dev_tier_, w_, op)) return roof->ps;
    fail(SimError::Kind::kTopology, int(p), -1, -1,
         run_errors::no_peak(w_, op, t_.devices[cls].id, t_.devices[cls].peak_dtypes()));
    return 0;
  });
}

Time Simulator::host_op_time(uint32_t p, uint32_t op) {
  return cached_time(host_op_time_, p, op, [&](size_t cls) -> Time {
    if (const auto roof = hw::host_op_time(t_, cls, w_, op)) return roof->ps;
    // A topology without a host CPU was refused when the plan was bound (hw::bind).
    fail(SimError::Kind::kTopology, int(p), -1, -1,
         run_errors::no_host_peak(w_, op, t_.name, t_.system.cpu.peak_dtypes()));
    return 0;
  });
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
      const auto p = uint32_t(&st - progs_.data());
      rec_.stall(int(p), uint32_t(next_step(p)), st.since, q_.now(), st.cause == Cause::kMemory,
                 st.cause == Cause::kMemory ? "memory" : "transfer");
    }
  }
  st.cause = Cause::kNone;
}

bool Simulator::ready(uint32_t p, size_t step, const Step& s, bool compute) {
  ProgramState& st = progs_[p];
  if (!st.host.empty() && st.host[step] > q_.now()) {
    // Steps are reached in program order and their host times never decrease, so one
    // wake-up per later time covers every step asking.
    if (st.host[step] > st.host_wake) {
      st.host_wake = st.host[step];
      q_.schedule(st.host_wake, kHostIssued, p);
    }
    return false;
  }
  for (uint32_t e : s.wait) {
    const uint32_t d = dense_event(e);
    if (events_[d].done) continue;
    events_[d].add_waiter(p);
    if (compute) {
      block(st, Cause::kTransfer);
      // Woken again while the same event is due, it keeps waiting from when it began.
      if (st.wait_event != d) st.wait_begin = q_.now();
      st.wait_event = d;
    }
    return false;
  }
  return true;
}

std::string Simulator::room_name(uint32_t slot) const {
  const SlotStats& x = ledger_->stats(slot);
  std::string name = fabric_.slot_name(slot);
  if (x.limit < x.capacity) name += " within the plan's budget";
  return name;
}

stepper::Fit Simulator::reserve(uint32_t p, size_t step, uint32_t tier, uint64_t bytes) {
  const uint32_t slot = slot_of(p, tier);
  if (ledger_->fits(slot, bytes)) return stepper::Fit::kFits;
  ProgramState& st = progs_[p];
  const Step& s = st.prog->steps[step];
  if (o_.on_full == OnFull::kWait && bytes <= ledger_->stats(slot).limit) {
    if (s.kind == StepKind::kCompute && !s.host) block(st, Cause::kMemory);
    mem_waiters_[slot].push_back(p);
    return stepper::Fit::kWait;
  }
  const SlotStats& x = ledger_->stats(slot);
  fail(SimError::Kind::kCapacity, int(p), int(step),
       s.kind == StepKind::kCompute ? -1 : int(s.target),
       run_errors::over_capacity(room_name(slot), s.kind, step, bytes, x.level, x.limit,
                                 largest_live(slot)));
  return stepper::Fit::kFailed;
}

bool Simulator::allocate(uint32_t p, size_t step, uint32_t tier, uint32_t what, uint64_t bytes) {
  ProgramState& st = progs_[p];
  const uint32_t slot = slot_of(p, tier);
  const uint32_t record = ledger_allocate(slot, bytes, what, p, q_.now());
  if ((what & kWorkspaceBit) != 0) {
    (tier == plan_.device_tier ? st.workspace : st.host_workspace) = record;
  } else if (tier == plan_.device_tier) {
    st.dev_rec[what] = record;
  } else if (tier == plan_.host_tier) {
    st.host_rec[what] = record;
  }
  // A device compute step's allocations are sampled once, when it starts.
  const Step& s = st.prog->steps[step];
  if (s.kind != StepKind::kCompute || s.host) touch_slot(slot);
  return true;
}

void Simulator::release(uint32_t p, uint32_t tier, uint32_t what) {
  ProgramState& st = progs_[p];
  const bool device = tier == plan_.device_tier;
  const bool tensor = (what & kWorkspaceBit) == 0;
  TF_ASSERT(device || tier == plan_.host_tier, "a release on tier {}", tier);
  uint32_t& record = tensor   ? (device ? st.dev_rec[what] : st.host_rec[what])
                     : device ? st.workspace
                              : st.host_workspace;
  TF_ASSERT(record != kNoRecord, "a release of what no record holds");
  ledger_release(record, q_.now());
  record = kNoRecord;
  const uint32_t slot = device ? st.dev_slot : slot_of(p, tier);
  touch_slot(slot);
  if (!mem_waiters_[slot].empty()) freed_slots_.push_back(slot);
}

bool Simulator::compute(uint32_t p, size_t step, const Step& s, uint64_t need) {
  ProgramState& st = progs_[p];
  const Time now = q_.now();
  if (s.host) {
    st.host_op_start = now;
    if (StepTime* at = step_time(p, step)) at->start = now;
    const Time d = host_op_time(p, s.target);
    if (error_) return false;
    if (d > kMaxSimTimePs - now) {
      past_time_limit(int(p), int(step), -1,
                      fmt::format("op {} ('{}') on the host, which takes {},", s.target,
                                  w_.ops[s.target].name, to_string_approx(Duration{d})));
      return false;
    }
    q_.schedule(now + d, kHostComputeDone, p);
    return true;
  }
  if (need > 0) touch_slot(st.dev_slot);
  if (rec_.drawing()) {
    for (uint32_t e : s.wait) {
      const uint32_t transfer = events_[dense_event(e)].transfer;
      if (transfer == kNone) continue;  // a host step's event
      Transfer& x = transfers_[transfer];
      const TransferRecord& r = records_[transfer];
      if (r.kind == StepKind::kPrefetch && r.program == p && !x.arrowed) {
        x.arrowed = true;  // one arrow per prefetch: to its first consumer
        rec_.arrow(x.track, r.start, e, int(p));
      }
    }
  }
  st.op_start = now;
  if (StepTime* at = step_time(p, step)) at->start = now;
  const Time d = op_time(p, s.target);
  if (d > kMaxSimTimePs - now) {
    past_time_limit(int(p), int(step), -1,
                    fmt::format("op {} ('{}'), which takes {},", s.target, w_.ops[s.target].name,
                                to_string_approx(Duration{d})));
    return false;
  }
  q_.schedule(now + d, kComputeDone, p);
  return true;
}

void Simulator::issued(uint32_t p, size_t step, const Step& s) {
  if (StepTime* at = step_time(p, step)) {
    at->start = q_.now();
    if (s.kind == StepKind::kDetach) at->end = q_.now();
  }
}

void Simulator::finished(uint32_t p) {
  if (issues_[p]) {
    const PlanIssue& issue = *issues_[p];
    fail(SimError::Kind::kPlanRule, int(p), issue.step, issue.tensor, issue.message);
  }
}

void Simulator::wake(std::span<const uint32_t> programs) {
  const uint64_t stamp = ++wake_stamp_;
  for (uint32_t p : programs) {
    if (progs_[p].woken == stamp) continue;
    progs_[p].woken = stamp;
    stepper_.advance(p);
  }
}

bool Simulator::transfer(uint32_t p, size_t step, const Step& s) {
  ProgramState& st = progs_[p];
  const bool prefetch = s.kind == StepKind::kPrefetch;
  const size_t from = prefetch ? tier_map_[s.tier] : dev_tier_;
  // A host prefetch lands on the host tier, not the device.
  const size_t to = s.host ? tier_map_[plan_.host_tier] : prefetch ? dev_tier_ : tier_map_[s.tier];
  const hw::FabricPath* path = fabric_.path(from, to, st.device);
  if (path == nullptr) {
    fail(SimError::Kind::kTopology, int(p), int(step), int(s.target),
         run_errors::no_route(t_.name, t_.tiers[from].id, t_.tiers[to].id, s.kind, w_, s.target));
    return false;
  }
  const uint32_t x = uint32_t(transfers_.size());
  Transfer& tr = transfers_.emplace_back();
  const TransferRecord& rec = records_.emplace_back(
      TransferRecord{p, uint32_t(step), s.kind, s.target, s.event, w_.tensors[s.target].bytes,
                     uint32_t(from), uint32_t(to), q_.now()});
  tr.path = path;
  tr.dense_event = dense_event(s.event);
  events_[tr.dense_event].transfer = x;
  ++st.res.transfers;
  if (!s.host) (prefetch ? st.res.bytes_in : st.res.bytes_out) += rec.bytes;
  for (uint32_t g : path->engines) engines_[g].queue.push_back(x);
  try_start(x);
  return true;
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
  TransferRecord& rec = records_[x];
  rec.start = q_.now();
  if (rec_.drawing()) tr.lanes = rec_.transfer_start(int(rec.program), *tr.path);
  Time setup = tr.path->route->setup.ps;
  // Starting while a link it crosses carries a transfer the other way: that direction's
  // contended setup too (the largest over its links, as one DMA is programmed once).
  Time contended = 0;
  for (uint32_t g : tr.path->engines) {
    const uint32_t other = reverse_engine_[g];
    if (contended_[g] > contended && engines_[other].free < fabric_.engines()[other].capacity) {
      contended = contended_[g];
    }
  }
  setup = saturating_add_ps(setup, contended);
  if (setup > kMaxSimTimePs - q_.now()) {
    past_time_limit(int(rec.program), int(rec.step), int(rec.tensor),
                    fmt::format("a transfer's setup of {}", to_string_approx(Duration{setup})));
    return true;
  }
  q_.schedule(q_.now() + setup, kSetupDone, x);
  return true;
}

void Simulator::complete_transfer(uint32_t x) {
  Transfer& tr = transfers_[x];
  TransferRecord& rec = records_[x];
  rec.end = q_.now();
  if (StepTime* at = step_time(rec.program, rec.step)) at->end = q_.now();
  for (uint32_t g : tr.path->engines) ++engines_[g].free;
  for (uint32_t g : tr.path->engines) {
    while (!engines_[g].queue.empty() && try_start(engines_[g].queue.front())) {
    }
  }
  if (rec_.drawing()) tr.track = rec_.transfer_end(tr.lanes, rec);
  ProgramState& owner = progs_[rec.program];
  owner.res.end = std::max(owner.res.end, q_.now());
  events_[tr.dense_event].for_each_waiter([&](uint32_t p) {
    ProgramState& st = progs_[p];
    if (st.wait_event != tr.dense_event) return;
    rec.exposed += q_.now() - st.wait_begin;  // its compute step waited for this one
    if (rec_.on()) rec_.waited(int(p), uint32_t(next_step(p)), x, st.wait_begin, q_.now());
    st.wait_event = kNone;
  });
  complete_event(tr.dense_event);
}

void Simulator::complete_event(uint32_t d) {
  EventState& ev = events_[d];
  ev.done = true;
  if (ev.waiter == kNone) return;
  if (ev.more_waiters.empty()) {
    // One waiter: woken without a list.
    const uint32_t p = ev.waiter;
    ev.waiter = kNone;
    if (progs_[p].wait_event == d) progs_[p].wait_event = kNone;
    wake(std::span(&p, 1));
    return;
  }
  std::vector<uint32_t> waiters;
  waiters.reserve(ev.more_waiters.size() + 1);
  ev.for_each_waiter([&](uint32_t p) { waiters.push_back(p); });
  ev.waiter = kNone;
  ev.more_waiters = {};
  for (uint32_t p : waiters) {
    if (progs_[p].wait_event == d) progs_[p].wait_event = kNone;
  }
  wake(waiters);
}

void Simulator::end_host_step(uint32_t p) {
  ProgramState& st = progs_[p];
  const Time now = q_.now();
  st.res.host_compute_ps += now - st.host_op_start;
  ++st.res.host_ops;
  st.res.end = std::max(st.res.end, now);
  const size_t step = stepper_.end_host(p);
  const Step& s = st.prog->steps[step];
  if (rec_.on()) rec_.host_compute(int(p), st.host_op_start, now, s.target, uint32_t(step));
  if (StepTime* at = step_time(p, step)) at->end = now;
  if (o_.op_end != nullptr && p == 0) (*o_.op_end)[s.target] = now;
  complete_event(dense_event(s.event));
  stepper_.advance(p);
}

void Simulator::dispatch(const Event& ev) {
  switch (ev.tag) {
    case kComputeDone: {
      ProgramState& st = progs_[ev.data];
      const Time dur = q_.now() - st.op_start;
      st.res.compute_ps += dur;
      ++st.res.ops;
      st.res.compute_end = q_.now();
      st.res.end = std::max(st.res.end, q_.now());
      // Nothing issues while the op runs: the step before `next` is the one that ended.
      const size_t step = next_step(ev.data) - 1;
      const Step& s = st.prog->steps[step];
      stepper_.end_compute(ev.data);
      if (rec_.on()) rec_.compute(int(ev.data), st.op_start, q_.now(), s.target, uint32_t(step));
      if (StepTime* at = step_time(ev.data, step)) at->end = q_.now();
      if (o_.op_end != nullptr && ev.data == 0) (*o_.op_end)[s.target] = q_.now();
      stepper_.advance(ev.data);
      break;
    }
    case kSetupDone: {
      Transfer& tr = transfers_[ev.data];
      TransferRecord& rec = records_[ev.data];
      rec.active = q_.now();
      if (o_.stop_after > 0 && rec.program == 0 && rec.kind == StepKind::kPrefetch &&
          rec.to == dev_tier_) {
        unbegun_fetch_ -= rec.bytes;  // counted only with a stop bound (setup)
      }
      if (rec.bytes == 0) {
        complete_transfer(ev.data);
        break;
      }
      tr.flow = net_.start(tr.path->resources, double(rec.bytes), q_.now());
      if (flow_owner_.size() <= tr.flow) flow_owner_.resize(tr.flow + 1, kNone);
      flow_owner_[tr.flow] = ev.data;
      break;
    }
    case kHostIssued:
      stepper_.advance(ev.data);
      break;
    case kHostComputeDone:
      end_host_step(ev.data);
      break;
    case kFlowDone: {
      const uint32_t x = flow_owner_[ev.data];
      Transfer& tr = transfers_[x];
      net_.finish(tr.flow, q_.now());
      flow_owner_[ev.data] = kNone;
      tr.flow = hw::kNoFlow;
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
    const TransferRecord& rec = records_[flow_owner_[f]];
    if (tr.flow_event != 0) q_.cancel(tr.flow_event - 1);
    const Time done = net_.completion(f);
    if (done > kMaxSimTimePs) {
      past_time_limit(int(rec.program), int(rec.step), int(rec.tensor),
                      fmt::format("a transfer of {}", to_string(Bytes{rec.bytes})));
      tr.flow_event = 0;
      continue;
    }
    tr.flow_event = q_.schedule(done, kFlowDone, f) + 1;
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
    if (o_.stop_after > 0 && past_stop()) {
      stopped_ = true;
      break;
    }
    for (uint32_t s : changed_slots_) {
      rec_.tier_level(s, ev.time, ledger_->stats(s).level);
      slot_changed_[s] = 0;
    }
    changed_slots_.clear();
  }
}

void Simulator::start_programs() {
  for (uint32_t p = 0; p < progs_.size() && !error_; ++p) stepper_.advance(p);
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

SimResult Simulator::run() {
  SimResult r;
  if (setup()) {
    start_programs();
    loop();
    if (stopped_) {
      r.stopped = true;
      r.makespan = q_.now();
      r.events = events_processed_;
      r.steps = stepper_.steps();
      r.solves = solves_;
      return r;
    }
    if (!error_) {
      for (uint32_t p = 0; p < progs_.size(); ++p) {
        const stepper::Cursor& c = stepper_.cursor(p);
        if (c.done || c.stopped) continue;
        const size_t step = c.blocked_step();
        const Step& s = c.prog->steps[step];
        uint32_t undone = kNoEvent;
        for (uint32_t e : s.wait) {
          if (!events_[dense_event(e)].done) {
            undone = e;
            break;
          }
        }
        const uint32_t slot = s.kind == StepKind::kStore ? slot_of(p, s.tier)
                              : s.host                   ? slot_of(p, plan_.host_tier)
                                                         : progs_[p].dev_slot;
        const std::string memory =
            fmt::format("waits for memory on '{}', which nothing will free; live: {}",
                        fabric_.slot_name(slot), largest_live(progs_[p].dev_slot));
        error_ =
            SimError{undone == kNoEvent ? SimError::Kind::kCapacity : SimError::Kind::kDeadlock,
                     int(p),
                     int(step),
                     s.kind == StepKind::kCompute ? -1 : int(s.target),
                     q_.now(),
                     run_errors::stuck(p, s, step, undone, memory)};
        break;
      }
    }
  }
  r.error = error_;
  if (ledger_) finish(r);
  if (rec_.on()) rec_.finish(net_);
  return r;
}

}  // namespace detail

SimResult simulate(const Plan& plan, const Workload& w, const hw::Topology& t,
                   const SimOptions& options) {
  const hw::Binding b = hw::bind(plan, w, t);
  return b.bound ? simulate(*b.bound, options) : unbound_result(plan, w, *b.error);
}

SimResult unbound_result(const Plan& plan, const Workload& w, const RunError& bind_error) {
  SimResult r;
  const PlanCheck check = verify_plan_programs(plan, w);
  r.error = check.global ? detail::rule_error(*check.global) : bind_error;
  return r;
}

SimResult simulate(const hw::BoundPlan& b, const SimOptions& options) {
  const Plan& plan = b.plan;
  const Workload& w = b.workload;
  if (options.op_end != nullptr) options.op_end->assign(w.ops.size(), -1);
  if (options.step_times != nullptr) {
    options.step_times->assign(plan.programs.size(), {});
    for (size_t p = 0; p < plan.programs.size(); ++p) {
      (*options.step_times)[p].assign(plan.programs[p].steps.size(), StepTime{});
    }
  }
  detail::Simulator sim(b, options);
  SimResult r = sim.run();
  r.device_tier = b.device_tier;
  return r;
}

}  // namespace tierflow::sim
