#include "tools/trace_cmd.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "core/io.h"
#include "core/workload_json.h"
#include "tools/cli_common.h"
#include "traces/arch_loader.h"
#include "traces/generate.h"
#include "traces/hf_import.h"
#include "traces/workload_info.h"

#ifndef TIERFLOW_CONFIG_DIR
#define TIERFLOW_CONFIG_DIR "configs"
#endif

namespace tierflow::cli {

std::string config_dir() {
  const char* env = std::getenv("TIERFLOW_CONFIG_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(TIERFLOW_CONFIG_DIR);
}

namespace {

struct TraceOptions {
  std::string model;
  std::string hf_config;
  std::string phase = "decode";
  traces::GenOptions gen;
  std::string weight_dtype = "bf16", kv_dtype = "bf16", act_dtype = "bf16", routing = "expected";
  std::vector<std::string> sets;
  std::string output;
  std::string file;
  bool json = false;
  int top = 10;
};

template <size_t N>
std::vector<std::string> names(const std::array<std::string_view, N>& a) {
  return {a.begin(), a.end()};
}

template <size_t N>
size_t index(const std::array<std::string_view, N>& a, const std::string& v) {
  return *index_of(a, v);  // CLI11 checked membership already
}

int run_gen(TraceOptions& o) {
  traces::Arch arch;
  if (!o.hf_config.empty()) {
    arch = traces::import_hf_config(o.hf_config);
  } else {
    arch = traces::load_arch(traces::find_arch(o.model, config_dir()), o.sets);
  }
  traces::GenOptions g = o.gen;
  g.phase = static_cast<traces::Phase>(index(traces::kPhaseNames, o.phase));
  g.weight_dtype = static_cast<Dtype>(index(kDtypeNames, o.weight_dtype));
  g.kv_dtype = static_cast<Dtype>(index(kDtypeNames, o.kv_dtype));
  g.act_dtype = static_cast<Dtype>(index(kDtypeNames, o.act_dtype));
  g.routing = static_cast<traces::Routing>(index(traces::kRoutingNames, o.routing));
  const Workload w = traces::generate(arch, g);
  write_file_atomic(o.output, write_workload(w));
  if (o.output != "-") {
    fmt::print(stderr, "wrote {}: {} ops, {} tensors\n", o.output, w.ops.size(), w.tensors.size());
  }
  return 0;
}

int run_info(const TraceOptions& o) {
  const Workload w = read_workload(o.file);
  const traces::InfoOptions io{o.top};
  const std::string text =
      o.json ? traces::info_json(w, io).dump(2) + "\n" : traces::info_text(w, io);
  write_file_atomic(o.output.empty() ? "-" : o.output, text);
  return 0;
}

int run_import(const TraceOptions& o) {
  // The command ends right after this: the workload (three heap blocks per op) is left to
  // the process exit, which takes its memory back at once, where freeing it block by block
  // took a tenth of the command for a million ops. The global keeps it reachable.
  static const Workload* kept = nullptr;
  kept = new Workload(read_workload(o.file));
  const Workload& w = *kept;
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
  gen->add_option("--phase", o->phase, "prefill, decode or train")
      ->check(CLI::IsMember(names(traces::kPhaseNames)))
      ->capture_default_str();
  gen->add_option("--batch", o->gen.batch, "sequences")->capture_default_str();
  gen->add_option("--seq", o->gen.seq, "prefill/training tokens per sequence")
      ->capture_default_str();
  gen->add_option("--context", o->gen.context, "decode: tokens already cached")
      ->capture_default_str();
  gen->add_option("--tokens", o->gen.tokens, "decode: tokens to generate")->capture_default_str();
  gen->add_option("--tp", o->gen.tp, "tensor-parallel degree (the workload is one shard)")
      ->capture_default_str();
  for (auto [flag, target, what] : {std::tuple{"--weight-dtype", &o->weight_dtype, "weights"},
                                    {"--kv-dtype", &o->kv_dtype, "KV cache"},
                                    {"--act-dtype", &o->act_dtype, "activations"}}) {
    gen->add_option(flag, *target, fmt::format("element type of the {}", what))
        ->check(CLI::IsMember(names(kDtypeNames)))
        ->capture_default_str();
  }
  gen->add_option("--kv-block", o->gen.kv_block, "tokens per KV-cache block tensor")
      ->capture_default_str();
  gen->add_flag("--checkpoint", o->gen.checkpoint, "training: activation checkpointing per layer");
  gen->add_option("--routing", o->routing,
                  "MoE: 'expected' distinct-expert count or a 'seeded' random router")
      ->check(CLI::IsMember(names(traces::kRoutingNames)))
      ->capture_default_str();
  gen->add_option("--seed", o->gen.seed, "seed of the seeded router")->capture_default_str();
  gen->add_option("--layers", o->gen.layers, "generate only the first N layers (0 = all)")
      ->capture_default_str();
  gen->add_option("--set", o->sets, "override a model field: KEY=VALUE (repeatable)")
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
      ->capture_default_str();
  info->add_option("-o,--output", o->output, "write to FILE instead of standard output");
  info->callback([o] { throw CommandResult(run_info(*o)); });

  CLI::App* imp = trace->add_subcommand(
      "import", "read and verify a workload JSON (e.g. from tools/torch_export.py)");
  imp->add_option("file", o->file, "workload JSON")->required();
  imp->add_option("-o,--output", o->output, "write the verified workload in canonical form");
  imp->callback([o] { throw CommandResult(run_import(*o)); });
}

}  // namespace tierflow::cli
