// Questions over a service, answered by searching serving runs (tools/study/serve.h):
//   max-rate           the highest arrival rate (a multiple of the trace's) that meets the
//                      target;
//   min-replicas       the fewest replicas that meet it;
//   min-capacity:TIER  the least capacity of a KV tier (per instance) that meets it.
// A target is one bound on the run's summary: `p99-ttft=2s`, `p90-ttft=...`, `p99-tpot=
// 100ms`, `p99-e2e=30s`, `goodput=95%` (the share of requests meeting `--slo`), or
// `hit=30%` (the share of prompt tokens found in the cache).
//
// The searches assume the metric moves one way with the knob (more rate, worse latency;
// more replicas or capacity, better), which queueing makes true in the large; every probe
// is printed, so a non-monotone stretch shows.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/study/serve.h"

namespace tierflow::study {

enum class ServeQuestion { kMaxRate, kMinReplicas, kMinCapacity };

/// What must hold of a run.
struct ServeTarget {
  std::string metric;  ///< "p99-ttft", "goodput", "hit", ...
  double bound = 0;    ///< seconds for times, a fraction for goodput and hit
  [[nodiscard]] bool is_time() const { return metric != "goodput" && metric != "hit"; }
};

/// "max-rate", "min-replicas" or "min-capacity:TIER"; InputError at `source`.
std::pair<ServeQuestion, std::string> parse_serve_question(const std::string& text,
                                                           std::string_view source);
/// "p99-ttft=2s", "goodput=95%", "hit=0.3"; InputError at `source`.
ServeTarget parse_serve_target(const std::string& text, std::string_view source);

/// A question with the target it must meet: what `--find` and `--target` ask.
struct ServeAsk {
  ServeQuestion question = ServeQuestion::kMaxRate;
  std::string tier;  ///< min-capacity's tier
  ServeTarget target;
};

/// `find` (a question) and `target`, both given or neither (nullopt). InputError naming the
/// flag (`cli`: "--find") or the Python argument ("find").
std::optional<ServeAsk> parse_serve_ask(const std::string& find, const std::string& target,
                                        bool cli);

struct ServeProbe {
  double knob = 0;   ///< rate multiple, replicas or bytes
  double value = 0;  ///< the target's metric at that knob (NaN when nothing finished)
  bool pass = false;
};

struct ServeAnswer {
  ServeQuestion question = ServeQuestion::kMaxRate;
  std::string tier;  ///< min-capacity's tier
  ServeTarget target;
  bool found = false;
  double knob = 0;                 ///< the answer: rate multiple, replicas or bytes per instance
  double requests_per_s = 0;       ///< max-rate: the arrival rate the answer means
  std::vector<ServeProbe> probes;  ///< in the order run
  std::optional<ServeStudy> at_answer;  ///< the run at the answer
};

/// Searches runs of `base`, prepared as `setup` (prepare_serve(base)), for the answer.
/// `progress` (optional) hears each probe.
ServeAnswer find_serve(const ServeSettings& base, ServeSetup setup, const ServeAsk& ask,
                       const std::function<void(const ServeProbe&)>& progress = {});

/// The answer as text (the probes, the answer, the run at it) and as
/// `tierflow.serve-answer/1` JSON.
std::string serve_answer_text(const ServeAnswer& a);
std::string serve_answer_json(const ServeAnswer& a);

/// The target's metric of a run (NaN when no request finished).
double serve_metric(const ServeStudy& x, const ServeTarget& t);

}  // namespace tierflow::study
