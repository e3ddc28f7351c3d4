#include "tools/cli/trace_cmd.h"

#include <fmt/format.h>

#include <memory>

#include "core/io.h"
#include "core/json_tree.h"
#include "core/workload_json.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/scenario.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"
#include "traces/hf_import.h"
#include "traces/workload_info.h"

namespace tierflow::cli {

namespace {

struct TraceOptions {
  std::string model;
  std::string hf_config;
  bool lenient = false;
  GenFlags gen;
  std::vector<std::string> sets;
  std::string output;
  std::string file;
  bool json = false;
  int top = 10;
};

int run_gen(TraceOptions& o) {
  traces::Arch arch;
  if (!o.hf_config.empty()) {
    std::vector<std::string> warnings;
    arch = traces::import_hf_config(o.hf_config, {o.lenient, &warnings});
    for (const std::string& w : warnings) fmt::print(stderr, "{}\n", w);
    fmt::print(stderr, "model '{}': named by {}\n", arch.name, arch.sources.at("name"));
  } else {
    arch = traces::load_arch(traces::find_arch(o.model, study::config_dir(), "--model"), o.sets);
  }
  check_outputs({{"-o", o.output}});
  study::Scenario s;
  s.workload.gen = o.gen.options();
  o.gen.check_routing_flags(arch);
  if (o.gen.context_option->count() == 0) study::cut_default_context(s, arch);
  if (const std::string n = study::context_note(s, arch.name); !n.empty()) {
    fmt::print(stderr, "note: {}\n", n);
  }
  for (const std::string& warn : study::model_warnings(arch, s)) {
    fmt::print(stderr, "warning: {}\n", warn);
  }
  const Workload w = traces::generate(arch, s.workload.gen);
  write_file_atomic(o.output, write_workload(w));
  if (o.output != "-") {
    fmt::print(stderr, "wrote {}: {} ops, {} tensors\n", o.output, w.ops.size(), w.tensors.size());
  }
  return 0;
}

int run_info(const TraceOptions& o) {
  const Workload w = read_workload(o.file);
  check_outputs({{"-o", o.output}});
  const traces::InfoOptions io{o.top};
  const std::string text = o.json ? json_text(traces::info_json(w, io)) : traces::info_text(w, io);
  write_file_atomic(o.output.empty() ? "-" : o.output, text);
  return 0;
}

int run_import(const TraceOptions& o) {
  // The command ends right after this: the workload (three heap blocks per op) is left to
  // the process exit, which takes its memory back at once, where freeing it block by block
  // took a tenth of the command for a million ops. The global keeps it reachable: volatile,
  // so that an optimizing build cannot drop the store (the leak checker saw a leak at -O1).
  static const Workload* volatile kept = nullptr;
  kept = new Workload(read_workload(o.file));
  const Workload& w = *kept;
  check_outputs({{"-o", o.output}});
  if (!o.output.empty()) write_file_atomic(o.output, write_workload(w));
  fmt::print(stderr, "ok: {}: {} ops, {} tensors{}\n", o.file, w.ops.size(), w.tensors.size(),
             o.output.empty() ? "" : fmt::format(", written to {}", o.output));
  return 0;
}

}  // namespace

void add_trace_commands(CLI::App& app) {
  auto o = std::make_shared<TraceOptions>();
  CLI::App* trace = app.add_subcommand("trace", "generate, import and inspect workloads");
  trace->require_subcommand(1);

  CLI::App* gen =
      trace->add_subcommand("gen", "generate the operator graph of one step of a model");
  auto* model = gen->add_option("--model", o->model,
                                "a shipped model (configs/models/NAME.yaml) or a model YAML file");
  auto* hf = gen->add_option("--hf-config", o->hf_config, "a Hugging Face config.json");
  model->excludes(hf);
  hf->excludes(model);
  gen->add_flag("--lenient", o->lenient,
                "with --hf-config: warn about unknown config.json fields instead of failing, "
                "except those that are (or look like) fields known to change counts")
      ->needs(hf);
  add_gen_flags(gen, o->gen);
  gen->add_option("--set", o->sets, "override a model field: KEY=VALUE (repeatable)")
      ->check(once_per_path())
      ->type_name("KEY=VALUE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  gen->add_option("-o,--output", o->output, "workload JSON to write ('-' for standard output)")
      ->required();
  gen->callback([o] {
    if (o->model.empty() && o->hf_config.empty()) {
      throw CLI::RequiredError("--model or --hf-config");
    }
    throw CommandResult(run_gen(*o));
  });

  CLI::App* info = trace->add_subcommand(
      "info", "ops, tensors, parameters, bytes by kind, KV per token, FLOPs, largest tensors");
  info->add_option("file", o->file, "workload JSON")->required();
  info->add_flag("--json", o->json, "machine-readable output");
  info->add_option("--top", o->top, "how many of the largest tensors to list")
      ->capture_default_str()
      ->check(CLI::Range(0, traces::kMaxInfoTop));
  info->add_option("-o,--output", o->output, "write to FILE instead of standard output");
  info->callback([o] { throw CommandResult(run_info(*o)); });

  CLI::App* imp = trace->add_subcommand(
      "import", "read and verify a workload JSON (e.g. from python -m tierflow_export)");
  imp->add_option("file", o->file, "workload JSON")->required();
  imp->add_option("-o,--output", o->output, "write the verified workload in canonical form");
  imp->callback([o] { throw CommandResult(run_import(*o)); });
}

}  // namespace tierflow::cli
