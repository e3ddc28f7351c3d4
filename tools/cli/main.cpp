// tierflow: plan and score how LLM tensors move across a memory hierarchy.
//
// Exit codes (docs/cli.md): 0 ok, 1 infeasible, 2 bad input, 3 internal error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "core/diagnostics.h"
#include "core/huge_pages.h"
#include "core/io.h"
#include "tools/cli/calibrate_cmd.h"
#include "tools/cli/common.h"
#include "tools/cli/hw_cmd.h"
#include "tools/cli/compare_cmd.h"
#include "tools/cli/export_cmd.h"
#include "tools/cli/plan_cmd.h"
#include "tools/cli/replay_cmd.h"
#include "tools/cli/report_cmd.h"
#include "tools/cli/serve_cmd.h"
#include "tools/cli/sim_cmd.h"
#include "tools/cli/trace_cmd.h"
#include "tools/cli/sweep_cmd.h"
#include "tools/cli/whatif_cmd.h"

#ifndef TIERFLOW_VERSION
#define TIERFLOW_VERSION "unknown"
#endif

namespace tierflow::cli {

void print_error(const InputError& e) {
  std::fflush(stdout);
  fmt::print(stderr, "error: {}\n", e.what());
}

namespace {

/// Every option that names a file to write (-o/--output, --summary, --report, --timeline,
/// --csv) refuses an empty value at parse time, naming the flag, in every subcommand.
void refuse_empty_output_paths(CLI::App& app) {
  static const CLI::Validator kNonEmpty(
      [](std::string& path) {
        return path.empty() ? std::string("an empty path: give a file name") : std::string();
      },
      "FILE");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* opt : sub->get_options()) {
      for (const std::string& name : opt->get_lnames()) {
        if (name == "output" || name == "summary" || name == "report" || name == "timeline" ||
            name == "csv") {
          opt->check(kNonEmpty);
          break;
        }
      }
    }
    refuse_empty_output_paths(*sub);
  }
}

int run(int argc, char** argv) {
  // No output of a command may replace one of its inputs (core/io.h).
  enable_output_guard();
  CLI::App app{"tierflow: plan and score LLM tensor movement across memory tiers"};
  app.name("tierflow");
  app.set_version_flag("--version", std::string("tierflow ") + TIERFLOW_VERSION);
  app.require_subcommand(1);
  add_hw_commands(app);
  add_trace_commands(app);
  add_plan_commands(app);
  add_serve_command(app);
  add_sim_command(app);
  add_compare_command(app);
  add_whatif_command(app);
  add_export_command(app);
  add_sweep_command(app);
  add_report_command(app);
  add_replay_command(app);
  add_calibrate_command(app);
  refuse_empty_output_paths(app);
  try {
    app.parse(argc, argv);
  } catch (const CommandResult& r) {
    return r.code;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\nRun with --help for usage.\n", e.what());
    return static_cast<int>(ExitCode::kBadInput);
  }
  return 0;
}

}  // namespace
}  // namespace tierflow::cli

int main(int argc, char** argv) {
  tierflow::reuse_freed_memory();
  try {
    return tierflow::cli::run(argc, argv);
  } catch (const tierflow::InputError& e) {
    tierflow::cli::print_error(e);
    return static_cast<int>(tierflow::ExitCode::kBadInput);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "internal error: {}\n(this is a bug in tierflow; please report it)\n",
               e.what());
    return static_cast<int>(tierflow::ExitCode::kInternal);
  }
}
