#include "tools/cli/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/kinds.h"
#include "core/units.h"
#include "planner/pass.h"
#include "tools/study/target.h"
#include "traces/hf_import.h"

namespace tierflow::cli {
namespace {

template <size_t N>
std::vector<std::string> words(const std::array<std::string_view, N>& a) {
  return {a.begin(), a.end()};
}

}  // namespace

const CLI::Validator kPositiveFinite(
    [](std::string& text) -> std::string {
      const std::optional<double> v = parse_real(text);
      if (!v || !std::isfinite(*v) || *v <= 0) {
        return fmt::format("must be a finite number above 0, got '{}'", text);
      }
      return {};
    },
    "> 0");

const CLI::Validator kNumber(
    [](std::string& text) -> std::string {
      if (!parse_real(text)) return fmt::format("expected a number, got '{}'", text);
      return {};
    },
    "NUMBER");

const CLI::Validator kPassName(
    [](std::string& text) -> std::string {
      std::vector<std::string> names;
      for (const planner::PassInfo& p : planner::registered_passes()) names.emplace_back(p.name);
      if (std::find(names.begin(), names.end(), text) != names.end()) return {};
      return fmt::format("no pass '{}'{} (passes: {})", text, did_you_mean(text, names),
                         fmt::join(names, ", "));
    },
    "PASS");

CLI::Validator once_per_path() {
  auto seen = std::make_shared<std::map<std::string, std::string>>();
  return {[seen](std::string& text) -> std::string {
            const auto eq = text.find('=');
            if (eq == std::string::npos) return {};  // the loader names the form
            const std::string path = text.substr(0, eq);
            const auto [it, fresh] = seen->emplace(path, text.substr(eq + 1));
            if (fresh) return {};
            return fmt::format("'{}' given twice ({}, then {}): the last would win unnoticed", path,
                               it->second, text.substr(eq + 1));
          },
          "PATH=VALUE"};
}

CLI::Validator count_up_to(int64_t most) {
  return {[most](std::string& text) -> std::string {
            const ParseResult<int64_t> r = parse_count(text);
            if (!r.ok()) return r.error;
            if (r.value > most) {
              return fmt::format("'{}' is too large: at most {}", text, most);
            }
            text = std::to_string(r.value);
            return {};
          },
          "COUNT"};
}

const CLI::Validator kMilliseconds(
    [](std::string& text) -> std::string {
      try {
        text = fmt::format("{}", study::parse_milliseconds(text, ""));
      } catch (const InputError& e) {
        return e.message();
      }
      return {};
    },
    "TIME");

traces::GenOptions GenFlags::options() const {
  traces::GenOptions g = gen;
  g.phase = static_cast<traces::Phase>(*index_of(traces::kPhaseNames, phase));
  g.weight_dtype = static_cast<Dtype>(*index_of(kDtypeNames, weight_dtype));
  g.kv_dtype = static_cast<Dtype>(*index_of(kDtypeNames, kv_dtype));
  g.act_dtype = static_cast<Dtype>(*index_of(kDtypeNames, act_dtype));
  if (!compute_dtype.empty())
    g.compute_dtype = static_cast<Dtype>(*index_of(kDtypeNames, compute_dtype));
  // Study commands also take oracle and realistic (study::set_field); both run the seeded
  // routing.
  g.routing = routing == "expected" ? traces::Routing::kExpected : traces::Routing::kSeeded;
  // trace gen: a routing trace is the routing that runs unless --routing says otherwise.
  if (!g.routing_trace.empty() && (routing_option == nullptr || routing_option->count() == 0)) {
    g.routing = traces::Routing::kSeeded;
  }
  // The seed seeds the seeded router only.
  if (given(seed_option) && !g.routing_trace.empty()) {
    throw InputError::at(SourcePos{"--seed"},
                         "a routing trace's picks are given, not drawn: it would be ignored");
  }
  if (given(seed_option) && g.routing == traces::Routing::kExpected) {
    throw InputError::at(SourcePos{"--seed"},
                         "it seeds the seeded router, and --routing expected runs none: it "
                         "would be ignored");
  }
  // A flag the phase does not read would be ignored without a word.
  const bool decode = g.phase == traces::Phase::kDecode;
  for (const auto& [option, flag, used] :
       {std::tuple{seq_option, "--seq", !decode}, std::tuple{context_option, "--context", decode},
        std::tuple{tokens_option, "--tokens", decode},
        std::tuple{checkpoint_option, "--checkpoint", g.phase == traces::Phase::kTrain}}) {
    if (used || !given(option)) continue;
    throw InputError::at(
        SourcePos{flag}, "a {} step does not read it, so it would be ignored: {}", phase,
        std::string_view(flag) == "--checkpoint" ? "activation checkpointing is training's"
        : decode ? "decode takes --context (the tokens cached) and --tokens (those generated)"
                 : "prefill and training take --seq (tokens per sequence)");
  }
  return g;
}

void GenFlags::check_routing_flags(const traces::Arch& arch) const {
  if (arch.experts > 0) return;
  for (const auto& [flag, set] :
       {std::pair{"--routing", given(routing_option)}, std::pair{"--seed", given(seed_option)},
        std::pair{"--routing-skew", gen.routing_skew != 0},
        std::pair{"--routing-repeat", gen.routing_repeat != 0},
        std::pair{"--routing-trace", !gen.routing_trace.empty()}}) {
    if (!set) continue;
    throw InputError::at(SourcePos{flag},
                         "{} has no routed experts (a dense model): the router's settings would "
                         "be ignored",
                         arch.name);
  }
}

void add_gen_flags(CLI::App* cmd, GenFlags& f, bool routing_modes) {
  f.phase_option = cmd->add_option("--phase", f.phase, "prefill, decode or train")
                       ->check(CLI::IsMember(words(traces::kPhaseNames)))
                       ->capture_default_str();
  cmd->add_option("--batch", f.gen.batch, "sequences")
      ->transform(count_of(f.gen.batch))
      ->capture_default_str();
  f.seq_option = cmd->add_option("--seq", f.gen.seq, "prefill/training tokens per sequence")
                     ->transform(count_of(f.gen.seq))
                     ->capture_default_str();
  f.context_option = cmd->add_option("--context", f.gen.context, "decode: tokens already cached")
                         ->transform(count_of(f.gen.context))
                         ->capture_default_str();
  f.tokens_option = cmd->add_option("--tokens", f.gen.tokens, "decode: tokens to generate")
                        ->transform(count_of(f.gen.tokens))
                        ->capture_default_str();
  cmd->add_option("--tp", f.gen.tp, "tensor-parallel degree (the workload is one shard)")
      ->transform(count_of(f.gen.tp))
      ->capture_default_str();
  for (auto [flag, target, what] : {std::tuple{"--weight-dtype", &f.weight_dtype, "weights"},
                                    {"--kv-dtype", &f.kv_dtype, "KV cache"},
                                    {"--act-dtype", &f.act_dtype, "activations"}}) {
    cmd->add_option(flag, *target, fmt::format("element type of the {}", what))
        ->check(CLI::IsMember(words(kDtypeNames)))
        ->capture_default_str();
  }
  cmd->add_option("--compute-dtype", f.compute_dtype,
                  "arithmetic of matmuls on quantized weights: the activation dtype (default) "
                  "or the weight dtype (fp8 weights on fp8 tensor cores)")
      ->check(CLI::IsMember(words(kDtypeNames)));
  cmd->add_option("--quant-group", f.gen.quant_group,
                  "quantized weights: input elements per scale, 0 = per output channel (default "
                  "128 for int4/int8/fp4, per channel for fp8)")
      ->transform(count_of(f.gen.quant_group));  // a negative group was read as the default
  cmd->add_flag("--quant-zeros", f.gen.quant_zeros,
                "quantized int4/int8 weights: asymmetric, a zero point per group (AWQ); default "
                "symmetric (GPTQ sym)");
  cmd->add_option("--kv-block", f.gen.kv_block, "tokens per KV-cache block tensor")
      ->transform(count_of(f.gen.kv_block))
      ->capture_default_str();
  f.checkpoint_option = cmd->add_flag("--checkpoint", f.gen.checkpoint,
                                      "training: activation checkpointing per layer");
  if (routing_modes) {
    f.routing = "realistic";  // the study's default (study::Scenario)
    f.routing_option =
        cmd->add_option(
               "--routing", f.routing,
               "MoE: 'expected' distinct-expert count; 'oracle' (or 'seeded'): plan and run "
               "the seeded router; 'realistic': plan on expected, run the seeded router, "
               "misses fetched on demand")
            ->check(CLI::IsMember(words(study::kRoutingModeNames)))
            ->capture_default_str();
    cmd->add_option("--expert-cache", f.expert_cache,
                    "realistic routing: the runtime's expert cache across tokens, on top of the "
                    "plan: none, lru:SIZE or lfu:SIZE, optionally ',predict' (prefetch the next "
                    "layer's most picked experts)");
  } else {
    f.routing_option = cmd->add_option(
        "--routing", f.routing,
        "MoE: 'expected' distinct-expert count or a 'seeded' random router (with "
        "--routing-trace: the trace's picks; the default then)")
        ->check(CLI::IsMember(words(traces::kRoutingNames)))
        ->capture_default_str();
  }
  f.seed_option =
      cmd->add_option("--seed", f.gen.seed, "seed of the seeded router")
          ->transform(count_of(
              f.gen.seed))  // -1 became 2^64 - 1; the fields (Python, sweeps) refuse it too
          ->capture_default_str();
  cmd->add_option("--routing-skew", f.gen.routing_skew,
                  "seeded router: expert popularity falls as 1 / rank^S (0: uniform)");
  cmd->add_option("--micro-batches", f.gen.micro_batches,
                  "decode and prefill: run the batch as N micro-batches in FlexGen's zig-zag "
                  "block schedule (each layer for every micro-batch in turn)")
      ->transform(count_of(f.gen.micro_batches))
      ->capture_default_str();
  cmd->add_option("--routing-trace", f.gen.routing_trace,
                  "MoE: the experts a real router picked (tierflow.routing/1 JSON Lines, "
                  "docs/formats.md) instead of the seeded router's");
  cmd->add_option("--routing-repeat", f.gen.routing_repeat,
                  "seeded router: probability that a token takes its predecessor's experts");
  cmd->add_option("--layers", f.gen.layers, "generate only the first N layers (0 = all)")
      ->transform(count_of(f.gen.layers))
      ->capture_default_str();
}

void add_target_flags(CLI::App* cmd, ScenarioFlags& f) {
  cmd->add_option("--hw", f.hw,
                  "topology: a shipped name (e.g. rtx4090-workstation) or a YAML file "
                  "(default: h100-sxm-8gpu)");
  cmd->add_option("--set", f.sets, "override a topology field: PATH=VALUE (repeatable)")
      ->check(once_per_path());
  cmd->add_option("--device", f.device, "device class (default: the first)");
  cmd->add_option("--devices", f.devices,
                  "programs, one per device: 1 (the default of every command), N, or 0 for every "
                  "device of the class")
      ->capture_default_str();
  cmd->add_option("--budget", f.budget, "device bytes per device (default: its capacity)");
  cmd->add_option("--pin", f.pins,
                  "KIND=TIER[:FRACTION][,TIER:FRACTION...]: home a kind's tensors (or those "
                  "fractions of its bytes) there, e.g. weight=ddr:0.4 (repeatable)");
  cmd->add_option("--on-host", f.on_host,
                  "op kinds the host CPU runs next to its tier where it can, e.g. attention "
                  "(FlexGen's --cpu: pin the KV cache there with --pin kv=ddr); the topology's "
                  "system.cpu times them");
  cmd->add_option("--threads", f.threads,
                  "threads for the tierflow policy's pipelines (default: one per hardware "
                  "thread; the results do not depend on it)");
}

std::string model_flag_help() {
  return fmt::format("a shipped model (configs/models/NAME.yaml) or a model YAML (default {})",
                     study::kDefaultModel);
}

void add_workload_flags(CLI::App* cmd, ScenarioFlags& f) {
  auto* file = cmd->add_option("--workload", f.workload, "workload JSON instead of generating one");
  auto* model = cmd->add_option("--model", f.model, model_flag_help());
  auto* hf = cmd->add_option("--hf-config", f.hf_config, "a Hugging Face config.json");
  file->excludes(model)->excludes(hf);
  model->excludes(hf);
  cmd->add_flag("--lenient", f.lenient,
                "with --hf-config: warn about unknown config.json fields instead of failing, "
                "except those that are (or look like) fields known to change counts")
      ->needs(hf);
  const size_t before = cmd->get_options().size();
  cmd->add_option("--model-set", f.model_sets, "override a model field: KEY=VALUE (repeatable)")
      ->check(once_per_path());
  add_gen_flags(cmd, f.gen, /*routing_modes=*/true);
  // A workload file holds its own shape: the generator's options with it were ignored.
  const std::vector<CLI::Option*> options = cmd->get_options();
  for (size_t i = before; i < options.size(); ++i) {
    const std::string& name = options[i]->get_name();
    if (name != "--routing" && name != "--expert-cache") file->excludes(options[i]);
  }
  cmd->add_option("--prompt", f.prompt,
                  "request: prompt tokens; with --generate, plans prefill and decode and "
                  "reports TTFT, TPOT and throughput")
      ->transform(count_of(f.prompt));
  cmd->add_option("--generate", f.generate, "request: tokens generated per sequence")
      ->transform(count_of(f.generate));
}

namespace {

/// --lenient: the importer's warnings, once, before the command runs (the study imports
/// again without printing them).
void print_hf_warnings(const std::string& hf_config) {
  std::vector<std::string> warnings;
  traces::import_hf_config(hf_config, {true, &warnings});
  for (const std::string& w : warnings) fmt::print(stderr, "{}\n", w);
}

}  // namespace

study::Scenario to_scenario(const ScenarioFlags& f) {
  study::Scenario s;
  s.hw = f.hw.empty() ? f.hw : study::find_topology(f.hw, "--hw");
  s.sets = f.sets;
  s.device = f.device;
  s.devices = f.devices;
  if (!f.budget.empty()) s.budget = study::parse_budget(f.budget, "--budget");
  s.pins = f.pins;
  s.policy = f.policy;
  s.threads = f.threads;
  s.workload.file = f.workload;
  s.workload.model = f.model;
  s.workload.hf_config = f.hf_config;
  s.workload.hf_lenient = f.lenient;
  if (f.lenient) print_hf_warnings(f.hf_config);
  s.workload.model_sets = f.model_sets;
  // A request makes its own prefill and decode steps from --prompt and --generate.
  if (f.prompt > 0 || f.generate > 0) {
    for (const auto& [option, flag] :
         {std::pair{f.gen.phase_option, "--phase"}, std::pair{f.gen.seq_option, "--seq"},
          std::pair{f.gen.context_option, "--context"},
          std::pair{f.gen.tokens_option, "--tokens"}}) {
      if (!GenFlags::given(option)) continue;
      throw InputError::at(SourcePos{flag},
                           "a request (--prompt, --generate) makes its own prefill and decode "
                           "steps, so it would be ignored");
    }
  }
  s.workload.gen = f.gen.options();
  // Left at its default, routing stays the scenario's (realistic; a workload file's own).
  if (f.gen.routing_option == nullptr || f.gen.routing_option->count() > 0) {
    study::set_field(s, "routing", f.gen.routing, "--routing");
  }
  if (!f.gen.expert_cache.empty()) study::set_field(s, "expert_cache", f.gen.expert_cache, "--expert-cache");
  if (!f.on_host.empty()) study::set_field(s, "on_host", f.on_host, "--on-host");
  if ((f.prompt > 0) != (f.generate > 0)) {
    throw CLI::ValidationError("--prompt and --generate go together (a request)");
  }
  if (f.prompt < 0 || f.generate < 0) throw CLI::ValidationError("--prompt and --generate must be >= 1");
  if (f.prompt > 0) s.request = study::Request{f.prompt, f.generate};
  if (s.request && !f.workload.empty()) {
    throw CLI::ValidationError("a request (--prompt/--generate) is generated from --model or --hf-config, not --workload");
  }
  // A default context past the model's declared maximum is cut to it (the study's rule).
  if (f.gen.context_option != nullptr && f.gen.context_option->count() == 0) {
    study::cut_default_context(s);
  }
  // The files the scenario reads are inputs from now: an output naming one is refused
  // before any work (check_outputs), not once the study has read it.
  for (const std::string* file : {&s.hw, &s.workload.file, &s.workload.hf_config, &s.workload.model,
                                  &s.workload.gen.routing_trace}) {
    if (!file->empty()) guard_file(*file);
  }
  return s;
}

void add_plan_topology_flags(CLI::App* cmd, std::string& hw, std::vector<std::string>& sets) {
  cmd->add_option(
      "--hw", hw,
      "topology: a shipped name or a YAML file (default: the file the plan references)");
  cmd->add_option(
         "--set", sets,
         "override a topology field: PATH=VALUE (repeatable; after those the plan records)")
      ->check(once_per_path());
}

void add_serve_setting_flags(CLI::App* cmd, study::ServeSettings& s) {
  cmd->add_option("--hw", s.hw, "topology YAML or shipped name (default h100-sxm-8gpu)");
  cmd->add_option("--set", s.sets, "override a topology field: PATH=VALUE (repeatable)")
      ->check(once_per_path());
  cmd->add_option("--nodes", s.nodes,
                  "copies of the topology serving together, each a node of its hosts "
                  "(default 1); replicas fill them in turn")
      ->transform(count_of(s.nodes));
  cmd->add_option("--model", s.model.model, model_flag_help());
  cmd->add_option("--hf-config", s.model.hf_config, "a Hugging Face config.json instead");
  cmd->add_option("--model-set", s.model.model_sets, "override a model field: KEY=VALUE")
      ->check(once_per_path());
  auto* trace = cmd->add_option("--trace", s.trace, "request trace: Mooncake JSONL or Azure CSV");
  cmd->add_option("--arrivals", s.arrivals,
                  "generate requests instead: poisson|gamma,rate=R/s,n=N,prompt=...,output=... "
                  "(docs/serving.md)")
      ->excludes(trace);
  cmd->add_option("--rate-scale", s.trace_options.rate_scale,
                  "replay arrivals this many times faster (0.5: half the rate)")
      ->check(kNumber);
  cmd->add_option("--first", s.trace_options.first, "serve only the first N requests")
      ->transform(count_of(s.trace_options.first));
  cmd->add_option("--block-tokens", s.trace_options.block_tokens,
                  "tokens per KV block (default 512); of a Mooncake trace, a divisor of 512 "
                  "splits its 512-token blocks into pages")
      ->transform(count_of(s.trace_options.block_tokens));
  cmd->add_option("--warmup", s.warmup, "leave requests arriving before this out of the metrics");
  cmd->add_option("--device", s.engine.device, "device class (default: the first)");
  for (auto [flag, value, help] :
       {std::tuple{"--tp", &s.model.gen.tp,
                   "devices per replica, tensor parallel (default 0: the least power of two "
                   "that leaves the model room for KV, said in a note)"},
        std::tuple{"--pp", &s.engine.pp,
                   "pipeline stages per replica, each of --tp devices (default: 1, or with "
                   "--tp not given either, the least that leave the model room for KV where no "
                   "TP does, said in a note)"},
        std::tuple{"--replicas", &s.engine.replicas,
                   "data-parallel replicas (default: as many as the devices hold beside any "
                   "prefill replicas, said in a note); with --prefill-replicas, those decoding"},
        std::tuple{"--prefill-replicas", &s.engine.prefill_replicas,
                   "disaggregated prefill: replicas more that only compute prompts, their KV "
                   "cache handed to the decode replicas over the peer route (default 0: none)"},
        std::tuple{"--prefill-tp", &s.engine.prefill_tp,
                   "disaggregated prefill: the prefill replicas' devices (default: --tp)"}}) {
    cmd->add_option(flag, *value, help)->transform(count_of(*value));
  }
  cmd->add_option("--router", s.router,
                  "round-robin (default), least-loaded, prefix (the longest cached prefix) or "
                  "kv-aware (the least prompt work: queued plus uncached)");
  cmd->add_option("--decode-router", s.decode_router,
                  "disaggregated: the decode replica a prompt's KV goes to: least-loaded "
                  "(default), round-robin or prefix (the one holding most of its blocks)");
  cmd->add_option("--token-budget", s.engine.token_budget, "iteration token budget (default 8192)")
      ->transform(count_of(s.engine.token_budget));
  cmd->add_option("--max-seqs", s.engine.max_seqs, "running sequences per replica (default 256)")
      ->transform(count_of(s.engine.max_seqs));
  cmd->add_option("--device-policy", s.device_policy,
                  "eviction of the device level's cached blocks: lru (default), lfu, s3fifo");
  cmd->add_option("--preemption", s.preemption, "when KV blocks run out: recompute (default)|swap");
  cmd->add_option("--swap-space", s.swap_space, "swap preemption: space per device (default 4GiB)");
  cmd->add_option("--swap-tier", s.swap_tier, "swap preemption: its tier (default: the first DDR)");
  cmd->add_option("--spec-tokens", s.engine.spec.tokens,
                  "speculative decoding: draft tokens each decode step proposes and verifies "
                  "(default 0: off)")
      ->transform(count_of(s.engine.spec.tokens));
  cmd->add_option("--spec-accept", s.engine.spec.accept,
                  "speculative decoding: each draft token's acceptance probability, 0 to 1")
      ->check(kNumber);
  cmd->add_option("--spec-draft", s.spec_draft,
                  "speculative decoding: the draft model (shipped name or YAML; default: n-gram "
                  "lookup, no model)");
  cmd->add_option("--kv-tiers", s.kv_tiers,
                  "KV tiers below the device, nearest first: TIER[:SIZE|PCT%][:lru|lfu|s3fifo]"
                  "[:back|through][:all|second],...  e.g. ddr:512GiB,ssd:25%");
  cmd->add_option("--load", s.load,
                  "prefix hits below the device load before the prefill or layered with it "
                  "(default layered)");
  for (auto [flag, value] :
       {std::pair{"--weight-dtype", &s.weight_dtype}, std::pair{"--kv-dtype", &s.kv_dtype},
        std::pair{"--act-dtype", &s.act_dtype}}) {
    cmd->add_option(flag, *value,
                    fmt::format("element type: {} (default bf16)", fmt::join(kDtypeNames, ", ")));
  }
  cmd->add_option("--slo", s.slo, "goodput bounds: ttft=2s,tpot=100ms,e2e=30s (any of them)");
  cmd->add_flag("--cache-only", s.cache_only,
                "replay the trace against the cache alone: hits per level, no time");
  cmd->add_option("--timeline", s.timeline,
                  "write a Chrome trace (ui.perfetto.dev): iterations, sequences, level "
                  "occupancy, KV transfers");
}

}  // namespace tierflow::cli
