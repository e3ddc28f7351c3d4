#include "tools/cli/calibrate_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <unistd.h>

#include "core/checked.h"
#include "core/io.h"
#include "core/units.h"
#include "hw_models/loader.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/replay/calibration.h"
#if defined(TIERFLOW_HAVE_CUDA)
#include "tools/replay/cuda_backend.h"
#endif

namespace tierflow::cli {
namespace {

struct CalibrateCliOptions {
  std::string backend = "cpu";
  std::string output;
  std::string report;
  std::string min_size = "4KiB";
  std::string max_size = "64MiB";
  std::string device_memory;
  int repeats = 5;
  int concurrent = 4;
  int device = 0;
  bool json = false;
};

uint64_t size_option(const std::string& flag, const std::string& text) {
  const auto v = parse_bytes(text);
  if (!v.ok() || v.value.value == 0) {
    throw CLI::ValidationError(flag, "expected a size such as 64MiB, got '" + text + "'");
  }
  return v.value.value;
}

int run_calibrate(const CalibrateCliOptions& o) {
  check_outputs({{"-o", o.output}, {"--report", o.report}});
  replay::CalibrateOptions co;
  co.min_bytes = size_option("--min-size", o.min_size);
  co.max_bytes = size_option("--max-size", o.max_size);
  if (co.max_bytes < co.min_bytes) {
    throw CLI::ValidationError("--max-size", "must be at least --min-size");
  }
  if (o.backend == "cpu") {
    // Two arenas (host and device memory) of max(2, concurrent) blocks of the largest size.
    const uint64_t need = saturating_mul(saturating_mul(2, co.max_bytes),
                                         static_cast<uint64_t>(std::max(2, o.concurrent)));
    const uint64_t have = replay::usable_host_memory();
    if (have > 0 && need > have / 2) {
      throw InputError::at(SourcePos{"--max-size"},
                           "{} per copy needs {} of host memory for the probe's buffers, more than "
                           "half of the {} this machine can give (MemAvailable, ulimit -v); give a "
                           "smaller --max-size",
                           to_string(Bytes{co.max_bytes}), to_string(Bytes{need}),
                           to_string(Bytes{have}));
    }
  }
  if (!o.device_memory.empty())
    co.device_capacity = size_option("--device-memory", o.device_memory);
  co.repeats = o.repeats;
  co.max_concurrent = o.concurrent;
  co.device = o.device;
  if (isatty(STDERR_FILENO) != 0) {
    co.progress = [](std::string_view line) { fmt::print(stderr, "  {}\n", line); };
  }
  replay::Calibration c;
  if (o.backend == "cpu") {
    c = replay::calibrate_cpu(co);
  } else {
#if defined(TIERFLOW_HAVE_CUDA)
    if (const std::string why = replay::cuda_device_problem(o.device); !why.empty()) {
      fmt::print(stderr, "error: --backend cuda: {}\n", why);
      return static_cast<int>(ExitCode::kBadInput);
    }
    try {
      c = replay::calibrate_cuda(co);
    } catch (const replay::CudaError& e) {
      // A GPU that fails during the run says so in CUDA's words; not a bug in tierflow.
      fmt::print(stderr, "error: calibrate: the CUDA backend failed: {}\n", e.what());
      return static_cast<int>(ExitCode::kInternal);
    }
#else
    fmt::print(stderr,
               "error: this tierflow was built without the CUDA backend (configure "
               "with a CUDA toolkit, or -DTIERFLOW_CUDA=ON)\n");
    return static_cast<int>(ExitCode::kBadInput);
#endif
  }
  const std::string yaml = replay::topology_yaml(c);
  // What is written must be a topology the other commands accept.
  (void)hw::load_topology_text(yaml, o.output);
  const std::string report =
      o.json ? replay::calibration_json(c, o.output) : replay::calibration_table(c, o.output);
  // The topology and its report appear together (the report on standard output comes after).
  const std::pair<std::string, std::string> outputs[] = {{o.output, yaml}, {o.report, report}};
  write_files_atomic(outputs);
  if (o.report.empty()) fmt::print("{}", report);
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "measure this machine's copies and compute and write a topology YAML");
  cmd->add_option("--backend", o->backend,
                  "what to measure: cpu (the CPU replay backend's memcpy threads) or cuda "
                  "(a GPU and pinned host memory)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("-o,--output", o->output, "topology YAML to write")->required();
  cmd->add_option("--report", o->report, "write the measurements to FILE instead of stdout");
  cmd->add_flag("--json", o->json, "measurements as JSON (tierflow.calibration/1)");
  cmd->add_option("--min-size", o->min_size, "smallest copy of the sweep (default 4KiB)");
  cmd->add_option("--max-size", o->max_size,
                  "largest copy of the sweep; sizes double from the smallest (default 64MiB)");
  cmd->add_option("--repeats", o->repeats, "runs per size; the median counts (default 5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--concurrent", o->concurrent,
                  "most copies in flight at once in the concurrency test (default 4)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--device-memory", o->device_memory,
                  "device tier capacity to write (default: cpu 1GiB; cuda the GPU's free "
                  "memory less 1GiB)");
  cmd->add_option("--device", o->device, "CUDA device ordinal (default 0)")
      ->transform(count_of(o->device));
  cmd->callback([o] { throw CommandResult(run_calibrate(*o)); });
}

}  // namespace tierflow::cli
