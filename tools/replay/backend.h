// What a replay backend provides to the executor (ARCHITECTURE §10): memory arenas, copy
// engines, a compute engine per program (and a host engine per program, for plans that
// compute on the host CPU: core/plan.h host steps) and a clock. The executor (replay/executor.h)
// decides what runs when; a backend only carries it out and says when it is done.
//
// Glossary
//   plan time   picoseconds of the plan's own clock. A backend may run slower than the
//               plan (a time scale): it converts durations on the way in and readings of
//               its clock on the way out, so the executor only ever sees plan time.
//   arena       one contiguous region of memory: a program's device tier, or one instance
//               of a host tier. Allocations in it are blocks.
//   logical     bytes as the plan counts them. A backend may hold a tensor in fewer bytes
//               (a size shift: every size divided by 2^shift, rounded up) so that a plan
//               for a large model replays in little memory; capacities and peaks are
//               compared in logical bytes, which stay exact.
//   engine group the copy engines of one link instance in one direction; a transfer holds
//               one engine of every group on its route at once and queues FIFO for them.
//               Transfers moving bytes through a group share its bandwidth.
//   completion  called by a backend thread once a copy's last byte landed or a compute
//               step's time has passed, with the plan times at which the work began and
//               ended. It is never called while the backend holds one of its own locks.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tierflow::replay {

/// Plan time in picoseconds.
using Time = int64_t;

using ArenaId = uint32_t;
/// Called with the plan times at which the work began (a copy: held its engines) and ended.
using Completion = std::function<void(Time start, Time end)>;

struct ArenaSpec {
  std::string name;       ///< "hbm[0]", "ddr[1]"
  uint64_t capacity = 0;  ///< logical bytes the executor lets it hold
  uint64_t physical = 0;  ///< bytes to reserve (size-shifted sizes plus alignment slack)
  bool device = false;    ///< a program's device arena
};

struct EngineGroupSpec {
  std::string name;  ///< "pcie[0] rc->hbm"
  int engines = 1;
  /// Paced copies: setup a copy adds when it starts while group `reverse` (the same link's
  /// other direction) holds an engine (hw::Link::contended_setup; 0: none).
  int64_t contended_ps = 0;
  uint32_t reverse = UINT32_MAX;  ///< that group, or none among the plan's
};

/// A block of an arena. `bytes` is its size in the arena (size-shifted).
struct Block {
  ArenaId arena = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t logical = 0;
};

/// Where an allocation's peak stands, measured by the arena's allocator.
struct ArenaStats {
  uint64_t in_use = 0;          ///< bytes of live blocks
  uint64_t peak = 0;            ///< highest in_use
  uint64_t logical_in_use = 0;  ///< logical bytes of live blocks
  uint64_t logical_peak = 0;    ///< highest logical_in_use
  uint64_t high_water = 0;      ///< most bytes outside the largest free range (arena_allocator.h)
  uint64_t blocks = 0;          ///< allocations made
};

/// One prefetch or store.
struct CopyRequest {
  uint32_t program = 0;
  uint32_t step = 0;
  Block src;
  Block dst;
  uint64_t logical_bytes = 0;
  std::vector<uint32_t> engines;  ///< engine groups on the route, in route order
  std::vector<uint32_t> resources;  ///< resources the copy shares, in route order
  Time setup = 0;                 ///< paid after the engines are held, before the first byte
  Time body = 0;                  ///< the bytes at the route's bandwidth, alone
  double bandwidth = 0;           ///< the route's bottleneck, bytes per plan second
};

/// One compute step: how long the plan says it runs, and what it computes (for backends
/// that run real work sized by the op, such as the CUDA backend's GEMM mode).
struct ComputeWork {
  Time duration = 0;      ///< the op's time on this device, plan time
  /// The device's launch overhead, part of `duration`: a backend whose steps pay a real
  /// launch (a kernel, its events, the poll that sees it end) waits only for the rest.
  Time launch = 0;
  double flops = 0;       ///< floating-point operations of the op
  uint64_t bytes = 0;     ///< bytes the op reads and writes in device memory
  std::string dtype;      ///< "bf16", "fp32", ...
  std::string kind;       ///< op kind: "matmul", "attention", ...
};

struct BackendSetup {
  std::vector<ArenaSpec> arenas;
  std::vector<EngineGroupSpec> engine_groups;
  /// Bytes per plan second (> 0) of each resource that copies share: the tier ports and
  /// link directions of hw_models/fabric.h that some copy crosses.
  std::vector<double> resources;
  uint32_t programs = 0;
  /// The plan has host steps: each program also gets a host engine.
  bool host = false;
  /// One of each kind of compute step the plan runs (distinct dtype, kind and FLOPs, in
  /// that order): what a backend that runs real work warms up before its clock starts.
  std::vector<ComputeWork> work;
};

class Backend {
 public:
  virtual ~Backend() = default;

  /// Short name for reports ("cpu").
  [[nodiscard]] virtual std::string name() const = 0;
  /// Most bytes all arenas together may reserve; the executor picks the size shift so that
  /// the plan fits under it.
  [[nodiscard]] virtual uint64_t memory_limit() const = 0;
  /// How memory_limit() was reached: "given", or the backend's default and why.
  [[nodiscard]] virtual std::string memory_limit_origin() const { return "given"; }
  /// Largest size shift the backend accepts: 0 for backends whose copies move the plan's
  /// bytes at the hardware's own speed (a shifted size would time a smaller copy).
  [[nodiscard]] virtual uint32_t max_shift() const { return 48; }
  /// Creates arenas, engines and per-program compute engines, and starts the clock at 0.
  virtual void start(const BackendSetup& setup) = 0;
  /// A block of `bytes` (arena bytes) holding `logical` plan bytes; nullopt when no free
  /// range is large enough. Thread-safe.
  virtual std::optional<Block> allocate(ArenaId arena, uint64_t bytes, uint64_t logical) = 0;
  virtual void free(const Block& b) = 0;
  /// Queues a copy on its engine groups (FIFO); it starts once it holds an engine of each.
  virtual void copy(const CopyRequest& r, Completion done) = 0;
  /// Runs a compute step on `program`'s compute engine (one at a time).
  virtual void compute(uint32_t program, const ComputeWork& work, Completion done) = 0;
  /// Runs a host step on `program`'s host engine (one at a time; the setup asked for host
  /// engines). Every backend times it on the host (timed_engines.h): the host CPU's work
  /// is the topology's roofline time, `work.duration`.
  virtual void host_compute(uint32_t program, const ComputeWork& work, Completion done) = 0;
  /// Plan time since start(); monotonic across threads.
  [[nodiscard]] virtual Time now() const = 0;
  [[nodiscard]] virtual ArenaStats arena_stats(ArenaId arena) const = 0;
  /// Waits for every queued copy and compute step to finish and joins the backend's
  /// threads. Called once, after the last completion was delivered.
  virtual void stop() = 0;
};

}  // namespace tierflow::replay
