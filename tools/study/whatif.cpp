#include "tools/study/whatif.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "core/checked.h"
#include "core/diagnostics.h"
#include "core/io.h"
#include "core/plan_json.h"
#include "core/units.h"
#include "tools/study/target.h"

namespace tierflow::study {
namespace {

/// `a` and `b` with at least `decimals` decimals, and as many more as it takes for the two
/// texts to differ when the numbers do ("30.004" above "30.000", never "30.00" above "30.00").
std::pair<std::string, std::string> apart(double a, double b, int decimals) {
  std::string x, y;
  for (int d = decimals; d <= 12; ++d) {
    x = fmt::format("{:.{}f}", a, d);
    y = fmt::format("{:.{}f}", b, d);
    if (x != y || a == b) break;
  }
  return {x, y};
}

constexpr uint64_t kMinResolution = uint64_t{64} << 20;  // 64 MiB
constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string pct(double x) { return fmt::format("{:+.1f}%", 100 * x); }

/// The scenario's device tier, its index and the bytes of it plans may use.
struct DeviceTier {
  std::shared_ptr<const hw::Topology> topo;
  size_t index = 0;
  uint64_t usable = 0;
  [[nodiscard]] const hw::Tier& tier() const { return topo->tiers[index]; }
};

DeviceTier device_tier(Study& study, const Scenario& s) {
  auto topo = study.topology(s);
  const planner::Target t = make_target(*topo, s.device, s.devices, s.name("device"));
  const uint64_t usable = topo->usable(t.device_tier);
  return {std::move(topo), t.device_tier, usable};
}

/// A bandwidth or capacity the upgrade question raises, and what relaxing a binding raises.
struct Knob {
  std::string what, path;
  double now = 0;
  bool bandwidth = true;
};

/// The knob of a link direction or tier port that carried bytes.
Knob knob_of(const hw::Topology& topo, const sim::LinkResult& l) {
  if (l.kind == sim::ResourceKind::kLink) {
    const hw::Link& link = topo.links[l.index];
    const bool reverse = !l.forward && link.bandwidth_reverse.bytes_per_s > 0;
    return {fmt::format("link '{}' bandwidth{}", link.id, reverse ? " (reverse)" : ""),
            fmt::format("links.{}.{}", link.id, reverse ? "bandwidth_reverse" : "bandwidth"),
            reverse ? link.bandwidth_reverse.bytes_per_s : link.bandwidth.bytes_per_s, true};
  }
  const hw::Tier& tier = topo.tiers[l.index];
  const bool read = l.kind == sim::ResourceKind::kTierRead;
  return {fmt::format("tier '{}' {} bandwidth", tier.id, read ? "read" : "write"),
          fmt::format("tiers.{}.{}_bandwidth", tier.id, read ? "read" : "write"),
          read ? tier.read_bandwidth.bytes_per_s : tier.write_bandwidth.bytes_per_s, true};
}

/// The scenario with a knob scaled by `f`.
Scenario scaled(const Scenario& s, const Knob& k, double f) {
  Scenario p = s;
  p.sets.push_back(fmt::format("{}={}", k.path,
                               k.bandwidth ? to_string(Bandwidth{k.now * f})
                                           : to_string(Bytes{static_cast<uint64_t>(k.now * f)})));
  return p;
}

/// The scenario with the device memory the plan may use scaled by `f`, and what applies
/// it (`set_2x`): the capacity knob's `--set`, or, where a budget holds the plan below the
/// tier, the budget (`budget=6GiB`), with the capacity only when the budget outgrows it.
Scenario scaled_memory(const Scenario& s, const Knob& k, double f, const DeviceTier& dev,
                       std::string& applied) {
  if (s.budget == 0) {
    Scenario p = scaled(s, k, f);
    applied = p.sets.back();
    return p;
  }
  Scenario p = s;
  p.budget = static_cast<uint64_t>(static_cast<double>(s.budget) * f);
  applied = fmt::format("budget={}", to_string(Bytes{p.budget}));
  if (p.budget > dev.usable) {
    p.sets.push_back(capacity_for_budget(*dev.topo, dev.index, p.budget));
    applied += " " + p.sets.back();
  }
  return p;
}

/// Relaxations tried per binding, busiest resource first.
constexpr size_t kRelaxTries = 4;
/// A relaxation counts when it shortens the latency by at least this.
constexpr double kRelaxGain = 0.005;

/// What binds a trial that ran but missed its limit, checked by relaxing it: of the links
/// and tier ports that carried bytes, busiest first, the first whose bandwidth doubled
/// shortens the latency by at least 0.5%; else compute. A trial that did not run is bound by
/// why it did not.
std::string checked_binding(Study& study, const Trial& t) {
  if (!t.ok) return t.reason;
  const auto topo = study.topology(t.scenario);
  const PhaseResult& m = t.main();
  const double seconds = static_cast<double>(m.makespan_ps) * 1e-12;
  std::vector<std::pair<double, Knob>> ranked;
  for (const sim::LinkResult& l : m.sim->links) {
    if (l.bytes <= 0 || l.capacity <= 0 || seconds <= 0) continue;
    Knob k = knob_of(*topo, l);
    const double used = l.bytes / (l.capacity * seconds);
    auto same = std::ranges::find_if(ranked, [&](const auto& r) { return r.second.path == k.path; });
    if (same == ranked.end()) {
      ranked.emplace_back(used, std::move(k));
    } else {
      same->first = std::max(same->first, used);
    }
  }
  std::ranges::stable_sort(ranked, [](const auto& a, const auto& b) { return a.first > b.first; });
  const auto base = static_cast<double>(t.latency_ps());
  std::vector<std::string> tried;
  for (size_t i = 0; i < std::min(ranked.size(), kRelaxTries); ++i) {
    const auto& [used, k] = ranked[i];
    const Trial r = study.run(scaled(t.scenario, k, 2.0));
    const double gain = r.ok ? (base - static_cast<double>(r.latency_ps())) / base : 0;
    if (gain >= kRelaxGain) {
      return fmt::format("{} ({:.0f}% used): doubled, the latency is {} ({})", k.what, 100 * used,
                         pct(-gain), to_string_approx(Duration{r.latency_ps()}));
    }
    tried.push_back(k.what);
  }
  if (tried.empty()) return "compute (nothing moved)";
  return fmt::format("compute: doubling {} shortens the latency by less than {:g}%",
                     fmt::join(tried, ", "), 100 * kRelaxGain);
}

Probe probe_of(const std::string& value, const Trial& t, bool pass, std::string why) {
  Probe p;
  p.value = value;
  p.pass = pass;
  p.latency_ps = t.ok ? t.latency_ps() : 0;
  p.device_peak = 0;
  for (const PhaseResult& ph : t.phases) p.device_peak = std::max(p.device_peak, ph.device_peak);
  p.tpot_ms = tpot_ms_of(t);
  p.throughput = throughput_of(t);
  p.why = pass ? "" : std::move(why);
  return p;
}

Answer min_memory(Study& study, const Scenario& s, const WhatIfOptions& o) {
  Answer a;
  a.question = Question::kMinMemory;
  const DeviceTier dev = device_tier(study, s);
  const std::string& tier_id = dev.tier().id;
  const uint64_t capacity = dev.usable;
  const Trial fastest = study.unlimited_trial(s);
  if (!fastest.ok) {
    a.binding = "even the resident plan on unlimited memory fails: " + fastest.reason;
    return a;
  }
  a.fastest_ps = fastest.latency_ps();
  a.limit_ps = scaled_ps(a.fastest_ps, 1.0 + o.max_overhead);
  uint64_t lo = 0, hi = 0;  // lo fails (or is below every plan), hi passes
  for (const PhaseResult& p : fastest.phases) {
    lo = std::max(lo, p.outcome.bounds.residency);
    hi = std::max(hi, p.device_peak);
  }
  lo = lo > 0 ? lo - 1 : 0;
  // Each budget is planned once; its probe says whether it passed and why not.
  std::map<uint64_t, Trial> done;
  std::map<uint64_t, size_t> probe_at;
  auto passes = [&](uint64_t budget) {
    if (auto it = probe_at.find(budget); it != probe_at.end()) return a.probes[it->second].pass;
    Scenario p = s;
    p.budget = budget;
    if (budget > capacity) p.sets.push_back(capacity_for_budget(*dev.topo, dev.index, budget));
    Trial t = study.run(p);
    const bool pass = t.ok && t.latency_ps() <= a.limit_ps;
    std::string why = !t.ok ? t.reason
                            : fmt::format("latency {} over the limit {} ({})",
                                          to_string_approx(Duration{t.latency_ps()}),
                                          to_string_approx(Duration{a.limit_ps}),
                                          t.main().binding);
    probe_at[budget] = a.probes.size();
    a.probes.push_back(probe_of(to_string_approx(Bytes{budget}), t, pass, why));
    if (o.progress) {
      o.progress(fmt::format("probe {}: {} {}", a.probes.size(), to_string_approx(Bytes{budget}),
                             pass ? "meets the limit" : "does not"));
    }
    done.emplace(budget, std::move(t));
    return pass;
  };
  if (!passes(hi)) {
    a.found = false;
    a.binding = a.probes.back().why;
    a.note = fmt::format("the plan at the resident peak ({}) is not within the overhead",
                         to_string_approx(Bytes{hi}));
    return a;
  }
  const uint64_t step = std::max(kMinResolution, static_cast<uint64_t>(static_cast<double>(hi) * o.resolution));
  a.resolution = to_string_approx(Bytes{step});
  while (hi - lo > step) {
    uint64_t mid = lo + (hi - lo) / 2;
    mid = std::max(lo + 1, mid / kMiB * kMiB);  // whole MiB, as a user would write it
    if (passes(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  a.found = true;
  a.number = static_cast<int64_t>(hi);
  a.value = to_string_approx(Bytes{hi});
  a.trial = done.at(hi);
  if (auto it = probe_at.find(lo); it != probe_at.end()) {
    const Trial& failed = done.at(lo);
    a.binding = failed.ok ? fmt::format("below {} of '{}': latency {} over the limit {}; {}", a.value,
                                        tier_id, to_string_approx(Duration{failed.latency_ps()}),
                                        to_string_approx(Duration{a.limit_ps}),
                                        checked_binding(study, failed))
                          : fmt::format("below {} of '{}': {}", a.value, tier_id, a.probes[it->second].why);
  } else {
    a.binding = fmt::format("the residency bound: no plan needs less than {} on '{}'",
                            to_string_approx(Bytes{lo + 1}), tier_id);
  }
  if (hi > capacity) {
    a.note = fmt::format(
        "more than the device's usable {} of '{}' ({:.2f}x): this is what the model "
        "would need",
        to_string_approx(Bytes{capacity}), tier_id,
        static_cast<double>(hi) / static_cast<double>(capacity));
  } else {
    a.note = fmt::format("fits the device's usable {} of '{}' ({:.0f}% of it)",
                         to_string_approx(Bytes{capacity}), tier_id,
                         100.0 * static_cast<double>(hi) / static_cast<double>(capacity));
  }
  return a;
}

Answer max_value(Study& study, const Scenario& s, const WhatIfOptions& o) {
  Answer a;
  a.question = o.question;
  const bool batch = o.question == Question::kMaxBatch;
  const std::string field = searched_field(o.question, s);
  const bool target = o.min_throughput > 0 || o.max_tpot_ms > 0;
  Scenario base = s;
  if (!target) base.policy = "resident";
  const int64_t step = batch ? 1 : std::max<int64_t>(1, s.workload.gen.kv_block);
  const int64_t cap = batch ? 65536 : int64_t{1} << 22;
  a.resolution = batch ? "1" : fmt::format("{} tokens (a KV block)", step);
  // Each value is planned once; its probe says whether it passed and why not.
  std::map<int64_t, Trial> done;
  std::map<int64_t, size_t> probe_at;
  std::map<int64_t, std::string> missed;  // a probe that ran but missed the target: by how much
  std::set<int64_t> slow;                 // a probe that ran below --min-throughput
  auto passes = [&](int64_t v) {
    if (auto it = probe_at.find(v); it != probe_at.end()) return a.probes[it->second].pass;
    Scenario p = base;
    set_field(p, field, std::to_string(v), base.name("question"));
    Trial t = study.run(p);
    bool pass = t.ok;
    std::string why = t.reason;
    if (pass && o.min_throughput > 0 && throughput_of(t) < o.min_throughput) {
      pass = false;
      slow.insert(v);
      const auto [got, want] = apart(throughput_of(t), o.min_throughput, 1);
      missed[v] = fmt::format("{} tokens/s below {}", got, want);
    }
    if (pass && o.max_tpot_ms > 0 && tpot_ms_of(t) > o.max_tpot_ms) {
      pass = false;
      const auto [got, want] = apart(tpot_ms_of(t), o.max_tpot_ms, 2);
      missed[v] = fmt::format("TPOT {} ms above {} ms", got, want);
    }
    if (missed.contains(v)) why = fmt::format("{} ({})", missed[v], t.main().binding);
    probe_at[v] = a.probes.size();
    a.probes.push_back(probe_of(fmt::format("{} {}", field, v), t, pass, why));
    if (o.progress) {
      o.progress(fmt::format("probe {}: {} {}", a.probes.size(), a.probes.back().value,
                             pass ? "passes" : "fails"));
    }
    done.emplace(v, std::move(t));
    return pass;
  };
  const int64_t now = batch ? s.workload.gen.batch : s.request ? s.request->prompt : s.workload.gen.context;
  const int64_t v0 = std::max(step, now);
  int64_t lo = 0, hi = 0;  // lo passes (0: none yet), hi fails (0: none yet)
  const bool start_passes = passes(v0);
  bool exhausted = false;  // the search found no value that passes: nothing to bisect
  if (!start_passes && batch && slow.contains(v0)) {
    // Below the throughput target: a larger batch gives more tokens per second, so the
    // batches that meet it lie above, up to the largest that fits. Doubling to the first
    // that passes, or to the first that fails otherwise (does not fit, or misses the TPOT).
    int64_t below = v0;  // ran, below the target
    // A probe passes (lo), falls below the target (below) or fails otherwise (hi).
    const auto probe_up = [&](int64_t v) {
      if (passes(v)) {
        lo = v;
      } else if (slow.contains(v)) {
        below = v;
      } else {
        hi = v;
      }
    };
    for (int64_t v = v0 * 2; v <= cap && lo == 0 && hi == 0; v *= 2) probe_up(v);
    // Between the last below the target and the first that failed otherwise: bisection
    // to the first that passes (then the search goes on above it), or to the fit limit.
    while (lo == 0 && hi - below > step) {
      int64_t mid = below + (hi - below) / 2;
      mid = std::max(below + step, mid / step * step);
      if (mid >= hi) break;
      probe_up(mid);
    }
    if (lo == 0) {
      // None meets it: the answer is none, bound by the last probe (nothing to bisect).
      hi = hi == 0 ? below : hi;
      exhausted = true;
    }
  }
  if (start_passes || (lo > 0 && hi == 0)) {
    if (lo == 0) lo = v0;
    for (int64_t v = lo * 2; v <= cap; v *= 2) {
      if (!passes(v)) {
        hi = v;
        break;
      }
      lo = v;
    }
    if (hi == 0) {
      a.found = true;
      a.number = lo;
      a.value = std::to_string(lo);
      a.trial = done.at(lo);
      a.binding = fmt::format("none up to {}, the search's cap", cap);
      return a;
    }
  } else if (hi == 0) {
    hi = v0;
  }
  while (!exhausted && hi - lo > step) {
    int64_t mid = lo + (hi - lo) / 2;
    mid = std::max(lo + step, mid / step * step);
    if (mid >= hi) break;
    if (passes(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  // The probe table's reasons name the busiest resource; the answer's binding is checked by
  // relaxing it.
  const auto failed = probe_at.find(hi);
  if (auto m = missed.find(hi); m != missed.end()) {
    a.binding = fmt::format("at {} {}: {}; {}", field, hi, m->second, checked_binding(study, done.at(hi)));
  } else {
    a.binding = fmt::format("at {} {}: {}", field, hi,
                            failed == probe_at.end() ? "" : a.probes[failed->second].why);
  }
  if (!target) a.note = "no target given: the largest that fits without offload (policy resident)";
  if (lo == 0) {
    a.found = false;
    if (o.min_throughput > 0) {
      // What came closest: a target past every value's throughput says so, beside why the
      // last probe failed.
      double best = 0;
      int64_t at = 0;
      for (const auto& [v, t] : done) {
        if (t.ok && throughput_of(t) > best) std::tie(best, at) = std::pair{throughput_of(t), v};
      }
      if (at > 0) {
        a.note = fmt::format("the most any probe reached: {:.1f} tokens/s at {} {}, below {:.1f}",
                             best, field, at, o.min_throughput);
      }
    }
    return a;
  }
  a.found = true;
  a.number = lo;
  a.value = std::to_string(lo);
  a.trial = done.at(lo);
  return a;
}

Answer upgrade(Study& study, const Scenario& s, const WhatIfOptions& o) {
  Answer a;
  a.question = Question::kUpgrade;
  Trial base = study.run(s);
  if (!base.ok) {
    a.found = false;
    a.binding = base.reason;
    a.trial = std::move(base);
    return a;
  }
  const auto topo = study.topology(s);
  const PhaseResult& m = base.main();
  std::vector<Knob> knobs;
  auto add = [&](Knob k) {
    for (const Knob& x : knobs) {
      if (x.path == k.path) return;
    }
    knobs.push_back(std::move(k));
  };
  for (const sim::LinkResult& l : m.sim->links) {
    if (l.bytes > 0) add(knob_of(*topo, l));
  }
  const DeviceTier dev_tier = device_tier(study, s);
  const hw::Tier& dev = dev_tier.tier();
  add({s.budget == 0 ? fmt::format("tier '{}' capacity", dev.id)
                     : fmt::format("budget on tier '{}'", dev.id),
       fmt::format("tiers.{}.capacity", dev.id), static_cast<double>(dev.capacity.value), false});
  const double base_ps = static_cast<double>(base.latency_ps());
  for (const Knob& k : knobs) {
    Upgrade u;
    u.what = k.what;
    for (int i = 0; i < 2; ++i) {
      const double f = i == 0 ? 1.25 : 2.0;
      std::string applied;
      const Scenario p = k.bandwidth ? scaled(s, k, f) : scaled_memory(s, k, f, dev_tier, applied);
      if (i == 1) u.set = k.bandwidth ? p.sets.back() : applied;
      const Trial t = study.run(p);
      u.latency_ps[static_cast<size_t>(i)] = t.ok ? t.latency_ps() : 0;
      u.gain[static_cast<size_t>(i)] = t.ok ? (base_ps - static_cast<double>(t.latency_ps())) / base_ps : 0;
      if (o.progress) o.progress(fmt::format("{} x{}: {}", k.what, f, t.ok ? pct(-u.gain[static_cast<size_t>(i)]) : "failed"));
    }
    a.upgrades.push_back(std::move(u));
  }
  std::stable_sort(a.upgrades.begin(), a.upgrades.end(), [](const Upgrade& x, const Upgrade& y) {
    if (x.gain[1] != y.gain[1]) return x.gain[1] > y.gain[1];
    return x.gain[0] > y.gain[0];
  });
  a.found = true;
  // The binding is what the table shows relaxing helps most (checked, not guessed).
  a.binding = !a.upgrades.empty() && a.upgrades.front().gain[1] >= kRelaxGain
                  ? fmt::format("{}: doubled, the latency is {}", a.upgrades.front().what,
                                pct(-a.upgrades.front().gain[1]))
                  : "compute: no link, port or capacity doubled shortens the latency";
  if (!a.upgrades.empty()) {
    a.value = a.upgrades.front().what;
    a.note = a.upgrades.front().gain[1] > 0.001
                 ? fmt::format("worth most: {} (2x: {} latency)", a.upgrades.front().what,
                               pct(-a.upgrades.front().gain[1]))
                 : "no single upgrade shortens the latency: compute binds";
  }
  a.trial = std::move(base);
  return a;
}

}  // namespace

std::string searched_field(Question q, const Scenario& s) {
  if (q == Question::kMaxBatch) return "batch";
  if (q == Question::kMaxContext) return s.request ? "prompt" : "context";
  return "";
}

double throughput_of(const Trial& t) {
  if (!t.ok) return 0;
  if (t.request) return t.request->throughput_tokens_per_s;
  const PhaseResult& p = t.main();
  const auto& g = t.scenario.workload.gen;
  const double s = static_cast<double>(p.makespan_ps) * 1e-12;
  if (s <= 0) return 0;
  if (g.phase == traces::Phase::kDecode) return static_cast<double>(g.batch * g.tokens) / s;
  return static_cast<double>(g.batch * g.seq) / s;
}

double tpot_ms_of(const Trial& t) {
  if (!t.ok) return 0;
  if (t.request) return t.request->tpot_ms;
  const auto& g = t.scenario.workload.gen;
  if (g.phase != traces::Phase::kDecode || g.tokens == 0) return 0;
  return static_cast<double>(t.main().makespan_ps) * 1e-9 / static_cast<double>(g.tokens);
}

void check_whatif_grid(const Scenario& base, const WhatIfOptions& o, const std::vector<Axis>& axes,
                       std::string_view vary) {
  const std::string_view question = kQuestionNames[static_cast<size_t>(o.question)];
  if (o.question == Question::kMinMemory && base.budget != 0) {
    throw InputError::at(SourcePos{base.name("budget")},
                         "min-memory searches the budget (its answer is the smallest that "
                         "keeps the latency within {} of the fastest): give no budget",
                         base.name("max_overhead"));
  }
  const std::string searched =
      o.question == Question::kMinMemory ? "budget" : searched_field(o.question, base);
  for (const Axis& a : axes) {
    if (!searched.empty() && a.path == searched) {
      throw InputError::at(SourcePos{std::string(vary)},
                           "{} searches {}: varying it gives the same answer at every point",
                           question, searched);
    }
  }
}

Answer whatif(Study& study, const Scenario& s, const WhatIfOptions& o) {
  check_policy(s.policy, s.name("policy"));
  if (!s.workload.file.empty() &&
      (o.question == Question::kMaxBatch || o.question == Question::kMaxContext)) {
    throw InputError::at(SourcePos{s.name("question")},
                         "{} regenerates the workload: give {} or {}, not {}",
                         kQuestionNames[static_cast<size_t>(o.question)], s.name("model"),
                         s.name("hf_config"), s.name("workload"));
  }
  Answer a;
  switch (o.question) {
    case Question::kMinMemory:
      a = min_memory(study, s, o);
      break;
    case Question::kMaxBatch:
    case Question::kMaxContext:
      a = max_value(study, s, o);
      break;
    case Question::kUpgrade:
      a = upgrade(study, s, o);
      break;
  }
  // A context past the model's declared maximum: the one answered (max-context), else
  // the one asked about.
  const bool searched = o.question == Question::kMaxContext;
  if (!searched || (a.found && a.trial)) {
    for (const std::string& w : model_warnings(searched ? a.trial->scenario : s)) {
      a.note = a.note.empty() ? w : a.note + "; " + w;
    }
  }
  if (const std::string cut = context_note(s); !cut.empty() && !searched) {
    a.note = a.note.empty() ? cut : a.note + "; " + cut;
  }
  return a;
}

std::string answer_plan_json(const Answer& a, const std::string& path, std::string_view source) {
  if (!a.trial || !a.trial->main().outcome.ok) {
    throw InputError::at(SourcePos{std::string(source)},
                         "no plan to write: the question has no answer");
  }
  return write_plan(plan_for_file(*a.trial, a.trial->main(), path), a.trial->main().workload.get());
}

}  // namespace tierflow::study
