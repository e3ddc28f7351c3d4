// The planner's target and pins from a scenario's words: the device class and its tier,
// the programs, the budget, KIND=TIER pins and the policy name, each checked against the
// topology with the flag or field it came from named in the error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/workload.h"
#include "hw_models/topology.h"
#include "planner/planner.h"
#include "planner/state.h"

namespace tierflow::study {

/// The most programs one plan runs (`--devices`, docs/cli.md "Limits").
inline constexpr uint32_t kMaxPrograms = 16'384;

/// Bytes with a unit ("40GiB"); InputError at `source` otherwise.
uint64_t parse_budget(const std::string& text, std::string_view source);

/// InputError at `source` when the target's budget is above what its device tier gives a
/// program (Topology::usable): a plan for a bigger device is a what-if on the topology.
void check_budget(const hw::Topology& topo, const planner::Target& target, std::string_view source);

/// The `--set` that makes the device tier hold `budget` for plans: its capacity becomes the
/// budget plus the devices' reserve (a bigger device, for a what-if).
std::string capacity_for_budget(const hw::Topology& topo, size_t device_tier, uint64_t budget);

/// The largest fraction parse_fraction takes: 100 (10000%, a plan 101 times the fastest).
inline constexpr double kMaxFraction = 100;

/// "1%" or "0.01" as a finite fraction in [0, kMaxFraction] (--max-overhead); InputError
/// at `source` otherwise.
double parse_fraction(const std::string& text, std::string_view source);
/// A latency overhead: "1%" or a fraction at most 1 ("0.01"). A bare number above 1 ("10")
/// is refused as ambiguous (10% or 1000%?), as is anything above the largest fraction.
double parse_overhead(const std::string& text, std::string_view source);

/// A duration in milliseconds: a plain number of them ("50") or a duration with its unit
/// ("50ms", "0.05s"), as --max-tpot and Python's max_tpot take it; InputError at `source`
/// otherwise.
double parse_milliseconds(const std::string& text, std::string_view source);

/// The device class (id, or the first), its device tier and the number of programs (0 =
/// every device of the class); budget 0 (the tier's capacity).
planner::Target make_target(const hw::Topology& topo, const std::string& device, uint32_t devices,
                            std::string_view source);

/// `KIND=TIER[:FRACTION][,TIER:FRACTION...]` pins (planner/pins.h; ',' or '+' between
/// shares), tiers as topology indices. InputError at `--pin` for a bad one.
std::vector<planner::Pin> parse_pins(const std::vector<std::string>& pins, const hw::Topology& topo,
                                     std::string_view source = "--pin");

/// Throws InputError at `source` unless `name` is a policy, with the nearest one.
void check_policy(const std::string& name, std::string_view source);
/// check_policy of each, and none named twice (it would run twice).
void check_policies(const std::vector<std::string>& names, std::string_view source);

/// What a user asks of one plan, as given (`tierflow plan` flags, `tierflow.plan()`
/// arguments).
struct PlanSettings {
  std::string policy;    ///< empty: planner::kDefaultPolicy (or the pipeline's passes)
  std::string pipeline;  ///< passes instead of the policy's
  std::string device;    ///< device class; empty: the first
  uint32_t devices = 1;  ///< programs; 0: every device of the class
  std::string budget;    ///< device bytes per program; empty: the tier's capacity
  std::string max_overhead;  ///< minimise memory within this latency overhead instead
  std::vector<std::string> pins;
  bool verify_each = false;
  unsigned threads = 0;
  std::string on_host;  ///< op kinds the host CPU runs (--on-host); empty: none
};

/// The planner request for `s` on `topo`, every setting checked before any work (policy,
/// pipeline, device, budget against the tier, overhead, pins), each error naming its flag
/// (`cli`: "--max-overhead") or argument ("max_overhead"). The evaluator is the caller's.
planner::PlanRequest plan_request(const hw::Topology& topo, const PlanSettings& s, bool cli);

}  // namespace tierflow::study
