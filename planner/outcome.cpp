#include "planner/outcome.h"

#include <fmt/format.h>

#include <algorithm>

#include "planner/offload.h"

namespace tierflow::planner {

namespace {

/// FNV-1a, one 64-bit value at a time, over four lanes that take the values in turn (four
/// multiply chains that do not wait for each other), folded together at the end.
struct Fnv {
  static constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t lane[4] = {1469598103934665603ULL, 1469598103934665603ULL ^ 1,
                      1469598103934665603ULL ^ 2, 1469598103934665603ULL ^ 3};
  size_t n = 0;
  void operator()(uint64_t v) {
    uint64_t& h = lane[n++ & 3];
    h ^= v;
    h *= kPrime;
  }
  /// Two 32-bit values as one.
  void operator()(uint32_t a, uint32_t b) { (*this)((uint64_t{a} << 32) | b); }
  [[nodiscard]] uint64_t done() const {
    uint64_t h = n;
    for (const uint64_t x : lane) {
      h ^= x;
      h *= kPrime;
    }
    return h;
  }
};

}  // namespace

uint64_t fingerprint(const Plan& p) {
  Fnv mix;
  for (uint32_t x : p.home) mix(x);
  if (!p.programs.empty()) {
    for (const Step& st : p.programs.front().steps) {
      mix(static_cast<uint32_t>(st.kind), st.target);
      mix(st.tier, st.event);
      for (uint32_t e : st.wait) mix(e);
      mix(UINT64_MAX);
    }
  }
  return mix.done();
}

uint64_t fingerprint(const PlanState& s) {
  Fnv mix;
  for (const uint32_t op : s.order) mix(op);
  for (const auto* v : {&s.tier_used, &s.tier_room}) {
    for (const uint64_t x : *v) mix(x);
    mix(UINT64_MAX);
  }
  for (const uint32_t t : s.offload_tiers) mix(t);
  for (const Residency& r : s.tensors) {
    mix(r.tier, (r.home_off_device ? 1U : 0U) | (r.pinned ? 2U : 0U) | (r.pin_kept ? 4U : 0U));
    for (const Run& run : r.runs) {
      mix(run.alloc, run.first);
      mix(run.last, run.release);
      mix(run.hold, (run.fetched ? 1U : 0U) | (run.store ? 2U : 0U));
    }
    mix(UINT64_MAX);
  }
  return mix.done();
}

bool better_than(const PlanOutcome& a, const PlanOutcome& b) {
  if (a.ok != b.ok) return a.ok;
  if (!a.evaluation || !b.evaluation) return false;
  if (a.evaluation->ok != b.evaluation->ok) return a.evaluation->ok;
  if (a.evaluation->makespan_ps != b.evaluation->makespan_ps) {
    return a.evaluation->makespan_ps < b.evaluation->makespan_ps;
  }
  return a.evaluation->device_peak < b.evaluation->device_peak;
}

Evaluation evaluate(PlanEvaluator& evaluator, PlanState& s) {
  const Plan& plan = s.plan();  // emitted first: verified() speaks of this plan
  return evaluator.evaluate(plan, s.emitted.verified());
}

void report(PlanOutcome& out, PlanState& s, PlanEvaluator* evaluator) {
  if (evaluator != nullptr && !out.evaluation) {
    out.evaluation = s.emitted.evaluation() ? *s.emitted.evaluation() : evaluate(*evaluator, s);
  }
  out.offloads = offloads_of(s, out.evaluation);
  (void)s.plan();  // emitted again if a search shed it
  out.plan = s.emitted.take();
}

uint64_t fetched_bytes(const PlanState& s) {
  uint64_t total = 0;
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    for (const Run& run : s.tensors[t].runs) {
      if (run.fetched) total += s.w.tensors[t].bytes;
    }
  }
  return total;
}

bool moves_anything(const PlanState& s) {
  for (const Residency& r : s.tensors) {
    if (r.home_off_device) return true;
    for (const Run& run : r.runs) {
      if (run.fetched || run.store) return true;
    }
  }
  return false;
}

std::vector<OffloadInfo> offloads_of(const PlanState& s, const std::optional<Evaluation>& ev) {
  const Costs& c = *s.costs;
  const uint32_t n = s.positions();
  std::vector<OffloadInfo> out;
  std::vector<int64_t> exposed(s.tensors.size(), 0);
  const uint32_t per = s.emitted.events_per_program();
  if (ev && per > 0) {
    for (size_t e = 0; e < ev->exposed_by_event.size(); ++e) {
      const auto& [t, k] = s.emitted.event_run()[e % per];
      exposed[t] += ev->exposed_by_event[e];
    }
  }
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    const Residency& r = s.tensors[t];
    OffloadInfo info;
    info.tensor = t;
    info.bytes = s.w.tensors[t].bytes;
    info.tier = r.tier;
    for (const Run& run : r.runs) {
      if (run.fetched) {
        ++info.fetches;
        info.transfer_ps += c.fetch_ps(r.tier, info.bytes);
      }
      if (run.store) {
        ++info.stores;
        info.transfer_ps += c.store_ps(r.tier, info.bytes);
      }
    }
    if (info.fetches == 0 && info.stores == 0 && !r.home_off_device) continue;
    int64_t on = 0;
    for (const Span& sp : occupancy(r.runs, n)) on += c.span_ps(sp.from, std::min(sp.to + 1, n));
    const uint32_t born = s.liveness->born[t];
    const int64_t life = born == kNone ? c.start_ps[n] : c.span_ps(born, n);
    info.gap_ps = std::max<int64_t>(0, life - on);
    info.exposed_ps = exposed[t];
    out.push_back(info);
  }
  std::stable_sort(out.begin(), out.end(), [](const OffloadInfo& a, const OffloadInfo& b) {
    return a.bytes * std::max<uint32_t>(1, a.fetches) > b.bytes * std::max<uint32_t>(1, b.fetches);
  });
  return out;
}

std::string plan_policy(const PlanRequest& req) {
  return req.pipeline.empty() ? req.policy : "custom";
}

PlanState initial_state(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                        uint64_t budget) {
  Target target = req.target;
  target.budget = budget;
  PlanState s(w, t, target);
  s.policy = plan_policy(req);
  s.traffic_memo = req.traffic_memo;
  s.set_pins(req.pins);
  s.ensure_costs();
  s.ensure_liveness();
  reset_resident(s);
  return s;
}

std::shared_ptr<const StartState> StartMemo::get(const std::string& key,
                                                 const std::function<StartState()>& make) {
  std::shared_ptr<Slot> slot;
  {
    const std::lock_guard lock(m_);
    std::shared_ptr<Slot>& s = slots_[key];
    if (!s) {
      s = std::make_shared<Slot>();
      order_.push_back(key);
    }
    slot = s;
    // A plan making or holding a dropped state keeps it alive until it is done with it.
    while (slots_.size() > kKept) {
      slots_.erase(order_.front());
      order_.pop_front();
    }
  }
  // Another plan asking for the same state waits here for the first to make it.
  std::call_once(slot->once, [&] { slot->state = std::make_shared<const StartState>(make()); });
  return slot->state;
}

void StartMemo::put_score(const std::string& key, uint64_t fingerprint, const Evaluation& e) {
  const std::lock_guard lock(m_);
  const auto [it, added] = scores_.insert_or_assign(key, std::pair(fingerprint, e));
  if (added) score_order_.push_back(key);
  while (scores_.size() > kKeptScores) {
    scores_.erase(score_order_.front());
    score_order_.pop_front();
  }
}

std::optional<Evaluation> StartMemo::take_score(const std::string& key, uint64_t fingerprint) {
  const std::lock_guard lock(m_);
  const auto it = scores_.find(key);
  if (it == scores_.end() || it->second.first != fingerprint) return std::nullopt;
  Evaluation e = std::move(it->second.second);
  scores_.erase(it);
  std::erase(score_order_, key);
  return e;
}

std::string memo_key(const PlanRequest& req, uint64_t budget) {
  return fmt::format("{}/{}/{}/{}", req.target.device_class, req.target.devices,
                     req.target.device_tier, budget);
}

std::string memo_key(const PlanRequest& req, uint64_t budget, std::string_view pipeline) {
  return fmt::format("{}|{}", memo_key(req, budget), pipeline);
}

size_t leading_prefix(const Pipeline& p) {
  size_t n = 0;
  while (n < p.passes().size()) {
    const std::string_view name = p.passes()[n]->name();
    if (name != "reorder" && name != "place" && name != "liveness") break;
    ++n;
  }
  return n;
}

StartMemo* shared_memo(const PlanRequest& req) {
  // Pins change the initial state; printing or checking after each pass runs every pass.
  const bool ok = req.pins.empty() && !req.after_pass && !req.verify_each;
  return ok ? req.start_memo.get() : nullptr;
}

namespace {

/// Keeps the memory profile of a start state's runs with it (PlanState::start_profile),
/// where the passes that fit runs read them as they are: no pins (select first merges a
/// pinned weight's runs) and nothing fetched yet (distance first moves fetches).
void keep_profile(PlanState& s) {
  for (const Residency& r : s.tensors) {
    if (r.pinned) return;
    for (const Run& run : r.runs) {
      if (run.fetched) return;
    }
  }
  s.start_profile = std::make_shared<const std::vector<uint64_t>>(memory_profile(s));
}

}  // namespace

std::shared_ptr<const StartState> start_state(const Workload& w, const hw::Topology& t,
                                              const PlanRequest& req, uint64_t budget,
                                              const Pipeline* prefix, StartMemo* memo) {
  // The prefix's passes run, and the bounds of where they end (also when one fails).
  const auto go_on = [&](StartState& x) {
    if (prefix != nullptr) {
      PassContext ctx = context_for(req);
      x.result = prefix->run(x.state, ctx);
      x.failure = std::move(ctx.failure);
      x.report = std::move(ctx.report);
      if (x.result != PassResult::kFailed) keep_profile(x.state);
    }
    x.bounds = lower_bounds(x.state);
  };
  const auto initial = [&] {
    StartState x{initial_state(w, t, req, budget), {}, PassResult::kUnchanged, {}, {}, 0};
    keep_profile(x.state);
    x.resident_peak =
        x.state.start_profile ? profile_peak(*x.state.start_profile) : memory_peak(x.state);
    return x;
  };
  if (memo == nullptr) {
    StartState x = initial();
    go_on(x);
    return std::make_shared<const StartState>(std::move(x));
  }
  const std::string key = memo_key(req, budget);
  const std::shared_ptr<const StartState> base = memo->get(key, [&] {
    StartState x = initial();
    x.bounds = lower_bounds(x.state);
    return x;
  });
  if (prefix == nullptr) return base;
  return memo->get(memo_key(req, budget, prefix->str()), [&] {
    StartState x{base->state, {}, PassResult::kUnchanged, {}, {}, base->resident_peak};
    go_on(x);
    return x;
  });
}

PassContext context_for(const PlanRequest& req) {
  PassContext ctx;
  ctx.evaluator = req.evaluator;
  ctx.verify_each = req.verify_each;
  ctx.after_pass = req.after_pass;
  return ctx;
}

bool conclude(PlanOutcome& out, PlanState& s, PassContext& ctx, PassResult r) {
  out.stats = ctx.report.stats;
  out.notes = ctx.report.notes;
  if (!s.pins.empty()) {
    std::vector<std::string> ids;
    for (const hw::Tier& t : s.topo.tiers) ids.push_back(t.id);
    for (const std::string& line : describe_pins(s.w, s.pins, ids)) {
      out.notes.push_back("pin " + line);
    }
  }
  out.estimated_compute_ps = s.costs->start_ps.back();
  if (r == PassResult::kFailed) {
    out.ok = false;
    out.infeasible = ctx.report.infeasible;
    out.reason = ctx.failure;
    return false;
  }
  s.plan();
  // The verify pass's, when the plan it checked still stands.
  const std::optional<uint64_t> checked = s.emitted.verified_peak();
  out.estimated_peak = checked ? *checked : memory_peak(s);
  out.ok = true;
  return true;
}

PlanOutcome run_pipeline(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                         std::string_view pipeline_text, uint64_t budget) {
  PlanOutcome out;
  const Pipeline pipeline = Pipeline::parse(pipeline_text);
  out.pipeline = pipeline.str();
  out.budget = budget;
  const size_t split = leading_prefix(pipeline);
  const std::optional<Pipeline> prefix =
      split > 0 ? std::optional(Pipeline::parse(pipeline.str(0, split))) : std::nullopt;
  const std::shared_ptr<const StartState> start =
      start_state(w, t, req, budget, prefix ? &*prefix : nullptr, shared_memo(req));
  PlanState s = start->state;
  s.policy = plan_policy(req);
  PassContext ctx = context_for(req);
  ctx.report = start->report;
  ctx.failure = start->failure;
  out.resident_peak = start->resident_peak;
  PassResult r = start->result;
  if (r != PassResult::kFailed) {
    const PassResult rest = pipeline.run(s, ctx, split, pipeline.passes().size());
    if (rest != PassResult::kUnchanged) r = rest;
  }
  // The bounds depend on the order alone (and the request): the prefix's, unless a later
  // pass reordered.
  out.bounds =
      r != PassResult::kFailed && s.order == start->state.order ? start->bounds : lower_bounds(s);
  if (!conclude(out, s, ctx, r)) return out;
  // The same plan scored by a search (StartMemo::put_score): its score, not a second
  // simulation.
  StartMemo* memo = shared_memo(req);
  if (memo != nullptr && req.evaluator != nullptr && !s.emitted.evaluation()) {
    std::optional<Evaluation> e =
        memo->take_score(memo_key(req, budget, out.pipeline), fingerprint(s.plan()));
    if (e) s.emitted.set_evaluation(std::move(*e));
  }
  report(out, s, req.evaluator);
  return out;
}

}  // namespace tierflow::planner
