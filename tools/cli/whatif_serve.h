// `tierflow whatif` about a service: with --trace or --arrivals, the question is one of
// `serve --find`'s (max-rate, min-replicas, min-devices, min-capacity:TIER, split, upgrade) and the
// scenario flags that describe the deployment (--hw, --set, --device, --model, --hf-config,
// --model-set, --tp, the dtypes) with the serving settings as --serve FIELD=VALUE (the
// fields serving sweeps and Python take) make the serving run it searches
// (tools/study/serve_find.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "tools/cli/flags.h"

namespace tierflow::cli {

struct WhatIfServeFlags {
  std::string trace, arrivals, target;
  std::vector<std::string> serve;  ///< FIELD=VALUE
  CLI::Option* trace_option = nullptr;
  CLI::Option* arrivals_option = nullptr;
  [[nodiscard]] bool asked() const {
    return trace_option->count() > 0 || arrivals_option->count() > 0;
  }
};

/// Throws InputError unless `q` is a question about a step (study::kQuestionNames); a
/// service's question says it needs --trace or --arrivals, any other names the nearest.
void check_step_question(const std::string& q);

/// Adds --trace, --arrivals, --target and --serve.
void add_whatif_serve_flags(CLI::App* cmd, WhatIfServeFlags& f);

/// Answers a service question: refuses the flags that describe a step (given on the command
/// line), runs the search, writes the answer (text, or tierflow.serve-answer/1 with
/// `json`) to `output` ("-": stdout) and returns the exit code (0 answered, 1 none).
int run_whatif_serve(const CLI::App* cmd, const ScenarioFlags& f, const WhatIfServeFlags& s,
                     const std::string& question, bool json, bool quiet,
                     const std::string& output);

}  // namespace tierflow::cli
