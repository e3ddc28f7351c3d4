#include "tools/study/serve_find.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "core/diagnostics.h"
#include "core/units.h"
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
    case ServeQuestion::kMinCapacity:
      return "min-capacity";
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

std::string knob_text(ServeQuestion q, double knob) {
  switch (q) {
    case ServeQuestion::kMaxRate:
      return fmt::format("x{:.4g}", knob);
    case ServeQuestion::kMinReplicas:
      return fmt::format("{}", static_cast<int64_t>(knob));
    case ServeQuestion::kMinCapacity:
      return to_string_approx(Bytes{static_cast<uint64_t>(knob)});
  }
  return "";
}

}  // namespace

std::pair<ServeQuestion, std::string> parse_serve_question(const std::string& text,
                                                           std::string_view source) {
  if (text == "max-rate") return {ServeQuestion::kMaxRate, ""};
  if (text == "min-replicas") return {ServeQuestion::kMinReplicas, ""};
  if (text.starts_with("min-capacity:") && text.size() > 13) {
    return {ServeQuestion::kMinCapacity, text.substr(13)};
  }
  throw InputError::at(
      SourcePos{std::string(source)},
      "unknown question '{}': max-rate, min-replicas or min-capacity:TIER{}", text,
      did_you_mean(text, std::vector<std::string>{"max-rate", "min-replicas", "min-capacity:ddr"}));
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
  const auto d = parse_duration(value);
  if (!d.ok() || d.value.ps <= 0) throw refuse("a latency bound is a duration such as 2s");
  t.bound = static_cast<double>(d.value.ps) / static_cast<double>(kPsPerS);
  return t;
}

std::optional<ServeAsk> parse_serve_ask(const std::string& find, const std::string& target,
                                        bool cli) {
  const std::string find_flag = serve_flag("find", cli), target_flag = serve_flag("target", cli);
  if (find.empty()) {
    if (target.empty()) return std::nullopt;
    throw InputError::at(SourcePos{target_flag},
                         "needs {} QUESTION (max-rate, min-replicas or min-capacity:TIER)",
                         find_flag);
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
  const auto name = [&base](std::string field) { return serve_flag(std::move(field), base.cli); };
  ServeAnswer a;
  a.question = q;
  a.tier = tier;
  a.target = target;
  if (target.metric == "goodput" && base.slo.empty()) {
    throw InputError::at(SourcePos{name("target")}, "goodput is the share meeting {}: give {}",
                         name("slo"), name("slo"));
  }
  // The settings were checked and the inputs read once; each probe changes one knob.
  std::vector<serve::KvTier>& tiers = setup.engine.kv_tiers;
  size_t tier_index = tiers.size();
  if (q == ServeQuestion::kMinCapacity) {
    for (size_t i = 0; i < tiers.size(); ++i) tier_index = tiers[i].tier == tier ? i : tier_index;
    if (tier_index == tiers.size()) {
      throw InputError::at(SourcePos{name("find")}, "tier '{}' is not among {} ('{}'): add it",
                           tier, name("kv_tiers"), base.kv_tiers);
    }
  }
  // The probes write no timeline and record no series: the answer's run alone does, once
  // the search is over.
  const std::string timeline = std::exchange(setup.timeline, std::string());
  const bool series = std::exchange(setup.engine.record_series, false);
  const auto set_knob = [&](double knob) {
    if (q == ServeQuestion::kMaxRate) setup.rate_scale = base.trace_options.rate_scale * knob;
    if (q == ServeQuestion::kMinReplicas) setup.engine.replicas = static_cast<int>(knob);
    // (A capacity of 0 reads as the tier's fraction; it comes only of a tier with nothing
    // usable, where that is 0 bytes too.)
    if (q == ServeQuestion::kMinCapacity) tiers[tier_index].bytes = static_cast<uint64_t>(knob);
  };
  // One run at `knob`; a setup the engine refuses (too many replicas, no room for a block)
  // fails the probe when it is the knob's doing.
  // The first probe runs the base setup's scale: an error there is the user's to see.
  bool first = true;
  const auto run = [&](double knob) -> std::optional<ServeStudy> {
    set_knob(knob);
    const bool rethrow = first || q == ServeQuestion::kMaxRate;
    first = false;
    try {
      return run_serve(setup);
    } catch (const InputError&) {
      if (rethrow) throw;
      return std::nullopt;
    }
  };
  const auto probe = [&](double knob) {
    std::optional<ServeStudy> x = run(knob);
    ServeProbe p{knob, x ? serve_metric(*x, target) : std::nan(""), false};
    p.pass = x && passes(target, p.value);
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

  if (q == ServeQuestion::kMaxRate) {
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
  } else if (q == ServeQuestion::kMinReplicas) {
    // Doubling, then bisection between the last failing count and the first passing one.
    int fail = 0, pass = 0;
    for (int r = 1; r <= (1 << 20); r *= 2) {
      auto [ok, x] = probe(r);
      if (!x) break;  // the topology has no devices for that many
      if (ok) {
        pass = r;
        keep(r, x);
        break;
      }
      fail = r;
    }
    while (pass > 0 && pass - fail > 1) {
      const int mid = fail + (pass - fail) / 2;
      auto [ok, x] = probe(mid);
      if (ok) {
        pass = mid;
        keep(mid, x);
      } else {
        fail = mid;
      }
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
    set_knob(a.knob);
    setup.timeline = timeline;
    setup.engine.record_series = series;
    best = run_serve(setup);
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

std::string serve_answer_text(const ServeAnswer& a) {
  const std::string what = a.question == ServeQuestion::kMinCapacity
                               ? fmt::format("min-capacity of '{}'", a.tier)
                               : std::string(question_name(a.question));
  std::string out =
      fmt::format("question: {} with {} {} {}\n\nprobes:\n", what, a.target.metric,
                  a.target.is_time() ? "<=" : ">=", value_text(a.target, a.target.bound));
  for (const ServeProbe& p : a.probes) {
    out += fmt::format("  {:>12}  {} {:>10}  {}\n", knob_text(a.question, p.knob), a.target.metric,
                       value_text(a.target, p.value), p.pass ? "pass" : "fail");
  }
  if (!a.found) {
    return out + fmt::format("\nanswer: none within the search ({})\n",
                             a.question == ServeQuestion::kMaxRate
                                 ? "1/1024 of the trace's rate misses it"
                             : a.question == ServeQuestion::kMinReplicas
                                 ? "every replica count the devices allow misses it"
                                 : "the tier's whole capacity misses it");
  }
  switch (a.question) {
    case ServeQuestion::kMaxRate:
      out += fmt::format("\nanswer: {} the trace's rate ({:.4g} requests/s), within 1%\n",
                         knob_text(a.question, a.knob), a.requests_per_s);
      break;
    case ServeQuestion::kMinReplicas:
      out += fmt::format("\nanswer: {} replicas\n", knob_text(a.question, a.knob));
      break;
    case ServeQuestion::kMinCapacity:
      out +=
          fmt::format("\nanswer: {} of '{}' per instance\n", knob_text(a.question, a.knob), a.tier);
      break;
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
  j["answer"] = a.found ? nlohmann::ordered_json(a.knob) : nlohmann::ordered_json();
  if (a.question == ServeQuestion::kMaxRate) j["requests_per_s"] = a.requests_per_s;
  nlohmann::ordered_json probes = nlohmann::ordered_json::array();
  for (const ServeProbe& p : a.probes) {
    probes.push_back({{"knob", p.knob},
                      {"value", std::isnan(p.value) ? nlohmann::ordered_json()
                                                    : nlohmann::ordered_json(p.value)},
                      {"pass", p.pass}});
  }
  j["probes"] = std::move(probes);
  j["run"] = a.at_answer ? nlohmann::ordered_json::parse(serve_json(*a.at_answer))
                         : nlohmann::ordered_json();
  return j.dump(2) + "\n";
}

}  // namespace tierflow::study
