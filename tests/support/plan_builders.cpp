#include "tests/support/plan_builders.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <random>

#include "core/diagnostics.h"

namespace tierflow::testing {
namespace {

// ---------------------------------------------------------------------------------------
// Shared pieces

Step compute_step(uint32_t op, std::vector<uint32_t> wait = {}) {
  return Step{StepKind::kCompute, op, /*tier=*/0, kNoEvent, std::move(wait)};
}

Step cache_step(StepKind kind, uint32_t tensor, uint32_t tier, uint32_t event,
                std::vector<uint32_t> wait = {}) {
  return Step{kind, tensor, tier, event, std::move(wait)};
}

/// Per tensor, the ops that read or update it, ascending (a tensor appears at most once
/// per op in a verified workload).
std::vector<std::vector<uint32_t>> uses_of(const Workload& w) {
  std::vector<std::vector<uint32_t>> uses(w.tensors.size());
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    for (uint32_t t : w.ops[o].inputs) uses[t].push_back(o);
    for (uint32_t t : w.ops[o].updates) uses[t].push_back(o);
  }
  for (auto& u : uses) std::sort(u.begin(), u.end());
  return uses;
}

/// Per op, the produced tensors (not of kind output) to detach right after it: those whose
/// last use it is, or which it produces and nobody reads. Ascending tensor ids.
std::vector<std::vector<uint32_t>> frees_after(const Workload& w,
                                               const std::vector<std::vector<uint32_t>>& uses) {
  std::vector<std::vector<uint32_t>> frees(w.ops.size());
  for (uint32_t t = 0; t < w.tensors.size(); ++t) {
    const Tensor& x = w.tensors[t];
    if (x.origin == kExternal || x.kind == TensorKind::kOutput) continue;
    frees[uses[t].empty() ? x.origin : uses[t].back()].push_back(t);
  }
  return frees;
}

Plan skeleton(const Workload& w, std::string_view policy, std::vector<std::string> tiers) {
  Plan p;
  p.name = fmt::format("{}.{}", w.name, policy);
  p.meta["policy"] = fmt::format("\"{}\"", policy);
  p.tiers = std::move(tiers);
  p.device_tier = 0;
  p.home.assign(w.tensors.size(), 0);
  return p;
}

/// `program` for device `device` with every event (completed or waited on) moved up by
/// `offset`, so that copies keep event ids unique and in step order.
Program shifted(const Program& program, uint32_t device, uint32_t offset) {
  Program out = program;
  out.device = device;
  for (Step& s : out.steps) {
    if (s.event != kNoEvent) s.event += offset;
    for (uint32_t& e : s.wait) e += offset;
  }
  return out;
}

uint32_t event_count(const Program& program) {
  uint32_t n = 0;
  for (const Step& s : program.steps) n += s.event != kNoEvent ? 1 : 0;
  return n;
}

/// Program 0 once per device, events renumbered per copy.
void replicate(Plan& p, const Program& program, uint32_t devices) {
  const uint32_t events = event_count(program);
  for (uint32_t d = 0; d < devices; ++d) p.programs.push_back(shifted(program, d, d * events));
}

// ---------------------------------------------------------------------------------------
// Deterministic randomness: std::mt19937_64's output sequence is fixed by the standard,
// the standard distributions are not, so ranges come from this mapping of the raw output.

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  /// Uniform in [0, n): rejects the top values that would bias the modulo.
  uint64_t below(uint64_t n) {
    TF_ASSERT(n > 0, "an empty range");
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x = gen_();
    while (x >= limit) x = gen_();
    return x % n;
  }
  /// Uniform in [lo, hi].
  uint64_t between(uint64_t lo, uint64_t hi) {
    TF_ASSERT(lo <= hi && hi - lo < UINT64_MAX, "bad range [{}, {}]", lo, hi);
    return lo + below(hi - lo + 1);
  }
  uint32_t index(size_t n) { return static_cast<uint32_t>(below(n)); }
  bool percent(uint32_t p) { return below(100) < p; }

 private:
  std::mt19937_64 gen_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// resident_plan

Plan resident_plan(const Workload& w, const PlanShape& shape) {
  Plan p = skeleton(w, "resident", {shape.device_tier});
  const auto frees = frees_after(w, uses_of(w));
  Program program;
  for (uint32_t o = 0; o < w.ops.size(); ++o) {
    program.steps.push_back(compute_step(o));
    for (uint32_t t : frees[o]) {
      program.steps.push_back(cache_step(StepKind::kDetach, t, /*tier=*/0, kNoEvent));
    }
  }
  replicate(p, program, shape.devices);
  return p;
}

// ---------------------------------------------------------------------------------------
// streamed_plan

Plan streamed_plan(const Workload& w, const PlanShape& shape, const StreamOptions& options) {
  TF_ASSERT(options.lookahead >= 1, "lookahead must be at least 1");
  TF_ASSERT(options.gap >= 1, "gap must be at least 1");
  constexpr uint32_t kHost = 1;
  Plan p = skeleton(w, "layerwise", {shape.device_tier, options.host_tier});
  const auto n = static_cast<uint32_t>(w.ops.size());
  const auto uses = uses_of(w);
  const auto frees = frees_after(w, uses);

  // Slot j holds the cache steps before compute j: first the releases of runs that ended
  // with op j-1, then the prefetches anchored there; each list in tensor order.
  struct Release {
    uint32_t tensor;
    bool store;
  };
  std::vector<std::vector<Release>> releases(n + 1);
  std::vector<std::vector<uint32_t>> prefetches(n + 1);
  for (uint32_t t = 0; t < w.tensors.size(); ++t) {
    const Tensor& x = w.tensors[t];
    const bool host = x.origin == kExternal &&
                      std::find(options.host_kinds.begin(), options.host_kinds.end(), x.kind) !=
                          options.host_kinds.end();
    if (!host) continue;
    p.home[t] = kHost;
    const auto& u = uses[t];
    uint32_t earliest = 0;  // a prefetch never precedes the previous run's detach
    for (size_t first = 0; first < u.size();) {
      size_t last = first;
      bool modified = false;
      for (;;) {
        const Op& op = w.ops[u[last]];
        modified |= std::find(op.updates.begin(), op.updates.end(), t) != op.updates.end();
        if (last + 1 == u.size() || u[last + 1] - u[last] - 1 >= options.gap) break;
        ++last;
      }
      const uint32_t anchor = u[first] >= options.lookahead ? u[first] - options.lookahead + 1 : 0;
      prefetches[std::max(anchor, earliest)].push_back(t);
      const bool later = last + 1 < u.size();
      releases[u[last] + 1].push_back({t, modified && (later || options.write_back_last)});
      earliest = u[last] + 1;
      first = last + 1;
    }
  }

  Program program;
  std::vector<std::vector<uint32_t>> waits(n);  // per op: prefetch events its compute waits on
  uint32_t event = 0;
  for (uint32_t j = 0; j <= n; ++j) {
    for (const Release& r : releases[j]) {
      std::vector<uint32_t> wait;
      if (r.store) {
        program.steps.push_back(cache_step(StepKind::kStore, r.tensor, kHost, event));
        wait.push_back(event++);
      }
      program.steps.push_back(
          cache_step(StepKind::kDetach, r.tensor, /*tier=*/0, kNoEvent, std::move(wait)));
    }
    if (j > 0) {
      for (uint32_t t : frees[j - 1]) {
        program.steps.push_back(cache_step(StepKind::kDetach, t, /*tier=*/0, kNoEvent));
      }
    }
    for (uint32_t t : prefetches[j]) {
      program.steps.push_back(cache_step(StepKind::kPrefetch, t, kHost, event));
      // The run this prefetch serves starts at the first use at or after slot j.
      const auto& u = uses[t];
      waits[*std::lower_bound(u.begin(), u.end(), j)].push_back(event++);
    }
    if (j < n) program.steps.push_back(compute_step(j, std::move(waits[j])));
  }
  replicate(p, program, shape.devices);
  return p;
}

// ---------------------------------------------------------------------------------------
// random_workload

Workload random_workload(uint64_t seed, const RandomWorkloadOptions& options) {
  TF_ASSERT(options.ops >= 1 && options.layers >= 1 && options.window >= 1,
            "random_workload needs ops, layers and window >= 1");
  TF_ASSERT(options.min_bytes >= 1 && options.min_bytes <= options.max_bytes,
            "bad size range [{}, {}]", options.min_bytes, options.max_bytes);
  Rng rng(seed);
  Workload w;
  w.name = fmt::format("random-{}", seed);
  w.meta["generator"] = "\"random_workload\"";
  w.meta["seed"] = std::to_string(seed);
  auto size = [&] { return rng.between(options.min_bytes, options.max_bytes); };
  auto layer_of = [&](uint32_t i, uint32_t count) {
    return static_cast<int32_t>(uint64_t{i} * options.layers / count);
  };

  const uint32_t input = w.add_tensor({"x", size(), TensorKind::kInput});
  std::vector<uint32_t> weights, kv;
  for (uint32_t i = 0; i < options.weights; ++i) {
    weights.push_back(w.add_tensor({fmt::format("w{}", i), size(), TensorKind::kWeight,
                                    Dtype::kBf16, kExternal, layer_of(i, options.weights)}));
  }
  for (uint32_t i = 0; i < options.kv; ++i) {
    kv.push_back(w.add_tensor({fmt::format("kv{}", i), size(), TensorKind::kKv, Dtype::kBf16,
                               kExternal, layer_of(i, options.kv)}));
  }

  constexpr OpKind kKinds[] = {OpKind::kMatmul, OpKind::kAttention, OpKind::kNorm,
                               OpKind::kElementwise, OpKind::kExpert};
  std::vector<std::vector<uint32_t>> produced(options.ops);  // per op: its outputs
  for (uint32_t o = 0; o < options.ops; ++o) {
    Op op;
    op.name = fmt::format("op{}", o);
    op.layer = layer_of(o, options.ops);
    op.kind = kKinds[rng.index(std::size(kKinds))];
    if (rng.percent(5) && !weights.empty()) op.kind = OpKind::kOptimizer;

    // Activations of the last `window` ops; the input while there are none, or by chance.
    std::vector<uint32_t> recent;
    for (uint32_t q = o > options.window ? o - options.window : 0; q < o; ++q) {
      recent.insert(recent.end(), produced[q].begin(), produced[q].end());
    }
    if (recent.empty() || rng.percent(10)) recent.push_back(input);
    const uint32_t reads = 1 + rng.index(std::min<size_t>(2, recent.size()));
    for (uint32_t k = 0; k < reads; ++k) {
      const auto at = recent.begin() + rng.index(recent.size());
      op.inputs.push_back(*at);
      recent.erase(at);
    }
    const bool reads_weight = op.kind == OpKind::kMatmul || op.kind == OpKind::kExpert;
    if (reads_weight && !weights.empty() && rng.percent(80)) {
      op.inputs.push_back(weights[rng.index(weights.size())]);
    }
    if (op.kind == OpKind::kAttention && !kv.empty()) {
      op.updates.push_back(kv[rng.index(kv.size())]);  // KV append
    }
    if (op.kind == OpKind::kOptimizer) {
      const uint32_t wt = weights[rng.index(weights.size())];
      if (std::find(op.inputs.begin(), op.inputs.end(), wt) == op.inputs.end()) {
        op.updates.push_back(wt);
      }
    }
    // In-place update of an activation the op does not also read (a tensor appears once).
    if (rng.percent(10) && !recent.empty() && recent.back() != input) {
      op.updates.push_back(recent.back());
    }

    const uint32_t outs = rng.percent(20) ? 2 : 1;
    for (uint32_t k = 0; k < outs; ++k) {
      const bool is_output = o + 1 == options.ops || rng.percent(3);
      const uint32_t t = w.add_tensor({fmt::format("a{}_{}", o, k), size(),
                                       is_output ? TensorKind::kOutput : TensorKind::kActivation,
                                       Dtype::kBf16, kExternal, op.layer});
      op.outputs.push_back(t);
      produced[o].push_back(t);
    }
    op.flops = static_cast<double>(rng.between(1, uint64_t{1} << 24));
    for (const auto* list : {&op.inputs, &op.updates, &op.outputs}) {
      for (uint32_t t : *list) op.bytes += w.tensors[t].bytes;
    }
    if (rng.percent(20)) op.workspace = size();
    w.add_op(std::move(op));
  }
  return w;
}

// ---------------------------------------------------------------------------------------
// random_plan

namespace {

/// Draws one program while tracking what verify_plan tracks (residency, which tiers hold a
/// current copy, transfers in flight, waited events), so that every choice is legal.
class ProgramDrawer {
 public:
  ProgramDrawer(const Workload& w, const Plan& p, const RandomPlanOptions& o, Rng& rng,
                const std::vector<std::vector<uint32_t>>& uses, uint32_t first_event)
      : w_(w),
        o_(o),
        rng_(rng),
        uses_(uses),
        first_event_(first_event),
        tiers_(static_cast<uint32_t>(p.tiers.size())),
        state_(w.tensors.size()),
        slots_(w.ops.size() + 1) {
    for (uint32_t t = 0; t < w.tensors.size(); ++t) {
      if (w.tensors[t].origin != kExternal) continue;
      state_[t].valid = bit(p.home[t]);
      state_[t].resident = p.home[t] == kDevice;
      if (!state_[t].resident && !uses_[t].empty()) {
        const uint32_t first = uses_[t].front();
        // Anywhere from the program start to the use, the start itself more often.
        const bool at_start = rng_.percent(o_.start_prefetch_percent);
        slots_[at_start ? 0 : rng_.between(0, first)].push_back(t);
      }
    }
  }

  Program draw(uint32_t device) {
    const auto n = static_cast<uint32_t>(w_.ops.size());
    for (uint32_t j = 0; j <= n; ++j) {
      for (uint32_t t : slots_[j]) prefetch(t);  // act_on only schedules later slots
      for (uint32_t t = 0; t < w_.tensors.size(); ++t) {
        if (state_[t].resident && (j == n || !uses_op(t, j))) act_on(t, j);
      }
      if (j < n) compute(j);
    }
    return Program{device, std::move(steps_)};
  }

 private:
  static constexpr uint32_t kDevice = 0;
  struct TensorState {
    bool resident = false;
    uint64_t valid = 0;  ///< bit per tier holding a current copy
    uint32_t inflight = kNoEvent;
  };
  struct Event {
    uint32_t tensor;
    StepKind kind;
    uint32_t tier;
    bool waited = false;
  };

  static uint64_t bit(uint32_t tier) { return uint64_t{1} << tier; }

  bool uses_op(uint32_t t, uint32_t op) const {
    return std::binary_search(uses_[t].begin(), uses_[t].end(), op);
  }
  /// The first op at or after `op` that uses t, or kNoEvent.
  uint32_t next_use(uint32_t t, uint32_t op) const {
    auto it = std::lower_bound(uses_[t].begin(), uses_[t].end(), op);
    return it == uses_[t].end() ? kNoEvent : *it;
  }

  void wait_on(uint32_t e, std::vector<uint32_t>& wait) {
    if (std::find(wait.begin(), wait.end(), e) != wait.end()) return;
    wait.push_back(e);
    Event& ev = events_[e - first_event_];
    if (ev.waited) return;
    ev.waited = true;
    TensorState& s = state_[ev.tensor];
    if (s.inflight == e) s.inflight = kNoEvent;
    s.valid |= ev.kind == StepKind::kStore ? bit(ev.tier) : bit(kDevice);
  }
  /// Waits on the transfers of `tensors` in flight, if any, and sometimes on a random earlier
  /// event.
  std::vector<uint32_t> waits_for(const std::vector<uint32_t>& tensors) {
    std::vector<uint32_t> wait;
    for (uint32_t t : tensors) {
      if (state_[t].inflight != kNoEvent) wait_on(state_[t].inflight, wait);
    }
    if (!events_.empty() && rng_.percent(o_.extra_wait_percent)) {
      wait_on(first_event_ + rng_.index(events_.size()), wait);
    }
    std::sort(wait.begin(), wait.end());
    return wait;
  }
  uint32_t new_event(uint32_t t, StepKind kind, uint32_t tier) {
    events_.push_back(Event{t, kind, tier});
    return first_event_ + static_cast<uint32_t>(events_.size() - 1);
  }
  uint32_t random_host() { return 1 + rng_.index(tiers_ - 1); }

  void prefetch(uint32_t t) {
    TensorState& s = state_[t];
    TF_ASSERT(!s.resident && s.inflight == kNoEvent, "prefetch of a resident tensor {}", t);
    std::vector<uint32_t> sources;
    for (uint32_t tier = 1; tier < tiers_; ++tier) {
      if (s.valid & bit(tier)) sources.push_back(tier);
    }
    TF_ASSERT(!sources.empty(), "tensor {} has no copy to prefetch", t);
    std::vector<uint32_t> wait = waits_for({});
    const uint32_t tier = sources[rng_.index(sources.size())];
    const uint32_t e = new_event(t, StepKind::kPrefetch, tier);
    steps_.push_back(cache_step(StepKind::kPrefetch, t, tier, e, std::move(wait)));
    s.resident = true;
    s.inflight = e;
  }

  void store(uint32_t t) {
    std::vector<uint32_t> wait = waits_for({t});
    const uint32_t tier = random_host();
    const uint32_t e = new_event(t, StepKind::kStore, tier);
    steps_.push_back(cache_step(StepKind::kStore, t, tier, e, std::move(wait)));
    state_[t].inflight = e;
  }

  void detach(uint32_t t) {
    std::vector<uint32_t> wait = waits_for({t});
    steps_.push_back(cache_step(StepKind::kDetach, t, kDevice, kNoEvent, std::move(wait)));
    state_[t].resident = false;
    state_[t].valid &= ~bit(kDevice);
  }

  /// Random cache steps for a resident tensor that compute `j` (if any) does not use.
  void act_on(uint32_t t, uint32_t j) {
    const uint32_t next = next_use(t, j);
    const bool later = next != kNoEvent;
    if (rng_.percent(o_.evict_percent)) {
      // Store + detach; the store is required when the device holds the only current copy
      // and a later op reads it, otherwise it is drawn now and then anyway.
      const bool only_copy = (state_[t].valid & ~bit(kDevice)) == 0 && later;
      if (only_copy || rng_.percent(30)) store(t);
      detach(t);
      if (later) {
        const auto slot = static_cast<uint32_t>(rng_.between(j, next));
        if (slot == j) {
          prefetch(t);
        } else {
          slots_[slot].push_back(t);
        }
      }
    } else if (state_[t].inflight == kNoEvent && rng_.percent(o_.store_percent)) {
      store(t);  // waited on by whichever step needs the tensor next
    } else if (!later && rng_.percent(50) &&
               (w_.tensors[t].kind != TensorKind::kOutput || rng_.percent(50))) {
      detach(t);  // no later use: nothing can be lost
    }
  }

  void compute(uint32_t j) {
    const Op& op = w_.ops[j];
    std::vector<uint32_t> used = op.inputs;
    used.insert(used.end(), op.updates.begin(), op.updates.end());
    for (uint32_t t : used) {
      TF_ASSERT(state_[t].resident, "op {} reads tensor {}, which is not resident", j, t);
    }
    std::vector<uint32_t> wait = waits_for(used);
    steps_.push_back(compute_step(j, std::move(wait)));
    for (uint32_t t : op.updates) state_[t].valid = bit(kDevice);
    for (uint32_t t : op.outputs) state_[t] = TensorState{true, bit(kDevice), kNoEvent};
  }

  const Workload& w_;
  const RandomPlanOptions& o_;
  Rng& rng_;
  const std::vector<std::vector<uint32_t>>& uses_;
  const uint32_t first_event_;
  const uint32_t tiers_;
  std::vector<TensorState> state_;
  std::vector<std::vector<uint32_t>> slots_;  ///< per slot: tensors to prefetch there
  std::vector<Event> events_;                 ///< this program's, from first_event_ on
  std::vector<Step> steps_;
};

}  // namespace

Plan random_plan(uint64_t seed, const Workload& w, const PlanShape& shape,
                 const RandomPlanOptions& options) {
  TF_ASSERT(!options.host_tiers.empty(), "random_plan needs at least one host tier");
  std::vector<std::string> tiers = {shape.device_tier};
  tiers.insert(tiers.end(), options.host_tiers.begin(), options.host_tiers.end());
  Plan p = skeleton(w, "random", std::move(tiers));
  p.meta["seed"] = std::to_string(seed);
  Rng rng(seed);
  for (uint32_t t = 0; t < w.tensors.size(); ++t) {
    if (w.tensors[t].origin == kExternal) p.home[t] = rng.index(p.tiers.size());
  }
  const auto uses = uses_of(w);
  uint32_t events = 0;
  for (uint32_t d = 0; d < shape.devices; ++d) {
    if (d > 0 && rng.percent(options.identical_percent)) {
      p.programs.push_back(shifted(p.programs.front(), d, events));
    } else {
      p.programs.push_back(ProgramDrawer(w, p, options, rng, uses, events).draw(d));
    }
    events += event_count(p.programs.back());
  }
  return p;
}

}  // namespace tierflow::testing
