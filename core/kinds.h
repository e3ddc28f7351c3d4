// Enumerations shared by topologies, workloads and plans, with their text spellings.
//
// Glossary
//   Dtype   element type of a tensor or of an op's arithmetic (bf16, fp8, int4, ...).
//   OpKind  the class of an operator; devices declare an efficiency per kind.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace tierflow {

enum class Dtype { kFp64, kFp32, kTf32, kBf16, kFp16, kFp8, kInt8, kFp4, kInt4 };
inline constexpr std::array<std::string_view, 9> kDtypeNames = {
    "fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4"};
/// Storage bits per element (tf32 is stored as 32 bits).
inline constexpr std::array<int, 9> kDtypeBits = {64, 32, 32, 16, 16, 8, 8, 4, 4};

enum class OpKind {
  kMatmul,
  kAttention,
  kNorm,
  kElementwise,
  kEmbedding,
  kRouter,
  kExpert,
  kCollective,
  kOptimizer,
  kOther,
};
inline constexpr std::array<std::string_view, 10> kOpKindNames = {
    "matmul", "attention", "norm",       "elementwise", "embedding",
    "router", "expert",    "collective", "optimizer",   "other"};

/// Index of `name` in `names`, if present.
template <size_t N>
constexpr std::optional<size_t> index_of(const std::array<std::string_view, N>& names,
                                         std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return i;
  }
  return std::nullopt;
}

inline constexpr std::string_view name_of(Dtype d) {
  return kDtypeNames[static_cast<size_t>(d)];
}
inline constexpr std::string_view name_of(OpKind k) {
  return kOpKindNames[static_cast<size_t>(k)];
}

}  // namespace tierflow
