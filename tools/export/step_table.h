// The simulated plan one step at a time: each step of a program joined with its
// anchor, the tiers and route it moves bytes over, and when it ran. The per-step CSV and
// the Chakra trace are both written from this table.
//
//   anchor   the compute step before a cache step in program order (none before the
//            first compute step).
//   issue    a cache step leaves its program: its anchor finished, its events completed,
//            its bytes fit.
//   start    a compute step begins; a transfer holds its copy engines (its queueing is
//            over); a detach frees its copy (= issue).
//   end      a compute step finishes; a transfer's last byte lands (its event completes).
//   stall    a compute step's idle compute engine before it: start minus the previous
//            compute step's end (0 for the first step's program start).
//   exposed  the time compute steps waited on a transfer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tools/export/export.h"

namespace tierflow::exporter {

inline constexpr int64_t kUnset = -1;

struct StepRow {
  uint32_t program = 0;
  uint32_t index = 0;  ///< the step's index in its program
  const Step* step = nullptr;
  int anchor = -1;  ///< step index of the anchor compute step; -1: none
  /// Topology tier ids the bytes leave and reach: a prefetch home -> device tier, a store
  /// device -> its tier, a detach the device tier (`to` empty); empty for compute.
  std::string from_tier, to_tier;
  std::vector<std::string> route;  ///< link ids crossed, in order (transfers)
  int64_t issue_ps = kUnset;       ///< cache steps
  int64_t start_ps = kUnset;
  int64_t end_ps = kUnset;
  int64_t queue_ps = kUnset;    ///< transfers: start - issue
  int64_t stall_ps = kUnset;    ///< compute steps
  int64_t exposed_ps = kUnset;  ///< transfers
};

/// The rows of program `program`, in step order. Needs `in.sim` and `in.step_times`.
std::vector<StepRow> step_rows(const ExportInput& in, size_t program);

/// Which step completes each event of the plan: event id -> (program, step).
std::map<uint32_t, std::pair<uint32_t, uint32_t>> event_producers(const Plan& plan);

/// Bytes a step names: an op's device-memory traffic, a tensor's size.
uint64_t step_bytes(const Workload& w, const Step& s);

}  // namespace tierflow::exporter
