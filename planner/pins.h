// User pins: which tier homes the tensors of a kind, whole or in fractions.
//
// Glossary
//   pin    `--pin KIND=TIER[:FRACTION][,TIER:FRACTION...]`: the named fractions of the bytes
//          of every tensor of KIND homed on those tiers. A tier other than the device tier
//          homes them off the device (they are fetched for their uses, whatever the
//          budget); the device tier keeps them there (never offloaded). Bytes the
//          fractions leave over are the policy's to place. One pin per kind: a later pin of
//          a kind replaces an earlier one.
//   share  one TIER:FRACTION of a pin.
//
// Tensors are whole, so a fraction is met to within one tensor: tensors are dealt out in
// workload order (layer by layer, as generators and importers write them), each to the
// share furthest below its fraction of the bytes dealt so far, which spreads every share
// evenly over the layers (FlexGen's per-layer percentages, vLLM's cpu_offload_gb).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/workload.h"

namespace tierflow::planner {

struct PinShare {
  uint32_t tier = 0;      ///< topology tier index
  double fraction = 1.0;  ///< of the kind's bytes, in (0, 1]
};

struct Pin {
  TensorKind kind = TensorKind::kWeight;
  std::vector<PinShare> shares;  ///< fractions sum to at most 1
};

/// Per tensor: the tier its pin homes it on, or UINT32_MAX where no pin places it.
std::vector<uint32_t> pinned_tiers(const Workload& w, const std::vector<Pin>& pins);

/// Per pin share, what it got: "weight: 40.1% on 'ddr' (asked 40%)".
std::vector<std::string> describe_pins(const Workload& w, const std::vector<Pin>& pins,
                                       const std::vector<std::string>& tier_ids);

}  // namespace tierflow::planner
