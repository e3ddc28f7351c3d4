#include "tools/cli/hw_cmd.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/json_tree.h"
#include "tools/cli/hw_describe.h"
#include "hw_models/loader.h"
#include "tools/study/hw_show.h"
#include "tools/cli/common.h"
#include "tools/study/scenario.h"

namespace tierflow::cli {
namespace {

struct HwOptions {
  std::vector<std::string> files;
  std::vector<std::string> sets;
  bool require_sources = false;
  bool json = false;
  bool markdown = false;
  bool quiet = false;
  bool all_routes = false;
  std::string output = "-";
};

void add_set_option(CLI::App* cmd, HwOptions& o) {
  cmd->add_option("--set", o.sets,
                  "override a field: PATH=VALUE, e.g. tiers.ddr.capacity=2TiB (repeatable)")
      ->check(once_per_path())
      ->type_name("PATH=VALUE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

int run_validate(const HwOptions& o) {
  hw::LoadOptions lo{o.sets, o.require_sources};
  int failed = 0;
  for (const auto& f : o.files) {
    try {
      const hw::Topology t = hw::load_topology(study::find_topology(f, f), lo);
      if (!o.quiet) {
        fmt::print("ok: {}: {} ({}, {} tiers, {} links)\n", f, t.name,
                   count_text(static_cast<uint64_t>(t.total_devices()), "device"), t.tiers.size(),
                   t.links.size());
      }
    } catch (const InputError& e) {
      print_error(e);
      ++failed;
    }
  }
  std::fflush(stdout);
  return failed == 0 ? static_cast<int>(ExitCode::kOk) : static_cast<int>(ExitCode::kBadInput);
}

int run_show(const HwOptions& o) {
  const std::string& name = o.files.front();
  const hw::Topology t =
      hw::load_topology(study::find_topology(name, name), hw::LoadOptions{o.sets, false});
  check_outputs({{"-o", o.output}});
  const std::string text =
      o.json ? json_text(study::show_json(t)) : study::show_text(t, study::ShowOptions{o.all_routes});
  write_file_atomic(o.output, text);
  return 0;
}

int run_describe(const HwOptions& o) {
  const std::string text = o.markdown ? describe_markdown() : describe_text();
  write_file_atomic(o.output, text);
  return 0;
}

}  // namespace

void add_hw_commands(CLI::App& app) {
  auto opts = std::make_shared<HwOptions>();
  CLI::App* hw = app.add_subcommand("hw", "load, check and print hardware topologies");
  hw->require_subcommand(1);

  CLI::App* validate = hw->add_subcommand(
      "validate", "check topology files; prints FILE:LINE:COL: message for each bad one");
  validate->add_option("files", opts->files, "topology YAML files or shipped names")->required();
  add_set_option(validate, *opts);
  validate->add_flag("--require-sources", opts->require_sources,
                     "every number must cite a source (as in the shipped files)");
  validate->add_flag("-q,--quiet", opts->quiet, "print only errors");
  validate->callback([opts] { throw CommandResult(run_validate(*opts)); });

  CLI::App* show = hw->add_subcommand(
      "show", "print the resolved topology: tiers, links, routes, totals per device and supernode");
  show->add_option("file", opts->files, "topology YAML file or shipped name (e.g. gh200)")
      ->required()
      ->expected(1);
  add_set_option(show, *opts);
  show->add_flag("--json", opts->json,
                 "machine-readable output in base units (always lists every route)");
  show->add_flag("--all-routes", opts->all_routes,
                 "list the route of every ordered pair of tiers, not only the local tiers'");
  show->add_option("-o,--output", opts->output, "write to FILE instead of standard output");
  show->callback([opts] { throw CommandResult(run_show(*opts)); });

  CLI::App* describe =
      hw->add_subcommand("describe", "print every topology field: type, unit, default and meaning");
  describe->add_flag("--markdown", opts->markdown, "Markdown, as in docs/hardware.md");
  describe->add_option("-o,--output", opts->output, "write to FILE instead of standard output");
  describe->callback([opts] { throw CommandResult(run_describe(*opts)); });
}

}  // namespace tierflow::cli
