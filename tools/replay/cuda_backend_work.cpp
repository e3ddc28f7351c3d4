// The CUDA backend at work (cuda_backend.h): copies queued FIFO on the engine groups and
// enqueued on their engines' streams, compute steps on the programs' streams, and the
// poller that turns their events into plan times and delivers the completions.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/diagnostics.h"
#include "tools/replay/calibration.h"
#include "tools/replay/cuda_backend_impl.h"
#include "tools/replay/cuda_check.h"
#include "tools/replay/cuda_kernels.h"

namespace tierflow::replay {

cudaDataType gemm_type(const std::string& dtype, bool has_bf16) {
  const std::string_view as = gemm_dtype(dtype, has_bf16);
  if (as == "fp32") return CUDA_R_32F;
  if (as == "fp16") return CUDA_R_16F;
  return CUDA_R_16BF;
}

void CudaBackend::Impl::start_ready() {
  queues_.start_ready(
      [&](uint32_t x) { return std::span<const uint32_t>(jobs_[x].req.engines); },
      [&](uint32_t x, std::vector<uint32_t> held) {
        jobs_[x].held = std::move(held);
        issue_copy(x);
      });
}

void CudaBackend::Impl::issue_copy(uint32_t x) {
  Job& job = jobs_[x];
  if (job.held.empty()) {
    if (spare_idle_.empty()) {
      spare_idle_.push_back(static_cast<uint32_t>(spares_.size()));
      try {
        make_lane(spares_.emplace_back());
      } catch (const CudaError& e) {
        latch(e);  // the copy below then completes without running
      }
    }
    job.spare = spare_idle_.back();
    spare_idle_.pop_back();
  }
  const Lane& lane = job.held.empty() ? spares_[job.spare] : engines_[job.held.front()];
  Pending p = pending(/*is_copy=*/true, x, lane, std::move(job.done));
  if (!p.failed) {
    try {
      const CopyRequest& r = job.req;
      const uint64_t bytes =
          r.src.bytes > 0 && r.dst.bytes > 0 ? std::min(r.src.bytes, r.dst.bytes) : 0;
      TF_CUDA(cudaSetDevice(o_.device));
      TF_CUDA(cudaEventRecord(lane.before, lane.stream));
      if (bytes > 0) {
        const auto* src = static_cast<const std::byte*>(arenas_[r.src.arena].memory) + r.src.offset;
        auto* dst = static_cast<std::byte*>(arenas_[r.dst.arena].memory) + r.dst.offset;
        TF_CUDA(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, lane.stream));
      }
      TF_CUDA(cudaEventRecord(lane.after, lane.stream));
    } catch (const CudaError& e) {
      latch(e);
      p.failed = true;
    }
  }
  outstanding_.emplace(seq_++, std::move(p));
}

void CudaBackend::Impl::copy(const CopyRequest& r, Completion done) {
  {
    const std::lock_guard lock(m_);
    const auto x = static_cast<uint32_t>(jobs_.size());
    jobs_.push_back(Job{r, std::move(done), {}, UINT32_MAX});
    ++unfinished_;
    if (r.engines.empty()) {
      issue_copy(x);
    } else {
      queues_.enqueue(x, r.engines);
      start_ready();
    }
  }
  work_cv_.notify_one();
}

void CudaBackend::Impl::run_compute(Program& p, const ComputeWork& work) {
  const GemmShape s =
      o_.compute == CudaComputeKind::kGemm ? gemm_shape(work.flops, o_.gemm_max_dim) : GemmShape{};
  if (s.repeats == 0) {
    // The step's own launch, events and poll stand for the op's launch overhead: the
    // kernel waits for the rest. Plan picoseconds to the kernel's nanoseconds, rounded to
    // the nearest.
    const Time ps = std::max<Time>(0, work.duration - work.launch);
    TF_CUDA(cuda_launch_spin(p.lane.stream, uint64_t(ps + kPsPerNs / 2) / uint64_t(kPsPerNs)));
    return;
  }
  const cudaDataType type = gemm_type(work.dtype, has_bf16_);
  const float alpha = 1.0f, beta = 0.0f;
  const int m = int(s.m), n = int(s.n), k = int(s.k);
  for (uint32_t i = 0; i < s.repeats; ++i) {
    TF_CUBLAS(cublasGemmEx(p.blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, gemm_a_, type,
                           /*lda=*/m, gemm_b_, type, /*ldb=*/k, &beta, p.out, type, /*ldc=*/m,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void CudaBackend::Impl::compute(uint32_t program, const ComputeWork& work, Completion done) {
  Program& p = programs_.at(program);
  {
    const std::lock_guard lock(m_);
    TF_ASSERT(!p.busy, "program {} started a compute step while one runs", program);
    p.busy = true;
    ++unfinished_;
  }
  // The program's lane is used by its own compute steps only, one at a time: no lock
  // needed to enqueue on it.
  Pending work_done = pending(/*is_copy=*/false, program, p.lane, std::move(done));
  if (!work_done.failed) {
    try {
      TF_CUDA(cudaSetDevice(o_.device));
      TF_CUDA(cudaEventRecord(p.lane.before, p.lane.stream));
      run_compute(p, work);
      TF_CUDA(cudaEventRecord(p.lane.after, p.lane.stream));
    } catch (const CudaError& e) {
      latch(e);
      work_done.failed = true;
    }
  }
  {
    const std::lock_guard lock(m_);
    outstanding_.emplace(seq_++, std::move(work_done));
  }
  work_cv_.notify_one();
}

Time CudaBackend::Impl::event_time(cudaEvent_t e) const {
  float ms = 0;
  TF_CUDA(cudaEventElapsedTime(&ms, ref_, e));
  return ref_time_ + static_cast<Time>(std::llround(double(ms) * double(kPsPerMs)));
}

CudaBackend::Impl::Finished CudaBackend::Impl::measure(const Pending& p, Time observed) const {
  Finished f;
  // The start from the reference; the duration from the pair on one stream, which
  // cudaEventElapsedTime resolves more finely than a long span from the reference.
  float ms = 0;
  TF_CUDA(cudaEventElapsedTime(&ms, p.before, p.after));
  const Time gpu_start = event_time(p.before);
  const Time gpu_end = gpu_start + static_cast<Time>(std::llround(double(ms) * double(kPsPerMs)));
  f.start = std::clamp(gpu_start, p.issued, std::max(p.issued, observed));
  f.end = std::clamp(gpu_end, f.start, std::max(f.start, observed));
  return f;
}

void CudaBackend::Impl::poll() {
  try {
    TF_CUDA(cudaSetDevice(o_.device));
  } catch (const CudaError& e) {
    latch(e);
  }
  struct Watch {
    uint64_t seq;
    const Pending* pending;  // stable: only this thread erases from outstanding_
  };
  std::vector<Watch> watch;
  std::vector<Finished> finished;
  std::vector<std::pair<Finished, Completion>> calls;
  while (true) {
    watch.clear();
    {
      std::unique_lock lock(m_);
      if (outstanding_.empty()) {
        work_cv_.wait(lock, [this] { return stopping_ || !outstanding_.empty(); });
        if (outstanding_.empty()) return;
      }
      for (const auto& [seq, p] : outstanding_) watch.push_back(Watch{seq, &p});
    }
    // Queried without the lock: a Pending's events and times do not change once it is
    // in outstanding_, and its lane is not reused before the poller releases it below.
    finished.clear();
    for (const Watch& w : watch) {
      const Pending& p = *w.pending;
      if (!p.failed && !failed()) {
        const cudaError_t q = cudaEventQuery(p.after);
        if (q == cudaErrorNotReady) continue;
        try {
          TF_CUDA(q);
        } catch (const CudaError& e) {
          latch(e);
        }
      }
      const Time observed = now();
      Finished f{0, p.issued, std::max(p.issued, observed)};  // after an error
      if (!p.failed && !failed()) {
        try {
          f = measure(p, observed);
        } catch (const CudaError& e) {
          latch(e);
        }
      }
      f.seq = w.seq;
      finished.push_back(f);
    }
    if (finished.empty()) {
      // Spins, yielding the core, for as long as anything is outstanding: a completion
      // seen late delays every step waiting on it. A sleep between queries lasts the
      // kernel's timer slack at least (some 60-100 us seen on an H200 host), which each
      // compute step waiting on a long copy paid on top of the launch overhead that
      // calibration measures with the poller spinning (on a 70B plan with 597 such waits,
      // 60 ms of its 2.2 s).
      std::this_thread::yield();
      continue;
    }
    calls.clear();
    {
      const std::lock_guard lock(m_);
      for (const Finished& f : finished) {
        auto it = outstanding_.find(f.seq);
        Pending& p = it->second;
        if (p.is_copy) {
          Job& job = jobs_[p.index];
          queues_.release(job.req.engines, job.held);
          if (job.held.empty()) spare_idle_.push_back(job.spare);
        } else {
          programs_[p.index].busy = false;
        }
        calls.emplace_back(f, std::move(p.done));
        outstanding_.erase(it);
        --unfinished_;
      }
      start_ready();
    }
    drained_cv_.notify_all();
    // Completions in the order the work ended on the GPU.
    std::stable_sort(calls.begin(), calls.end(),
                     [](const auto& a, const auto& b) { return a.first.end < b.first.end; });
    for (auto& [f, done] : calls) done(f.start, f.end);
  }
}

}  // namespace tierflow::replay
