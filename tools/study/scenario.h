// What one study point is: a topology with its overrides, a workload source with its
// generator parameters, an optional request shape, the device target, budget and policy
// (ARCHITECTURE §9). compare, whatif, sweep and the Python API build scenarios; a Study
// turns them into trials (tools/study/study.h).
//
// Glossary
//   scenario   every input of one plan-and-simulate: nothing else changes the answer.
//   field      a scenario input named by a path, for --vary and sweeps: a topology path
//              (`tiers.hbm.capacity`, `links.gpu-pcie.bandwidth`, `devices.h100.count`)
//              becomes a `--set` override; `model.KEY` overrides a model field; plain
//              names are generator, request and target fields (`batch`, `context`,
//              `prompt`, `generate`, `budget`, `policy`, ...; field_names() lists them).
//   request    `batch` sequences, each with a `prompt` of P tokens, then `generate` G
//              tokens: a prefill of P tokens (its last logits give the first token) and
//              G - 1 decode steps at contexts P .. P + G - 2.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/host_steps.h"
#include "planner/realize.h"
#include "traces/arch.h"
#include "traces/generate.h"

namespace tierflow::study {

/// The folder holding hw/ and models/: $TIERFLOW_CONFIG_DIR, else the source tree's configs/.
std::string config_dir();

/// The shipped topology every command defaults to: an 8-GPU H100 SXM server.
std::string default_topology();
inline constexpr std::string_view kDefaultModel = "llama-3.1-70b";

/// How rows name a topology file: a shipped one (config_dir()/hw/NAME.yaml) by its NAME,
/// the same on every checkout; any other by its path.
std::string topology_label(const std::string& file);

/// Names of the shipped topologies: the stems of config_dir()/hw/*.yaml, sorted.
std::vector<std::string> shipped_topology_names();
/// The file for `name`: a path (anything with '/', ending in .yaml or .yml, or an existing
/// file) as is, else a shipped topology (`h100-sxm-8gpu`); an unknown name is an InputError
/// at `source` naming the shipped ones, with the nearest.
std::string find_topology(const std::string& name, std::string_view source);

/// Where the workload comes from: a file, or generated from a model.
struct WorkloadSource {
  std::string file;       ///< a workload JSON (tierflow.workload/1); when set, no generation
  std::string model;      ///< a shipped model name or a model YAML (default kDefaultModel)
  std::string hf_config;  ///< a Hugging Face config.json instead of `model`
  bool hf_lenient = false;  ///< --lenient: unknown keys that change no count are warnings
  std::string lenient_flag = "--lenient";  ///< how messages name it ("lenient=True": Python)
  std::vector<std::string> model_sets;  ///< KEY=VALUE overrides of the model's fields
  std::string sets_flag = "--model-set";  ///< how errors name model_sets ("model_set": Python)
  std::string model_flag = "--model";     ///< how errors name model ("model": Python, sweeps)
  /// Phase, batch, seq, context, tokens, tp, dtypes; the routing that runs is the seeded
  /// router's (the default is realistic routing, below). Errors name the fields as specs
  /// and Python spell them; the CLI's scenarios take its flags' options, which name flags.
  traces::GenOptions gen{.routing = traces::Routing::kSeeded, .field_names = true};
  /// The default decode context cut_default_context() cut to the model's maximum (0: none
  /// cut; gen.context is what runs).
  int64_t context_cut_from = 0;
};

/// Prefill of `prompt` tokens, then `generate` tokens, for `gen.batch` sequences.
struct Request {
  int64_t prompt = 0;
  int64_t generate = 0;
};

/// How errors name a scenario's settings: as the CLI's flags (`--devices`, `--expert-cache`)
/// or as its fields (`devices`, `expert_cache`: Python's keywords).
enum class Naming : uint8_t { kFlags, kFields };

/// File fields ("hw", "workload", "hf_config", "model", "routing_trace", "trace") as a
/// sweep spec wrote them, by field.
using WrittenFiles = std::map<std::string, std::string, std::less<>>;

/// `value` of file field `field` as written, if `written` has it.
inline const std::string& shown_file(const WrittenFiles& written, std::string_view field,
                                     const std::string& value) {
  const auto it = written.find(field);
  return it != written.end() ? it->second : value;
}

struct Scenario {
  std::string hw;                 ///< topology YAML; empty: default_topology()
  std::vector<std::string> sets;  ///< topology overrides, PATH=VALUE, applied in order
  WorkloadSource workload;
  std::optional<Request> request;  ///< set: plan prefill and decode of one request
  std::string device;              ///< device class id; empty: the first
  uint32_t devices = 1;            ///< programs, one per device
  uint64_t budget = 0;             ///< device bytes per program; 0: the device tier's capacity
  std::string policy = "tierflow";
  std::vector<std::string> pins;  ///< KIND=TIER
  unsigned threads = 0;           ///< the tierflow policy's threads; 0: one per hardware thread
  /// MoE routing without foresight (`routing=realistic`): plan on the expected routing,
  /// then run the plan on the seeded routing (`gen.seed`) with misses fetched on demand
  /// (planner/realize.h). `gen.routing` is then kSeeded, the routing that runs. The
  /// default: a routing a runtime can achieve; `oracle` (the plan knows the future) and
  /// `expected` (every token reads the expected number of experts) are bounds to ask for.
  /// Dense models have no routing: the same plan either way. A workload file runs the
  /// routing it holds (the plan sees it) unless realistic routing was asked for.
  bool realistic_routing = true;
  bool routing_given = false;  ///< `routing` was set (set_field), not left at its default
  /// Realistic routing: the runtime's expert cache across tokens (`expert_cache=lru:8GiB`,
  /// planner/realize.h); the plan is made for the budget less its bytes. Off by default
  /// (each demand-fetched expert dropped after its op). Refused with another routing.
  planner::ExpertCache expert_cache;
  /// Op kinds the host CPU runs where it can (`on_host=attention`, FlexGen's `--cpu`): the
  /// plan, once made, moves them there (planner/host_steps.h). Empty: every op on the device.
  std::vector<OpKind> on_host;
  Naming naming = Naming::kFlags;  ///< how errors name the settings
  /// File fields as a sweep spec wrote them (relative to its folder), by field: what study
  /// rows show, so that a sweep's rows are the same wherever its folder lies (the fields
  /// themselves hold the resolved paths that are read).
  WrittenFiles written;

  /// The setting `field` ("expert_cache") as errors name it: "--expert-cache" or
  /// "expert_cache".
  [[nodiscard]] std::string name(std::string_view field) const;

  /// Whether this scenario runs realistic routing (realistic_routing, less a workload
  /// file's default).
  [[nodiscard]] bool realistic() const {
    return realistic_routing && (workload.file.empty() || routing_given);
  }
};

/// The values of the `routing` field: `expected`, `oracle` (the plan sees the seeded
/// routing that runs; `seeded` is read as `oracle`) and `realistic`.
inline constexpr std::array<std::string_view, 4> kRoutingModeNames = {"expected", "oracle",
                                                                      "realistic", "seeded"};

/// The names set_field() takes besides topology (`tiers.`, `links.`, ...) and `model.` paths.
const std::vector<std::string_view>& field_names();

/// Sets the field `path` to `value` (--vary, sweep axes). Throws InputError at `source`
/// for an unknown field (with "did you mean") or a value it cannot take. Topology paths
/// are appended to `sets` and checked when the topology loads.
void set_field(Scenario& s, std::string_view path, std::string_view value, std::string_view source);

/// A topology path (`tiers.hbm.capacity`, `links.X.bandwidth`, `name`): set_field() makes
/// it a `--set` override.
bool is_topology_path(std::string_view path);

/// Throws InputError at `source` unless set_field() knows `path` (with "did you mean").
void check_field(std::string_view path, std::string_view source);

/// The value of a plain field as set_field() reads it back (e.g. "16", "32GiB"); empty
/// for topology and model paths that the scenario does not override.
std::string get_field(const Scenario& s, std::string_view path);

/// One axis of a grid: a field and its values (--vary PATH=V1,V2,...; sweep axes).
struct Axis {
  std::string path;
  std::vector<std::string> values;
};

/// "PATH=V1,V2,..." as an axis; InputError at `source` when malformed.
Axis parse_axis(std::string_view text, std::string_view source);

/// The cartesian product of `axes` applied to `base`, the first axis slowest; each point
/// with the values it took, in axis order.
std::vector<std::pair<Scenario, std::vector<std::string>>> expand_grid(const Scenario& base,
                                                                       const std::vector<Axis>& axes);

/// The model of a generated workload as rows and descriptions name it: the HF config's
/// path, else the model name or YAML (kDefaultModel when none).
std::string model_label(const WorkloadSource& w);

/// The model a generated workload comes from: the HF config, else the model name or YAML
/// (kDefaultModel when none) with its overrides. Throws InputError (lenient without an HF
/// config among them: check_lenient).
traces::Arch load_model(const WorkloadSource& w);
/// `lenient` is an HF import's: set with a model or a workload file it would change nothing,
/// so it is refused (InputError at "lenient") rather than ignored.
void check_lenient(const WorkloadSource& w);

/// A warning when the scenario's workload spans more positions than its model declares
/// (Arch::max_context): a decode's context plus its tokens, a request's prompt plus what
/// it generates, a prefill's or training step's sequence. Empty when within, when the
/// model declares none, or for a workload file.
std::string context_warning(const Scenario& s);
/// The same for a model already loaded (the scenario's workload source is not read).
std::string context_warning(const traces::Arch& a, const Scenario& s);
/// "the 8192 that llama-3-8b declares (max_context, source CTX-L3)": how the warnings name
/// a model's maximum.
std::string max_context_text(const traces::Arch& a);
/// A warning when the generated weights are wider than the model's checkpoint holds them
/// (Arch::checkpoint_dtype): DeepSeek-V3's fp8 planned in bf16 is twice the bytes it ships
/// as. Empty otherwise (a narrower, quantized dtype is a choice) and for a workload file.
std::string weights_warning(const traces::Arch& a, const Scenario& s);
/// The same for weights of `weights`, the setting named as `naming` says (serve's).
std::string weights_warning(const traces::Arch& a, Dtype weights, Naming naming);
/// Both warnings that apply, the context's first: what trace gen, compare and Python's
/// generate and compare print, and a whatif answer notes.
std::vector<std::string> model_warnings(const Scenario& s);
std::vector<std::string> model_warnings(const traces::Arch& a, const Scenario& s);

/// The commands whose scenario starts from a decode of their own when the flags (or
/// Python's keywords) leave it: compare from batch 1, 8 tokens after a 4,096-token
/// context; whatif from batch 16, 8 tokens after 32,768. The CLI and Python take them here.
enum class Command : uint8_t { kCompare, kWhatIf };
void set_command_defaults(traces::GenOptions& g, Command c);

/// A decode context left at its default (not given) whose positions, with the tokens
/// generated, pass the model's max_context is cut to fit, and the default kept in
/// WorkloadSource::context_cut_from: `whatif --model llama-2-7b` asks about 4,088 tokens,
/// not 32,768. Nothing for a workload file, a request, another phase, or a model that
/// declares no maximum (or too few positions for the tokens). Throws what load_model does.
void cut_default_context(Scenario& s);
/// The same for a model already loaded (trace gen's, with its --set overrides).
void cut_default_context(Scenario& s, const traces::Arch& a);
/// What cut_default_context() did, in a line ("context 4088 tokens: ..."); empty if nothing.
/// `model_name` names the model when the scenario does not (trace gen's loaded model).
std::string context_note(const Scenario& s, std::string_view model_name = {});

/// One line saying what the workload is: "llama-3-70b decode, batch 16, 8 tokens from a
/// 32768-token context", the file's path, or the request.
std::string describe_workload(const Scenario& s, std::string_view searched = {});

}  // namespace tierflow::study
