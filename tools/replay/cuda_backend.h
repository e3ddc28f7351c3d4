// The CUDA replay backend (ARCHITECTURE §10): device arenas in GPU memory, host arenas in
// pinned host memory, copies as cudaMemcpyAsync on one stream per copy engine, compute
// steps as kernels on one stream per program. Built only with a CUDA toolkit
// (TIERFLOW_HAVE_CUDA); this header needs no CUDA header.
//
// Glossary
//   plan time   runs at time scale 1: now() is the host's steady clock since start(), in
//               picoseconds, and a step's measured start and end are GPU timestamps on
//               that same clock (see "reference").
//   reference   an event recorded at start() and waited for; its GPU timestamp is taken
//               to be the host time at which the wait returned (ref). A copy or compute
//               step is bracketed by two events on its stream; its plan times come from
//               cudaEventElapsedTime, clamped into the host interval from when the work was
//               issued to when the poller saw it done, so that a drift between the two
//               clocks never puts a step before its cause:
//
//                 host     issued                                   seen
//                            |········································|
//                 stream        [before]======= copy or kernel =======[after]
//                 start = clamp(ref + elapsed(ref, before), issued, seen)
//                 end   = clamp(start + elapsed(before, after), start, seen)
//
//   lane        a stream with its two bracketing events. Each copy engine owns one (the
//               engine a transfer holds in the first group of its route issues it), each
//               program owns one for compute, and transfers whose route has no engine
//               take a spare one.
//   FIFO        as the CPU backend: a transfer queues on every engine group of its route
//               and starts when it is first in each queue and each group has an idle
//               engine. It then runs on the GPU at whatever speed the GPU moves bytes: no
//               pacing to the topology's bandwidth and no artificial setup delay (the
//               DMA's own setup is paid for real).
//   poller      one thread that queries the outstanding events, turns the GPU timestamps
//               into plan times, releases engines, starts the transfers that may start and
//               then, holding no lock, calls the completions (which may issue new work).
//   timed       compute mode: a one-thread kernel that spins on %globaltimer for the op's
//               plan duration (cuda_kernels.h).
//   host step   (a plan that computes on the host CPU) timed on the host, on a thread per
//               program (timed_engines.h), in both compute modes.
//   gemm        compute mode: cublasGemmEx of about the op's FLOPs in its dtype (bf16 or
//               fp16 with fp32 accumulation, fp32; other dtypes run as bf16, and bf16 as
//               fp16 before compute capability 8.0) on operands in a scratch allocation
//               outside the arenas; ops without FLOPs run timed.
//   outside the measured peak
//               the GEMM scratch, cuBLAS workspaces and a 4 KiB warm-up buffer on each side:
//               allocated at start(), never counted by the arenas' allocators.
//   errors      a failed CUDA call throws CudaError from the constructor or start(); after
//               start() the first failure is kept, every step outstanding or issued later
//               completes at once (so the executor drains), and stop() throws it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "tools/replay/backend.h"

namespace tierflow::replay {

/// A failed CUDA runtime or cuBLAS call: the call, its file:line and CUDA's words.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What a compute step runs on the GPU (see the glossary).
enum class CudaComputeKind { kTimed, kGemm };

struct CudaBackendOptions {
  int device = 0;  ///< CUDA device ordinal; every program's arena and streams live on it
  /// Bytes all arenas may reserve together (device arenas in GPU memory, host arenas in
  /// pinned host memory). 0: the GPU's free memory when the backend is made, less 1 GiB
  /// (2 GiB in gemm mode, for the scratch and cuBLAS), and at most half the host's RAM, so
  /// that whatever fits the limit fits both memories.
  uint64_t memory_limit = 0;
  CudaComputeKind compute = CudaComputeKind::kTimed;
  /// Largest GEMM dimension in gemm mode (a multiple of 64). The scratch holds two shared
  /// operands and one output per program of gemm_max_dim^2 fp32 elements each.
  uint32_t gemm_max_dim = 4096;
};

/// Why `device` cannot run the backend ("no CUDA device: ..."), or empty when it can.
std::string cuda_device_problem(int device);

/// A GEMM shape for gemm mode: `repeats` runs of m x n x k (2*m*n*k*repeats FLOPs).
struct GemmShape {
  uint32_t m = 0;
  uint32_t n = 0;
  uint32_t k = 0;
  uint32_t repeats = 0;  ///< 0 when there is nothing to compute
};

/// The GEMMs that come closest to `flops`: m = n and k multiples of 64 in [64, max_dim],
/// m = n about the cube root of the FLOPs of one run and k adjusted to them; a run of
/// max_dim^3 is repeated as often as needed. No FLOPs: repeats 0.
GemmShape gemm_shape(double flops, uint32_t max_dim);

class CudaBackend final : public Backend {
 public:
  /// Selects the device and resolves the default memory limit; throws CudaError when the
  /// device cannot be used.
  explicit CudaBackend(const CudaBackendOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] uint64_t memory_limit() const override;
  [[nodiscard]] std::string memory_limit_origin() const override;
  /// Copies move real bytes at the GPU's speed: sizes are never divided.
  [[nodiscard]] uint32_t max_shift() const override { return 0; }
  void start(const BackendSetup& setup) override;
  std::optional<Block> allocate(ArenaId arena, uint64_t bytes, uint64_t logical) override;
  void free(const Block& b) override;
  void copy(const CopyRequest& r, Completion done) override;
  void compute(uint32_t program, const ComputeWork& work, Completion done) override;
  void host_compute(uint32_t program, const ComputeWork& work, Completion done) override;
  [[nodiscard]] Time now() const override;
  [[nodiscard]] ArenaStats arena_stats(ArenaId arena) const override;
  void stop() override;

  /// The GPU's name, as reports print it.
  [[nodiscard]] std::string device_name() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierflow::replay
