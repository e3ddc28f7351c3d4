// The flags several subcommands share, declared once: the target (--hw, --set, --device,
// --devices, --budget, --pin, --policy, --threads), the workload source with the
// generator's parameters (--workload | --model | --hf-config, --phase, --batch, ...) and
// the request shape (--prompt, --generate). Each command sets its defaults in the struct
// before adding the flags; to_scenario() turns what was parsed into a study::Scenario.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/plan.h"
#include "hw_models/topology.h"
#include "tools/study/scenario.h"
#include "tools/study/serve.h"
#include "traces/generate.h"

namespace tierflow::cli {

/// A flag's value must be a finite number above 0 (NaN, infinities, 0 and negatives are
/// refused with the flag named; a target such as --max-tpot 0 is never silently dropped).
extern const CLI::Validator kPositiveFinite;
/// A number (its range is the settings' to check, as Python's and sweeps' values are):
/// "expected a number, got 'abc'", as the serving fields word it (CLI11 said "Could not
/// convert").
extern const CLI::Validator kNumber;
/// A count with an optional prefix ("8192", "8k" = 8,000, "32Ki" = 32,768) of at most
/// `most`: rewritten as the plain integer for CLI11's conversion, or the parser's own error.
CLI::Validator count_up_to(int64_t most);
/// count_up_to the largest value `target`'s type holds (past it, CLI11 said only "Could
/// not convert").
template <class T>
CLI::Validator count_of(const T& /*target*/) {
  constexpr auto most = std::numeric_limits<T>::max();
  return count_up_to(std::cmp_greater(most, std::numeric_limits<int64_t>::max())
                         ? std::numeric_limits<int64_t>::max()
                         : static_cast<int64_t>(most));
}
/// A time in milliseconds: a bare number (ms) or a duration with its unit ("50ms", "0.05s"),
/// rewritten as the number of milliseconds.
extern const CLI::Validator kMilliseconds;
/// The name of a planner pass (planner::registered_passes()), with "did you mean".
extern const CLI::Validator kPassName;
/// A repeatable PATH=VALUE option (--set, --model-set): each PATH at most once, as the last
/// would win unnoticed. Each call makes a validator with its own record of the paths seen.
CLI::Validator once_per_path();

/// Generator parameters as flags (trace gen, compare, whatif).
struct GenFlags {
  traces::GenOptions gen;
  std::string phase = "decode";
  std::string weight_dtype = "bf16", kv_dtype = "bf16", act_dtype = "bf16";
  std::string compute_dtype;  ///< empty: the activation dtype
  std::string routing = "expected";
  CLI::Option* routing_option = nullptr;  ///< whether --routing was given
  CLI::Option* context_option = nullptr;  ///< whether --context was given
  // Whether the phase's own flags were given: one that the phase does not read is refused.
  CLI::Option* phase_option = nullptr;
  CLI::Option* seq_option = nullptr;
  CLI::Option* tokens_option = nullptr;
  CLI::Option* checkpoint_option = nullptr;
  CLI::Option* seed_option = nullptr;
  std::string expert_cache;  ///< study commands: --expert-cache (empty: none)

  /// The options with the words parsed (CLI11 checked them already). InputError at a flag
  /// the phase would ignore (--seq in decode, --context or --tokens in prefill and training,
  /// --checkpoint outside training).
  [[nodiscard]] traces::GenOptions options() const;
  /// InputError at a routing flag given for a model with no routed experts (`arch`), which
  /// would be ignored.
  void check_routing_flags(const traces::Arch& arch) const;
  /// Whether `o` (one of the options above; null: not added) was given.
  static bool given(const CLI::Option* o) { return o != nullptr && o->count() > 0; }
};

/// Adds --phase, --batch, --seq, --context, --tokens, --tp, the dtypes, --compute-dtype,
/// --quant-group, --quant-zeros, --kv-block, --checkpoint, --routing, --seed,
/// --routing-skew, --routing-repeat, --layers.
/// `routing_modes`: --routing takes the study's oracle and realistic too (study commands).
void add_gen_flags(CLI::App* cmd, GenFlags& f, bool routing_modes = false);

struct ScenarioFlags {
  std::string hw;
  std::vector<std::string> sets;
  std::string device;
  uint32_t devices = 1;
  std::string budget;
  std::vector<std::string> pins;
  std::string on_host;  ///< --on-host KINDS (empty: every op on the device)
  std::string policy = "tierflow";
  unsigned threads = 0;

  std::string workload, model, hf_config;
  bool lenient = false;  ///< --lenient (with --hf-config)
  std::vector<std::string> model_sets;
  GenFlags gen;
  int64_t prompt = 0, generate = 0;
};

/// --hw, --set, --device, --devices, --budget, --pin, --on-host, --threads.
void add_target_flags(CLI::App* cmd, ScenarioFlags& f);
/// The help of --model: what it takes and the default model (study::kDefaultModel).
std::string model_flag_help();
/// --workload | --model | --hf-config, --model-set, the generator flags, --prompt and
/// --generate.
void add_workload_flags(CLI::App* cmd, ScenarioFlags& f);

/// Checks the combination (one workload source; --prompt with --generate) and builds the
/// scenario; a --context left at its default is cut to the model's max_context
/// (study::cut_default_context). Throws CLI::ValidationError or InputError.
study::Scenario to_scenario(const ScenarioFlags& f);

/// `serve`'s settings as flags: the topology, the model, the requests, the replicas, the
/// engine's scheduling, the KV tiers, preemption, dtypes, SLO, cache-only and the timeline.
void add_serve_setting_flags(CLI::App* cmd, study::ServeSettings& s);

/// --hw and --set of the commands that run a plan (sim, replay): see study::plan_topology().
void add_plan_topology_flags(CLI::App* cmd, std::string& hw, std::vector<std::string>& sets);

}  // namespace tierflow::cli
