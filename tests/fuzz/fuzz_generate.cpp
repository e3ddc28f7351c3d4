// libFuzzer target: the value paths from the command line to bytes. An input is the
// flags of `tierflow trace gen` (one or more per line, parsed by the CLI's own flag
// definitions, tools/cli/flags.cpp) followed by a Hugging Face config.json (from the first
// line that starts with '{'). Every number the user gives (counts on the command line,
// sizes in the config) flows through the importer, the generator, the workload format,
// the planner's bounds and the simulator. What must hold:
//   - a bad value is refused by the flag parser, or as an InputError naming the config or
//     the flag (position "--NAME"), never anything else;
//   - a generated workload follows the format (verify_workload) and reads back from its
//     JSON text to the same text;
//   - its resident plan, simulated on a machine large enough to hold it, ends no earlier
//     than the planner's makespan lower bound, at a time no later than the simulator's
//     limit, and never crashes or overflows (the sanitizers' part).
// Workloads above kMaxFuzzOps estimated ops are not generated (a few seconds each under
// the sanitizers): the generator's count limits are the hostile suite's
// (tests/e2e/hostile_test.sh); sizes, which decide bytes, are not capped here.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/workload_json.h"
#include "hw_models/loader.h"
#include "planner/planner.h"
#include "sim/simulator.h"
#include "tests/fuzz/fuzz_common.h"
#include "tools/cli/flags.h"
#include "traces/hf_import.h"

namespace {

using namespace tierflow;

constexpr int64_t kMaxFuzzOps = int64_t{1} << 16;

/// One H100 of the shipped 8-GPU server with HBM and host memory large enough for any
/// workload the generator accepts, so that the resident plan fits and runs.
const hw::Topology& roomy_h100() {
  static const hw::Topology t = hw::load_topology(
      std::string(TIERFLOW_SOURCE_DIR) + "/configs/hw/h100-sxm-8gpu.yaml",
      {.overrides = {"tiers.hbm.capacity=1000PB", "tiers.ddr.capacity=1000PB"}});
  return t;
}

/// Ops the generator would make, roughly (an upper estimate, per layer and step).
int64_t estimated_ops(const traces::Arch& a, const traces::GenOptions& o) {
  const int64_t layers = o.layers > 0 ? std::min<int64_t>(o.layers, a.layers) : a.layers;
  int64_t steps = 1;
  if (o.phase == traces::Phase::kDecode) steps = std::max<int64_t>(o.tokens, 1);
  if (o.phase == traces::Phase::kTrain) steps = 4;  // forward, recompute, backward, optimizer
  const int64_t per_layer = 64 + 4 * std::max(a.experts, 0);
  // Saturates well below overflow: every factor is bounded by the generator's limits or
  // compared before multiplying.
  if (steps > kMaxFuzzOps || layers > kMaxFuzzOps) return kMaxFuzzOps + 1;
  return steps * (layers + 1) * per_layer;
}

/// The flags (one or more per line) and the config text of an input.
struct Input {
  std::vector<std::string> args;
  std::string config;
};

Input split(const std::string& text) {
  Input in;
  size_t pos = 0;
  while (pos < text.size() && text[pos] != '{') {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::istringstream line(text.substr(pos, end - pos));
    for (std::string word; line >> word;) in.args.push_back(word);
    pos = end + 1;
  }
  if (pos < text.size()) in.config = text.substr(pos);
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Input in = split(fuzz::text_of(data, size));
  if (in.args.size() > 64) return 0;

  // The flags, as `tierflow trace gen` declares them.
  cli::GenFlags flags;
  CLI::App app("fuzz", "gen");
  cli::add_gen_flags(&app, flags);
  std::vector<std::string> reversed(in.args.rbegin(), in.args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError&) {
    return 0;  // the CLI prints it and exits 2
  }
  traces::GenOptions options;
  try {
    options = flags.options();
  } catch (const InputError& e) {
    // A flag the step does not read (--checkpoint in decode, ...): the CLI's exit 2.
    if (!e.pos().file.starts_with("--") || e.message().empty())
      fuzz::fail("a refused flag is not named", e.what(), "");
    return 0;
  }
  // A routing trace is a file: the fuzzer opens none (its reader is fuzz_routing's target,
  // the generator's use of it the unit tests').
  if (!options.routing_trace.empty()) return 0;

  const std::string name = "config.json";
  traces::Arch arch;
  try {
    arch = traces::import_hf_config_text(in.config, name);
  } catch (const InputError& e) {
    fuzz::check_error(e, name);
    return 0;
  }
  if (estimated_ops(arch, options) > kMaxFuzzOps) return 0;

  Workload w;
  try {
    w = traces::generate(arch, options);
  } catch (const InputError& e) {
    if (e.pos().file.rfind("--", 0) != 0 && e.pos().file != name)
      fuzz::fail("generator error names neither a flag nor the config", e.what(), name);
    if (e.message().empty()) fuzz::fail("generator error without a message", e.what(), name);
    return 0;
  }

  if (auto issue = verify_workload(w))
    fuzz::fail("generated workload breaks the format", issue->message, std::to_string(issue->index));
  const std::string json = write_workload(w);
  const std::string again = write_workload(read_workload_text(json, "generated.json"));
  if (again != json) fuzz::fail("generated workload does not read back to itself", json, again);

  const hw::Topology& t = roomy_h100();
  planner::PlanRequest req;
  req.policy = "resident";
  req.threads = 1;
  req.target.device_tier = *t.tier_index(t.devices[0].local_tier);
  planner::PlanOutcome out;
  try {
    out = planner::make_plan(w, t, req);
  } catch (const InputError& e) {
    // What the device cannot run (a dtype without a peak rate): the CLI's exit 2.
    if (e.message().empty()) fuzz::fail("planner error without a message", e.what(), json.substr(0, 2000));
    return 0;
  }
  if (!out.ok || !out.plan) return 0;
  const sim::SimResult r =
      sim::simulate(*out.plan, w, t, {.keep_transfers = false, .live_top = 0});
  if (r.error) {
    // A shard of a tensor parallelism wider than the server's 8 GPUs has no group to run in:
    // refused when the plan is bound, as the CLI refuses it.
    const bool no_group = r.error->kind == RunError::Kind::kTopology &&
                          options.tp > t.devices[0].count &&
                          r.error->message.find("its group needs") != std::string::npos;
    if (r.error->kind != RunError::Kind::kTimeLimit && !no_group)
      fuzz::fail("a resident plan that fits fails to run", r.error->message, json.substr(0, 2000));
    return 0;
  }
  if (r.makespan < out.bounds.makespan_ps)
    fuzz::fail("simulated makespan below the planner's lower bound",
               std::to_string(r.makespan), std::to_string(out.bounds.makespan_ps));
  return 0;
}
