// tierflow: plan and score how LLM tensors move across a memory hierarchy.
//
// Exit codes (docs/cli.md): 0 ok, 1 infeasible, 2 bad input, 3 internal error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <functional>
#include <new>
#include <regex>

#include "core/diagnostics.h"
#include "core/huge_pages.h"
#include "core/io.h"
#include "tools/cli/calibrate_cmd.h"
#include "tools/cli/common.h"
#include "tools/cli/compare_cmd.h"
#include "tools/cli/export_cmd.h"
#include "tools/cli/hw_cmd.h"
#include "tools/cli/plan_cmd.h"
#include "tools/cli/replay_cmd.h"
#include "tools/cli/report_cmd.h"
#include "tools/cli/serve_cmd.h"
#include "tools/cli/sim_cmd.h"
#include "tools/cli/sweep_cmd.h"
#include "tools/cli/trace_cmd.h"
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

/// Every option that takes a value refuses an empty one at parse time, naming the flag, in
/// every subcommand (`--budget ''` would otherwise fall back to the default unnoticed);
/// those that name a file to write (-o/--output, --summary, --report, --timeline, --csv)
/// say so.
void refuse_empty_values(CLI::App& app) {
  static const CLI::Validator kNonEmptyPath(
      [](std::string& path) {
        return path.empty() ? std::string("an empty path: give a file name") : std::string();
      },
      "FILE");
  static const CLI::Validator kNonEmpty(
      [](std::string& value) {
        return value.empty() ? std::string("an empty value: give one, or leave the option out")
                             : std::string();
      },
      "");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* opt : sub->get_options()) {
      if (opt->get_expected_max() == 0) continue;  // a flag: no value (nor ":FILE" in help)
      bool path = false;
      for (const std::string& name : opt->get_lnames()) {
        path = path || name == "output" || name == "summary" || name == "report" ||
               name == "timeline" || name == "csv";
      }
      opt->check(path ? kNonEmptyPath : kNonEmpty);
    }
    refuse_empty_values(*sub);
  }
}

/// The deepest subcommand the command line selected (the app itself when none).
CLI::App* deepest_selected(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands()) return deepest_selected(sub);
  return app;
}

/// "tierflow plan", "tierflow sweep merge": how a message names a subcommand.
std::string command_path(const CLI::App* app) {
  std::string path = app->get_name();
  for (const CLI::App* p = app->get_parent(); p != nullptr; p = p->get_parent()) {
    path = p->get_name() + " " + path;
  }
  return path;
}

/// The message of a parse error, with "did you mean" for a mistyped option or subcommand:
/// CLI11 says "The following arguments were not expected: 1GiB --budgte" and "A subcommand
/// is required"; this says which word is wrong and what it may stand for.
std::string parse_error_text(CLI::App& app, const CLI::ParseError& e) {
  CLI::App* at = deepest_selected(&app);
  const std::vector<std::string> extra = at->remaining();
  std::vector<std::string> options, commands;
  for (const CLI::Option* opt : at->get_options()) {
    for (const std::string& n : opt->get_lnames()) options.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) options.push_back("-" + n);
  }
  for (const CLI::App* sub : at->get_subcommands([](CLI::App*) { return true; })) {
    commands.push_back(sub->get_name());
  }
  const std::string where = command_path(at);
  // "A subcommand is required": the commands, each with what it does.
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && extra.empty() &&
      at->get_require_subcommand_min() > 0 && at->get_subcommands().empty()) {
    std::string list;
    for (const CLI::App* sub : at->get_subcommands([](CLI::App*) { return true; })) {
      list += fmt::format("\n  {:<10} {}", sub->get_name(), sub->get_description());
    }
    return fmt::format("'{}' needs a command:{}{}", where, list,
                       at == &app ? "\nStart with 'tierflow whatif' (a what-if on the default "
                                    "model and topology) or 'tierflow serve --arrivals "
                                    "poisson,rate=2/s,n=500,prompt=lognormal:2000:0.6,output="
                                    "uniform:50:400' (a service)."
                                  : "");
  }
  // "plans is required": which argument, what it is, and how the command is written.
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    for (const CLI::Option* opt : at->get_options()) {
      if (!opt->get_required() || opt->count() > 0) continue;
      if (!opt->get_lnames().empty() || !opt->get_snames().empty()) {
        const std::string flag = opt->get_lnames().empty() ? "-" + opt->get_snames().front()
                                                           : "--" + opt->get_lnames().front();
        return fmt::format("'{}' needs {}: {}", where, flag, opt->get_description());
      }
      std::string name = opt->get_name();
      std::ranges::transform(name, name.begin(), [](unsigned char c) { return std::toupper(c); });
      const bool many = opt->get_expected_max() > 1;
      return fmt::format("'{}' needs {}{}: {} (usage: {} [OPTIONS] {}{})", where, name,
                         many ? "..." : "", opt->get_description(), where, name, many ? "..." : "");
    }
  }
  for (const std::string& word : extra) {
    if (word.size() > 1 && word[0] == '-') {
      const std::string flag = word.substr(0, word.find('='));
      std::string hint = did_you_mean(flag, options);
      if (hint.empty()) {
        // An option of other commands: which take it ('tierflow plan --model': trace gen,
        // compare, whatif and serve do).
        std::vector<std::string> takers;
        const std::function<void(CLI::App*)> walk = [&](CLI::App* a) {
          for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; })) {
            if (sub != at) {
              for (const CLI::Option* opt : sub->get_options()) {
                const auto& ln = opt->get_lnames();
                if (std::ranges::find(ln, flag.substr(2)) != ln.end() && flag.starts_with("--")) {
                  takers.push_back("'" + command_path(sub) + "'");
                  break;
                }
              }
            }
            walk(sub);
          }
        };
        walk(&app);
        if (!takers.empty()) {
          hint = fmt::format(" (it is an option of {})", fmt::join(takers, ", "));
        }
      }
      return fmt::format("unknown option '{}' for '{}'{}", flag, where, hint);
    }
  }
  if (!extra.empty()) {
    const std::string hint = did_you_mean(extra.front(), commands);
    if (!hint.empty() || dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      return fmt::format("unexpected argument '{}' for '{}'{}", extra.front(), where,
                         hint.empty() && !commands.empty()
                             ? fmt::format(" (its subcommands: {})", fmt::join(commands, ", "))
                             : hint);
    }
  }
  // CLI11's words for a value outside a set ("--phase: Decode not in {prefill,decode,train}")
  // and for a number it could not read ("Could not convert: --threads = -1"): said as the
  // project's own checks say them, with the nearest word.
  const std::string what = e.what();
  static const std::regex not_in(R"(^(-[-\w]+): (.*) not in \{(.*)\}$)");
  static const std::regex convert(R"(^Could not convert: (-[-\w]+) = (.*)$)");
  std::smatch m;
  if (std::regex_match(what, m, not_in)) {
    std::vector<std::string> words;
    std::string list = m[3].str();
    for (size_t from = 0; from <= list.size();) {
      const size_t comma = std::min(list.find(',', from), list.size());
      words.push_back(list.substr(from, comma - from));
      from = comma + 1;
    }
    return fmt::format("{}: expected one of {}, got '{}'{}", m[1].str(), fmt::join(words, ", "),
                       m[2].str(), did_you_mean(m[2].str(), words));
  }
  if (std::regex_match(what, m, convert)) {
    return fmt::format("{}: expected a whole number from 0, got '{}'", m[1].str(), m[2].str());
  }
  return what;
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
  refuse_empty_values(app);
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
    fmt::print(stderr, "error: {}\nRun with --help for usage.\n", parse_error_text(app, e));
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
  } catch (const std::bad_alloc&) {
    // Every size an input sets is capped (docs/cli.md, "Limits"), but the caps together may
    // still ask for more than this machine has: a bad input for this machine.
    std::fflush(stdout);
    fmt::print(stderr,
               "error: out of memory: this run needs more memory than the machine (or its "
               "ulimit) gives; give smaller sizes (docs/cli.md, \"Limits\")\n");
    return static_cast<int>(tierflow::ExitCode::kBadInput);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "internal error: {}\n(this is a bug in tierflow; please report it)\n",
               e.what());
    return static_cast<int>(tierflow::ExitCode::kInternal);
  }
}
