#include "tools/cli/whatif_serve.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <optional>
#include <string_view>
#include <tuple>
#include <unistd.h>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/kinds.h"
#include "tools/cli/common.h"
#include "tools/study/serve.h"
#include "tools/study/serve_find.h"
#include "tools/study/whatif.h"

namespace tierflow::cli {
namespace {

/// The whatif flags a service question takes; any other given is refused, not ignored.
constexpr std::array<std::string_view, 17> kServeFlags = {
    "--question",     "--trace",    "--arrivals",  "--target",    "--serve",     "--hw",
    "--set",          "--device",   "--model",     "--hf-config", "--model-set", "--tp",
    "--weight-dtype", "--kv-dtype", "--act-dtype", "--json",      "--quiet"};

}  // namespace

void check_step_question(const std::string& q) {
  if (index_of(study::kQuestionNames, q)) return;
  try {
    (void)study::parse_serve_question(q, "--question");
  } catch (const InputError&) {
    std::vector<std::string> all(study::kQuestionNames.begin(), study::kQuestionNames.end());
    for (const std::string_view s : study::kServeQuestionNames) {
      if (s != "upgrade") all.emplace_back(s == "min-capacity:TIER" ? "min-capacity:ddr" : s);
    }
    throw InputError::at(SourcePos{"--question"}, "unknown question '{}'{}", q,
                         did_you_mean(q, all));
  }
  throw InputError::at(SourcePos{"--question"},
                       "'{}' is a question about a service: give its requests (--trace or "
                       "--arrivals)",
                       q);
}

void add_whatif_serve_flags(CLI::App* cmd, WhatIfServeFlags& f) {
  f.trace_option = cmd->add_option(
      "--trace", f.trace, "a service: a request trace (Mooncake JSONL or Azure CSV), as serve");
  f.arrivals_option =
      cmd->add_option("--arrivals", f.arrivals, "a service: generated requests, as serve")
          ->excludes(f.trace_option);
  cmd->add_option("--target", f.target,
                  "a service question's target: p99-ttft=2s, goodput=95%, hit=30%, ...");
  cmd->add_option("--serve", f.serve,
                  "a service's setting FIELD=VALUE, e.g. kv_tiers=ddr:1TB (repeatable; "
                  "docs/sweeps.md lists the fields)");
}

int run_whatif_serve(const CLI::App* cmd, const ScenarioFlags& f, const WhatIfServeFlags& s,
                     const std::string& question, bool json, bool quiet,
                     const std::string& output) {
  for (const CLI::Option* opt : cmd->get_options()) {
    if (opt->count() == 0) continue;
    const std::string name = opt->get_name();
    const bool service =
        std::find(kServeFlags.begin(), kServeFlags.end(), name) != kServeFlags.end();
    if (!service && name != "--output") {
      throw CLI::ValidationError(opt->get_name(),
                                 "describes a step, not a service: a question about a service "
                                 "(--trace or --arrivals) takes --serve FIELD=VALUE for its "
                                 "settings");
    }
  }
  study::ServeSettings settings;
  settings.names = study::SettingNames::kWhatif;  // its own flags, or --serve FIELD
  settings.hw = f.hw;
  settings.sets = f.sets;
  settings.model.model = f.model;
  settings.model.hf_config = f.hf_config;
  settings.model.model_sets = f.model_sets;
  // --tp given, else the service's own default (the least TP that leaves room for KV).
  if (cmd->get_option("--tp")->count() > 0) settings.model.gen.tp = f.gen.gen.tp;
  settings.engine.device = f.device;
  settings.weight_dtype = f.gen.weight_dtype;
  settings.kv_dtype = f.gen.kv_dtype;
  settings.act_dtype = f.gen.act_dtype;
  settings.trace = s.trace;
  settings.arrivals = s.arrivals;
  std::vector<std::string> set_fields;
  for (const std::string& item : s.serve) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InputError::at(SourcePos{"--serve"}, "'{}' is not FIELD=VALUE (e.g. kv_tiers=ddr:1TB)",
                           item);
    }
    const std::string field = item.substr(0, eq);
    if (std::find(set_fields.begin(), set_fields.end(), field) != set_fields.end()) {
      throw InputError::at(SourcePos{"--serve " + field},
                           "given twice: the last would win unnoticed");
    }
    set_fields.push_back(field);
    const std::string named = study::serve_flag(field, study::SettingNames::kWhatif);
    const auto& fields = study::serve_field_names();
    if (!named.starts_with("--serve") &&
        std::find(fields.begin(), fields.end(), field) != fields.end()) {
      throw InputError::at(SourcePos{"--serve " + field}, "give it as whatif's {}", named);
    }
    study::set_serve_field(settings, field, item.substr(eq + 1), "--serve " + field);
  }
  // whatif's default question (min-memory) is a step's: a service's must be asked.
  if (cmd->get_option("--question")->count() == 0) {
    throw InputError::at(SourcePos{"--question"},
                         "a service ({}) takes a question of its own: {}, with --target "
                         "METRIC=BOUND (e.g. --question max-rate --target p99-ttft=2s)",
                         s.trace_option->count() > 0 ? "--trace" : "--arrivals",
                         study::serve_question_list());
  }
  study::ServeAsk ask;
  std::tie(ask.question, ask.tier) = study::parse_serve_question(question, "--question");
  if (s.target.empty()) {
    throw InputError::at(SourcePos{"--question"}, "a service question needs --target METRIC=BOUND");
  }
  ask.target = study::parse_serve_target(s.target, "--target");
  study::ServeSetup setup = study::prepare_serve(settings);
  if (!output.empty()) check_output_path(output);
  // The notes come with the first probe: a setup it refuses comes alone.
  NotesOnce notes(study::serve_notes(setup));
  const bool tty = !quiet && isatty(fileno(stderr)) != 0;
  const std::function<void(const study::ServeProbe&)> progress = [&](const study::ServeProbe& p) {
    notes();
    if (tty) fmt::print(stderr, "whatif: probe {:.6g}: {}\n", p.knob, p.pass ? "pass" : "fail");
  };
  const study::ServeAnswer a = study::find_serve(settings, std::move(setup), ask, progress);
  notes();
  write_file_atomic(output.empty() ? "-" : output,
                    json ? study::serve_answer_json(a) : study::serve_answer_text(a));
  return static_cast<int>(a.found ? ExitCode::kOk : ExitCode::kInfeasible);
}

}  // namespace tierflow::cli
