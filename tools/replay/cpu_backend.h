// The CPU replay backend (ARCHITECTURE §10): arenas in RAM, copy engines as threads doing
// memcpy, compute steps as calibrated busy work. Always built; what CI replays.
//
// Glossary
//   time scale   real seconds per plan second: 1000 runs a 1 us plan in 1 ms, which keeps
//                thread hand-offs small next to the steps of a plan with ns-long ops.
//   copy engine  a thread that takes a started transfer, waits out its setup latency and
//                copies it in slices of time, each moving the bytes due at its current rate.
//   piece        a copy engine memcpys at most `chunk_bytes` at a time and yields its core
//                between pieces, so a compute thread sharing the core waits a piece, not a
//                time slice.
//   copy mode    paced: a copy moves its bytes at the plan's rate (below), which checks
//                the executor at any time scale and size shift; native: a copy is one
//                memcpy in chunks as fast as this machine goes, at time scale 1 and real
//                sizes only, which measures the machine (`tierflow calibrate` writes the
//                topology that predicts it).
//   rate         (paced) max-min fair among the transfers moving bytes, from the solver the
//                simulator uses (hw_models/flows.h) over the same resources (tier ports,
//                link directions, both directions of a half-duplex link as one:
//                hw_models/fabric.h); a share one transfer cannot use (held back elsewhere)
//                goes to the others. Solved again whenever a transfer starts or ends moving
//                bytes.
//   compute      one timed engine per program (timed_engines.h): a step waits until its
//                duration has passed since it was handed over; so does a host step, on
//                the program's host engine.
//   FIFO         a transfer queues on every engine group of its route and starts when it
//                is first in each queue and each group has an idle engine (the
//                simulator's rule); the transfers that start are handed to the engines.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hw_models/flows.h"
#include "tools/replay/arena_allocator.h"
#include "tools/replay/backend.h"
#include "tools/replay/engine_queues.h"
#include "tools/replay/timed_engines.h"

namespace tierflow::replay {

enum class CopyMode { kPaced, kNative };

struct CpuBackendOptions {
  double time_scale = 1.0;                    ///< real seconds per plan second (> 0)
  CopyMode copy = CopyMode::kPaced;           ///< native needs time scale 1
  uint64_t memory_limit = uint64_t{1} << 30;  ///< bytes all arenas may reserve
  std::string memory_limit_origin = "given";  ///< how the limit was chosen, for reports
  uint64_t chunk_bytes = uint64_t{1} << 20;   ///< largest single memcpy of a copy engine
  uint32_t max_copy_threads = 64;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  [[nodiscard]] std::string name() const override { return "cpu"; }
  [[nodiscard]] uint64_t memory_limit() const override { return options_.memory_limit; }
  [[nodiscard]] std::string memory_limit_origin() const override {
    return options_.memory_limit_origin;
  }
  [[nodiscard]] uint32_t max_shift() const override {
    return options_.copy == CopyMode::kNative ? 0 : Backend::max_shift();
  }
  void start(const BackendSetup& setup) override;
  std::optional<Block> allocate(ArenaId arena, uint64_t bytes, uint64_t logical) override;
  void free(const Block& b) override;
  void copy(const CopyRequest& r, Completion done) override;
  void compute(uint32_t program, const ComputeWork& work, Completion done) override;
  void host_compute(uint32_t program, const ComputeWork& work, Completion done) override;
  [[nodiscard]] Time now() const override;
  [[nodiscard]] ArenaStats arena_stats(ArenaId arena) const override;
  void stop() override;

 private:
  using Clock = std::chrono::steady_clock;
  /// Real time between two rate updates of a transfer (slept, not spun).
  static constexpr double kSliceNs = 200'000;

  struct Arena {
    std::unique_ptr<std::byte, void (*)(void*)> memory{nullptr, nullptr};
    ArenaAllocator alloc{0};
  };
  struct Job {
    CopyRequest req;
    Completion done;
    Time start = 0;
    Clock::time_point real_start;
    bool started = false;
    std::vector<uint32_t> held;  ///< engines, one per group of the route
    Time contended = 0;          ///< paced: setup added for starting beside the other direction
    uint32_t flow = hw::kNoFlow;  ///< paced: its flow in net_ while moving (pace_m_)
  };

  [[nodiscard]] Clock::time_point real(Time plan) const { return computes_.real(plan); }
  /// Starts every queued job that is first in all its queues with idle engines; returns
  /// the jobs started. Needs copy_m_.
  void start_ready(std::vector<uint32_t>& started);
  void copy_worker();
  void run_copy(Job& job);
  /// Copies `n` bytes in chunks of at most `chunk_bytes`.
  void copy_chunks(std::byte* dst, const std::byte* src, uint64_t n) const;

  CpuBackendOptions options_;
  Clock::time_point t0_;
  std::vector<Arena> arenas_;
  mutable std::mutex alloc_m_;  // guards arenas_' allocators

  std::mutex copy_m_;  // guards jobs_, queues_, ready_, stopping_
  std::condition_variable copy_cv_;
  std::deque<Job> jobs_;  ///< stable addresses; never shrinks during a run
  std::vector<EngineGroupSpec> groups_;  ///< the setup's engine groups
  std::vector<int> busy_;                ///< engines held per group (copy_m_)
  EngineQueues queues_;
  std::mutex pace_m_;  // guards net_ and the jobs' flows
  /// Paced transfers moving bytes, sharing the resources' bandwidth as the simulator's do.
  hw::FlowNetwork net_;
  std::deque<uint32_t> ready_;                   ///< started jobs waiting for a copy thread
  uint32_t unfinished_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> copy_threads_;

  /// Programs' compute engines, then (a plan with host steps) their host engines.
  TimedEngines computes_;
  uint32_t programs_ = 0;
  bool started_ = false;
};

}  // namespace tierflow::replay
