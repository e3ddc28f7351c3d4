#include "tools/study/serve_find.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "core/diagnostics.h"
#include "core/units.h"
#include "hw_models/loader.h"
#include "tools/study/target.h"

namespace tierflow::study {
namespace {

/// The rate search: how far it doubles or halves from the trace's rate, and when it stops
/// narrowing (the answer within 1%).
constexpr double kRateLimit = 1024;
constexpr double kRatePrecision = 1.01;
/// The capacity search: bisection steps on [0, the instance's capacity].
constexpr int kCapacitySteps = 12;

constexpr std::string_view kLatencies[] = {"queue", "ttft", "tpot", "e2e"};

std::string_view question_name(ServeQuestion q) {
  switch (q) {
    case ServeQuestion::kMaxRate:
      return "max-rate";
    case ServeQuestion::kMinReplicas:
      return "min-replicas";
    case ServeQuestion::kMinDevices:
      return "min-devices";
    case ServeQuestion::kMinCapacity:
      return "min-capacity";
    case ServeQuestion::kSplit:
      return "split";
    case ServeQuestion::kUpgrade:
      return "upgrade";
  }
  return "";
}

bool passes(const ServeTarget& t, double v) {
  if (std::isnan(v)) return false;
  return t.is_time() ? v <= t.bound : v >= t.bound;
}

std::string value_text(const ServeTarget& t, double v) {
  if (std::isnan(v)) return "-";
  return t.is_time() ? fmt::format("{:.4g}s", v) : fmt::format("{:.2f}%", 100 * v);
}

std::string knob_text(const ServeAnswer& a, double knob) {
  switch (a.question) {
    case ServeQuestion::kMaxRate:
      return fmt::format("x{:.4g}", knob);
    case ServeQuestion::kMinReplicas:
    case ServeQuestion::kMinDevices:
      return fmt::format("{}", static_cast<int64_t>(knob));
    case ServeQuestion::kMinCapacity:
      return to_string_approx(Bytes{static_cast<uint64_t>(knob)});
    case ServeQuestion::kSplit: {
      // Prefill:decode, or every replica doing both.
      const auto p = static_cast<int>(knob);
      return p == 0 ? fmt::format("{} colocated", a.split_replicas)
                    : fmt::format("{}:{}", p, a.split_replicas - p);
    }
    case ServeQuestion::kUpgrade:
      return "";
  }
  return "";
}

/// Devices of the class a setup serves on (0: the topology has no such class, which the
/// engine refuses).
/// An upgrade counts when its metric at 2x is at least this much better than the base's.
constexpr double kUpgradeGain = 0.005;
constexpr std::array<double, 2> kUpgradeFactors = {1.25, 2.0};

/// How much better `v` is than `base` for the target: a shorter latency, a larger share.
double gain_of(const ServeTarget& t, double base, double v) {
  if (std::isnan(v) || std::isnan(base)) return 0;
  if (t.is_time()) return base > 0 ? (base - v) / base : 0;
  return base > 0 ? (v - base) / base : v - base;
}

/// One upgrade to try: it changes a copy of the settings' overrides and the engine.
struct Candidate {
  std::string what;
  std::string path;  ///< a topology path scaled, "replicas" or "prefill_replicas"
  double now = 0;
  bool bandwidth = true;
  int kv_tier = -1;  ///< a KV tier whose bytes (when given) scale with its tier's capacity
};

/// Runs each candidate at 1.25x and 2x of `setup` (the base), ranks them; see serve_find.h.
ServeAnswer upgrade_serve(const ServeSettings& base, ServeSetup setup, const ServeAsk& ask) {
  ServeAnswer a;
  a.question = ServeQuestion::kUpgrade;
  a.target = ask.target;
  const std::string timeline = std::exchange(setup.timeline, std::string());
  const bool series = std::exchange(setup.engine.record_series, false);
  const ServeStudy first = run_serve(setup);  // an error of the base is the user's to see
  a.base_value = serve_metric(first, a.target);
  a.base_pass = passes(a.target, a.base_value);
  const hw::Topology& topo = setup.topology;
  std::vector<Candidate> candidates;
  const auto add = [&](Candidate c) {
    for (const Candidate& x : candidates) {
      if (x.path == c.path) return;
    }
    candidates.push_back(std::move(c));
  };
  for (const serve::ResourceRecord& r : first.result.resources) {
    if (r.bytes <= 0) continue;
    if (r.kind == hw::ResourceKind::kLink) {
      const hw::Link& l = topo.links[r.index];
      const bool reverse = !r.forward && l.bandwidth_reverse.bytes_per_s > 0;
      add({fmt::format("link '{}' bandwidth{}", l.id, reverse ? " (reverse)" : ""),
           fmt::format("links.{}.{}", l.id, reverse ? "bandwidth_reverse" : "bandwidth"),
           reverse ? l.bandwidth_reverse.bytes_per_s : l.bandwidth.bytes_per_s, true});
    } else {
      const hw::Tier& t = topo.tiers[r.index];
      const bool read = r.kind == hw::ResourceKind::kTierRead;
      add({fmt::format("tier '{}' {} bandwidth", t.id, read ? "read" : "write"),
           fmt::format("tiers.{}.{}_bandwidth", t.id, read ? "read" : "write"),
           read ? t.read_bandwidth.bytes_per_s : t.write_bandwidth.bytes_per_s, true});
    }
  }
  const auto device = std::find_if(topo.devices.begin(), topo.devices.end(), [&](const hw::Device& d) {
    return setup.engine.device.empty() || d.id == setup.engine.device;
  });
  if (device != topo.devices.end()) {
    const hw::Tier& t = topo.tiers[*topo.tier_index(device->local_tier)];
    add({fmt::format("tier '{}' capacity (the device memory)", t.id),
         fmt::format("tiers.{}.capacity", t.id), static_cast<double>(t.capacity.value), false});
  }
  for (size_t k = 0; k < setup.engine.kv_tiers.size(); ++k) {
    const auto ti = topo.tier_index(setup.engine.kv_tiers[k].tier);
    if (!ti) continue;
    const hw::Tier& t = topo.tiers[*ti];
    add({fmt::format("tier '{}' capacity (a KV tier)", t.id), fmt::format("tiers.{}.capacity", t.id),
         static_cast<double>(t.capacity.value), false, static_cast<int>(k)});
  }
  if (device != topo.devices.end()) {
    // Disaggregated: one decode replica more, or one prefill replica more.
    const serve::ServeOptions& e = setup.engine;
    const bool pd = e.prefill_replicas > 0;
    const int64_t tp = int64_t{setup.gen.tp} * std::max(1, e.pp);
    const int64_t ptp = e.prefill_tp > 0 ? int64_t{e.prefill_tp} * std::max(1, e.pp) : tp;
    const int64_t used = e.replicas * tp + e.prefill_replicas * ptp;
    if (used + tp <= device->count) {
      add({pd ? "one decode replica more" : "one replica more", "replicas",
           static_cast<double>(e.replicas), false});
    }
    if (pd && used + ptp <= device->count) {
      add({"one prefill replica more", "prefill_replicas", static_cast<double>(e.prefill_replicas),
           false});
    }
  }
  // The base with one candidate applied at `f`, and the change as text; nothing when the
  // topology refuses the override (then it is not an upgrade). The loop and the answer's
  // run again below both go through here, so they cannot differ.
  const auto apply = [&](const Candidate& c, double f, std::string& set) -> std::optional<ServeSetup> {
    ServeSetup p = setup;
    if (c.path == "replicas" || c.path == "prefill_replicas") {
      int& n = c.path == "replicas" ? p.engine.replicas : p.engine.prefill_replicas;
      n += 1;
      set = fmt::format("{}={}", c.path, n);
      return p;
    }
    set = fmt::format("{}={}", c.path,
                      c.bandwidth ? to_string(Bandwidth{c.now * f})
                                  : to_string(Bytes{static_cast<uint64_t>(c.now * f)}));
    std::vector<std::string> sets = base.sets;
    sets.push_back(set);
    if (c.kv_tier >= 0 && p.engine.kv_tiers[static_cast<size_t>(c.kv_tier)].bytes > 0) {
      // A KV tier of a given size grows with its tier.
      serve::KvTier& k = p.engine.kv_tiers[static_cast<size_t>(c.kv_tier)];
      k.bytes = static_cast<uint64_t>(static_cast<double>(k.bytes) * f);
      set += fmt::format(" and KV tier '{}' {}", k.tier, to_string(Bytes{k.bytes}));
    }
    try {
      p.topology = load_serve_topology(base, sets);
    } catch (const InputError&) {
      return std::nullopt;
    }
    return p;
  };
  // Ranked by the gain at 2x, then at 1.25x; ties keep the order tried.
  const auto better = [](const ServeUpgrade& x, const ServeUpgrade& y) {
    if (x.gain[1] != y.gain[1]) return x.gain[1] > y.gain[1];
    return x.gain[0] > y.gain[0];
  };
  std::optional<ServeStudy> best;  // the run at 2x of the first upgrade ranked highest
  size_t best_at = 0;
  std::vector<size_t> order;  // upgrades[i] is candidates[order[i]]
  for (size_t ci = 0; ci < candidates.size(); ++ci) {
    const Candidate& c = candidates[ci];
    ServeUpgrade u;
    u.what = c.what;
    std::optional<ServeStudy> at2;
    for (size_t i = 0; i < kUpgradeFactors.size(); ++i) {
      u.value[i] = std::nan("");
      if (c.path.ends_with("replicas") && i == 0) continue;  // whole replicas only
      std::string set;
      const std::optional<ServeSetup> p = apply(c, kUpgradeFactors[i], set);
      if (!p) continue;
      if (i == 1) u.set = set;
      std::optional<ServeStudy> x;
      try {
        x = run_serve(*p);
      } catch (const InputError&) {
        continue;
      }
      u.value[i] = serve_metric(*x, a.target);
      u.pass[i] = passes(a.target, u.value[i]);
      u.gain[i] = gain_of(a.target, a.base_value, u.value[i]);
      if (i == 1) at2 = std::move(x);
    }
    if (at2 && (!best || better(u, a.upgrades[best_at]))) {
      best = std::move(at2);
      best_at = a.upgrades.size();
    }
    a.upgrades.push_back(std::move(u));
    order.push_back(ci);
  }
  // The winner's index before the sort (a stable sort keeps the first of equals first, as
  // the strict `better` above does).
  std::vector<size_t> rank(a.upgrades.size());
  for (size_t i = 0; i < rank.size(); ++i) rank[i] = i;
  std::stable_sort(rank.begin(), rank.end(),
                   [&](size_t x, size_t y) { return better(a.upgrades[x], a.upgrades[y]); });
  std::vector<ServeUpgrade> sorted;
  for (size_t i : rank) sorted.push_back(std::move(a.upgrades[i]));
  a.upgrades = std::move(sorted);
  a.found = !a.upgrades.empty() && a.upgrades.front().gain[1] >= kUpgradeGain;
  if (a.found) {
    if (rank.front() != best_at) {
      throw std::logic_error(fmt::format("upgrade: the answer's run is upgrade {}, the top is {}", best_at,
                                      rank.front()));
    }
    if (!timeline.empty() || series) {
      // The answer's run again (the engine is deterministic), with its timeline and series.
      std::string set;
      std::optional<ServeSetup> p = apply(candidates[order[rank.front()]], kUpgradeFactors[1], set);
      if (!p) throw std::logic_error("upgrade: the answer's topology was refused on its run again");
      p->timeline = timeline;
      p->engine.record_series = series;
      best = run_serve(*p);
    }
  }
  if (a.found && best) a.at_answer = std::move(best);
  return a;
}

}  // namespace

std::string serve_question_list() {
  const auto n = kServeQuestionNames.size();
  return fmt::format("{} or {}",
                     fmt::join(kServeQuestionNames.begin(), kServeQuestionNames.end() - 1, ", "),
                     kServeQuestionNames[n - 1]);
}

std::pair<ServeQuestion, std::string> parse_serve_question(const std::string& text,
                                                           std::string_view source) {
  if (text.starts_with("min-capacity:") && text.size() > 13) {
    return {ServeQuestion::kMinCapacity, text.substr(13)};
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < kServeQuestionNames.size(); ++i) {
    const auto q = static_cast<ServeQuestion>(i);
    if (q != ServeQuestion::kMinCapacity && text == kServeQuestionNames[i]) return {q, ""};
    names.emplace_back(q == ServeQuestion::kMinCapacity ? "min-capacity:ddr"
                                                        : kServeQuestionNames[i]);
  }
  throw InputError::at(SourcePos{std::string(source)}, "unknown question '{}': {}{}", text,
                       serve_question_list(), did_you_mean(text, names));
}

ServeTarget parse_serve_target(const std::string& text, std::string_view source) {
  const auto refuse = [&](const std::string& why) {
    return InputError::at(SourcePos{std::string(source)}, "'{}': {}", text, why);
  };
  const size_t eq = text.find('=');
  if (eq == std::string::npos) throw refuse("expected METRIC=BOUND, e.g. p99-ttft=2s or hit=30%");
  ServeTarget t;
  t.metric = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  if (t.metric == "goodput" || t.metric == "hit") {
    t.bound = parse_fraction(value, source);
    if (!(t.bound > 0 && t.bound <= 1)) throw refuse("a share in (0, 100%]");
    return t;
  }
  std::vector<std::string> names{"goodput", "hit"};
  bool known = false;
  for (const std::string_view l : kLatencies) {
    for (const std::string_view p : {"p50", "p90", "p99", "mean"}) {
      names.push_back(fmt::format("{}-{}", p, l));
      known = known || names.back() == t.metric;
    }
  }
  if (!known) {
    throw refuse(fmt::format("unknown metric '{}'{}", t.metric, did_you_mean(t.metric, names)));
  }
  // One bound a search: "p99-ttft=1s,p90-tpot=1ms" is two.
  if (value.find(',') != std::string::npos && value.find('=') != std::string::npos) {
    throw refuse(
        "one bound at a time: a search meets one target (give the others as --slo, "
        "which goodput counts)");
  }
  const auto d = parse_duration(value);
  if (!d.ok() || d.value.ps <= 0) throw refuse("a latency bound is a duration such as 2s");
  t.bound = static_cast<double>(d.value.ps) / static_cast<double>(kPsPerS);
  return t;
}

std::optional<ServeAsk> parse_serve_ask(const std::string& find, const std::string& target,
                                        SettingNames names) {
  const std::string find_flag = serve_flag("find", names), target_flag = serve_flag("target", names);
  if (find.empty()) {
    if (target.empty()) return std::nullopt;
    throw InputError::at(SourcePos{target_flag}, "needs {} QUESTION ({})", find_flag,
                         serve_question_list());
  }
  ServeAsk ask;
  std::tie(ask.question, ask.tier) = parse_serve_question(find, find_flag);
  if (target.empty()) {
    throw InputError::at(SourcePos{find_flag}, "needs {} METRIC=BOUND", target_flag);
  }
  ask.target = parse_serve_target(target, target_flag);
  return ask;
}

double serve_metric(const ServeStudy& x, const ServeTarget& t) {
  if (t.metric == "goodput") return serve_goodput_share(x);
  if (t.metric == "hit") return serve_hit_ratio(x);
  const size_t dash = t.metric.find('-');
  const std::string p = t.metric.substr(0, dash);
  const double pct = p == "mean" ? 0 : std::stod(p.substr(1));
  return serve_latency(x, t.metric.substr(dash + 1), pct);
}

ServeAnswer find_serve(const ServeSettings& base, ServeSetup setup, const ServeAsk& ask,
                       const std::function<void(const ServeProbe&)>& progress) {
  const ServeQuestion q = ask.question;
  const std::string& tier = ask.tier;
  const ServeTarget& target = ask.target;
  const auto name = [&base](std::string field) { return serve_flag(std::move(field), base.names); };
  ServeAnswer a;
  a.question = q;
  a.tier = tier;
  a.target = target;
  if (target.metric == "goodput" && base.slo.empty()) {
    throw InputError::at(SourcePos{name("target")}, "goodput is the share meeting {}: give {}",
                         name("slo"), name("slo"));
  }
  if (base.cache_only && target.metric != "hit") {
    throw InputError::at(SourcePos{name("target")},
                         "{} runs no time, so it has no {}: with {}, search for hit=SHARE",
                         name("cache_only"), target.metric, name("cache_only"));
  }
  // TPOT is the time per output token after the first: a trace of one-token outputs has
  // none, and every probe would fail on a metric that does not exist.
  if (target.metric.ends_with("-tpot") && setup.trace != nullptr &&
      std::none_of(setup.trace->requests.begin(), setup.trace->requests.end(),
                   [](const traces::Request& r) { return r.output_tokens > 1; })) {
    throw InputError::at(SourcePos{name("target")},
                         "{}: no request of {} generates more than one token, so none has a "
                         "TPOT (the time per output token after the first)",
                         target.metric, setup.trace_name);
  }
  if (q == ServeQuestion::kUpgrade) return upgrade_serve(base, std::move(setup), ask);
  if (q == ServeQuestion::kSplit) {
    a.split_replicas = setup.engine.replicas + setup.engine.prefill_replicas;
    if (a.split_replicas < 2) {
      throw InputError::at(SourcePos{name("find")},
                           "split divides the replicas between prefill and decode: give at least "
                           "2 ({} and {} together; now {})",
                           name("replicas"), name("prefill_replicas"), a.split_replicas);
    }
    if (base.cache_only) {
      throw InputError::at(SourcePos{name("find")},
                           "split compares prefill and decode, which {} does not run",
                           name("cache_only"));
    }
  }
  if (q == ServeQuestion::kMinDevices && setup.engine.prefill_replicas > 0) {
    throw InputError::at(SourcePos{name("find")},
                         "min-devices counts replicas that prefill and decode; with {} ask "
                         "split (how to divide them) or min-replicas (decode replicas)",
                         name("prefill_replicas"));
  }
  // The settings were checked and the inputs read once; each probe changes one knob.
  std::vector<serve::KvTier>& tiers = setup.engine.kv_tiers;
  size_t tier_index = tiers.size();
  if (q == ServeQuestion::kMinCapacity) {
    for (size_t i = 0; i < tiers.size(); ++i) tier_index = tiers[i].tier == tier ? i : tier_index;
    if (tier_index == tiers.size()) {
      const hw::Topology& topo = setup.topology;
      std::vector<std::string> ids;
      for (const hw::Tier& x : topo.tiers) ids.push_back(x.id);
      if (!topo.tier_index(tier)) {
        throw InputError::at(SourcePos{name("find")}, "min-capacity:{}: '{}' has no tier '{}'{}",
                             tier, topo.name, tier, did_you_mean(tier, ids));
      }
      const std::string& device_tier =
          topo.devices[topo.device_index(setup.engine.device).value_or(0)].local_tier;
      if (tier == device_tier) {
        throw InputError::at(SourcePos{name("find")},
                             "min-capacity:{}: '{}' is the devices' own tier, which holds the "
                             "weights and the KV pool; the search sizes a KV tier below it "
                             "({}; give it in {})",
                             tier, tier, name("kv_tiers"), name("kv_tiers"));
      }
      const std::string flag = name("kv_tiers");
      throw InputError::at(SourcePos{name("find")}, "tier '{}' is not among {} ('{}'): add it ({})",
                           tier, flag, base.kv_tiers,
                           flag.starts_with("--") ? fmt::format("{} {}:1TB", flag, tier)
                                                  : fmt::format("{}='{}:1TB'", flag, tier));
    }
  }
  // The probes write no timeline and record no series: the answer's run alone does, once
  // the search is over.
  const std::string timeline = std::exchange(setup.timeline, std::string());
  const bool series = std::exchange(setup.engine.record_series, false);
  const int split_prefill_tp = setup.engine.prefill_tp;
  const serve::RouterKind split_router = setup.engine.decode_router;
  const auto set_knob = [&](double knob) {
    if (q == ServeQuestion::kMaxRate) setup.rate_scale = base.trace_options.rate_scale * knob;
    if (q == ServeQuestion::kMinReplicas || q == ServeQuestion::kMinDevices) {
      setup.engine.replicas = static_cast<int>(knob);
    }
    // (A capacity of 0 reads as the tier's fraction; it comes only of a tier with nothing
    // usable, where that is 0 bytes too.)
    if (q == ServeQuestion::kMinCapacity) tiers[tier_index].bytes = static_cast<uint64_t>(knob);
    if (q == ServeQuestion::kSplit) {
      setup.engine.prefill_replicas = static_cast<int>(knob);
      setup.engine.replicas = a.split_replicas - static_cast<int>(knob);
      // Colocated, what only disaggregated serving reads is not set (the engine refuses it).
      setup.engine.prefill_tp = knob == 0 ? 0 : split_prefill_tp;
      setup.engine.decode_router = knob == 0 ? serve::RouterKind::kLeastLoaded : split_router;
    }
  };
  // One run at `knob`; a setup the engine refuses (too many replicas, no room for a block)
  // fails the probe when it is the knob's doing.
  // The first probe runs the base setup's scale: an error there is the user's to see.
  bool first = true;
  std::string why;  // the last refused run's error
  const auto run = [&](double knob) -> std::optional<ServeStudy> {
    set_knob(knob);
    // A split's divisions take different devices (prefill_tp), and min-devices tries
    // every tensor parallelism: one the topology or the model cannot take fails alone.
    const bool rethrow = (first && q != ServeQuestion::kSplit && q != ServeQuestion::kMinDevices) ||
                         q == ServeQuestion::kMaxRate;
    first = false;
    why.clear();
    try {
      return run_serve(setup);
    } catch (const InputError& e) {
      if (rethrow) throw;
      why = e.message();
      return std::nullopt;
    }
  };
  const auto probe = [&](double knob) {
    std::optional<ServeStudy> x = run(knob);
    ServeProbe p{knob, x ? serve_metric(*x, target) : std::nan(""), false};
    p.pass = x && passes(target, p.value);
    p.why = why;
    if (q == ServeQuestion::kMinDevices) {
      p.tp = setup.gen.tp;
      p.pp = setup.engine.pp;
    }
    a.probes.push_back(p);
    if (progress) progress(p);
    return std::pair{p.pass, std::move(x)};
  };
  std::optional<ServeStudy> best;
  const auto keep = [&](double knob, std::optional<ServeStudy>& x) {
    a.found = true;
    a.knob = knob;
    best = std::move(x);
  };
  // The fewest replicas in [1, cap] that pass: doubling (the cap last), then bisection
  // between the last count that fails and the first that passes. 0 when none passes or a
  // count is refused.
  const auto fewest = [&](int cap) -> std::pair<int, std::optional<ServeStudy>> {
    int fail = 0, pass = 0;
    std::optional<ServeStudy> at;
    for (int r = 1;; r = std::min(2 * r, cap)) {
      auto [ok, x] = probe(r);
      if (!x) break;
      if (ok) {
        pass = r;
        at = std::move(x);
        break;
      }
      fail = r;
      if (r >= cap) break;
    }
    while (pass > 0 && pass - fail > 1) {
      const int mid = fail + (pass - fail) / 2;
      auto [ok, x] = probe(mid);
      if (ok) {
        pass = mid;
        at = std::move(x);
      } else {
        fail = mid;
      }
    }
    return {pass, std::move(at)};
  };

  if (q == ServeQuestion::kMaxRate) {
    // The rate scales the arrival times: with every request arriving at once there is none.
    const auto& rq = setup.trace->requests;
    if (rq.front().arrival_ps == rq.back().arrival_ps) {
      throw InputError::at(SourcePos{name("find")},
                           "max-rate scales the arrival times, and all {} requests of {} arrive "
                           "at once: there is no rate to scale (ask min-replicas, or give "
                           "arrivals that spread over time)",
                           rq.size(), setup.trace_name);
    }
    // Geometric: double while it passes, or halve until it does; then narrow to 1%.
    double lo = 0, hi = 0;
    auto [ok, x] = probe(1);
    if (ok) {
      lo = 1;
      keep(1, x);
      for (double m = 2; m <= kRateLimit; m *= 2) {
        auto [ok2, x2] = probe(m);
        if (!ok2) {
          hi = m;
          break;
        }
        lo = m;
        keep(m, x2);
      }
      a.at_limit = hi == 0;
    } else {
      hi = 1;
      for (double m = 0.5; m >= 1 / kRateLimit; m /= 2) {
        auto [ok2, x2] = probe(m);
        if (ok2) {
          lo = m;
          keep(m, x2);
          break;
        }
        hi = m;
      }
    }
    while (lo > 0 && hi > 0 && hi / lo > kRatePrecision) {
      const double mid = std::sqrt(lo * hi);
      auto [ok2, x2] = probe(mid);
      if (ok2) {
        lo = mid;
        keep(mid, x2);
      } else {
        hi = mid;
      }
    }
  } else if (q == ServeQuestion::kSplit) {
    // Every division, colocated first; the best value among those that pass, ties to the
    // fewer prefill replicas.
    const int base_prefill = setup.engine.prefill_replicas;
    double best_value = 0;
    bool ran = false;
    for (int p = 0; p < a.split_replicas; ++p) {
      auto [ok, x] = probe(p);
      ran = ran || x.has_value();
      const double v = a.probes.back().value;
      if (ok && (!a.found || gain_of(target, best_value, v) > 0)) {
        best_value = v;
        keep(p, x);
      }
    }
    // The base's own division is among them: when none could run, its error is the user's.
    if (!ran) {
      set_knob(base_prefill);
      (void)run_serve(setup);
    }
  } else if (q == ServeQuestion::kMinReplicas) {
    // Up to as many as the devices hold beside the prefill replicas (the most the devices
    // allow is tried, not only powers of two).
    const serve::ServeOptions& e = setup.engine;
    const int64_t tp = int64_t{setup.gen.tp} * std::max(1, e.pp);
    const int64_t ptp = e.prefill_tp > 0 ? int64_t{e.prefill_tp} * std::max(1, e.pp) : tp;
    const int64_t cap =
        (class_devices(setup) - e.prefill_replicas * ptp) / std::max<int64_t>(1, tp);
    auto [pass, x] = fewest(static_cast<int>(std::max<int64_t>(1, cap)));
    if (pass > 0) keep(pass, x);
  } else if (q == ServeQuestion::kMinDevices) {
    // Each tensor parallelism from the given one (1 by default), doubling, up to as many
    // devices as the best so far (as many: a better metric wins the tie); each replica of
    // the setup's pipeline stages. Where the setup had to choose stages (no TP alone leaves
    // the model room) and none were given, each TP from 1 with the least stages that leave
    // room at it (Llama-3.1-405B on H100s: TP 4 x PP 3 takes 12 devices, TP 8 x PP 2 16).
    const int count = class_devices(setup);
    const int given_tp = setup.gen.tp, given_pp = setup.engine.pp;
    const bool stage_search = base.engine.pp == 0 && given_pp > 1;
    const int base_tp = stage_search ? 1 : given_tp;
    const auto least_stages = [&](int tp) {
      serve::ServeOptions one = setup.engine;
      one.replicas = 1;
      traces::GenOptions g = setup.gen;
      g.tp = tp;
      for (int pp = 1; int64_t{pp} * tp <= count && pp <= setup.arch.layers; ++pp) {
        one.pp = pp;
        try {
          (void)serve::check_setup(*setup.trace, setup.arch, g, setup.topology, one);
          return pp;
        } catch (const serve::DoesNotFit&) {
          continue;
        } catch (const InputError&) {
          return 0;  // the heads do not divide, or no route joins the stages
        }
      }
      return 0;
    };
    double best_value = 0;
    for (int tp = base_tp; tp <= std::max(count, base_tp); tp *= 2) {
      const int stages = stage_search ? least_stages(tp) : given_pp;
      if (stages == 0) continue;
      const int cap = (a.found ? std::min(count, static_cast<int>(a.knob)) : count) / (tp * stages);
      if (cap < 1) {
        if (stage_search) continue;  // a wider TP may take fewer stages
        break;
      }
      setup.gen.tp = tp;
      setup.engine.pp = stages;
      auto [pass, x] = fewest(cap);
      if (pass == 0) continue;
      const double v = serve_metric(*x, target);
      if (!a.found || pass * tp * stages < a.knob || gain_of(target, best_value, v) > 0) {
        best_value = v;
        a.tp = tp;
        a.pp = stages;
        a.replicas = pass;
        keep(pass * tp * stages, x);
      }
    }
    // When no setup ran at all, the base's error is the user's.
    if (std::all_of(a.probes.begin(), a.probes.end(),
                    [](const ServeProbe& p) { return !p.why.empty(); })) {
      setup.gen.tp = given_tp;
      setup.engine.pp = given_pp;
      setup.engine.replicas = base.engine.replicas;
      (void)run_serve(setup);
    }
  } else {
    // The instance's whole capacity first; then bisection below it.
    const hw::Topology& topo = setup.topology;
    const auto ti = topo.tier_index(tier);
    if (!ti) {
      throw InputError::at(SourcePos{name("find")}, "no tier '{}' in '{}'", tier, topo.name);
    }
    double hi = static_cast<double>(topo.usable(*ti));
    auto [ok, x] = probe(hi);
    if (ok) {
      keep(hi, x);
      double lo = 0;
      for (int i = 0; i < kCapacitySteps; ++i) {
        const double mid = std::floor((lo + hi) / 2);
        auto [ok2, x2] = probe(mid);
        if (ok2) {
          hi = mid;
          keep(mid, x2);
        } else {
          lo = mid;
        }
      }
    }
  }
  if (best && (!timeline.empty() || series)) {
    // The same run again (the engine is deterministic), with its timeline and series.
    set_knob(q == ServeQuestion::kMinDevices ? a.replicas : a.knob);
    if (q == ServeQuestion::kMinDevices) {
      setup.gen.tp = a.tp;
      setup.engine.pp = a.pp;
    }
    setup.timeline = timeline;
    setup.engine.record_series = series;
    best = run_serve(setup);
  }
  if (q == ServeQuestion::kMinDevices && a.found) {
    // Replicas fill the nodes in turn; a replica lies within one (its devices must reach
    // one another), but for its pipeline stages, which may take nodes of their own.
    a.nodes = setup.nodes;
    const int per_node = class_devices(setup) / setup.nodes;
    a.nodes_used = (static_cast<int>(a.knob) + per_node - 1) / per_node;
  }
  if (best) {
    const auto& rq = best->trace.requests;
    const double span = static_cast<double>(rq.back().arrival_ps) / static_cast<double>(kPsPerS);
    if (q == ServeQuestion::kMaxRate && span > 0) {
      a.requests_per_s = static_cast<double>(rq.size() - 1) / span;
    }
    a.at_answer = std::move(best);
  }
  return a;
}

namespace {

/// The upgrade question's answer as text.
std::string upgrade_text(const ServeAnswer& a) {
  const ServeTarget& t = a.target;
  std::string out = fmt::format("question: upgrade for {} {} {}\n\nbase: {} {} ({})\n\n", t.metric,
                                t.is_time() ? "<=" : ">=", value_text(t, t.bound), t.metric,
                                value_text(t, a.base_value), a.base_pass ? "pass" : "fail");
  size_t width = 7;
  for (const ServeUpgrade& u : a.upgrades) width = std::max(width, u.what.size());
  out += fmt::format("{:<{}}  {:>10}  {:>10}  {:>10}  {}\n", "upgrade", width, "at 1.25x", "at 2x",
                     "gain at 2x", "target at 2x");
  for (const ServeUpgrade& u : a.upgrades) {
    out += fmt::format("{:<{}}  {:>10}  {:>10}  {:>9.1f}%  {}\n", u.what, width,
                       value_text(t, u.value[0]), value_text(t, u.value[1]), 100 * u.gain[1],
                       std::isnan(u.value[1]) ? "-" : u.pass[1] ? "pass" : "fail");
  }
  if (!a.found) {
    return out + fmt::format("\nanswer: none: no single upgrade improves {} by {:.1f}% or more\n",
                             t.metric, 100 * kUpgradeGain);
  }
  const ServeUpgrade& top = a.upgrades.front();
  out += fmt::format("\nanswer: {} ({}): {} {}, {:.1f}% better; the target {}\n", top.what, top.set,
                     t.metric, value_text(t, top.value[1]), 100 * top.gain[1],
                     top.pass[1] ? "met" : "still missed");
  return out + "\nthe run with it:\n" + serve_text(*a.at_answer);
}

}  // namespace

std::string serve_answer_text(const ServeAnswer& a) {
  if (a.question == ServeQuestion::kUpgrade) return upgrade_text(a);
  const std::string what = a.question == ServeQuestion::kMinCapacity
                               ? fmt::format("min-capacity of '{}'", a.tier)
                               : std::string(question_name(a.question));
  std::string out =
      fmt::format("question: {} with {} {} {}\n\nprobes:\n", what, a.target.metric,
                  a.target.is_time() ? "<=" : ">=", value_text(a.target, a.target.bound));
  std::vector<std::string> knobs;
  size_t width = 12;  // wider for pipeline stages' "TP 4 x PP 3 x 2"
  for (const ServeProbe& p : a.probes) {
    knobs.push_back(a.question == ServeQuestion::kMinDevices
                        ? fmt::format("TP {}{} x {}", p.tp,
                                      p.pp > 1 ? fmt::format(" x PP {}", p.pp) : "",
                                      static_cast<int64_t>(p.knob))
                        : knob_text(a, p.knob));
    width = std::max(width, knobs.back().size());
  }
  // Capacities a bisection tells apart by less than three digits show: exact, in bytes.
  for (size_t i = 0; i < knobs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (knobs[i] != knobs[j] || a.probes[i].knob == a.probes[j].knob) continue;
      if (a.question != ServeQuestion::kMinCapacity) continue;
      // In GiB, with the fewest decimals that tell every two apart.
      for (int digits = 1; digits <= 9; ++digits) {
        for (size_t k = 0; k < knobs.size(); ++k) {
          knobs[k] =
              fmt::format("{:.{}f}GiB", a.probes[k].knob / double(uint64_t{1} << 30), digits);
        }
        bool apart = true;
        for (size_t x = 0; x < knobs.size() && apart; ++x) {
          for (size_t y = 0; y < x && apart; ++y) {
            apart = knobs[x] != knobs[y] || a.probes[x].knob == a.probes[y].knob;
          }
        }
        if (apart) break;
      }
      for (const std::string& k : knobs) width = std::max(width, k.size());
      i = knobs.size();
      break;
    }
  }
  for (size_t i = 0; i < a.probes.size(); ++i) {
    const ServeProbe& p = a.probes[i];
    out += fmt::format("  {:>{}}  {} {:>10}  {}{}\n", knobs[i], width, a.target.metric,
                       value_text(a.target, p.value), p.pass ? "pass" : "fail",
                       p.why.empty() ? "" : fmt::format("  ({})", p.why));
  }
  if (!a.found) {
    return out + fmt::format("\nanswer: none within the search ({})\n",
                             a.question == ServeQuestion::kMaxRate
                                 ? "1/1024 of the trace's rate misses it"
                             : a.question == ServeQuestion::kMinReplicas
                                 ? "every replica count the devices allow misses it"
                             : a.question == ServeQuestion::kMinDevices
                                 ? "every tensor parallelism and replica count the devices "
                                   "allow misses it"
                             : a.question == ServeQuestion::kSplit
                                 ? "every division of the replicas misses it"
                                 : "the tier's whole capacity misses it");
  }
  switch (a.question) {
    case ServeQuestion::kMaxRate:
      if (a.at_limit) {
        out += fmt::format(
            "\nanswer: at least {} the trace's rate ({:.4g} requests/s): every probe passed, up "
            "to the search's limit of {:g}x; the rate where the target starts to miss lies above\n",
            knob_text(a, a.knob), a.requests_per_s, kRateLimit);
      } else {
        out += fmt::format("\nanswer: {} the trace's rate ({:.4g} requests/s), within 1%\n",
                           knob_text(a, a.knob), a.requests_per_s);
      }
      break;
    case ServeQuestion::kMinReplicas: {
      // Disaggregated, the search counts decode replicas beside the prefill ones.
      const int prefill = a.at_answer ? a.at_answer->result.prefill_replicas : 0;
      out += prefill == 0 ? fmt::format("\nanswer: {} replicas\n", knob_text(a, a.knob))
                          : fmt::format("\nanswer: {} decode replicas (beside {} prefill)\n",
                                        knob_text(a, a.knob), prefill);
      break;
    }
    case ServeQuestion::kMinDevices:
      out += fmt::format(
          "\nanswer: {} devices: {} replica{} of TP {}{}{} ({} {})\n", knob_text(a, a.knob),
          a.replicas, a.replicas == 1 ? "" : "s", a.tp,
          a.pp > 1 ? fmt::format(" x PP {}", a.pp) : "",
          a.nodes > 1 ? fmt::format(" on {} of the {} nodes", a.nodes_used, a.nodes) : "",
          a.target.metric, value_text(a.target, serve_metric(*a.at_answer, a.target)));
      break;
    case ServeQuestion::kMinCapacity:
      out += fmt::format("\nanswer: {} of '{}' per instance\n", knob_text(a, a.knob), a.tier);
      break;
    case ServeQuestion::kSplit: {
      const auto p = static_cast<int>(a.knob);
      const ServeProbe& at = a.probes[static_cast<size_t>(p)];
      out += p == 0 ? fmt::format("\nanswer: colocated, all {} replicas doing both ({} {})\n",
                                  a.split_replicas, a.target.metric, value_text(a.target, at.value))
                    : fmt::format("\nanswer: {} prefill and {} decode replicas ({} {})\n", p,
                                  a.split_replicas - p, a.target.metric,
                                  value_text(a.target, at.value));
      break;
    }
    case ServeQuestion::kUpgrade:
      break;
  }
  // An answer that turns requests away meets a goodput or latency target on the others:
  // say so beside it, not only in the run below.
  if (const ServeSummary& s = a.at_answer->summary; s.rejected > 0) {
    out += fmt::format(
        "note: at the answer {} of the {} requests are rejected (their KV is larger than a "
        "replica's device pool){}\n",
        s.rejected, a.at_answer->trace.requests.size(),
        a.target.metric == "goodput" ? ": they count as missing the SLO"
                                     : ": the latencies are of the others");
  }
  return out + "\nthe run at the answer:\n" + serve_text(*a.at_answer);
}

std::string serve_answer_json(const ServeAnswer& a) {
  nlohmann::ordered_json j;
  j["format"] = "tierflow.serve-answer/1";
  j["question"] = question_name(a.question);
  if (!a.tier.empty()) j["tier"] = a.tier;
  j["target"] = {{"metric", a.target.metric}, {"bound", a.target.bound}};
  j["found"] = a.found;
  const auto number = [](double v) {
    return std::isnan(v) ? nlohmann::ordered_json() : nlohmann::ordered_json(v);
  };
  if (a.question == ServeQuestion::kUpgrade) {
    j["answer"] = a.found ? nlohmann::ordered_json(a.upgrades.front().what) : nlohmann::ordered_json();
    j["base"] = {{"value", number(a.base_value)}, {"pass", a.base_pass}};
    nlohmann::ordered_json ups = nlohmann::ordered_json::array();
    for (const ServeUpgrade& u : a.upgrades) {
      ups.push_back({{"what", u.what},
                     {"set", u.set},
                     {"value_1_25x", number(u.value[0])},
                     {"value_2x", number(u.value[1])},
                     {"gain_2x", u.gain[1]},
                     {"pass_2x", u.pass[1]}});
    }
    j["upgrades"] = std::move(ups);
    j["run"] = a.at_answer ? nlohmann::ordered_json::parse(serve_json(*a.at_answer))
                           : nlohmann::ordered_json();
    return j.dump(2) + "\n";
  }
  j["answer"] = a.found ? nlohmann::ordered_json(a.knob) : nlohmann::ordered_json();
  if (a.question == ServeQuestion::kMaxRate) {
    j["requests_per_s"] = a.requests_per_s;
    j["at_limit"] = a.at_limit;
  }
  if (a.question == ServeQuestion::kSplit) j["replicas"] = a.split_replicas;
  if (a.question == ServeQuestion::kMinDevices) {
    j["tp"] = a.found ? nlohmann::ordered_json(a.tp) : nlohmann::ordered_json();
    j["pp"] = a.pp;
    j["replicas"] = a.found ? nlohmann::ordered_json(a.replicas) : nlohmann::ordered_json();
    j["nodes_used"] = a.found ? nlohmann::ordered_json(a.nodes_used) : nlohmann::ordered_json();
  }
  nlohmann::ordered_json probes = nlohmann::ordered_json::array();
  for (const ServeProbe& p : a.probes) {
    nlohmann::ordered_json o = {
        {"knob", p.knob},
        {"value", std::isnan(p.value) ? nlohmann::ordered_json() : nlohmann::ordered_json(p.value)},
        {"pass", p.pass}};
    if (a.question == ServeQuestion::kMinDevices) {
      o["tp"] = p.tp;
      o["pp"] = p.pp;
    }
    if (!p.why.empty()) o["why"] = p.why;
    probes.push_back(std::move(o));
  }
  j["probes"] = std::move(probes);
  j["run"] = a.at_answer ? nlohmann::ordered_json::parse(serve_json(*a.at_answer))
                         : nlohmann::ordered_json();
  return j.dump(2) + "\n";
}

}  // namespace tierflow::study
