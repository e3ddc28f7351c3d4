#include "tools/replay/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/diagnostics.h"
#include "core/stepper.h"
#include "hw_models/cost.h"

namespace tierflow::replay {
namespace {

struct EventState {
  bool done = false;
  Time end = 0;
};

/// What the executor keeps of a program beside its stepper cursor.
struct ProgramState {
  const Program* prog = nullptr;
  bool compute_done = false;  ///< its completion arrived and is not yet handled
  bool host_done = false;     ///< its host step's completion arrived, not yet handled
  size_t compute_step = 0;
  bool reached = false;  ///< the next compute step has been reached
  std::optional<Block> workspace;
  std::optional<Block> host_workspace;       ///< of the host step that runs
  size_t host_step = 0;                      ///< the host step that runs or ran last
  std::vector<std::optional<Block>> dev;     ///< per tensor: the device copy
  std::vector<std::optional<Block>> copies;  ///< [tensor * tiers + tier]: other copies
  uint32_t in_flight = 0;                    ///< transfers and compute steps running
  bool finished = false;
  bool waiting = false;  ///< asleep on the condition variable
  uint64_t seen = 0;     ///< the generation it last advanced at
  uint64_t seq = 0;
  ProgramRecord rec;
};

}  // namespace

std::optional<ReplayError> broken_rule(const Plan& plan, const Workload& w) {
  const PlanCheck check = verify_plan_programs(plan, w);
  if (check.global) {
    return ReplayError{ReplayError::Kind::kPlanRule, -1, -1, check.global->tensor, -1,
                       check.global->message};
  }
  for (size_t p = 0; p < check.programs.size(); ++p) {
    if (const auto& issue = check.programs[p]) {
      return ReplayError{ReplayError::Kind::kPlanRule, int(p), issue->step, issue->tensor, -1,
                         issue->message};
    }
  }
  return std::nullopt;
}

namespace {

class Executor {
 public:
  Executor(const hw::BoundPlan& bound, Backend& b)
      : bound_(bound),
        plan_(bound.plan),
        w_(bound.workload),
        t_(bound.topology),
        backend_(b),
        stepper_(plan_, w_, *this) {}

  ReplayResult run();

 private:
  friend class stepper::Stepper<Executor>;
  // The stepper's driver (core/stepper.h): the §6 rules on a real backend, under m_, in
  // the order a step meets them.
  /// Whether the waited events completed; a compute step is reached (timed) the first time.
  bool ready(uint32_t p, size_t step, const Step& s, bool compute) {
    ProgramState& st = progs_[p];
    if (compute && !st.reached) {
      st.reached = true;
      st.rec.steps[step].issue = now();
    } else if (is_host_step(s) && st.rec.steps[step].issue < 0) {
      st.rec.steps[step].issue = now();
    }
    return first_undone(s) == kNoEvent;
  }
  void compute_ready(uint32_t /*p*/, size_t /*step*/) {}
  /// Strict, as the simulator's --on-full fail: never kWait; logical bytes per arena.
  stepper::Fit reserve(uint32_t p, size_t step, uint32_t tier, uint64_t bytes);
  /// A block of the arena; false when its free ranges cannot hold it (fragmentation).
  bool allocate(uint32_t p, size_t step, uint32_t tier, uint32_t what, uint64_t bytes);
  /// Hands the op to the backend, after checking the device (or, for a host step, the
  /// host CPU) can compute its dtype.
  bool compute(uint32_t p, size_t step, const Step& s, uint64_t need);
  bool host_compute(uint32_t p, size_t step, const Step& s);
  /// Hands the copy to the backend on the path's engines; its completion ends the event.
  bool transfer(uint32_t p, size_t step, const Step& s);
  /// Numbers the step in issue order; a detach ends when it issues.
  void issued(uint32_t p, size_t step, const Step& s);
  /// Returns a device copy's or a workspace's block to its arena.
  void release(uint32_t p, uint32_t tier, uint32_t what) {
    ProgramState& st = progs_[p];
    const bool device = tier == plan_.device_tier;
    std::optional<Block>& b = (what & kWorkspaceBit) == 0
                                  ? (device ? st.dev[what] : copy_of(p, what, tier))
                              : device ? st.workspace
                                       : st.host_workspace;
    if (b) release_block(*b);
    b.reset();
  }
  /// Nothing: the plan was verified whole before the threads started.
  void finished(uint32_t /*p*/) {}
  /// Any program's error stops them all.
  [[nodiscard]] bool halted() const { return error_.has_value(); }

  bool prepare();
  bool place_home_copies();
  void program_main(uint32_t p);
  void advance(uint32_t p);
  void issue_copy(uint32_t p, size_t step, const ReplayPath& path, const Block& src,
                  const Block& dst);
  /// A completion under m_: the step's plan times, its event (dense; kNoEvent: none) done,
  /// one fewer thing running, the programs woken. Returns the step's record.
  StepRecord& landed(uint32_t p, size_t step, Time start, Time end, uint32_t event);
  [[nodiscard]] uint32_t first_undone(const Step& s) const;
  std::optional<Block> allocate_block(uint32_t p, size_t step, ArenaId a, uint64_t bytes);
  void release_block(const Block& b);
  void check_stuck(uint32_t p);
  void fail(ReplayError::Kind kind, int program, int step, int tensor, std::string message);
  [[nodiscard]] std::string largest_live(ArenaId a) const;
  /// The home copies of external tensors that arena `a` holds, as largest_live() lists.
  [[nodiscard]] std::string statics_named(ArenaId a) const;
  [[nodiscard]] Time now() const { return backend_.now() - origin_; }
  [[nodiscard]] uint32_t dense(uint32_t event) const { return event_index_.at(event); }
  std::optional<Block>& copy_of(uint32_t p, uint32_t t, uint32_t tier) {
    return progs_[p].copies[size_t(t) * plan_.tiers.size() + tier];
  }

  const hw::BoundPlan& bound_;
  const Plan& plan_;
  const Workload& w_;
  const hw::Topology& t_;
  Backend& backend_;
  stepper::Stepper<Executor> stepper_;
  Layout layout_;
  Time origin_ = 0;
  bool started_ = false;

  std::mutex m_;  // guards everything below once the program threads run
  std::condition_variable cv_;
  uint64_t gen_ = 0;  ///< bumped by every completion and every program that finishes
  uint32_t in_flight_ = 0;
  std::optional<ReplayError> error_;
  std::vector<ProgramState> progs_;
  std::unordered_map<uint32_t, uint32_t> event_index_;
  std::vector<EventState> events_;
  std::vector<uint64_t> level_;  ///< logical bytes per arena
};

void Executor::fail(ReplayError::Kind kind, int program, int step, int tensor,
                    std::string message) {
  if (error_) return;
  error_ = ReplayError{kind, program, step, tensor, started_ ? now() : -1, std::move(message)};
  ++gen_;
  cv_.notify_all();
}

bool Executor::prepare() {
  if (auto e = broken_rule(plan_, w_)) {
    error_ = std::move(*e);
    return false;
  }
  if (auto e = build_layout(bound_, backend_.memory_limit(), layout_, backend_.max_shift())) {
    error_ = std::move(*e);
    return false;
  }
  uint32_t next = 0;
  for (const Program& prog : plan_.programs) {
    for (const Step& s : prog.steps) {
      if (s.event != kNoEvent) event_index_.emplace(s.event, next++);
    }
  }
  events_.resize(next);
  level_.assign(layout_.setup.arenas.size(), 0);
  progs_.resize(plan_.programs.size());
  for (size_t p = 0; p < progs_.size(); ++p) {
    ProgramState& st = progs_[p];
    st.prog = &plan_.programs[p];
    stepper_.start(uint32_t(p), st.prog->steps.size());
    st.dev.resize(w_.tensors.size());
    st.copies.resize(w_.tensors.size() * plan_.tiers.size());
    st.rec.device = int(st.prog->device);
    st.rec.steps.resize(st.prog->steps.size());
  }
  backend_.start(layout_.setup);
  started_ = true;
  origin_ = backend_.now();
  return place_home_copies();
}

bool Executor::place_home_copies() {
  // Host tiers first: the simulator counts home copies as present before anything else and
  // reports an instance they overflow as a whole.
  std::vector<uint64_t> statics(level_.size());
  for_each_home_copy(plan_, w_, [&](uint32_t p, uint32_t t, uint32_t home) {
    if (home != plan_.device_tier) statics[layout_.arena_of[p][home]] += w_.tensors[t].bytes;
    return true;
  });
  for (ArenaId a = 0; a < statics.size(); ++a) {
    const ArenaSpec& spec = layout_.setup.arenas[a];
    if (statics[a] > spec.capacity) {
      fail(ReplayError::Kind::kCapacity, -1, -1, -1,
           run_errors::home_over_capacity(spec.name, statics[a], spec.capacity, statics_named(a)));
      return false;
    }
  }
  return for_each_home_copy(plan_, w_, [&](uint32_t p, uint32_t t, uint32_t home) {
    ProgramState& st = progs_[p];
    const uint64_t bytes = w_.tensors[t].bytes;
    const ArenaId a = layout_.arena_of[p][home];
    const ArenaSpec& spec = layout_.setup.arenas[a];
    if (home == plan_.device_tier && level_[a] + bytes > spec.capacity) {
      fail(ReplayError::Kind::kCapacity, int(p), -1, int(t),
           run_errors::home_does_not_fit(spec.name, w_, t, level_[a], spec.capacity,
                                         largest_live(a)));
      return false;
    }
    auto b = allocate_block(p, 0, a, bytes);
    if (!b) return false;
    (home == plan_.device_tier ? st.dev[t] : copy_of(p, t, home)) = b;
    stepper_.add_copy(p, t, home);
    return true;
  });
}

stepper::Fit Executor::reserve(uint32_t p, size_t step, uint32_t tier, uint64_t bytes) {
  const ArenaId a = layout_.arena_of[p][tier];
  const ArenaSpec& spec = layout_.setup.arenas[a];
  if (level_[a] <= spec.capacity && bytes <= spec.capacity - level_[a]) return stepper::Fit::kFits;
  const Step& s = progs_[p].prog->steps[step];
  fail(ReplayError::Kind::kCapacity, int(p), int(step),
       s.kind == StepKind::kCompute ? -1 : int(s.target),
       run_errors::over_capacity(spec.name, s.kind, step, bytes, level_[a], spec.capacity,
                                 largest_live(a)));
  return stepper::Fit::kFailed;
}

bool Executor::allocate(uint32_t p, size_t step, uint32_t tier, uint32_t what, uint64_t bytes) {
  ProgramState& st = progs_[p];
  auto b = allocate_block(p, step, layout_.arena_of[p][tier], bytes);
  if (!b) return false;
  if ((what & kWorkspaceBit) != 0) {
    (tier == plan_.device_tier ? st.workspace : st.host_workspace) = b;
  } else if (tier == plan_.device_tier) {
    st.dev[what] = b;
  } else {
    copy_of(p, what, tier) = b;
  }
  return true;
}

/// Allocates `bytes` in arena `a`, which reserve() found room for (or, for the home
/// copies, place_home_copies() did); false when the arena's free ranges cannot hold them.
std::optional<Block> Executor::allocate_block(uint32_t p, size_t step, ArenaId a, uint64_t bytes) {
  const ArenaSpec& spec = layout_.setup.arenas[a];
  const Step* s = step < progs_[p].prog->steps.size() ? &progs_[p].prog->steps[step] : nullptr;
  auto b = backend_.allocate(a, layout_.scaled(bytes), bytes);
  if (!b) {
    fail(ReplayError::Kind::kCapacity, int(p), int(step),
         s == nullptr || s->kind == StepKind::kCompute ? -1 : int(s->target),
         fmt::format("'{}' has room for {} in logical bytes, but no free range of the arena "
                     "holds it (fragmentation); largest live: {}",
                     spec.name, to_string_approx(Bytes{bytes}), largest_live(a)));
    return std::nullopt;
  }
  level_[a] += bytes;
  return b;
}

void Executor::release_block(const Block& b) {
  level_[b.arena] -= b.logical;
  backend_.free(b);
}

uint32_t Executor::first_undone(const Step& s) const {
  for (uint32_t e : s.wait) {
    if (!events_[dense(e)].done) return e;
  }
  return kNoEvent;
}

void Executor::issue_copy(uint32_t p, size_t step, const ReplayPath& path, const Block& src,
                          const Block& dst) {
  ProgramState& st = progs_[p];
  const Step& s = st.prog->steps[step];
  const uint64_t bytes = w_.tensors[s.target].bytes;
  CopyRequest r;
  r.program = p;
  r.step = uint32_t(step);
  r.src = src;
  r.dst = dst;
  r.logical_bytes = bytes;
  r.engines = path.engines;
  r.resources = path.resources;
  r.setup = path.route->setup.ps;
  r.body = hw::transfer_time_alone(*path.route, Bytes{bytes}).ps - r.setup;
  r.bandwidth = path.route->bandwidth.bytes_per_s;
  ++st.in_flight;
  ++in_flight_;
  ++st.rec.transfers;
  const uint32_t d = dense(s.event);
  backend_.copy(r, [this, p, step, d](Time start, Time end) {
    const std::lock_guard lock(m_);
    landed(p, step, start, end, d);
  });
}

StepRecord& Executor::landed(uint32_t p, size_t step, Time start, Time end, uint32_t event) {
  ProgramState& owner = progs_[p];
  StepRecord& rec = owner.rec.steps[step];
  rec.start = start - origin_;
  rec.end = end - origin_;
  owner.rec.end = std::max(owner.rec.end, rec.end);
  if (event != kNoEvent) {
    events_[event].done = true;
    events_[event].end = rec.end;
  }
  --owner.in_flight;
  --in_flight_;
  ++gen_;
  cv_.notify_all();
  return rec;
}

bool Executor::transfer(uint32_t p, size_t step, const Step& s) {
  ProgramState& st = progs_[p];
  const uint32_t t = s.target;
  const bool prefetch = s.kind == StepKind::kPrefetch;
  // A host prefetch lands on the host tier.
  const auto& path = (s.host     ? layout_.host_fetch
                      : prefetch ? layout_.fetch
                                 : layout_.store)[p][s.tier];
  if (!path) {
    const size_t from = prefetch ? bound_.tier(s.tier) : bound_.device_tier;
    const size_t to = s.host     ? bound_.tier(plan_.host_tier)
                      : prefetch ? bound_.device_tier
                                 : bound_.tier(s.tier);
    fail(ReplayError::Kind::kTopology, int(p), int(step), int(t),
         run_errors::no_route(t_.name, t_.tiers[from].id, t_.tiers[to].id, s.kind, w_, t));
    return false;
  }
  st.rec.steps[step].issue = now();
  const std::optional<Block>& landing = s.host ? copy_of(p, t, plan_.host_tier) : st.dev[t];
  const Block src = (prefetch ? copy_of(p, t, s.tier) : st.dev[t]).value_or(Block{});
  const Block dst = (prefetch ? landing : copy_of(p, t, s.tier)).value_or(Block{});
  issue_copy(p, step, *path, src, dst);
  return true;
}

void Executor::issued(uint32_t p, size_t step, const Step& s) {
  ProgramState& st = progs_[p];
  StepRecord& rec = st.rec.steps[step];
  if (s.kind == StepKind::kDetach) {
    rec.issue = rec.start = rec.end = now();
    st.rec.end = std::max(st.rec.end, rec.end);
  }
  rec.ran = true;
  rec.seq = ++st.seq;
}

bool Executor::compute(uint32_t p, size_t step, const Step& s, uint64_t /*need*/) {
  if (s.host) return host_compute(p, step, s);
  ProgramState& st = progs_[p];
  const Op& op = w_.ops[s.target];
  const size_t cls = bound_.programs[p].device_class;
  const auto duration = layout_.op_time[cls][s.target];
  if (!duration) {
    const hw::Device& device = t_.devices[cls];
    fail(ReplayError::Kind::kTopology, int(p), int(step), -1,
         run_errors::no_peak(w_, s.target, device.id, device.peak_dtypes()));
    return false;
  }
  StepRecord& rec = st.rec.steps[step];
  rec.waited = now() - rec.issue;
  rec.ran = true;
  rec.seq = ++st.seq;
  st.rec.waited_ps += rec.waited;
  st.reached = false;
  st.compute_step = step;
  ++st.in_flight;
  ++in_flight_;
  const ComputeWork work = work_of(t_, cls, op, *duration);
  backend_.compute(p, work, [this, p, step](Time start, Time end) {
    const std::lock_guard lock(m_);
    const StepRecord& r = landed(p, step, start, end, kNoEvent);
    progs_[p].rec.compute_ps += r.end - r.start;
    progs_[p].compute_done = true;
  });
  return true;
}

bool Executor::host_compute(uint32_t p, size_t step, const Step& s) {
  ProgramState& st = progs_[p];
  const size_t cls = bound_.programs[p].device_class;
  const auto duration = layout_.host_time[cls][s.target];
  if (!duration) {
    fail(ReplayError::Kind::kTopology, int(p), int(step), -1,
         run_errors::no_host_peak(w_, s.target, t_.name, t_.system.cpu.peak_dtypes()));
    return false;
  }
  StepRecord& rec = st.rec.steps[step];
  rec.waited = now() - rec.issue;
  rec.ran = true;
  rec.seq = ++st.seq;
  st.host_step = step;
  ++st.in_flight;
  ++in_flight_;
  const uint32_t d = dense(s.event);
  const ComputeWork work = work_of(t_, cls, w_.ops[s.target], *duration);
  backend_.host_compute(p, work, [this, p, step, d](Time start, Time end) {
    const std::lock_guard lock(m_);
    const StepRecord& r = landed(p, step, start, end, d);
    progs_[p].rec.host_ps += r.end - r.start;
    ++progs_[p].rec.host_ops;
    progs_[p].host_done = true;
  });
  return true;
}

void Executor::advance(uint32_t p) {
  ProgramState& st = progs_[p];
  if (st.compute_done) {
    st.compute_done = false;
    stepper_.end_compute(p);
  }
  if (st.host_done) {
    st.host_done = false;
    stepper_.end_host(p);
  }
  stepper_.advance(p);
}

void Executor::check_stuck(uint32_t p) {
  if (error_ || in_flight_ > 0) return;
  for (uint32_t q = 0; q < progs_.size(); ++q) {
    const ProgramState& st = progs_[q];
    if (q == p || st.finished) continue;
    if (!st.waiting || st.seen != gen_ || st.compute_done || st.host_done) return;
  }
  // Nothing runs and every program has looked at the latest completion: none can move.
  for (uint32_t q = 0; q < progs_.size(); ++q) {
    const ProgramState& st = progs_[q];
    if (st.finished) continue;
    const size_t step = stepper_.cursor(q).blocked_step();
    if (step >= st.prog->steps.size()) continue;
    const Step& s = st.prog->steps[step];
    fail(ReplayError::Kind::kDeadlock, int(q), int(step),
         s.kind == StepKind::kCompute ? -1 : int(s.target),
         run_errors::stuck(q, s, step, first_undone(s),
                           "cannot issue although its events completed"));
    return;
  }
}

void Executor::program_main(uint32_t p) {
  std::unique_lock lock(m_);
  ProgramState& st = progs_[p];
  while (true) {
    advance(p);
    st.seen = gen_;
    const bool all_issued = stepper_.cursor(p).all_issued();
    const bool idle = st.in_flight == 0 && !st.compute_done && !st.host_done;
    if ((error_ || all_issued) && idle) break;
    check_stuck(p);
    if (error_ && idle) break;
    st.waiting = true;
    const uint64_t g = gen_;
    cv_.wait(lock, [&] { return gen_ != g; });
    st.waiting = false;
  }
  if (st.compute_done) {
    st.compute_done = false;
    stepper_.end_compute(p);
  }
  if (st.host_done) {
    st.host_done = false;
    stepper_.end_host(p);
  }
  st.finished = true;
  ++gen_;
  cv_.notify_all();
}

std::string Executor::largest_live(ArenaId a) const {
  std::vector<run_errors::LiveItem> live;
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    const ProgramState& st = progs_[p];
    for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
      const auto add = [&](const std::optional<Block>& b) {
        if (b && b->arena == a) live.push_back({b->logical, t, p});
      };
      add(st.dev[t]);
      for (uint32_t h = 0; h < plan_.tiers.size(); ++h) {
        add(st.copies[size_t(t) * plan_.tiers.size() + h]);
      }
    }
    if (st.workspace && st.workspace->arena == a) {
      live.push_back(
          {st.workspace->logical, st.prog->steps[st.compute_step].target | kWorkspaceBit, p});
    }
    if (st.host_workspace && st.host_workspace->arena == a) {
      live.push_back(
          {st.host_workspace->logical, st.prog->steps[st.host_step].target | kWorkspaceBit, p});
    }
  }
  return run_errors::largest_live(std::move(live), w_, progs_.size() > 1);
}

std::string Executor::statics_named(ArenaId a) const {
  std::vector<run_errors::LiveItem> live;
  for_each_home_copy(plan_, w_, [&](uint32_t p, uint32_t t, uint32_t home) {
    if (home != plan_.device_tier && layout_.arena_of[p][home] == a) {
      live.push_back({w_.tensors[t].bytes, t, p});
    }
    return true;
  });
  return run_errors::largest_live(std::move(live), w_, progs_.size() > 1);
}

ReplayResult Executor::run() {
  ReplayResult r;
  r.backend = backend_.name();
  if (prepare()) {
    std::vector<std::thread> threads;
    threads.reserve(progs_.size());
    for (uint32_t p = 0; p < progs_.size(); ++p) {
      threads.emplace_back([this, p] { program_main(p); });
    }
    for (std::thread& th : threads) th.join();
  }
  if (started_) backend_.stop();
  r.error = error_;
  r.shift = layout_.shift;
  r.budget = layout_.budget;
  r.memory_limit = backend_.memory_limit();
  r.memory_limit_origin = backend_.memory_limit_origin();
  r.steps = stepper_.steps();
  for (ProgramState& st : progs_) {
    r.makespan = std::max(r.makespan, st.rec.end);
    r.programs.push_back(std::move(st.rec));
  }
  if (started_) {
    for (ArenaId a = 0; a < layout_.setup.arenas.size(); ++a) {
      r.arenas.push_back(ArenaRecord{layout_.setup.arenas[a], backend_.arena_stats(a)});
    }
  }
  return r;
}

}  // namespace

ReplayResult replay(const hw::BoundPlan& plan, Backend& backend) {
  Executor ex(plan, backend);
  return ex.run();
}

ReplayResult replay(const Plan& plan, const Workload& w, const hw::Topology& t, Backend& backend) {
  const hw::Binding b = hw::bind(plan, w, t);
  if (b.bound) return replay(*b.bound, backend);
  ReplayResult r;
  r.backend = backend.name();
  r.error = broken_rule(plan, w).value_or(*b.error);  // a broken rule is reported first
  return r;
}

}  // namespace tierflow::replay
