// Questions over a service, answered by searching serving runs (tools/study/serve.h):
//   max-rate           the highest arrival rate (a multiple of the trace's) that meets the
//                      target;
//   min-replicas       the fewest replicas that meet it;
//   min-devices        the fewest devices that meet it: for each tensor parallelism (the
//                      given one, 1 by default, doubled up to the class's devices), the
//                      fewest replicas, as min-replicas searches them; ties to the better
//                      metric;
//   min-capacity:TIER  the least capacity of a KV tier (per instance) that meets it;
//   split              how to divide the replicas between prefill and decode (disaggregated
//                      prefill): every division of them, colocated too, run; the answer
//                      is the one meeting the target best;
//   upgrade            which single upgrade helps the target's metric most: each link
//                      direction and tier port that carried bytes, the device memory, each
//                      KV tier's capacity and one replica more, each at 1.25x and 2x (a
//                      replica: one more), ranked by the metric at 2x.
// A target is one bound on the run's summary: `p99-ttft=2s`, `p90-ttft=...`, `p99-tpot=
// 100ms`, `p99-e2e=30s`, `goodput=95%` (the share of requests meeting `--slo`), or
// `hit=30%` (the share of prompt tokens found in the cache).
//
// The searches assume the metric moves one way with the knob (more rate, worse latency;
// more replicas or capacity, better), which queueing makes true in the large; every probe
// is printed, so a non-monotone stretch shows.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/study/serve.h"

namespace tierflow::study {

enum class ServeQuestion { kMaxRate, kMinReplicas, kMinDevices, kMinCapacity, kSplit, kUpgrade };
/// The questions as `--find` names them (min-capacity takes its tier: min-capacity:TIER).
inline constexpr std::array<std::string_view, 6> kServeQuestionNames = {
    "max-rate", "min-replicas", "min-devices", "min-capacity:TIER", "split", "upgrade"};
/// "max-rate, min-replicas, ..., split or upgrade", as errors and help list them.
std::string serve_question_list();

/// What must hold of a run.
struct ServeTarget {
  std::string metric;  ///< "p99-ttft", "goodput", "hit", ...
  double bound = 0;    ///< seconds for times, a fraction for goodput and hit
  [[nodiscard]] bool is_time() const { return metric != "goodput" && metric != "hit"; }
};

/// One of kServeQuestionNames (min-capacity with its tier); InputError at `source`.
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
/// setting as `names` says ("--find", "find" or whatif's "--question").
std::optional<ServeAsk> parse_serve_ask(const std::string& find, const std::string& target,
                                        SettingNames names);

struct ServeProbe {
  double knob = 0;   ///< rate multiple, replicas, bytes or (split) prefill replicas
  double value = 0;  ///< the target's metric at that knob (NaN when nothing finished)
  bool pass = false;
  int tp = 0;       ///< min-devices: the probe's tensor parallelism (knob: its replicas)
  int pp = 1;       ///< min-devices: the probe's pipeline stages
  std::string why;  ///< a setup the engine refused (the knob's doing): its error
};

/// One upgrade the upgrade question tried.
struct ServeUpgrade {
  std::string what;  ///< "link 'gpu-pcie' bandwidth", "tier 'hbm' capacity", "replicas"
  /// The change at 2x: "links.gpu-pcie.bandwidth=128GB/s", "replicas=2", or a KV tier's
  /// "tiers.ddr.capacity=2TB and KV tier 'ddr' 128GiB" (a KV tier of a given size grows
  /// with its tier).
  std::string set;
  std::array<double, 2> value{};  ///< the metric at 1.25x and 2x (NaN: nothing finished or refused)
  std::array<bool, 2> pass{};     ///< the target met
  /// How much better than the base at 1.25x and 2x: (base - value) / base for a latency,
  /// (value - base) / base for a share; 0 when it did not run.
  std::array<double, 2> gain{};
};

struct ServeAnswer {
  ServeQuestion question = ServeQuestion::kMaxRate;
  std::string tier;  ///< min-capacity's tier
  ServeTarget target;
  bool found = false;
  /// The answer: rate multiple, replicas, bytes per instance, (split) prefill replicas or
  /// (min-devices) devices.
  double knob = 0;
  int tp = 0, replicas = 0;        ///< min-devices: the answer's tensor parallelism, replicas
  int pp = 1;                      ///< min-devices: the answer's pipeline stages
  /// min-devices on several nodes (`nodes`): the nodes its devices take, and how many there are
  int nodes_used = 0, nodes = 1;
  int split_replicas = 0;          ///< split: the replicas divided (prefill and decode)
  double requests_per_s = 0;       ///< max-rate: the arrival rate the answer means
  /// max-rate: every probe passed up to the search's limit (1024x the trace's rate), so the
  /// answer is a lower bound, not the rate where the target starts to miss.
  bool at_limit = false;
  std::vector<ServeProbe> probes;  ///< in the order run
  /// upgrade: the metric of the base run, and the upgrades, best first.
  double base_value = 0;
  bool base_pass = false;
  std::vector<ServeUpgrade> upgrades;
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
