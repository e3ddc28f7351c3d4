#include "traces/quant.h"

#include <cmath>

#include "traces/generate.h"

namespace tierflow::traces {

uint64_t QuantScheme::matrix_bytes(double inputs, double outputs) const {
  const double groups = group > 0 ? std::ceil(inputs / static_cast<double>(group)) : 1.0;
  // Zero points are packed at the weights' width.
  return bytes_of(inputs * outputs, weights) + bytes_of(groups * outputs, scale) +
         (zeros ? bytes_of(groups * outputs, weights) : 0);
}

bool is_quantized(Dtype d) {
  return kDtypeBits[static_cast<size_t>(d)] <= 8;
}

std::optional<QuantScheme> quant_scheme(const GenOptions& o) {
  if (!is_quantized(o.weight_dtype) || o.phase == Phase::kTrain) return std::nullopt;
  QuantScheme q;
  q.weights = o.weight_dtype;
  if (o.weight_dtype == Dtype::kFp8) {
    // Per-channel fp8 checkpoints carry an fp32 scale per output channel.
    q.group = o.quant_group >= 0 ? o.quant_group : 0;
    q.scale = Dtype::kFp32;
  } else {
    q.group = o.quant_group >= 0 ? o.quant_group : kDefaultIntGroup;
    q.scale = Dtype::kFp16;
  }
  q.zeros = o.quant_zeros;
  return q;
}

Dtype compute_dtype(const GenOptions& o) {
  return o.compute_dtype.value_or(o.act_dtype);
}

}  // namespace tierflow::traces
