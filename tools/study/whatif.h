// What-if questions answered by searching scenarios with the planner and the simulator in
// the loop (ARCHITECTURE §9). Every answer comes with the trial that achieves it, what
// binds there and the probes the search made. Probes share the study's topologies and
// workloads; a search never probes the same value twice.
//
// Questions
//   min-memory   the least device memory (budget) whose plan keeps the latency within
//                max_overhead of the fastest possible (the resident plan on unlimited
//                memory). Capacities above the device's are probed by raising its tier's
//                capacity: the answer says what a model would need. Bisection between the
//                residency bound and the unlimited resident peak, to `resolution` of the
//                answer (at least 64 MiB).
//   max-batch    the largest batch (max-context: context, or a request's prompt) that fits
//                and meets the target (min_throughput tokens/s, max_tpot_ms). Without a
//                target, "fits" means fits without offload (the resident policy). Doubling
//                from the scenario's value, then bisection to one sequence (context: to
//                the KV block).
//   upgrade      for each link direction and tier port that carried bytes and for the
//                device tier's capacity, the latency with it 1.25x and 2x: ranked by the
//                gain at 2x.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/study/study.h"

namespace tierflow::study {

enum class Question { kMinMemory, kMaxBatch, kMaxContext, kUpgrade };
inline constexpr std::array<std::string_view, 4> kQuestionNames = {"min-memory", "max-batch",
                                                                   "max-context", "upgrade"};

struct WhatIfOptions {
  Question question = Question::kMinMemory;
  double max_overhead = 0.01;  ///< min-memory: latency within (1 + x) of the fastest
  double min_throughput = 0;   ///< max-batch/context: tokens/s at least (0: no target)
  double max_tpot_ms = 0;      ///< max-batch/context: TPOT at most (0: no target)
  double resolution = 0.005;   ///< min-memory: relative resolution of the answer
  std::function<void(const std::string&)> progress;  ///< told of each probe
};

/// One point a search tried.
struct Probe {
  std::string value;  ///< "292GiB", "batch 32"
  bool pass = false;
  int64_t latency_ps = 0;
  uint64_t device_peak = 0;
  double tpot_ms = 0;     ///< decode time per token (throughput_of, tpot_ms_of); 0 if none
  double throughput = 0;  ///< tokens/s
  std::string why;        ///< why it failed
};

struct Upgrade {
  std::string what;  ///< "link 'gpu-pcie' rc->hbm bandwidth"
  std::string set;   ///< the --set at 2x
  std::array<int64_t, 2> latency_ps{};  ///< at 1.25x and 2x
  std::array<double, 2> gain{};         ///< (base - new) / base
};

struct Answer {
  Question question = Question::kMinMemory;
  bool found = false;
  std::string value;        ///< "292.4GiB", "48"
  int64_t number = 0;       ///< the answer as a number: bytes, or the batch or context
  std::string resolution;   ///< of a bisection, e.g. "1.46GiB"
  std::optional<Trial> trial;  ///< the plan that achieves it (the base trial for upgrade)
  int64_t fastest_ps = 0;   ///< min-memory: the resident latency on unlimited memory
  int64_t limit_ps = 0;     ///< min-memory: the latency allowed
  std::string binding;      ///< what stops the answer from going further
  std::string note;         ///< e.g. the device has less memory than the answer
  std::vector<Probe> probes;
  std::vector<Upgrade> upgrades;  ///< ranked
};

/// Refuses a setting the question would override, not use: a budget (given, or an axis)
/// for min-memory, which searches it; an axis over the field max-batch or max-context
/// searches. InputError at the setting, named as `base` names it, or at `vary`.
void check_whatif_grid(const Scenario& base, const WhatIfOptions& o, const std::vector<Axis>& axes,
                       std::string_view vary);

/// Answers `o.question` for `s`. Bad input throws InputError.
Answer whatif(Study& study, const Scenario& s, const WhatIfOptions& o);

/// The plan of an answer as `tierflow plan -o` writes one to `path` (`sim --plan` runs it):
/// `--plan-out`, Python's plan_out. InputError at `source` when there is none.
std::string answer_plan_json(const Answer& a, const std::string& path, std::string_view source);

/// The tokens/s a max-batch target compares: a request's generation throughput, a decode
/// step's batch x tokens / makespan, a prefill's or training step's batch x seq / makespan.
/// The field max-batch and max-context search ("batch", "context", a request's "prompt"),
/// or "" for the other questions.
std::string searched_field(Question q, const Scenario& s);
double throughput_of(const Trial& t);
/// A request's TPOT, or a decode step's makespan / tokens; 0 otherwise.
double tpot_ms_of(const Trial& t);

}  // namespace tierflow::study
