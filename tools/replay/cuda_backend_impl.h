// The CUDA backend's state (cuda_backend.h), shared by cuda_backend.cpp (setup, memory,
// teardown) and cuda_backend_work.cpp (copies, compute steps and the poller that completes
// them). Included by those two files only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/units.h"
#include "tools/replay/arena_allocator.h"
#include "tools/replay/backend.h"
#include "tools/replay/calibration.h"
#include "tools/replay/cuda_backend.h"
#include "tools/replay/engine_queues.h"
#include "tools/replay/timed_engines.h"

namespace tierflow::replay {

/// The cuBLAS type of gemm_dtype(dtype, has_bf16) (calibration.h).
cudaDataType gemm_type(const std::string& dtype, bool has_bf16);

class CudaBackend::Impl {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Impl(const CudaBackendOptions& o);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  [[nodiscard]] uint64_t memory_limit() const { return limit_.bytes; }
  [[nodiscard]] const std::string& memory_limit_origin() const { return limit_.origin; }
  [[nodiscard]] const std::string& device_name() const { return name_; }
  void start(const BackendSetup& setup);
  std::optional<Block> allocate(ArenaId arena, uint64_t bytes, uint64_t logical);
  void free(const Block& b);
  void copy(const CopyRequest& r, Completion done);
  void compute(uint32_t program, const ComputeWork& work, Completion done);
  /// A host step: timed on the host, on the program's host engine (timed_engines.h).
  void host_compute(uint32_t program, const ComputeWork& work, Completion done) {
    host_.run(program, work.duration, std::move(done));
  }
  [[nodiscard]] Time now() const {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
    return static_cast<Time>(ns) * kPsPerNs;
  }
  [[nodiscard]] ArenaStats arena_stats(ArenaId arena) const;
  void stop();

 private:
  /// A stream and the two events that bracket the work issued on it.
  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t before = nullptr;
    cudaEvent_t after = nullptr;
  };
  struct Arena {
    void* memory = nullptr;
    bool device = false;
    ArenaAllocator alloc{0};
  };
  struct Job {
    CopyRequest req;
    Completion done;
    std::vector<uint32_t> held;   ///< engine lanes, one per group of the route
    uint32_t spare = UINT32_MAX;  ///< the spare lane of a route without engines
  };
  struct Program {
    Lane lane;
    cublasHandle_t blas = nullptr;
    void* workspace = nullptr;
    void* out = nullptr;  ///< GEMM output
    bool busy = false;
  };
  /// Work on the GPU whose completion the poller has not delivered yet.
  struct Pending {
    bool is_copy = false;
    uint32_t index = 0;  ///< job or program
    cudaEvent_t before = nullptr;
    cudaEvent_t after = nullptr;
    Time issued = 0;  ///< plan time just before it was enqueued
    bool failed = false;
    Completion done;
  };
  struct Finished {
    uint64_t seq = 0;
    Time start = 0;
    Time end = 0;
  };

  /// Work about to be enqueued on `lane`, issued now; failed at once after an error.
  Pending pending(bool is_copy, uint32_t index, const Lane& lane, Completion done) const {
    return Pending{is_copy, index, lane.before, lane.after, now(), failed(), std::move(done)};
  }
  /// Starts every queued job that is first in all its queues with idle engines and
  /// enqueues it on the GPU. Needs m_.
  void start_ready();
  /// Enqueues a started job on its lane and adds it to outstanding_. Needs m_.
  void issue_copy(uint32_t x);
  /// Creates `l`'s stream and events in place, so that a failure half-way leaves what was
  /// made where release() finds it.
  static void make_lane(Lane& l);
  /// Enqueues a compute step's kernel or GEMMs on the program's stream.
  void run_compute(Program& p, const ComputeWork& work);
  /// The plan time of a completed event, by the reference.
  [[nodiscard]] Time event_time(cudaEvent_t e) const;
  /// Plan times of work whose events completed (see the glossary's "reference").
  [[nodiscard]] Finished measure(const Pending& p, Time observed) const;
  void poll();
  /// Keeps the first error after start(); later work completes without running.
  void latch(const std::exception& e);
  [[nodiscard]] bool failed() const { return failed_.load(std::memory_order_acquire); }
  /// Destroys streams, events and handles and frees memory; keeps the first error.
  void release() noexcept;
  void keep(cudaError_t e, const char* call) noexcept;

  CudaBackendOptions o_;
  std::string name_;
  bool has_bf16_ = true;  ///< compute capability 8.0 or later
  MemoryLimit limit_;
  Clock::time_point t0_;
  /// One per program when the plan has host steps; on the clock now() reads.
  TimedEngines host_;
  cudaStream_t clock_stream_ = nullptr;
  cudaEvent_t ref_ = nullptr;
  Time ref_time_ = 0;  ///< plan time of ref_

  std::vector<Arena> arenas_;
  mutable std::mutex alloc_m_;  // guards arenas_' allocators

  std::vector<Lane> engines_;  ///< one per copy engine; fixed after start()
  std::vector<Program> programs_;
  void* gemm_a_ = nullptr;
  void* gemm_b_ = nullptr;
  void* warm_device_ = nullptr;
  void* warm_host_ = nullptr;

  std::mutex m_;                        // guards everything below
  std::condition_variable work_cv_;     // the poller: new outstanding work or stopping
  std::condition_variable drained_cv_;  // stop(): nothing left unfinished
  std::deque<Job> jobs_;                ///< stable addresses; never shrinks during a run
  EngineQueues queues_;  ///< engines: their lanes in engines_
  std::vector<Lane> spares_;  ///< lanes of routes without engines
  std::vector<uint32_t> spare_idle_;
  std::map<uint64_t, Pending> outstanding_;  ///< by issue order
  uint64_t seq_ = 0;
  uint32_t unfinished_ = 0;  ///< copies queued or outstanding, compute steps outstanding
  bool stopping_ = false;
  std::thread poller_;
  bool started_ = false;

  std::atomic<bool> failed_{false};
  std::mutex error_m_;
  std::string error_;  ///< the first failure after start()
};

}  // namespace tierflow::replay
