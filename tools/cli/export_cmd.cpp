#include "tools/cli/export_cmd.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "core/io.h"
#include "core/plan_json.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/export/export.h"
#include "tools/study/study.h"

namespace tierflow::cli {
namespace {

struct ExportCliOptions {
  std::string plan;
  std::string hw;
  std::vector<std::string> sets;
  std::string format;
  std::string output;
  std::string on_full = "fail";
  CLI::Option* on_full_option = nullptr;  ///< whether --on-full was given
  std::string stem;
  bool inline_workload = false;
  bool list = false;
};

int run_export(const ExportCliOptions& o) {
  if (o.list) {
    fmt::print("{}", exporter::formats_table());
    return static_cast<int>(ExitCode::kOk);
  }
  // Required unless --list-formats, so checked here, in the words main() gives the others.
  if (o.plan.empty())
    throw CLI::ValidationError("'tierflow export' needs --plan: plan JSON (tierflow.plan/2)");
  if (o.format.empty()) {
    throw CLI::ValidationError("'tierflow export' needs --format: one of --list-formats");
  }
  if (o.output.empty()) {
    throw CLI::ValidationError(
        "'tierflow export' needs -o: a file ('-' for standard output) or a folder");
  }
  const exporter::Format& format = exporter::find_format(o.format);
  // A flag the format does not read would be ignored without a word.
  if (o.inline_workload && format.name != "plan-json") {
    throw InputError::at(SourcePos{"--inline-workload"},
                         "plan-json embeds the workload; {} does not read it: it would be ignored",
                         format.name);
  }
  if (!o.stem.empty() && format.name != "chakra") {
    throw InputError::at(SourcePos{"--stem"},
                         "chakra names its traces by it; {} does not: it would be ignored",
                         format.name);
  }
  if (o.on_full_option != nullptr && o.on_full_option->count() > 0 &&
      format.sim == exporter::SimNeed::kNone) {
    throw InputError::at(SourcePos{"--on-full"},
                         "{} is not simulated, so no tier fills: it would be ignored", format.name);
  }
  // A simulated format leaves the rules to the simulator, which says when a broken step is
  // reached; plan-json is not simulated and verifies the plan as it reads it.
  const LoadedPlan lp = read_plan(o.plan, /*verify=*/format.sim == exporter::SimNeed::kNone);
  const hw::Topology topo = study::plan_topology(lp.plan, o.plan, o.hw, o.sets);
  // A file format's output over an input is refused naming -o (a folder, by the format).
  if (format.output == exporter::OutputKind::kFile && !std::filesystem::is_directory(o.output)) {
    check_outputs({{"-o", o.output}});
  }

  exporter::ExportOptions eo;
  eo.on_full = o.on_full == "wait" ? sim::OnFull::kWait : sim::OnFull::kFail;
  eo.inline_workload = o.inline_workload;
  eo.stem = o.stem;
  eo.hw = o.hw;
  eo.sets = o.sets;
  const exporter::ExportOutcome out =
      exporter::run_export(format, lp.plan, lp.workload, topo, o.plan, o.output, eo);
  if (out.error) return print_run_error(o.plan, *out.error);
  if (o.output != "-") fmt::print(stderr, "wrote {}\n", o.output);
  print_notes(out.notes);
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "write a plan, simulated once, in another format (Chakra ET, CSV, Chrome trace, ...)");
  cmd->add_option("--plan", o->plan, "plan JSON (tierflow.plan/2)");
  cmd->add_option("--format", o->format, "output format (see --list-formats)");
  cmd->add_option("-o,--output", o->output,
                  "where to write: a file ('-' = standard output), or a folder for chakra");
  add_plan_topology_flags(cmd, o->hw, o->sets);
  o->on_full_option =
      cmd->add_option("--on-full", o->on_full,
                      "when a tier is full: fail (the default: an error naming the step) or wait")
          ->check(CLI::IsMember({"fail", "wait"}));
  cmd->add_flag("--inline-workload", o->inline_workload,
                "plan-json: embed the workload instead of referencing its file");
  cmd->add_option("--stem", o->stem,
                  "chakra: name the traces STEM.PROGRAM.et (default: the plan file's name)");
  cmd->add_flag("--list-formats", o->list, "print the formats and exit");
  cmd->callback([o] { throw CommandResult(run_export(*o)); });
}

}  // namespace tierflow::cli
