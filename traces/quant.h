// Weight-only quantization: how the generator stores the weights of the transformer blocks'
// linear layers when --weight-dtype is 8 bits or fewer (int4, int8, fp4, fp8) at inference.
//
// Glossary
//   group        the input elements of one output channel that share a scale (and a zero
//                point): `--quant-group` along the input dimension; 0 = the whole input
//                dimension (one scale per output channel).
//   symmetric    values scaled only (GPTQ sym, the Marlin/Machete kernels' format);
//   asymmetric   a scale and a zero point per group (AWQ), the zero packed at the weight's
//                width.
//
// Bytes of a K x N matrix (K inputs, N outputs), b the weight's bits, G the group (K when 0),
// s the scale's bytes:   ceil(K·N·b / 8) + ceil(K/G)·N·s [+ ceil(ceil(K/G)·N·b / 8) zeros]
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/kinds.h"

namespace tierflow::traces {

struct GenOptions;

struct QuantScheme {
  Dtype weights = Dtype::kInt4;
  int64_t group = 128;  ///< input elements per scale; 0 = per output channel
  Dtype scale = Dtype::kFp16;
  bool zeros = false;  ///< asymmetric: a zero point per group

  /// Bytes of a matrix with `inputs` x `outputs` elements: packed values, scales, zeros.
  [[nodiscard]] uint64_t matrix_bytes(double inputs, double outputs) const;
};

/// Integer and fp4 weights default to groups of 128 inputs (the AWQ and GPTQ default); fp8
/// to one scale per output channel.
inline constexpr int64_t kDefaultIntGroup = 128;

/// Weights stored in 8 bits or fewer.
bool is_quantized(Dtype d);

/// The scheme the options ask for; nullopt when weights are not quantized (16 or 32 bits)
/// or for training, which keeps every weight in the weight dtype without scales.
std::optional<QuantScheme> quant_scheme(const GenOptions& o);

/// The dtype matmuls on quantized weights compute in: --compute-dtype, else the activation
/// dtype.
Dtype compute_dtype(const GenOptions& o);

}  // namespace tierflow::traces
