#include "tools/replay/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/diagnostics.h"
#include "hw_models/cost.h"

namespace tierflow::replay {
namespace {

struct EventState {
  bool done = false;
  Time end = 0;
};

struct ProgramState {
  const Program* prog = nullptr;
  size_t next = 0;
  bool busy = false;          ///< a compute step runs
  bool compute_done = false;  ///< its completion arrived and is not yet handled
  size_t compute_step = 0;
  bool reached = false;  ///< steps[next], a compute step, has been reached
  std::optional<Block> workspace;
  std::vector<uint32_t> pending;             ///< cache steps whose anchor ended, not yet issued
  std::vector<uint32_t> pending_on;          ///< per tensor: its cache steps in `pending`
  std::vector<std::optional<Block>> dev;     ///< per tensor: the device copy
  std::vector<std::optional<Block>> copies;  ///< [tensor * tiers + tier]: other copies
  uint32_t in_flight = 0;                    ///< transfers and compute steps running
  bool finished = false;
  bool waiting = false;  ///< asleep on the condition variable
  uint64_t seen = 0;     ///< the generation it last advanced at
  uint64_t seq = 0;
  ProgramRecord rec;
};

class Executor {
 public:
  Executor(const Plan& plan, const Workload& w, const hw::Topology& t, Backend& b)
      : plan_(plan), w_(w), t_(t), backend_(b) {}

  ReplayResult run();

 private:
  bool prepare();
  bool place_home_copies();
  void program_main(uint32_t p);
  void advance(uint32_t p);
  void finish_compute(uint32_t p);
  void retry_pending(uint32_t p);
  bool try_issue(uint32_t p, size_t step);
  void issue_copy(uint32_t p, size_t step, const ReplayPath& path, const Block& src,
                  const Block& dst);
  [[nodiscard]] uint32_t first_undone(const Step& s) const;
  std::optional<Block> allocate(uint32_t p, size_t step, ArenaId a, uint64_t bytes);
  void release(const Block& b);
  void check_stuck(uint32_t p);
  void fail(ReplayError::Kind kind, int program, int step, int tensor, std::string message);
  [[nodiscard]] std::string largest_live(ArenaId a) const;
  [[nodiscard]] std::string tensor_name(uint32_t t) const {
    return fmt::format("tensor {} '{}'", t, w_.tensors[t].name);
  }
  [[nodiscard]] Time now() const { return backend_.now() - origin_; }
  [[nodiscard]] uint32_t dense(uint32_t event) const { return event_index_.at(event); }
  std::optional<Block>& copy_of(uint32_t p, uint32_t t, uint32_t tier) {
    return progs_[p].copies[size_t(t) * plan_.tiers.size() + tier];
  }

  const Plan& plan_;
  const Workload& w_;
  const hw::Topology& t_;
  Backend& backend_;
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
  uint64_t steps_ = 0;
};

void Executor::fail(ReplayError::Kind kind, int program, int step, int tensor,
                    std::string message) {
  if (error_) return;
  error_ = ReplayError{kind, program, step, tensor, started_ ? now() : -1, std::move(message)};
  ++gen_;
  cv_.notify_all();
}

bool Executor::prepare() {
  // The §6 rules, by the verifier the simulator uses; the simulator runs a program up to
  // its first broken step and reports it there, the replayer refuses to start.
  const PlanCheck check = verify_plan_programs(plan_, w_);
  if (check.global) {
    fail(ReplayError::Kind::kPlanRule, -1, -1, check.global->tensor, check.global->message);
    return false;
  }
  for (size_t p = 0; p < check.programs.size(); ++p) {
    if (const auto& issue = check.programs[p]) {
      fail(ReplayError::Kind::kPlanRule, int(p), issue->step, issue->tensor, issue->message);
      return false;
    }
  }
  if (auto e = build_layout(plan_, w_, t_, backend_.memory_limit(), layout_,
                              backend_.max_shift())) {
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
    st.pending_on.assign(w_.tensors.size(), 0);
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
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
      const uint32_t home = plan_.home[t];
      if (w_.tensors[t].origin != kExternal || home == plan_.device_tier) continue;
      statics[layout_.arena_of[p][home]] += w_.tensors[t].bytes;
    }
  }
  for (ArenaId a = 0; a < statics.size(); ++a) {
    const ArenaSpec& spec = layout_.setup.arenas[a];
    if (statics[a] > spec.capacity) {
      fail(ReplayError::Kind::kCapacity, -1, -1, -1,
           fmt::format("'{}' is over capacity before the step starts: the home copies take {} "
                       "of {}",
                       spec.name, to_string_approx(Bytes{statics[a]}),
                       to_string_approx(Bytes{spec.capacity})));
      return false;
    }
  }
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    ProgramState& st = progs_[p];
    for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
      const Tensor& x = w_.tensors[t];
      if (x.origin != kExternal) continue;
      const uint32_t home = plan_.home[t];
      const ArenaId a = layout_.arena_of[p][home];
      if (home == plan_.device_tier && level_[a] + x.bytes > layout_.setup.arenas[a].capacity) {
        const ArenaSpec& spec = layout_.setup.arenas[a];
        fail(ReplayError::Kind::kCapacity, int(p), -1, int(t),
             fmt::format("'{}' is full before the step starts: the device-resident {} ({}) does "
                         "not fit in the {} left of {}; live: {}",
                         spec.name, tensor_name(t), to_string_approx(Bytes{x.bytes}),
                         to_string_approx(Bytes{spec.capacity - level_[a]}),
                         to_string_approx(Bytes{spec.capacity}), largest_live(a)));
        return false;
      }
      auto b = allocate(p, 0, a, x.bytes);
      if (!b) return false;
      (home == plan_.device_tier ? st.dev[t] : copy_of(p, t, home)) = b;
    }
  }
  return true;
}

std::optional<Block> Executor::allocate(uint32_t p, size_t step, ArenaId a, uint64_t bytes) {
  const ArenaSpec& spec = layout_.setup.arenas[a];
  const Step* s = step < progs_[p].prog->steps.size() ? &progs_[p].prog->steps[step] : nullptr;
  if (level_[a] > spec.capacity || bytes > spec.capacity - level_[a]) {
    fail(ReplayError::Kind::kCapacity, int(p), int(step),
         s == nullptr || s->kind == StepKind::kCompute ? -1 : int(s->target),
         fmt::format("'{}' is over capacity: {} step {} needs {}, {} of {} is free; largest "
                     "live: {}",
                     spec.name, s ? kStepKindNames[size_t(s->kind)] : "setup", step,
                     to_string_approx(Bytes{bytes}),
                     to_string_approx(Bytes{spec.capacity - std::min(spec.capacity, level_[a])}),
                     to_string_approx(Bytes{spec.capacity}), largest_live(a)));
    return std::nullopt;
  }
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

void Executor::release(const Block& b) {
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
  r.setup = path.route->setup.ps;
  r.body = hw::transfer_time_alone(*path.route, Bytes{bytes}).ps - r.setup;
  r.bandwidth = path.route->bandwidth.bytes_per_s;
  ++st.in_flight;
  ++in_flight_;
  ++st.rec.transfers;
  const uint32_t d = dense(s.event);
  backend_.copy(r, [this, p, step, d](Time start, Time end) {
    const std::lock_guard lock(m_);
    ProgramState& owner = progs_[p];
    StepRecord& rec = owner.rec.steps[step];
    rec.start = start - origin_;
    rec.end = end - origin_;
    owner.rec.end = std::max(owner.rec.end, rec.end);
    events_[d].done = true;
    events_[d].end = rec.end;
    --owner.in_flight;
    --in_flight_;
    ++gen_;
    cv_.notify_all();
  });
}

bool Executor::try_issue(uint32_t p, size_t step) {
  ProgramState& st = progs_[p];
  const Step& s = st.prog->steps[step];
  if (first_undone(s) != kNoEvent) return false;
  const uint32_t t = s.target;
  const ArenaId dev = layout_.arena_of[p][plan_.device_tier];
  StepRecord& rec = st.rec.steps[step];
  const auto no_route = [&](size_t from, size_t to) {
    fail(ReplayError::Kind::kTopology, int(p), int(step), int(t),
         fmt::format("'{}' has no route from '{}' to '{}' for the {} of {}", t_.name,
                     t_.tiers[from].id, t_.tiers[to].id, kStepKindNames[size_t(s.kind)],
                     tensor_name(t)));
  };
  const Time issued = now();
  switch (s.kind) {
    case StepKind::kPrefetch: {
      const auto& path = layout_.fetch[p][s.tier];
      if (!path) {
        no_route(layout_.tier_map[s.tier], layout_.dev_tier);
        return false;
      }
      auto dst = allocate(p, step, dev, w_.tensors[t].bytes);
      if (!dst) return false;
      st.dev[t] = dst;
      const std::optional<Block>& src = copy_of(p, t, s.tier);
      issue_copy(p, step, *path, src.value_or(Block{}), *dst);
      break;
    }
    case StepKind::kStore: {
      const auto& path = layout_.store[p][s.tier];
      if (!path) {
        no_route(layout_.dev_tier, layout_.tier_map[s.tier]);
        return false;
      }
      std::optional<Block>& dst = copy_of(p, t, s.tier);
      if (!dst) {
        dst = allocate(p, step, layout_.arena_of[p][s.tier], w_.tensors[t].bytes);
        if (!dst) return false;
      }
      issue_copy(p, step, *path, st.dev[t].value_or(Block{}), *dst);
      break;
    }
    case StepKind::kDetach:
      if (st.dev[t]) release(*st.dev[t]);
      st.dev[t].reset();
      rec.start = rec.end = issued;
      st.rec.end = std::max(st.rec.end, issued);
      break;
    case StepKind::kCompute:
      TF_ASSERT(false, "try_issue of a compute step");
  }
  rec.ran = true;
  rec.issue = issued;
  rec.seq = ++st.seq;
  ++steps_;
  return true;
}

void Executor::retry_pending(uint32_t p) {
  ProgramState& st = progs_[p];
  // Steps on one tensor issue in program order; steps on different tensors need not.
  std::vector<uint32_t> blocked;
  size_t keep = 0;
  for (size_t i = 0; i < st.pending.size(); ++i) {
    const uint32_t step = st.pending[i];
    const uint32_t t = st.prog->steps[step].target;
    const bool behind = std::find(blocked.begin(), blocked.end(), t) != blocked.end();
    if (!error_ && !behind && try_issue(p, step)) {
      --st.pending_on[t];
      continue;
    }
    if (!behind) blocked.push_back(t);
    st.pending[keep++] = step;
  }
  st.pending.resize(keep);
}

void Executor::finish_compute(uint32_t p) {
  ProgramState& st = progs_[p];
  st.compute_done = false;
  st.busy = false;
  if (st.workspace) release(*st.workspace);
  st.workspace.reset();
}

void Executor::advance(uint32_t p) {
  ProgramState& st = progs_[p];
  if (st.compute_done) finish_compute(p);
  if (error_) return;
  retry_pending(p);
  const std::vector<Step>& steps = st.prog->steps;
  while (!error_ && !st.busy && st.next < steps.size()) {
    const Step& s = steps[st.next];
    StepRecord& rec = st.rec.steps[st.next];
    if (s.kind != StepKind::kCompute) {
      // A cache step whose anchor ended: issue it now, or keep it pending without holding
      // back the steps after it.
      if (st.pending_on[s.target] > 0 || !try_issue(p, st.next)) {
        if (error_) return;
        st.pending.push_back(uint32_t(st.next));
        ++st.pending_on[s.target];
      }
      ++st.next;
      continue;
    }
    if (!st.reached) {
      st.reached = true;
      rec.issue = now();
    }
    if (first_undone(s) != kNoEvent) return;
    const Op& op = w_.ops[s.target];
    const auto duration = layout_.op_time[layout_.device_class[p]][s.target];
    if (!duration) {
      fail(ReplayError::Kind::kTopology, int(p), int(st.next), -1,
           fmt::format("op {} '{}' computes in {}, which device '{}' has no peak rate for (it "
                       "has: {})",
                       s.target, op.name, name_of(op.dtype), t_.devices[layout_.device_class[p]].id,
                       t_.devices[layout_.device_class[p]].peak_dtypes()));
      return;
    }
    const ArenaId dev = layout_.arena_of[p][plan_.device_tier];
    uint64_t need = op.workspace;
    for (uint32_t t : op.outputs) need += w_.tensors[t].bytes;
    const ArenaSpec& spec = layout_.setup.arenas[dev];
    if (level_[dev] > spec.capacity || need > spec.capacity - level_[dev]) {
      (void)allocate(p, st.next, dev, need);  // reports the overflow
      return;
    }
    for (uint32_t t : op.outputs) {
      st.dev[t] = allocate(p, st.next, dev, w_.tensors[t].bytes);
      if (!st.dev[t]) return;
    }
    if (op.workspace > 0) {
      st.workspace = allocate(p, st.next, dev, op.workspace);
      if (!st.workspace) return;
    }
    const Time handed = now();
    rec.waited = handed - rec.issue;
    rec.ran = true;
    rec.seq = ++st.seq;
    st.rec.waited_ps += rec.waited;
    st.busy = true;
    st.reached = false;
    st.compute_step = st.next;
    ++st.in_flight;
    ++in_flight_;
    ++steps_;
    const size_t step = st.next++;
    const ComputeWork work{*duration, op.flops, op.bytes, std::string(name_of(op.dtype)),
                           std::string(name_of(op.kind))};
    backend_.compute(p, work, [this, p, step](Time start, Time end) {
      const std::lock_guard lock(m_);
      ProgramState& owner = progs_[p];
      StepRecord& r = owner.rec.steps[step];
      r.start = start - origin_;
      r.end = end - origin_;
      owner.rec.compute_ps += r.end - r.start;
      owner.rec.end = std::max(owner.rec.end, r.end);
      owner.compute_done = true;
      --owner.in_flight;
      --in_flight_;
      ++gen_;
      cv_.notify_all();
    });
    return;
  }
}

void Executor::check_stuck(uint32_t p) {
  if (error_ || in_flight_ > 0) return;
  for (uint32_t q = 0; q < progs_.size(); ++q) {
    const ProgramState& st = progs_[q];
    if (q == p || st.finished) continue;
    if (!st.waiting || st.seen != gen_ || st.compute_done) return;
  }
  // Nothing runs and every program has looked at the latest completion: none can move.
  for (uint32_t q = 0; q < progs_.size(); ++q) {
    const ProgramState& st = progs_[q];
    if (st.finished) continue;
    const size_t step = st.pending.empty() ? st.next : st.pending.front();
    if (step >= st.prog->steps.size()) continue;
    const Step& s = st.prog->steps[step];
    const uint32_t undone = first_undone(s);
    const std::string why =
        undone == kNoEvent
            ? std::string("cannot issue although its events completed")
            : fmt::format(
                  "waits on event {}, which never completes: the step completing it is "
                  "itself blocked",
                  undone);
    fail(ReplayError::Kind::kDeadlock, int(q), int(step),
         s.kind == StepKind::kCompute ? -1 : int(s.target),
         fmt::format("program {} is stuck at its {} step {}: it {}", q,
                     kStepKindNames[size_t(s.kind)], step, why));
    return;
  }
}

void Executor::program_main(uint32_t p) {
  std::unique_lock lock(m_);
  ProgramState& st = progs_[p];
  while (true) {
    advance(p);
    st.seen = gen_;
    const bool all_issued = st.next >= st.prog->steps.size() && st.pending.empty() && !st.busy;
    if ((error_ || all_issued) && st.in_flight == 0 && !st.compute_done) break;
    check_stuck(p);
    if (error_ && st.in_flight == 0 && !st.compute_done) break;
    st.waiting = true;
    const uint64_t g = gen_;
    cv_.wait(lock, [&] { return gen_ != g; });
    st.waiting = false;
  }
  if (st.compute_done) finish_compute(p);
  st.finished = true;
  ++gen_;
  cv_.notify_all();
}

std::string Executor::largest_live(ArenaId a) const {
  struct Item {
    uint64_t bytes;
    std::string name;
    uint32_t program;
  };
  std::vector<Item> live;
  for (uint32_t p = 0; p < progs_.size(); ++p) {
    const ProgramState& st = progs_[p];
    for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
      const auto add = [&](const std::optional<Block>& b) {
        if (b && b->arena == a) live.push_back({b->logical, w_.tensors[t].name, p});
      };
      add(st.dev[t]);
      for (uint32_t h = 0; h < plan_.tiers.size(); ++h) {
        add(st.copies[size_t(t) * plan_.tiers.size() + h]);
      }
    }
    if (st.workspace && st.workspace->arena == a) {
      live.push_back({st.workspace->logical,
                      fmt::format("workspace of op {}", st.prog->steps[st.compute_step].target),
                      p});
    }
  }
  std::stable_sort(live.begin(), live.end(),
                   [](const Item& x, const Item& y) { return x.bytes > y.bytes; });
  std::string out;
  for (size_t i = 0; i < live.size() && i < 5; ++i) {
    if (!out.empty()) out += ", ";
    out += live[i].name.starts_with("workspace") ? live[i].name : fmt::format("'{}'", live[i].name);
    if (progs_.size() > 1) out += fmt::format(" of program {}", live[i].program);
    out += fmt::format(" ({})", to_string_approx(Bytes{live[i].bytes}));
  }
  if (live.size() > 5) out += fmt::format(" and {} more", live.size() - 5);
  return out.empty() ? "nothing" : out;
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
  r.steps = steps_;
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

ReplayResult replay(const Plan& plan, const Workload& w, const hw::Topology& t, Backend& backend) {
  Executor ex(plan, w, t, backend);
  return ex.run();
}

}  // namespace tierflow::replay
