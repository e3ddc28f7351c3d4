#include "planner/planner.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/units.h"
#include "planner/offload.h"

namespace tierflow::planner {
namespace {

constexpr std::string_view kTierflowPipeline =
    "reorder,place{multi=true},liveness,select,insert,schedule,refine,verify";

/// What the tierflow policy scores with the simulator: its own selection at several
/// headrooms and prefetch leads, the budget's room given to the latest or the soonest
/// prefetch first; Belady paging (evict the furthest next use) from a warm start with
/// look-ahead prefetching, the fewest fetches where reuse is irregular (MoE experts), by
/// op count (`reactive`) and in estimated time as the link frees (`belady`); the
/// baselines' selections scheduled on multi-tier placement; and the other policies as they
/// are. Plans that repeat one already scored, or whose copies alone take longer than the
/// best so far, are not simulated. The best is then refined.
constexpr std::string_view kPortfolio[] = {
    "reorder,place{multi=true},liveness,select,insert,schedule,verify",
    "reorder,place{multi=true},liveness,select{lead=0},insert,schedule,verify",
    "reorder,place{multi=true},liveness,select{lead=0},insert,schedule{room=soonest},verify",
    "reorder,place{multi=true},liveness,select{headroom=0.02,lead=0},insert,schedule,verify",
    "reorder,place{multi=true},liveness,select{headroom=0.05},insert,schedule,verify",
    "reorder,place{multi=true},liveness,select{headroom=0.1},insert,schedule,verify",
    "reorder{mode=hoist},place{multi=true},liveness,select,insert,schedule,verify",
    "reorder{mode=hoist},place{multi=true},liveness,select{lead=0},insert,schedule,verify",
    "reorder{mode=hoist},place{multi=true},liveness,select{preferred=1.5},insert,"
    "schedule{preferred=1.5},verify",
    "reorder,place{multi=true},liveness,distance,insert,schedule,verify",
    "reorder,place{multi=true},liveness,layerwise,insert,schedule,verify",
    "reorder,place{multi=true},liveness,reactive{evict=furthest,warm=true},insert,schedule,verify",
    "reorder,place{multi=true},liveness,reactive{evict=furthest,warm=true,ahead=32},insert,"
    "schedule,verify",
    "reorder,place{multi=true},liveness,reactive{evict=furthest,warm=true,ahead=128},insert,"
    "schedule,verify",
    "reorder,place{multi=true},liveness,reactive{evict=furthest,warm=true,ahead=512},insert,"
    "schedule,verify",
    "reorder,place{multi=true},liveness,reactive{evict=furthest,keep=0.8},insert,schedule,verify",
    "reorder,place{multi=true},liveness,belady,insert,verify",
    "place,liveness,select,insert,schedule,verify",
    "place,liveness,distance{select=16,prefetch=4,release=0},insert,verify",
    "place,liveness,layerwise{ahead=1},insert,verify",
    "place,liveness,reactive,insert,verify",
};

/// FNV-1a over the steps of program 0 and the homes: equal plans, equal prints.
uint64_t fingerprint(const Plan& p) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  for (uint32_t x : p.home) mix(x);
  if (!p.programs.empty()) {
    for (const Step& st : p.programs.front().steps) {
      mix(static_cast<uint64_t>(st.kind));
      mix(st.target);
      mix(st.tier);
      mix(st.event);
      for (uint32_t e : st.wait) mix(e);
      mix(UINT64_MAX);
    }
  }
  return h;
}

/// Bytes program 0 prefetches.
uint64_t fetched_bytes(const Plan& p, const Workload& w) {
  uint64_t total = 0;
  if (p.programs.empty()) return 0;
  for (const Step& st : p.programs.front().steps) {
    if (st.kind == StepKind::kPrefetch) total += w.tensors[st.target].bytes;
  }
  return total;
}

struct Attempt {
  PlanOutcome out;
  bool better_than(const Attempt& o) const {
    if (out.ok != o.out.ok) return out.ok;
    if (!out.evaluation || !o.out.evaluation) return false;
    if (out.evaluation->ok != o.out.evaluation->ok) return out.evaluation->ok;
    if (out.evaluation->makespan_ps != o.out.evaluation->makespan_ps) {
      return out.evaluation->makespan_ps < o.out.evaluation->makespan_ps;
    }
    return out.evaluation->device_peak < o.out.evaluation->device_peak;
  }
};

std::vector<OffloadInfo> offloads_of(const PlanState& s, const PassContext& ctx,
                                     const std::optional<Evaluation>& ev) {
  const Costs& c = *s.costs;
  const uint32_t n = s.positions();
  std::vector<OffloadInfo> out;
  std::vector<int64_t> exposed(s.tensors.size(), 0);
  if (ev && ctx.events_per_program > 0) {
    for (size_t e = 0; e < ev->exposed_by_event.size(); ++e) {
      const auto& [t, k] = ctx.event_run[e % ctx.events_per_program];
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

/// Decides before scoring whether a plan is worth simulating; a reason means no.
using Gate = std::function<std::string(const Plan&, const PlanOutcome&)>;

/// One pipeline run at one budget, scored unless the gate says why not.
PlanOutcome run_once(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                     const std::string& pipeline_text, uint64_t budget, const Gate& gate = {}) {
  PlanOutcome out;
  const Pipeline pipeline = Pipeline::parse(pipeline_text);
  out.pipeline = pipeline.str();
  Target target = req.target;
  target.budget = budget;
  out.budget = budget;
  PlanState s(w, t, target);
  s.policy = req.pipeline.empty() ? req.policy : "custom";
  s.pins = req.pins;
  PassContext ctx;
  ctx.evaluator = req.evaluator;
  ctx.verify_each = req.verify_each;
  if (req.after_pass) {
    ctx.after_pass = [&](std::string_view pass, const PlanState& st) {
      req.after_pass(pass, st, ctx.plan);
    };
  }
  s.ensure_costs();
  s.ensure_liveness();
  reset_resident(s);
  out.resident_peak = ProfileTree(memory_profile(s)).max();
  const PassResult r = pipeline.run(s, ctx);
  out.bounds = lower_bounds(s);
  out.stats = s.stats;
  out.notes = s.notes;
  out.estimated_compute_ps = s.costs->start_ps.back();
  if (r == PassResult::kFailed) {
    out.ok = false;
    out.infeasible = s.infeasible;
    out.reason = ctx.failure;
    return out;
  }
  if (!ctx.plan) rematerialize(s, ctx);
  out.estimated_peak = ProfileTree(memory_profile(s)).max();
  if (gate) out.skipped = gate(*ctx.plan, out);
  if (req.evaluator != nullptr && out.skipped.empty()) {
    out.evaluation = req.evaluator->evaluate(*ctx.plan);
  }
  out.offloads = offloads_of(s, ctx, out.evaluation);
  out.plan = std::move(ctx.plan);
  out.ok = true;
  return out;
}

/// The policy's pipeline at one budget; tierflow scores its portfolio and refines the best.
PlanOutcome plan_at(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                    uint64_t budget) {
  if (!req.pipeline.empty()) return run_once(w, t, req, req.pipeline, budget);
  const Policy* p = find_policy(req.policy);
  if (req.policy != "tierflow" || req.evaluator == nullptr) {
    return run_once(w, t, req, std::string(p->pipeline), budget);
  }
  std::optional<Attempt> best;
  std::vector<std::string> tried;
  std::vector<uint64_t> seen;  // fingerprints of the plans already scored
  // A plan is not simulated when it repeats one already scored, or when its own copies
  // alone (bytes fetched over the ingress bound) take longer than the best makespan so far.
  const Gate gate = [&](const Plan& plan, const PlanOutcome& o) -> std::string {
    const uint64_t f = fingerprint(plan);
    if (std::find(seen.begin(), seen.end(), f) != seen.end()) return "same plan as before";
    seen.push_back(f);
    if (!best || !best->out.evaluation || !best->out.evaluation->ok || o.bounds.ingress <= 0) {
      return "";
    }
    const double copies = static_cast<double>(fetched_bytes(plan, w)) / o.bounds.ingress * 1e12;
    if (std::max(copies, static_cast<double>(o.bounds.compute_ps)) >=
        static_cast<double>(best->out.evaluation->makespan_ps)) {
      return fmt::format("its copies alone take {}", to_string_approx(Duration{static_cast<int64_t>(copies)}));
    }
    return "";
  };
  for (std::string_view text : kPortfolio) {
    Attempt a{run_once(w, t, req, std::string(text), budget, gate)};
    if (!a.out.skipped.empty()) {
      tried.push_back(fmt::format("{} (not simulated: {})", text, a.out.skipped));
      continue;
    }
    tried.push_back(a.out.ok && a.out.evaluation && a.out.evaluation->ok
                        ? fmt::format("{} ({})", text,
                                      to_string_approx(Duration{a.out.evaluation->makespan_ps}))
                        : fmt::format("{} (does not fit)", text));
    if (!best || a.better_than(*best)) best = std::move(a);
    // Nothing to choose between when everything fits.
    if (best->out.ok && best->out.offloads.empty()) break;
  }
  if (best->out.ok && !best->out.offloads.empty()) {
    std::string text = best->out.pipeline;
    text.replace(text.rfind(",verify"), 7, ",refine,verify");
    Attempt refined{run_once(w, t, req, text, budget)};
    if (refined.better_than(*best)) best = std::move(refined);
  }
  for (const std::string& x : tried) best->out.notes.push_back("tierflow tried " + x);
  return std::move(best->out);
}

}  // namespace

const std::vector<Policy>& policies() {
  static const std::vector<Policy> list = {
      {"resident", "place,liveness,insert,verify",
       "no offload; activations freed at last use (may not fit)"},
      {"reactive", "place,liveness,reactive,insert,verify",
       "fetch on a miss, evict least recently used (a runtime without look-ahead)"},
      {"layerwise", "place,liveness,layerwise{ahead=1},insert,verify",
       "stream every weight, the next layer's during this one (DeepSpeed ZeRO style)"},
      {"distance", "place,liveness,distance{select=16,prefetch=4,release=0},insert,verify",
       "op-count distances for select, prefetch and release (MindSpore's strategy)"},
      {"hyperoffload", "place,liveness,select,insert,schedule,verify",
       "lifetime analysis, cost model, execution-order refinement (the HyperOffload planner)"},
      {"tierflow", kTierflowPipeline,
       "all of the above, multi-tier placement, reordering, simulator in the loop"},
  };
  return list;
}

const Policy* find_policy(std::string_view name) {
  for (const Policy& p : policies()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

PlanOutcome make_plan(const Workload& w, const hw::Topology& t, const PlanRequest& req) {
  uint64_t budget = req.target.budget;
  if (budget == 0) budget = t.tiers[req.target.device_tier].capacity.value;
  PlanOutcome full = plan_at(w, t, req, budget);
  if (req.max_overhead < 0 || !full.ok || !full.evaluation || !full.evaluation->ok) return full;

  // The unconstrained best is the resident plan with unlimited memory: one engine, no
  // transfers, so exactly the compute sum. Bisection on the budget finds the smallest
  // that keeps the simulated makespan within the overhead of it.
  const auto limit = static_cast<int64_t>(static_cast<double>(full.bounds.compute_ps) *
                                          (1.0 + req.max_overhead));
  if (full.evaluation->makespan_ps > limit) {
    full.ok = false;
    full.infeasible = true;
    full.reason = fmt::format(
        "does not fit within the overhead: at the full budget {} the makespan is {}, above "
        "{} = (1 + {}) x the compute time {}",
        to_string_approx(Bytes{budget}), to_string_approx(Duration{full.evaluation->makespan_ps}),
        to_string_approx(Duration{limit}), req.max_overhead,
        to_string_approx(Duration{full.bounds.compute_ps}));
    return full;
  }
  uint64_t lo = full.bounds.residency;
  uint64_t hi = std::min(budget, full.evaluation->device_peak);
  PlanOutcome best = std::move(full);
  for (int round = 0; round < 12 && lo + lo / 200 < hi; ++round) {
    const uint64_t mid = lo + (hi - lo) / 2;
    PlanOutcome o = plan_at(w, t, req, mid);
    if (o.ok && o.evaluation && o.evaluation->ok && o.evaluation->makespan_ps <= limit) {
      hi = std::min(mid, o.evaluation->device_peak);
      best = std::move(o);
    } else {
      lo = mid + 1;
    }
  }
  best.notes.push_back(fmt::format(
      "max-overhead {}: budget {} keeps the makespan within {} (compute {} x {})",
      req.max_overhead, to_string_approx(Bytes{best.budget}), to_string_approx(Duration{limit}),
      to_string_approx(Duration{best.bounds.compute_ps}), 1.0 + req.max_overhead));
  return best;
}

std::vector<std::string> plan_warnings(const PlanOutcome& o) {
  std::vector<std::string> out;
  if (!o.ok) return out;
  uint64_t moved = 0;
  for (const OffloadInfo& i : o.offloads) moved += i.bytes * (i.fetches + i.stores);
  if (o.resident_peak <= o.budget && moved > 0) {
    out.push_back(fmt::format("everything fits ({} of {}), yet the plan moves {}",
                              to_string_approx(Bytes{o.resident_peak}),
                              to_string_approx(Bytes{o.budget}), to_string_approx(Bytes{moved})));
  }
  if (o.resident_peak > o.budget && o.offloads.empty()) {
    out.push_back(fmt::format("the resident peak {} exceeds the budget {}, yet nothing is "
                              "offloaded",
                              to_string_approx(Bytes{o.resident_peak}),
                              to_string_approx(Bytes{o.budget})));
  }
  return out;
}

}  // namespace tierflow::planner
