// The kernels of the CUDA backend and of `tierflow calibrate --backend cuda`, behind host
// functions that plain C++ files call (only cuda_kernels.cu is compiled by nvcc).
//
// Glossary
//   spin     a kernel of one thread in one block that reads the GPU's global timer
//            (%globaltimer, nanoseconds) until a duration has passed since it began: a
//            compute step of the plan's length that takes one SM slot and no memory
//            bandwidth, so it does not slow the copies beside it.
//   fill     writes 16-bit words 0x3Cxx (xx from a hash of the index): each reads as a
//            finite normal number in bf16 (about 0.008), fp16 (1 to 1.25) and, in pairs, fp32
//            (about 0.008), so GEMM operands hold realistic values whatever their dtype.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

namespace tierflow::replay {

/// Enqueues a spin of `ns` nanoseconds on `stream`; returns the launch's error.
cudaError_t cuda_launch_spin(cudaStream_t stream, uint64_t ns);

/// Enqueues a kernel that does nothing (one thread); returns the launch's error.
cudaError_t cuda_launch_empty(cudaStream_t stream);

/// Enqueues a fill of `bytes` at `p` (device memory; an odd last byte is left alone) with
/// words that depend on `seed`; returns the launch's error.
cudaError_t cuda_launch_fill(cudaStream_t stream, void* p, uint64_t bytes, uint32_t seed);

/// The compilers that built the CUDA sources: "nvcc 13.0.88 (host g++ 12.2.0)".
const char* cuda_compiler_version();

}  // namespace tierflow::replay
