// Plan builders for simulator tests and benchmarks: the plan a runtime with enough memory
// would follow, the layerwise offload plan a real runtime uses, and seeded random
// workloads and plans that always verify.
//
// Glossary
//   use        an op that reads (inputs) or modifies (updates) a tensor.
//   run        consecutive uses of a host-homed tensor that stay on the device in between:
//              uses with fewer than `gap` other ops between them (gap 1: uses by
//              back-to-back ops). Each run gets one prefetch and one detach.
//   lookahead  how many compute steps before a run's first use its prefetch is issued.
//   anchor     the compute step a cache step follows (core/plan.h): a prefetch with
//              lookahead L for a run starting at op u is placed right after compute u-L,
//              at the program start when u < L, and never before the detach that ended the
//              tensor's previous run.
//   slot       where cache steps go: slot j is before compute j (slot 0 = program start,
//              slot n = after the last compute).
//
// Events are numbered from 0 in step order, program after program.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/workload.h"

namespace tierflow::testing {

/// How many programs (devices) a plan has and which tier they compute from.
struct PlanShape {
  uint32_t devices = 1;
  std::string device_tier = "hbm";
};

/// Everything homed on the device tier; each program computes the ops in order and detaches
/// every produced tensor that is not of kind output right after its last use (for a tensor
/// nobody reads: right after the op producing it). No prefetch, no store, no events.
Plan resident_plan(const Workload& w, const PlanShape& shape);

struct StreamOptions {
  std::string host_tier = "ddr";
  /// External tensors of these kinds are homed on the host and streamed in per run.
  std::vector<TensorKind> host_kinds = {TensorKind::kWeight};
  uint32_t lookahead = 1;  ///< a run starting at op u prefetches after compute u-lookahead
  uint32_t gap = 1;        ///< uses with fewer than `gap` ops between them share a run; >= 1
  /// Also store a modified host-homed tensor back after its last run (a runtime keeping the
  /// KV cache for the next step would); by default only when a later run reads it again.
  bool write_back_last = false;
};

/// The layerwise offload plan (tiers: device, host). Per run of a host-homed tensor:
///   after compute u-L:  prefetch t from host (event e)
///   compute u:          wait [e]  ...  compute of the run's last use v
///   after compute v:    store t to host (event s), if v modified t and a later run reads it
///                       detach t (wait [s] when stored)
/// Activations stay on the device and are detached as in resident_plan.
Plan streamed_plan(const Workload& w, const PlanShape& shape, const StreamOptions& options);

struct RandomWorkloadOptions {
  uint32_t ops = 40;
  uint32_t weights = 8;     ///< external weight tensors
  uint32_t kv = 4;          ///< external KV tensors, updated in place by attention ops
  uint32_t layers = 4;      ///< ops are split evenly into this many layers
  uint64_t min_bytes = 64;  ///< tensor sizes are uniform in [min_bytes, max_bytes]
  uint64_t max_bytes = 4096;
  uint32_t window = 6;  ///< activations read are produced by one of the last `window` ops
};

/// A seeded random DAG that passes verify_workload: one input tensor, external weights
/// and KV, each op reading 1-2 recent activations plus sometimes a weight, attention ops
/// updating a KV tensor, a few in-place updates of activations and weights (optimizer), the
/// last op's output of kind output. Same seed and options: the same workload, on every
/// platform.
Workload random_workload(uint64_t seed, const RandomWorkloadOptions& options = {});

struct RandomPlanOptions {
  std::vector<std::string> host_tiers = {"ddr", "nvme"};
  uint32_t evict_percent = 20;           ///< chance per slot and idle resident tensor of a detach
                                         ///< (stored first when the device copy is the only one)
  uint32_t store_percent = 10;           ///< chance per slot and tensor of a lone store
  uint32_t start_prefetch_percent = 30;  ///< chance that a first prefetch is at program start
  uint32_t extra_wait_percent = 15;      ///< chance per step of waiting on an earlier event
  uint32_t identical_percent = 50;       ///< chance that a program repeats program 0's choices
};

/// A seeded random plan that passes verify_plan (tiers: device, then host_tiers): random
/// homes for external tensors, prefetches anywhere between the previous detach (or the
/// program start) and the use, random stores and store+detach between uses, redundant
/// waits on earlier events of the same program, final detaches. Every step kind appears
/// in most plans; programs after the first either repeat program 0 or draw their own.
Plan random_plan(uint64_t seed, const Workload& w, const PlanShape& shape,
                 const RandomPlanOptions& options = {});

}  // namespace tierflow::testing
