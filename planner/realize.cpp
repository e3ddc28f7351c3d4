#include "planner/realize.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/diagnostics.h"
#include "core/units.h"

namespace tierflow::planner {
namespace {

/// An index that names nothing: no op, tensor or weight.
constexpr uint32_t kAbsent = UINT32_MAX;
constexpr std::string_view kExpertWord = "expert";

/// "t3.L7.expert5" -> "t3.L7." for a routed expert op; nullopt for any other op (the
/// shared expert, "t3.L7.shared_expert", has no number).
std::optional<std::string_view> group_of(const Op& op) {
  if (op.kind != OpKind::kExpert) return std::nullopt;
  const std::string_view n = op.name;
  size_t d = n.size();
  while (d > 0 && n[d - 1] >= '0' && n[d - 1] <= '9') --d;
  if (d == n.size() || d < kExpertWord.size()) return std::nullopt;
  if (n.substr(d - kExpertWord.size(), kExpertWord.size()) != kExpertWord) return std::nullopt;
  const std::string_view prefix = n.substr(0, d - kExpertWord.size());
  if (!prefix.empty() && prefix.back() != '.') return std::nullopt;
  return prefix;
}

/// The MoE layer of a group: its prefix's last component ("t3.L7." -> "L7.").
std::string_view layer_of(std::string_view prefix) {
  const size_t dot = prefix.size() >= 2 ? prefix.rfind('.', prefix.size() - 2) : std::string_view::npos;
  return dot == std::string_view::npos ? prefix : prefix.substr(dot + 1);
}

uint32_t weight_of(const Workload& w, const Op& op) {
  for (uint32_t t : op.inputs) {
    if (w.tensors[t].kind == TensorKind::kWeight) return t;
  }
  return kAbsent;
}

bool reads(const Op& op, uint32_t t) {
  return std::ranges::find(op.inputs, t) != op.inputs.end() ||
         std::ranges::find(op.updates, t) != op.updates.end();
}

/// Per tensor of `w`: a weight no op but routed experts reads (an expert no token picked
/// is read by none).
std::vector<bool> routed_inputs(const Workload& w) {
  std::vector<uint8_t> by(w.tensors.size(), 0);  // bit 0: a routed reader, bit 1: another
  for (const Op& op : w.ops) {
    const uint8_t bit = group_of(op) ? 1 : 2;
    for (const auto* list : {&op.inputs, &op.updates}) {
      for (uint32_t t : *list) by[t] |= bit;
    }
  }
  std::vector<bool> out(w.tensors.size());
  for (size_t t = 0; t < out.size(); ++t) {
    out[t] = (by[t] & 2) == 0 && w.tensors[t].kind == TensorKind::kWeight;
  }
  return out;
}

Step detach_step(uint32_t t) {
  Step s;
  s.kind = StepKind::kDetach;
  s.target = t;
  return s;
}

InputError mismatch(std::string_view what, std::string_view name) {
  return InputError::at(SourcePos{"--routing"},
                        "the realized workload {} '{}': only the routed experts may differ "
                        "between the planned and the realized routing",
                        what, name);
}

/// Rewrites one program; shares the plan-wide event counter and statistics.
class ProgramRealizer {
 public:
  ProgramRealizer(const Workload& pw, const Workload& rw, const Plan& out,
                  const std::vector<uint32_t>& op_map, const std::vector<uint32_t>& tensor_map,
                  const std::vector<bool>& is_new, uint32_t& next_event, RoutingStats& stats,
                  const ExpertCache& cache,
                  const std::map<std::string, std::vector<uint32_t>, std::less<>>& layer_weights)
      : cache_(cache),
        layer_weights_(layer_weights),
        pw_(pw),
        rw_(rw),
        out_(out),
        op_map_(op_map),
        tensor_map_(tensor_map),
        is_new_(is_new),
        next_event_(next_event),
        stats_(stats) {
    const size_t nt = rw.tensors.size();
    resident_.assign(nt, false);
    inflight_.assign(nt, kNoEvent);
    inflight_prefetch_.assign(nt, false);
    fetched_.assign(nt, false);
    used_.assign(nt, false);
    readers_left_.assign(nt, 0);
    cached_.assign(nt, false);
    last_use_.assign(nt, 0);
    picks_.assign(nt, 0);
    for (size_t t = 0; t < nt; ++t) {
      if (rw.tensors[t].origin == kExternal) resident_[t] = out.home[t] == out.device_tier;
    }
    for (const Op& op : rw.ops) {
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) ++readers_left_[t];
      }
    }
  }

  Program run(const Program& in,
              const std::map<std::string, std::vector<uint32_t>, std::less<>>& realized_groups) {
    assign_places(in, realized_groups);
    if (cache_.on()) order_groups(in, realized_groups);
    out_prog_.device = in.device;
    for (size_t i = 0; i < in.steps.size(); ++i) {
      const Step& s = in.steps[i];
      if (s.kind == StepKind::kCompute) {
        if (group_of(pw_.ops[s.target])) {
          if (assign_[i] != kAbsent) {
            emit_expert(assign_[i], s.wait);
          } else {
            keep_for_next(s.wait);
          }
        } else {
          Step c = s;
          c.target = op_map_[s.target];
          emit_compute(std::move(c));
        }
        for (uint32_t r : extra_after_[i]) emit_expert(r, {});
        continue;
      }
      emit_cache(s);
    }
    for (size_t t = 0; t < resident_.size(); ++t) {
      if (resident_[t]) count_if_wasted(static_cast<uint32_t>(t));
    }
    return std::move(out_prog_);
  }

 private:
  // Per group: hits keep their places, misses fill the unpicked places in expert order,
  // more misses follow the last place (or the router when the plan has none there).
  void assign_places(
      const Program& in,
      const std::map<std::string, std::vector<uint32_t>, std::less<>>& realized_groups) {
    assign_.assign(in.steps.size(), kAbsent);
    extra_after_.assign(in.steps.size(), {});
    std::map<std::string, std::vector<size_t>, std::less<>> places;
    // Non-expert ops have the same names in both workloads: the router by its planned name.
    std::unordered_map<std::string_view, size_t> step_of_name;
    for (size_t i = 0; i < in.steps.size(); ++i) {
      if (in.steps[i].kind != StepKind::kCompute) continue;
      step_of_name[pw_.ops[in.steps[i].target].name] = i;
      if (auto g = group_of(pw_.ops[in.steps[i].target])) places[std::string(*g)].push_back(i);
    }
    for (const auto& [prefix, realized] : realized_groups) {
      std::vector<uint32_t> misses;
      auto it = places.find(prefix);
      std::vector<size_t> where = it == places.end() ? std::vector<size_t>{} : it->second;
      for (uint32_t r : realized) {
        bool hit = false;
        for (size_t i : where) {
          if (pw_.ops[in.steps[i].target].name == rw_.ops[r].name) {
            assign_[i] = r;
            hit = true;
          }
        }
        if (!hit) misses.push_back(r);
      }
      size_t m = 0;
      for (size_t i : where) {
        if (assign_[i] == kAbsent && m < misses.size()) assign_[i] = misses[m++];
      }
      if (m == misses.size()) continue;
      size_t after = 0;
      if (!where.empty()) {
        after = where.back();
      } else {
        // No planned expert of this group: the misses run once the router has picked.
        const auto at = step_of_name.find(prefix + "router");
        if (at == step_of_name.end()) {
          throw mismatch("has routed experts whose router the plan does not compute", prefix);
        }
        after = at->second;
      }
      for (; m < misses.size(); ++m) extra_after_[after].push_back(misses[m]);
    }
  }

  // The groups in the order their routers run (each one's successor is the one the
  // predictor fetches for) and the weights each picks.
  void order_groups(const Program& in,
                    const std::map<std::string, std::vector<uint32_t>, std::less<>>& realized_groups) {
    std::string_view last;
    for (const Step& s : in.steps) {
      if (s.kind != StepKind::kCompute) continue;
      const std::string_view n = pw_.ops[s.target].name;
      if (pw_.ops[s.target].kind != OpKind::kRouter || !n.ends_with("router")) continue;
      const auto g = realized_groups.find(n.substr(0, n.size() - 6));
      if (g == realized_groups.end()) continue;
      if (!last.empty()) next_group_[std::string(last)] = g->first;
      last = g->first;
      group_weights_[g->first] = {};
      for (uint32_t r : g->second) {
        if (const uint32_t w = weight_of(rw_, rw_.ops[r]); w != kAbsent) group_weights_[g->first].push_back(w);
      }
    }
  }

  /// The cached weight to evict next, by the cache's policy; kAbsent when every cached one
  /// is pinned.
  uint32_t victim() const {
    // LRU: the oldest use; LFU: the fewest picks, then the oldest use.
    const auto key = [&](uint32_t x) {
      return std::pair{cache_.kind == ExpertCacheKind::kLfu ? picks_[x] : 0, last_use_[x]};
    };
    uint32_t best = kAbsent;
    for (uint32_t t : cache_list_) {
      if (std::ranges::find(pinned_, t) != pinned_.end()) continue;
      if (best == kAbsent || key(t) < key(best)) best = t;
    }
    return best;
  }

  /// Detaches cached weights by the policy until `bytes` more fit; false when they cannot
  /// (what is left is pinned).
  bool make_room(uint64_t bytes) {
    while (cache_used_ + bytes > cache_.bytes) {
      const uint32_t v = victim();
      if (v == kAbsent) return false;
      TF_ASSERT(resident_[v], "the expert cache holds '{}', which is not resident", rw_.tensors[v].name);
      Step d = detach_step(v);
      wait_for(d, v, /*prefetch_only=*/false);
      count_if_wasted(v);
      emit(std::move(d));
      drop_from_cache(v);
      resident_[v] = false;
      ++stats_.evictions;
    }
    return true;
  }

  void add_to_cache(uint32_t t) {
    cached_[t] = true;
    cache_list_.push_back(t);
    cache_used_ += rw_.tensors[t].bytes;
  }

  void drop_from_cache(uint32_t t) {
    cached_[t] = false;
    std::erase(cache_list_, t);
    cache_used_ -= rw_.tensors[t].bytes;
  }

  /// After the router of group `prefix`: its picks are pinned, and with `predict` the next
  /// group's layer's most picked experts are prefetched into the cache.
  void after_router(std::string_view prefix) {
    const auto g = group_weights_.find(prefix);
    if (g == group_weights_.end()) return;
    pinned_ = g->second;
    // What the predictor fetches for this layer's next pass: as many as it picked now.
    last_k_[std::string(layer_of(prefix))] = g->second.size();
    if (!cache_.predict) return;
    const auto next = next_group_.find(prefix);
    if (next == next_group_.end()) return;
    const std::string_view layer = layer_of(next->second);
    const auto k = last_k_.find(layer);
    const auto all = layer_weights_.find(layer);
    if (k == last_k_.end() || all == layer_weights_.end()) return;  // not run yet: no history
    std::vector<uint32_t> ranked = all->second;
    std::ranges::stable_sort(ranked, [&](uint32_t a, uint32_t b) { return picks_[a] > picks_[b]; });
    for (size_t i = 0; i < ranked.size() && i < k->second; ++i) {
      const uint32_t w = ranked[i];
      if (picks_[w] == 0) break;
      if (resident_[w]) continue;
      if (!make_room(rw_.tensors[w].bytes)) break;
      Step fetch;
      fetch.kind = StepKind::kPrefetch;
      fetch.target = w;
      fetch.tier = out_.home[w];
      fetch.event = next_event_++;
      emit(std::move(fetch));
      resident_[w] = true;
      fetched_[w] = true;
      used_[w] = false;
      add_to_cache(w);
      pinned_.push_back(w);  // with this layer's picks, kept until the next router
      ++stats_.predicted;
      stats_.predicted_bytes += rw_.tensors[w].bytes;
    }
  }

  // Waits of a dropped compute step: prefetches stay in flight (a later reader or detach
  // waits on them); any other event is waited on by the next compute step.
  void keep_for_next(const std::vector<uint32_t>& waits) {
    for (uint32_t e : waits) {
      if (!is_prefetch_event(e)) carried_.push_back(e);
    }
  }

  bool is_prefetch_event(uint32_t e) const {
    const auto it = event_tensor_.find(e);
    return it != event_tensor_.end() && it->second.second;
  }

  void wait_for(Step& s, uint32_t t, bool prefetch_only) {
    if (inflight_[t] == kNoEvent || (prefetch_only && !inflight_prefetch_[t])) return;
    if (std::ranges::find(s.wait, inflight_[t]) == s.wait.end()) s.wait.push_back(inflight_[t]);
  }

  void emit(Step s) {
    std::erase_if(s.wait, [this](uint32_t e) { return dropped_.contains(e); });
    for (uint32_t e : s.wait) {
      const auto it = event_tensor_.find(e);
      if (it == event_tensor_.end()) continue;
      const uint32_t t = it->second.first;
      if (inflight_[t] == e) inflight_[t] = kNoEvent;
    }
    if (s.kind == StepKind::kPrefetch || s.kind == StepKind::kStore) {
      event_tensor_[s.event] = {s.target, s.kind == StepKind::kPrefetch};
      inflight_[s.target] = s.event;
      inflight_prefetch_[s.target] = s.kind == StepKind::kPrefetch;
    }
    out_prog_.steps.push_back(std::move(s));
  }

  void emit_compute(Step c) {
    const Op& op = rw_.ops[c.target];
    c.wait.insert(c.wait.end(), carried_.begin(), carried_.end());
    carried_.clear();
    for (const auto* list : {&op.inputs, &op.updates}) {
      for (uint32_t t : *list) wait_for(c, t, /*prefetch_only=*/list == &op.inputs);
    }
    const bool router = cache_.on() && op.kind == OpKind::kRouter && op.name.ends_with("router");
    emit(std::move(c));
    if (router) after_router(std::string_view(op.name).substr(0, op.name.size() - 6));
    std::vector<uint32_t> done;
    for (const auto* list : {&op.inputs, &op.updates}) {
      for (uint32_t t : *list) {
        used_[t] = true;
        if (--readers_left_[t] == 0 && is_new_[t]) done.push_back(t);
      }
    }
    for (uint32_t t : op.outputs) {
      resident_[t] = true;
      fetched_[t] = false;
      if (readers_left_[t] == 0 && is_new_[t]) done.push_back(t);
    }
    // The realized experts' outputs the plan never saw: released after their last reader.
    for (uint32_t t : done) {
      // A weight stays: whether a later token picks it is the router's to say, and the
      // cache's to guess.
      const TensorKind k = rw_.tensors[t].kind;
      if (k == TensorKind::kOutput || k == TensorKind::kWeight || !resident_[t]) continue;
      emit(detach_step(t));
      resident_[t] = false;
    }
  }

  void emit_expert(uint32_t r, const std::vector<uint32_t>& planned_waits) {
    const Op& op = rw_.ops[r];
    ++stats_.expert_ops;
    Step c;
    c.target = r;
    for (uint32_t e : planned_waits) {
      const auto it = event_tensor_.find(e);
      // The prefetch of a weight this op does not read stays in flight: its reader or its
      // detach waits on it.
      if (it != event_tensor_.end() && it->second.second && !reads(op, it->second.first)) continue;
      c.wait.push_back(e);
    }
    const uint32_t w = weight_of(rw_, op);
    const bool miss = w != kAbsent && !resident_[w];
    if (miss && cache_.on() && !make_room(rw_.tensors[w].bytes)) {
      // Everything cached is pinned (this layer's picks and predictions): the pins go.
      pinned_.clear();
      make_room(rw_.tensors[w].bytes);
    }
    if (miss) {
      const uint32_t ev = next_event_++;
      Step fetch;
      fetch.kind = StepKind::kPrefetch;
      fetch.target = w;
      fetch.tier = out_.home[w];
      fetch.event = ev;
      fetch.demand = true;
      emit(std::move(fetch));
      resident_[w] = true;
      fetched_[w] = false;
      ++stats_.misses;
      stats_.miss_bytes += rw_.tensors[w].bytes;
      c.wait.push_back(ev);
    } else {
      ++stats_.hits;
    }
    if (w != kAbsent) {
      last_use_[w] = ++clock_;
      ++picks_[w];
    }
    emit_compute(std::move(c));
    if (miss && cache_.on()) {
      add_to_cache(w);
    } else if (miss) {
      emit(detach_step(w));
      resident_[w] = false;
    }
  }

  void count_if_wasted(uint32_t t) {
    if (fetched_[t] && !used_[t]) {
      ++stats_.wasted;
      stats_.wasted_bytes += rw_.tensors[t].bytes;
    }
    fetched_[t] = false;
  }

  void emit_cache(const Step& s) {
    const uint32_t t = tensor_map_[s.target];
    Step c = s;
    c.target = t;
    // A step on a planned expert output the realized routing lacks, or one the realized
    // residency makes moot, is dropped; so are the waits on its event.
    const bool keep = t != kAbsent && (s.kind == StepKind::kPrefetch ? !resident_[t] : resident_[t]);
    if (!keep && t != kAbsent && s.kind == StepKind::kPrefetch && cached_[t]) {
      // The plan takes the cache's copy over: its own detach releases it.
      drop_from_cache(t);
      fetched_[t] = false;
    }
    if (!keep) {
      if (s.event != kNoEvent) dropped_.insert(s.event);
      return;
    }
    switch (s.kind) {
      case StepKind::kPrefetch:
        emit(std::move(c));
        resident_[t] = true;
        fetched_[t] = true;
        used_[t] = false;
        break;
      case StepKind::kStore:
        wait_for(c, t, /*prefetch_only=*/false);
        emit(std::move(c));
        break;
      case StepKind::kDetach:
        wait_for(c, t, /*prefetch_only=*/false);
        count_if_wasted(t);
        emit(std::move(c));
        resident_[t] = false;
        break;
      case StepKind::kCompute:
        break;
    }
  }

  const ExpertCache& cache_;
  const std::map<std::string, std::vector<uint32_t>, std::less<>>& layer_weights_;
  const Workload& pw_;
  const Workload& rw_;
  const Plan& out_;
  const std::vector<uint32_t>& op_map_;
  const std::vector<uint32_t>& tensor_map_;
  const std::vector<bool>& is_new_;
  uint32_t& next_event_;
  RoutingStats& stats_;

  Program out_prog_;
  std::vector<uint32_t> assign_;
  std::vector<std::vector<uint32_t>> extra_after_;
  std::vector<bool> resident_, inflight_prefetch_, fetched_, used_;
  std::vector<uint32_t> inflight_;
  std::vector<uint32_t> readers_left_;
  std::vector<uint32_t> carried_;
  std::unordered_map<uint32_t, std::pair<uint32_t, bool>> event_tensor_;  ///< -> tensor, prefetch
  std::unordered_set<uint32_t> dropped_;
  // The expert cache.
  std::vector<bool> cached_;          ///< held by the cache (not by the plan)
  std::vector<uint32_t> cache_list_;  ///< the cached weights
  uint64_t cache_used_ = 0;
  std::vector<uint64_t> last_use_, picks_;  ///< per weight: a clock stamp, times picked
  uint64_t clock_ = 0;
  std::vector<uint32_t> pinned_;  ///< the current layer's picks (and its predictions)
  std::map<std::string, std::string, std::less<>> next_group_;
  std::map<std::string, std::vector<uint32_t>, std::less<>> group_weights_;
  std::map<std::string, size_t, std::less<>> last_k_;  ///< per layer: distinct picks last pass
};

}  // namespace

bool has_routed_experts(const Workload& w) {
  return std::ranges::any_of(w.ops, [](const Op& op) { return group_of(op).has_value(); });
}

uint64_t demand_reserve(const Workload& w) {
  uint64_t most = 0;
  for (const Op& op : w.ops) {
    if (!group_of(op)) continue;
    if (const uint32_t t = weight_of(w, op); t != kAbsent) most = std::max(most, w.tensors[t].bytes);
  }
  return most;
}

Workload without_routed_experts(const Workload& w) {
  const std::vector<bool> routed_only = routed_inputs(w);
  Workload out;
  out.name = w.name;
  out.meta = w.meta;
  std::vector<uint32_t> map(w.tensors.size(), kAbsent);
  for (uint32_t t = 0; t < w.tensors.size(); ++t) {
    const Tensor& x = w.tensors[t];
    const bool expert_output = x.origin != kExternal && group_of(w.ops[x.origin]);
    if (expert_output || (x.origin == kExternal && routed_only[t])) continue;
    Tensor copy = x;
    copy.origin = kExternal;  // set again by add_op
    map[t] = out.add_tensor(std::move(copy));
  }
  const auto remap = [&](const std::vector<uint32_t>& list) {
    std::vector<uint32_t> kept;
    for (uint32_t t : list) {
      if (map[t] != kAbsent) kept.push_back(map[t]);
    }
    return kept;
  };
  for (const Op& op : w.ops) {
    if (group_of(op)) continue;
    Op copy = op;
    copy.inputs = remap(op.inputs);
    copy.outputs = remap(op.outputs);
    copy.updates = remap(op.updates);
    out.add_op(std::move(copy));
  }
  return out;
}

ExpertCache parse_expert_cache(std::string_view text, std::string_view source) {
  const SourcePos at{std::string(source)};
  ExpertCache c;
  if (text == "none") return c;
  std::string_view rest = text;
  const size_t comma = rest.find(',');
  if (comma != std::string_view::npos) {
    const std::string_view option = rest.substr(comma + 1);
    if (option != "predict") {
      throw InputError::at(at, "'{}': unknown cache option '{}' (the one there is: predict){}", text,
                           option, did_you_mean(option, std::vector<std::string>{"predict"}));
    }
    c.predict = true;
    rest = rest.substr(0, comma);
  }
  const size_t colon = rest.find(':');
  const std::string_view policy = rest.substr(0, colon);
  if (policy == "lru") {
    c.kind = ExpertCacheKind::kLru;
  } else if (policy == "lfu") {
    c.kind = ExpertCacheKind::kLfu;
  } else {
    throw InputError::at(at, "'{}': unknown expert cache policy '{}': none, lru:SIZE or lfu:SIZE{}",
                         text, policy,
                         did_you_mean(policy, std::vector<std::string>{"none", "lru", "lfu"}));
  }
  if (colon == std::string_view::npos) {
    throw InputError::at(at, "'{}': the cache needs its size, e.g. {}:8GiB", text, policy);
  }
  const auto b = parse_bytes(rest.substr(colon + 1));
  if (!b.ok() || b.value.value == 0) {
    throw InputError::at(at, "'{}': expected a size above 0 such as 8GiB after '{}:'", text, policy);
  }
  c.bytes = b.value.value;
  return c;
}

std::string to_string(const ExpertCache& c) {
  if (!c.on()) return "none";
  return fmt::format("{}:{}{}", c.kind == ExpertCacheKind::kLru ? "lru" : "lfu",
                     tierflow::to_string(Bytes{c.bytes}), c.predict ? ",predict" : "");
}

namespace {

/// Per group prefix, the bytes of its routed experts' outputs.
std::map<std::string, uint64_t, std::less<>> group_output_bytes(const Workload& w) {
  std::map<std::string, uint64_t, std::less<>> out;
  for (const Op& op : w.ops) {
    const auto g = group_of(op);
    if (!g) continue;
    uint64_t& n = out[std::string(*g)];
    for (uint32_t t : op.outputs) n += w.tensors[t].bytes;
  }
  return out;
}

}  // namespace

uint64_t routing_reserve(const Workload& realized, const ExpertCache& cache, std::string_view source) {
  // A realized group's outputs accumulate op by op until its combine, in an order other
  // than the planned group's, so the excess of its total over the planned total does not
  // bound the moments in between (DeepSeek-V3 went 7 KiB over): the whole of the largest
  // realized group does, since the planned group's outputs are gone from the realized plan.
  uint64_t extra = 0;
  for (const auto& [prefix, bytes] : group_output_bytes(realized)) extra = std::max(extra, bytes);
  const uint64_t expert = demand_reserve(realized);
  if (!cache.on()) return expert + extra;
  if (cache.bytes < expert) {
    throw InputError::at(SourcePos{std::string(source)},
                         "an expert cache of {} holds no expert: the largest routed expert "
                         "weighs {}",
                         to_string_approx(Bytes{cache.bytes}), to_string_approx(Bytes{expert}));
  }
  return cache.bytes + extra;
}

RealizedPlan realize_routing(const Plan& plan, const Workload& pw, const Workload& rw,
                             const ExpertCache& cache, const std::string& expert_home) {
  if (plan.home.size() != pw.tensors.size()) {
    throw std::logic_error("realize_routing: the plan is not over the planned workload");
  }
  std::unordered_map<std::string_view, uint32_t> r_ops, r_tensors, p_ops;
  for (uint32_t i = 0; i < rw.ops.size(); ++i) r_ops.emplace(rw.ops[i].name, i);
  for (uint32_t i = 0; i < rw.tensors.size(); ++i) r_tensors.emplace(rw.tensors[i].name, i);
  for (uint32_t i = 0; i < pw.ops.size(); ++i) p_ops.emplace(pw.ops[i].name, i);

  std::vector<uint32_t> op_map(pw.ops.size(), kAbsent), tensor_map(pw.tensors.size(), kAbsent);
  std::vector<bool> is_new(rw.tensors.size(), true);
  for (uint32_t i = 0; i < pw.tensors.size(); ++i) {
    const auto it = r_tensors.find(pw.tensors[i].name);
    if (it == r_tensors.end()) {
      if (pw.tensors[i].origin == kExternal || !group_of(pw.ops[pw.tensors[i].origin])) {
        throw mismatch("lacks the tensor", pw.tensors[i].name);
      }
      continue;
    }
    tensor_map[i] = it->second;
    is_new[it->second] = false;
  }
  for (uint32_t i = 0; i < pw.ops.size(); ++i) {
    if (group_of(pw.ops[i])) continue;
    const auto it = r_ops.find(pw.ops[i].name);
    if (it == r_ops.end()) throw mismatch("lacks the op", pw.ops[i].name);
    op_map[i] = it->second;
  }
  std::map<std::string, std::vector<uint32_t>, std::less<>> realized_groups;
  for (uint32_t i = 0; i < rw.ops.size(); ++i) {
    if (auto g = group_of(rw.ops[i])) {
      realized_groups[std::string(*g)].push_back(i);
    } else if (!p_ops.contains(rw.ops[i].name)) {
      throw mismatch("has an op the plan does not know", rw.ops[i].name);
    }
  }
  // New tensors: the routed experts' outputs, and (for a plan made without the routed
  // experts, with `expert_home`) their weights, which only routed experts read.
  const std::vector<bool> routed_only = routed_inputs(rw);
  std::vector<uint32_t> new_weights;
  for (uint32_t t = 0; t < rw.tensors.size(); ++t) {
    if (!is_new[t]) continue;
    const Tensor& x = rw.tensors[t];
    if (x.origin == kExternal && routed_only[t] && !expert_home.empty()) {
      new_weights.push_back(t);
      continue;
    }
    if (x.origin == kExternal || !group_of(rw.ops[x.origin])) {
      throw mismatch("has a tensor the plan does not know", x.name);
    }
  }

  RealizedPlan out;
  Plan& p = out.plan;
  p.name = plan.name;
  p.meta = plan.meta;
  p.routing = "realistic";
  p.topology_ref = plan.topology_ref;
  p.tiers = plan.tiers;
  p.device_tier = plan.device_tier;
  p.home.assign(rw.tensors.size(), plan.device_tier);
  for (uint32_t i = 0; i < pw.tensors.size(); ++i) {
    if (tensor_map[i] != kAbsent) p.home[tensor_map[i]] = plan.home[i];
  }
  if (!new_weights.empty()) {
    auto at = std::ranges::find(p.tiers, expert_home);
    if (at == p.tiers.end()) at = p.tiers.insert(p.tiers.end(), expert_home);
    const auto home = static_cast<uint32_t>(at - p.tiers.begin());
    for (uint32_t t : new_weights) p.home[t] = home;
  }
  uint32_t next_event = 0;
  for (const Program& prog : plan.programs) {
    for (const Step& s : prog.steps) {
      if (s.event != kNoEvent) next_event = std::max(next_event, s.event + 1);
    }
  }
  // Per MoE layer ("L7."), its routed experts' weights: what the predictor ranks.
  std::map<std::string, std::vector<uint32_t>, std::less<>> layer_weights;
  if (cache.predict) {
    for (const Op& o : rw.ops) {
      const auto g = group_of(o);
      const uint32_t w = g ? weight_of(rw, o) : kAbsent;
      if (w == kAbsent) continue;
      std::vector<uint32_t>& list = layer_weights[std::string(layer_of(*g))];
      if (std::ranges::find(list, w) == list.end()) list.push_back(w);
    }
    for (auto& [layer, list] : layer_weights) std::ranges::sort(list);
  }
  for (const Program& prog : plan.programs) {
    ProgramRealizer r(pw, rw, p, op_map, tensor_map, is_new, next_event, out.stats, cache,
                      layer_weights);
    p.programs.push_back(r.run(prog, realized_groups));
  }
  if (const auto issue = verify_plan(p, rw)) {
    throw std::logic_error(
        fmt::format("realize_routing made a plan that does not verify: program {} step {}: {}",
                    issue->program, issue->step, issue->message));
  }
  return out;
}

}  // namespace tierflow::planner
