#include "tools/cli/replay_cmd.h"

#include <fmt/format.h>

#include <memory>

#include "core/io.h"
#include "core/plan_json.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/study/replay_vs_sim.h"
#include "tools/study/study.h"
#ifdef TIERFLOW_HAVE_CUDA
#include "tools/replay/cuda_backend.h"
#endif

namespace tierflow::cli {
namespace {

struct ReplayCliOptions {
  study::ReplaySettings settings;
  std::string hw;
  std::string plan;
  std::vector<std::string> sets;
  std::string timeline;
  std::string measured;  ///< --measured: a recorded replay scored again, nothing run
  std::string output = "-";
  bool json = false;
  study::CheckedReplay checked;  ///< by the command's callback, before any file is read
};

int run_replay(const ReplayCliOptions& o) {
  const LoadedPlan lp = read_plan(o.plan, /*verify=*/false);
  const hw::Topology topo = study::plan_topology(lp.plan, o.plan, o.hw, o.sets);
  if (!o.measured.empty()) guard_file(o.measured, "the recorded replay it scores");
  check_outputs({{"-o", o.output}, {"--timeline", o.timeline}});
  const study::ReplayOutcome out = o.measured.empty()
                                       ? study::replay_plan(lp, topo, o.settings, o.checked)
                                       : study::rescore_replay(lp, topo, o.measured);
  if (out.refused) return print_run_error(o.plan, *out.refused, /*measured=*/true);
  const study::ReplayVsSim& x = *out.runs;
  // A replay refused before its first step has nothing to report but why.
  if (study::replay_ran(x.replay)) {
    OutputSet outputs;  // the report and the timeline appear together
    outputs.add(o.output,
                o.json ? study::replay_json(lp, topo, x) : study::replay_table(lp, topo, x));
    if (!o.timeline.empty()) study::write_replay_timeline(*outputs.open(o.timeline), lp, x.replay);
    outputs.publish();
  }
  if (x.sim.error && !x.replay.error) {
    std::fflush(stdout);
    fmt::print(stderr, "warning: {}: the simulation stopped: {}\n", o.plan, x.sim.error->message);
  }
  if (!x.replay.error) return static_cast<int>(ExitCode::kOk);
  if (!o.measured.empty()) {
    // Scored again as far as it ran; its failure was that run's, not this command's.
    std::fflush(stdout);
    fmt::print(stderr, "warning: {}: the recorded replay stopped: {}\n", o.measured,
               x.replay.error->message);
    return static_cast<int>(ExitCode::kOk);
  }
  return print_run_error(o.plan, *x.replay.error, /*measured=*/true);
}

}  // namespace

void add_replay_command(CLI::App& app) {
  auto o = std::make_shared<ReplayCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "run a plan for real on a backend and compare with the simulator");
  cmd->add_option("--backend", o->settings.backend,
                  "where to run: cpu (arenas in RAM, memcpy threads) or cuda (GPU memory, "
                  "pinned host memory, cudaMemcpyAsync; only in a binary built with CUDA)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--copy", o->settings.copy,
                  "cpu copies: paced (at the topology's rates; any time scale and size) or "
                  "native (memcpy as fast as this machine goes, time scale 1, real sizes: "
                  "measures the machine; plan on a `tierflow calibrate` topology)")
      ->check(CLI::IsMember({"paced", "native"}));
  cmd->add_option("--plan", o->plan, "plan JSON (tierflow.plan/2)")->required();
  add_plan_topology_flags(cmd, o->hw, o->sets);
  cmd->add_option("--timeline", o->timeline, "write the measured timeline as a Chrome trace");
  cmd->add_option("--time-scale", o->settings.time_scale,
                  "real seconds per plan second, or auto (the run takes about 1 s, at least "
                  "1x); cuda: 1 only");
  cmd->add_option("--memory-limit", o->settings.memory_limit,
                  "most memory the arenas may take; larger plans replay with sizes divided by "
                  "a power of two (not with --copy native, which copies real sizes only) "
                  "(default cpu: 1GiB; cuda: the GPU's free memory less 1 GiB, "
                  "2 GiB with --compute gemm, plus the available host memory less an eighth, "
                  "at least 4 GiB; the report says which it chose)");
  cmd->add_option("--compute", o->settings.compute,
                  "cuda: what a compute step runs: timed (a kernel that lasts the op's time) "
                  "or gemm (cuBLAS GEMMs of the op's FLOPs)")
      ->check(CLI::IsMember({"timed", "gemm"}));
  cmd->add_option("--device", o->settings.device, "cuda: the GPU to run on (CUDA device ordinal)")
      ->transform(count_of(o->settings.device));
  auto* measured = cmd->add_option(
      "--measured", o->measured,
      "score a replay recorded earlier (its --json) against this simulation instead of "
      "running one: the plan's run on a GPU scored again after the topology or model changed");
  for (const char* run_flag :
       {"--backend", "--copy", "--time-scale", "--memory-limit", "--compute", "--device"}) {
    measured->excludes(run_flag);
  }
  cmd->add_flag("--json", o->json, "print the comparison as JSON, every measured step included");
  cmd->add_option("-o,--output", o->output, "write the report to FILE instead of stdout");
  cmd->callback([o, cmd] {
    o->settings.device_given = cmd->count("--device") > 0;
    o->checked = study::check_replay_settings(o->settings);
#ifdef TIERFLOW_HAVE_CUDA
    int code = 0;
    try {
      code = run_replay(*o);
    } catch (const replay::CudaError& e) {
      // A GPU that fails during the run (memory taken by another process, a fault) says so
      // in CUDA's words; it is not reported as a bug in tierflow.
      std::fflush(stdout);
      fmt::print(stderr, "error: {}: the CUDA backend failed: {}\n", o->plan, e.what());
      code = static_cast<int>(ExitCode::kInternal);
    }
    throw CommandResult(code);
#else
    throw CommandResult(run_replay(*o));
#endif
  });
}

}  // namespace tierflow::cli
