// Routing traces: the experts a real router picked, per pass, MoE layer and token, as
// JSON Lines (`tierflow.routing/1`, docs/formats.md), one object a line:
//
//   {"pass": 0, "layer": 3, "token": 0, "experts": [1, 6]}
//
//   pass     the n-th time the workload routes that layer: a decode step (0, 1, ...); 0
//            for a prefill or a training step's forward pass
//   layer    the model's layer (0-based, as the generator numbers them)
//   token    the token within the pass: in decode the sequence (0 .. batch-1), in prefill and
//            training sequence x seq + position
//   experts  the routed experts it picked (distinct, each below the model's expert count;
//            as many as the model's experts_per_token, checked when the trace is used)
//
// A workload generated with a routing trace (GenOptions::routing_trace) takes every routed
// pick from it; a pick the workload needs that the trace lacks is an error naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tierflow::traces {

inline constexpr uint32_t kMaxRoutingPasses = 1U << 20;
inline constexpr uint32_t kMaxRoutingLayers = 1U << 12;
inline constexpr uint64_t kMaxRoutingToken = (uint64_t{1} << 32) - 1;
inline constexpr uint32_t kMaxRoutingExperts = 1U << 16;  ///< an expert id is below this

struct RoutingPick {
  uint32_t line = 0, column = 0;  ///< of the `experts` array, for errors
  std::vector<uint16_t> experts;
};

struct RoutingTrace {
  std::string file;
  std::unordered_map<uint64_t, RoutingPick> picks;  ///< by key()
  [[nodiscard]] static uint64_t key(uint32_t pass, uint32_t layer, uint64_t token) {
    return (uint64_t{pass} << 44) | (uint64_t{layer} << 32) | token;
  }
  /// The pick of (pass, layer, token), or nullptr.
  [[nodiscard]] const RoutingPick* find(uint32_t pass, uint32_t layer, uint64_t token) const;
};

/// Parses a routing trace's text, `file` naming it in errors (InputError at file:line:col).
RoutingTrace parse_routing_trace(std::string_view text, const std::string& file);

/// Reads a routing trace (InputError at file:line:col for what breaks the format). Traces
/// are read once per file and shared (a sweep's points generate many workloads from one).
std::shared_ptr<const RoutingTrace> read_routing_trace(const std::string& path);

}  // namespace tierflow::traces
