// Time series a simulation collects for plots (`tierflow report`): the bytes of each tensor
// kind in every tier instance the plan touches, the rate of every link direction that
// carries a flow, and the compute, stall and wait intervals of every program. The Recorder
// fills them while simulating when SimOptions::series is set, from the same samples as
// the timeline's counters; the simulated results do not depend on it.
//
// Glossary
//   kind slot  what a tier's bytes are: a TensorKind, or kWorkspaceKind (an op's workspace).
//   change     a new value of one series, held from its time until the next change: every
//              series here is a step function; a value before the first change is 0.
//   stall      a compute engine idle while its program has work left, by cause (waiting
//              for a transfer, or for memory); the timeline draws the same intervals.
//   wait       the part of a stall spent on one transfer: from when the step started
//              waiting on the transfer's event (or on the event before it) until it landed.
//              A program's waits add up to its transfer stall time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/workload.h"
#include "sim/kernel/event_queue.h"

namespace tierflow::sim {

inline constexpr size_t kWorkspaceKind = kTensorKindNames.size();
inline constexpr size_t kKindSlots = kWorkspaceKind + 1;
/// Names of the kind slots: the tensor kinds, then "workspace".
inline constexpr std::array<std::string_view, kKindSlots> kKindSlotNames = {
    "weight", "activation", "kv", "grad", "optimizer_state", "input", "output", "workspace"};

/// Bytes of one kind held in a tier instance from `time` on.
struct LevelChange {
  Time time = 0;
  uint64_t bytes = 0;
  uint32_t kind = 0;  ///< kind slot
};

/// One tier instance the plan touches (holds home copies, receives prefetches, stores,
/// outputs or workspace).
struct TierSeries {
  std::string name;  ///< "hbm[3]", as in TierResult
  size_t tier = 0;   ///< topology tier index
  int instance = 0;
  uint64_t capacity = 0;
  uint32_t kinds = 0;                ///< bit k: kind slot k may hold bytes here
  std::vector<LevelChange> changes;  ///< in time order; at most one per kind and time
};

/// The summed rate of the flows on a link direction from `time` on.
struct RateChange {
  Time time = 0;
  double bytes_per_s = 0;
};

/// One link direction that carried a flow.
struct LinkSeries {
  std::string name;       ///< "pcie[3] hbm->rc", as in LinkResult
  uint32_t resource = 0;  ///< flow resource of the fabric
  size_t link = 0;        ///< topology link index
  int instance = 0;
  bool forward = true;
  double capacity = 0;  ///< bytes/s achievable
  std::vector<RateChange> changes;
};

struct ComputeSpan {
  uint32_t program = 0;
  uint32_t step = 0;
  uint32_t op = 0;
  Time start = 0, end = 0;
};

struct StallSpan {
  uint32_t program = 0;
  uint32_t step = 0;  ///< the compute step that could not start
  Time start = 0, end = 0;
  bool memory = false;  ///< waiting for memory; else for a transfer
};

struct WaitSpan {
  uint32_t program = 0;
  uint32_t step = 0;      ///< the compute step that waited
  uint32_t transfer = 0;  ///< index into SimResult::transfers
  Time start = 0, end = 0;
};

/// Everything one simulation collected; the vectors are in the order things happened,
/// tiers in fabric slot order and links in order of their first flow.
struct SimSeries {
  std::vector<TierSeries> tiers;
  std::vector<LinkSeries> links;
  std::vector<ComputeSpan> compute;
  std::vector<StallSpan> stalls;
  std::vector<WaitSpan> waits;
};

}  // namespace tierflow::sim
