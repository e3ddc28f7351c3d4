#include "tools/replay/cuda_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#define TF_STRINGIFY_(x) #x
#define TF_STRINGIFY(x) TF_STRINGIFY_(x)

#if defined(__clang__)
#define TF_HOST_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define TF_HOST_COMPILER "g++ " __VERSION__
#else
#define TF_HOST_COMPILER "unknown"
#endif

namespace tierflow::replay {
namespace {

/// The GPU's global timer in nanoseconds (the clock that also stamps events).
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t begin = global_ns();
  while (global_ns() - begin < ns) {
  }
}

__global__ void empty_kernel() {}

__global__ void fill_kernel(uint16_t* p, uint64_t words, uint32_t seed) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    uint32_t h = (uint32_t(i) ^ seed) * 2654435761u;
    h ^= h >> 16;
    p[i] = uint16_t(0x3C00u | (h & 0xFFu));
  }
}

}  // namespace

const char* cuda_compiler_version() {
  return "nvcc " TF_STRINGIFY(__CUDACC_VER_MAJOR__) "." TF_STRINGIFY(
      __CUDACC_VER_MINOR__) "." TF_STRINGIFY(__CUDACC_VER_BUILD__) " (host " TF_HOST_COMPILER ")";
}

cudaError_t cuda_launch_spin(cudaStream_t stream, uint64_t ns) {
  spin_kernel<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

cudaError_t cuda_launch_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t cuda_launch_fill(cudaStream_t stream, void* p, uint64_t bytes, uint32_t seed) {
  const uint64_t words = bytes / 2;
  if (words == 0) return cudaSuccess;
  constexpr uint64_t kThreads = 256;
  const uint64_t blocks = (words + kThreads - 1) / kThreads;
  // A grid-stride loop: enough blocks to fill every SM, never more than the words need.
  const unsigned grid = unsigned(blocks < 4096 ? blocks : 4096);
  fill_kernel<<<grid, unsigned(kThreads), 0, stream>>>(static_cast<uint16_t*>(p), words, seed);
  return cudaGetLastError();
}

}  // namespace tierflow::replay
