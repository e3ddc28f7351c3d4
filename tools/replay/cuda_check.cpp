#include "tools/replay/cuda_check.h"

#include <fmt/format.h>

namespace tierflow::replay {

void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clears a non-sticky error so later launches do not report it
  throw CudaError(fmt::format("{} failed at {}:{}: {} ({})", call, file, line,
                              cudaGetErrorString(e), cudaGetErrorName(e)));
}

void cublas_check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(
      fmt::format("{} failed at {}:{}: {}", call, file, line, cublasGetStatusString(s)));
}

std::string cuda_device_problem(int device) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("no CUDA device: cudaGetDeviceCount says '{}'", cudaGetErrorString(e));
  }
  if (n == 0) return "no CUDA device";
  if (device < 0 || device >= n) {
    return fmt::format("CUDA device {} does not exist (devices 0 to {})", device, n - 1);
  }
  return {};
}

}  // namespace tierflow::replay
