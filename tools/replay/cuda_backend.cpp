#include "tools/replay/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <set>
#include <tuple>

#include "core/diagnostics.h"
#include "tools/replay/calibration.h"
#include "tools/replay/cuda_backend_impl.h"
#include "tools/replay/cuda_check.h"
#include "tools/replay/cuda_kernels.h"

namespace tierflow::replay {

GemmShape gemm_shape(double flops, uint32_t max_dim) {
  if (!(flops > 0) || !std::isfinite(flops)) return {};
  constexpr double kStep = 64;
  const double top = std::max(kStep, std::floor(double(max_dim) / kStep) * kStep);
  const auto dim = [&](double x) {
    return static_cast<uint32_t>(std::clamp(std::round(x / kStep) * kStep, kStep, top));
  };
  const double one = 2.0 * top * top * top;
  const double repeats = std::max(1.0, std::ceil(flops / one));
  const double each = flops / repeats;
  GemmShape s;
  s.m = s.n = dim(std::cbrt(each / 2.0));
  s.k = dim(each / (2.0 * double(s.m) * double(s.n)));
  s.repeats = static_cast<uint32_t>(std::min(repeats, double(UINT32_MAX)));
  return s;
}

namespace {

constexpr size_t kWarmBytes = 4096;

}  // namespace

void CudaBackend::Impl::make_lane(Lane& l) {
  TF_CUDA(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
  TF_CUDA(cudaEventCreateWithFlags(&l.before, cudaEventDefault));
  TF_CUDA(cudaEventCreateWithFlags(&l.after, cudaEventDefault));
}

CudaBackend::Impl::Impl(const CudaBackendOptions& o) : o_(o) {
  TF_ASSERT(o_.gemm_max_dim >= 64, "the largest GEMM dimension must be at least 64");
  TF_CUDA(cudaSetDevice(o_.device));
  cudaDeviceProp prop{};
  TF_CUDA(cudaGetDeviceProperties(&prop, o_.device));
  name_ = prop.name;
  has_bf16_ = prop.major >= 8;
  limit_ = MemoryLimit{o_.memory_limit, "given"};
  if (o_.memory_limit == 0) {
    size_t free_bytes = 0, total = 0;
    TF_CUDA(cudaMemGetInfo(&free_bytes, &total));
    constexpr uint64_t gib = uint64_t{1} << 30;
    const uint64_t reserve = o_.compute == CudaComputeKind::kGemm ? 2 * gib : gib;
    limit_ = cuda_default_memory_limit(free_bytes, reserve, usable_host_memory());
  }
}

CudaBackend::Impl::~Impl() {
  if (started_) {
    try {
      stop();
    } catch (const std::exception&) {
      // A destructor must not throw; stop() has released everything before it throws.
    }
  } else {
    release();
  }
}

void CudaBackend::Impl::start(const BackendSetup& setup) {
  TF_ASSERT(!started_, "the backend was started twice");
  TF_CUDA(cudaSetDevice(o_.device));
  arenas_.resize(setup.arenas.size());
  for (size_t a = 0; a < setup.arenas.size(); ++a) {
    const uint64_t size = ArenaAllocator::footprint(setup.arenas[a].physical);
    Arena& arena = arenas_[a];
    arena.device = setup.arenas[a].device;
    try {
      if (size > 0 && arena.device) {
        TF_CUDA(cudaMalloc(&arena.memory, size_t(size)));
      } else if (size > 0) {
        TF_CUDA(cudaHostAlloc(&arena.memory, size_t(size), cudaHostAllocDefault));
      }
    } catch (const CudaError& e) {
      throw CudaError(fmt::format(
          "cannot reserve {} of {} memory for arena '{}' (a lower memory limit makes the "
          "arenas smaller): {}",
          to_string_approx(Bytes{size}), arena.device ? "GPU" : "pinned host", setup.arenas[a].name,
          e.what()));
    }
    arena.alloc = ArenaAllocator(size);
  }
  TF_CUDA(cudaMalloc(&warm_device_, kWarmBytes));
  TF_CUDA(cudaHostAlloc(&warm_host_, kWarmBytes, cudaHostAllocDefault));

  std::vector<std::vector<uint32_t>> lanes(setup.engine_groups.size());
  for (size_t g = 0; g < lanes.size(); ++g) {
    for (int e = 0; e < setup.engine_groups[g].engines; ++e) {
      lanes[g].push_back(static_cast<uint32_t>(engines_.size()));
      make_lane(engines_.emplace_back());
    }
  }
  queues_ = EngineQueues(std::move(lanes));

  const bool gemm = o_.compute == CudaComputeKind::kGemm;
  const size_t operand = size_t(o_.gemm_max_dim) * o_.gemm_max_dim * sizeof(float);
  TF_CUDA(cudaStreamCreateWithFlags(&clock_stream_, cudaStreamNonBlocking));
  TF_CUDA(cudaEventCreateWithFlags(&ref_, cudaEventDefault));
  if (gemm) {
    TF_CUDA(cudaMalloc(&gemm_a_, operand));
    TF_CUDA(cudaMalloc(&gemm_b_, operand));
    TF_CUDA(cuda_launch_fill(clock_stream_, gemm_a_, operand, /*seed=*/1));
    TF_CUDA(cuda_launch_fill(clock_stream_, gemm_b_, operand, /*seed=*/2));
    TF_CUDA(cudaStreamSynchronize(clock_stream_));  // before the program streams read them
  }
  programs_.resize(setup.programs);
  for (Program& p : programs_) {
    make_lane(p.lane);
    if (!gemm) continue;
    TF_CUBLAS(cublasCreate(&p.blas));
    TF_CUBLAS(cublasSetStream(p.blas, p.lane.stream));
    TF_CUDA(cudaMalloc(&p.workspace, kCublasWorkspace));
    TF_CUBLAS(cublasSetWorkspace(p.blas, p.workspace, kCublasWorkspace));
    TF_CUDA(cudaMalloc(&p.out, operand));
  }

  // Warm-up: the first copy on a stream and the first launch of a kernel (modules load
  // lazily) cost far more than later ones; pay them before the clock starts.
  for (const Lane& l : engines_) {
    TF_CUDA(cudaMemcpyAsync(warm_device_, warm_host_, kWarmBytes, cudaMemcpyDefault, l.stream));
    TF_CUDA(cudaMemcpyAsync(warm_host_, warm_device_, kWarmBytes, cudaMemcpyDefault, l.stream));
  }
  // In GEMM mode each GEMM shape loads its own cuBLAS kernel on first use (measured on an
  // H200: 38 ms for the first, 2-5 ms for each new shape after it): run every shape the
  // plan will, once per program, untimed.
  for (Program& p : programs_) {
    TF_CUDA(cuda_launch_spin(p.lane.stream, 0));
    if (!gemm) continue;
    std::set<std::tuple<uint32_t, uint32_t, uint32_t, cudaDataType>> shapes;
    for (const ComputeWork& w : setup.work) {
      const GemmShape g = gemm_shape(w.flops, o_.gemm_max_dim);
      if (g.repeats == 0 || !shapes.emplace(g.m, g.n, g.k, gemm_type(w.dtype, has_bf16_)).second) {
        continue;
      }
      ComputeWork once = w;
      once.flops = 2.0 * double(g.m) * double(g.n) * double(g.k);  // one repeat
      run_compute(p, once);
    }
  }
  TF_CUDA(cudaDeviceSynchronize());

  // The reference: its GPU timestamp is taken to be the host time at which the wait for it
  // returned. The first record and wait warm the path up.
  t0_ = Clock::now();
  for (int i = 0; i < 2; ++i) {
    TF_CUDA(cudaEventRecord(ref_, clock_stream_));
    TF_CUDA(cudaEventSynchronize(ref_));
    ref_time_ = now();
  }
  host_.start(setup.host ? setup.programs : 0, t0_, 1.0);
  poller_ = std::thread([this] { poll(); });
  started_ = true;
}

std::optional<Block> CudaBackend::Impl::allocate(ArenaId arena, uint64_t bytes, uint64_t logical) {
  const std::lock_guard lock(alloc_m_);
  const auto offset = arenas_.at(arena).alloc.allocate(bytes, logical);
  if (!offset) return std::nullopt;
  return Block{arena, *offset, bytes, logical};
}

void CudaBackend::Impl::free(const Block& b) {
  const std::lock_guard lock(alloc_m_);
  arenas_.at(b.arena).alloc.free(b.offset, b.bytes, b.logical);
}

ArenaStats CudaBackend::Impl::arena_stats(ArenaId arena) const {
  const std::lock_guard lock(alloc_m_);
  const ArenaAllocator& a = arenas_.at(arena).alloc;
  return ArenaStats{a.in_use(),       a.peak(),       a.logical_in_use(),
                    a.logical_peak(), a.high_water(), a.blocks()};
}

void CudaBackend::Impl::latch(const std::exception& e) {
  const std::lock_guard lock(error_m_);
  if (error_.empty()) error_ = e.what();
  failed_.store(true, std::memory_order_release);
}

void CudaBackend::Impl::stop() {
  if (!started_) return;
  {
    std::unique_lock lock(m_);
    drained_cv_.wait(lock, [this] { return unfinished_ == 0; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  poller_.join();
  host_.stop();
  started_ = false;
  release();
  if (failed()) {
    const std::lock_guard lock(error_m_);
    throw CudaError(error_);
  }
}

void CudaBackend::Impl::keep(cudaError_t e, const char* call) noexcept {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  const std::lock_guard lock(error_m_);
  if (error_.empty()) {
    error_ =
        std::string(call) + " failed while releasing the CUDA backend: " + cudaGetErrorString(e);
  }
  failed_.store(true, std::memory_order_release);
}

void CudaBackend::Impl::release() noexcept {
  if (cudaSetDevice(o_.device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;  // nothing was made on a device that cannot be selected
  }
  keep(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const auto drop_lane = [this](Lane& l) {
    if (l.before != nullptr) keep(cudaEventDestroy(l.before), "cudaEventDestroy");
    if (l.after != nullptr) keep(cudaEventDestroy(l.after), "cudaEventDestroy");
    if (l.stream != nullptr) keep(cudaStreamDestroy(l.stream), "cudaStreamDestroy");
    l = Lane{};
  };
  const auto drop = [this](void*& p) {
    if (p != nullptr) keep(cudaFree(p), "cudaFree");
    p = nullptr;
  };
  for (Program& p : programs_) {
    if (p.blas != nullptr && cublasDestroy(p.blas) != CUBLAS_STATUS_SUCCESS) {
      keep(cudaErrorUnknown, "cublasDestroy");
    }
    p.blas = nullptr;
    drop(p.workspace);
    drop(p.out);
    drop_lane(p.lane);
  }
  programs_.clear();
  for (Lane& l : engines_) drop_lane(l);
  engines_.clear();
  for (Lane& l : spares_) drop_lane(l);
  spares_.clear();
  spare_idle_.clear();
  if (ref_ != nullptr) keep(cudaEventDestroy(ref_), "cudaEventDestroy");
  ref_ = nullptr;
  if (clock_stream_ != nullptr) keep(cudaStreamDestroy(clock_stream_), "cudaStreamDestroy");
  clock_stream_ = nullptr;
  drop(gemm_a_);
  drop(gemm_b_);
  drop(warm_device_);
  if (warm_host_ != nullptr) keep(cudaFreeHost(warm_host_), "cudaFreeHost");
  warm_host_ = nullptr;
  for (Arena& a : arenas_) {
    if (a.memory == nullptr) continue;
    keep(a.device ? cudaFree(a.memory) : cudaFreeHost(a.memory),
         a.device ? "cudaFree" : "cudaFreeHost");
    a.memory = nullptr;
  }
}

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
CudaBackend::~CudaBackend() = default;
uint64_t CudaBackend::memory_limit() const {
  return impl_->memory_limit();
}

std::string CudaBackend::memory_limit_origin() const {
  return impl_->memory_limit_origin();
}
void CudaBackend::start(const BackendSetup& setup) {
  impl_->start(setup);
}
std::optional<Block> CudaBackend::allocate(ArenaId arena, uint64_t bytes, uint64_t logical) {
  return impl_->allocate(arena, bytes, logical);
}
void CudaBackend::free(const Block& b) {
  impl_->free(b);
}
void CudaBackend::copy(const CopyRequest& r, Completion done) {
  impl_->copy(r, std::move(done));
}
void CudaBackend::compute(uint32_t program, const ComputeWork& work, Completion done) {
  impl_->compute(program, work, std::move(done));
}
void CudaBackend::host_compute(uint32_t program, const ComputeWork& work, Completion done) {
  impl_->host_compute(program, work, std::move(done));
}
Time CudaBackend::now() const {
  return impl_->now();
}
ArenaStats CudaBackend::arena_stats(ArenaId arena) const {
  return impl_->arena_stats(arena);
}
void CudaBackend::stop() {
  impl_->stop();
}
std::string CudaBackend::device_name() const {
  return impl_->device_name();
}

}  // namespace tierflow::replay
