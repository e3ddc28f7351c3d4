// Checks of CUDA runtime and cuBLAS return codes for the CUDA backend and its calibration:
// a failed call throws CudaError naming the call, where it was made and what CUDA said.
// (cuda_device_problem, declared in cuda_backend.h, is defined beside them.)
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "tools/replay/cuda_backend.h"

namespace tierflow::replay {

/// The workspace each cuBLAS handle is given (cuBLAS's advice for Hopper), by the backend
/// and the calibration alike.
inline constexpr size_t kCublasWorkspace = size_t{32} << 20;

/// Throws CudaError unless `e` is cudaSuccess.
void cuda_check(cudaError_t e, const char* call, const char* file, int line);
/// Throws CudaError unless `s` is CUBLAS_STATUS_SUCCESS.
void cublas_check(cublasStatus_t s, const char* call, const char* file, int line);

}  // namespace tierflow::replay

/// Checks a CUDA runtime call: `TF_CUDA(cudaMalloc(&p, n));`
#define TF_CUDA(call) ::tierflow::replay::cuda_check((call), #call, __FILE__, __LINE__)
/// Checks a cuBLAS call: `TF_CUBLAS(cublasCreate(&h));`
#define TF_CUBLAS(call) ::tierflow::replay::cublas_check((call), #call, __FILE__, __LINE__)
