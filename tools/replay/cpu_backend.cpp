#include "tools/replay/cpu_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/diagnostics.h"
#include "core/units.h"

namespace tierflow::replay {

CpuBackend::CpuBackend(const CpuBackendOptions& options) : options_(options) {
  TF_ASSERT(options_.time_scale > 0 && std::isfinite(options_.time_scale),
            "time scale must be positive");
  TF_ASSERT(options_.chunk_bytes > 0, "chunk size must be positive");
  TF_ASSERT(options_.copy == CopyMode::kPaced || options_.time_scale == 1.0,
            "native copies run at time scale 1");
}

CpuBackend::~CpuBackend() {
  if (started_) stop();
}

void CpuBackend::start(const BackendSetup& setup) {
  TF_ASSERT(!started_, "the backend was started twice");
  arenas_.resize(setup.arenas.size());
  for (size_t a = 0; a < setup.arenas.size(); ++a) {
    const uint64_t size = ArenaAllocator::footprint(setup.arenas[a].physical);
    if (size > 0) {
      // calloc: the kernel hands out zeroed pages lazily, so untouched bytes cost nothing.
      void* p = std::calloc(size_t(size), 1);
      if (p == nullptr) throw std::bad_alloc();
      arenas_[a].memory = {static_cast<std::byte*>(p), &std::free};
      // Native copies are timed: touch every page now, so that no copy pays for faulting
      // in the pages it writes.
      if (options_.copy == CopyMode::kNative) std::memset(p, 0, size_t(size));
    }
    arenas_[a].alloc = ArenaAllocator(size);
  }
  std::vector<int> counts;
  uint32_t engines = 1;  // one more for routes that cross no link
  net_ = hw::FlowNetwork();
  for (const double bw : setup.resources) {
    TF_ASSERT(bw > 0 && std::isfinite(bw), "shared resource bandwidth {} is not positive", bw);
    net_.add_resource(bw);
  }
  for (const EngineGroupSpec& g : setup.engine_groups) {
    counts.push_back(g.engines);
    engines += uint32_t(g.engines);
  }
  queues_ = EngineQueues::numbered(counts);
  groups_ = setup.engine_groups;
  busy_.assign(groups_.size(), 0);
  engines = std::min(engines, std::max<uint32_t>(1, options_.max_copy_threads));
  started_ = true;
  t0_ = Clock::now();  // before any thread reads it
  programs_ = setup.programs;
  computes_.start(setup.host ? 2 * programs_ : programs_, t0_, options_.time_scale);
  for (uint32_t i = 0; i < engines; ++i) copy_threads_.emplace_back([this] { copy_worker(); });
}

Time CpuBackend::now() const {
  return computes_.now();
}

std::optional<Block> CpuBackend::allocate(ArenaId arena, uint64_t bytes, uint64_t logical) {
  const std::lock_guard lock(alloc_m_);
  const auto offset = arenas_.at(arena).alloc.allocate(bytes, logical);
  if (!offset) return std::nullopt;
  return Block{arena, *offset, bytes, logical};
}

void CpuBackend::free(const Block& b) {
  const std::lock_guard lock(alloc_m_);
  arenas_.at(b.arena).alloc.free(b.offset, b.bytes, b.logical);
}

ArenaStats CpuBackend::arena_stats(ArenaId arena) const {
  const std::lock_guard lock(alloc_m_);
  const ArenaAllocator& a = arenas_.at(arena).alloc;
  return ArenaStats{a.in_use(),       a.peak(),       a.logical_in_use(),
                    a.logical_peak(), a.high_water(), a.blocks()};
}

void CpuBackend::start_ready(std::vector<uint32_t>& started) {
  queues_.start_ready(
      [&](uint32_t x) { return std::span<const uint32_t>(jobs_[x].req.engines); },
      [&](uint32_t x, std::vector<uint32_t> held) {
        Job& job = jobs_[x];
        job.held = std::move(held);
        // Starting while a group's other direction holds an engine: its contended setup
        // (the largest over the route, as the simulator charges it).
        for (const uint32_t g : job.req.engines) {
          const EngineGroupSpec& spec = groups_[g];
          if (spec.reverse < busy_.size() && busy_[spec.reverse] > 0) {
            job.contended = std::max(job.contended, spec.contended_ps);
          }
        }
        for (const uint32_t g : job.req.engines) ++busy_[g];
        job.started = true;
        job.real_start = Clock::now();
        job.start = now();
        started.push_back(x);
      });
}

void CpuBackend::copy(const CopyRequest& r, Completion done) {
  std::vector<uint32_t> started;
  {
    const std::lock_guard lock(copy_m_);
    const auto x = static_cast<uint32_t>(jobs_.size());
    Job& job = jobs_.emplace_back(Job{r, std::move(done)});
    ++unfinished_;
    if (r.engines.empty()) {
      job.started = true;
      job.real_start = Clock::now();
      job.start = now();
      started.push_back(x);
    } else {
      queues_.enqueue(x, r.engines);
      start_ready(started);
    }
    ready_.insert(ready_.end(), started.begin(), started.end());
  }
  if (!started.empty()) copy_cv_.notify_all();
}

void CpuBackend::copy_chunks(std::byte* dst, const std::byte* src, uint64_t n) const {
  for (uint64_t done = 0; done < n;) {
    const uint64_t k = std::min(options_.chunk_bytes, n - done);
    std::memcpy(dst + done, src + done, size_t(k));
    done += k;
    // A copy engine stands for a DMA engine, which takes no core from compute: between
    // pieces it lets a woken compute thread that shares its core run at once, rather than
    // after the scheduler's time slice (milliseconds).
    std::this_thread::yield();
  }
}

void CpuBackend::run_copy(Job& job) {
  const CopyRequest& r = job.req;
  if (options_.copy == CopyMode::kNative) {
    // The machine's own speed: setup and bandwidth are whatever the hand-off and memcpy
    // take; the plan's numbers are not used.
    const uint64_t n = std::min(r.src.bytes, r.dst.bytes);
    if (n > 0) {
      copy_chunks(arenas_[r.dst.arena].memory.get() + r.dst.offset,
                  arenas_[r.src.arena].memory.get() + r.src.offset, n);
    }
    return;
  }
  const Clock::time_point active = job.real_start + (real(r.setup + job.contended) - t0_);
  TimedEngines::wait_until(active);
  const uint64_t bytes =
      r.src.bytes > 0 && r.dst.bytes > 0 ? std::min(r.src.bytes, r.dst.bytes) : 0;
  const double total = static_cast<double>(r.logical_bytes);
  if (r.body <= 0 || total <= 0 || !(r.bandwidth > 0)) {
    if (bytes > 0) {
      std::memcpy(arenas_[r.dst.arena].memory.get() + r.dst.offset,
                  arenas_[r.src.arena].memory.get() + r.src.offset, size_t(bytes));
    }
    return;
  }
  const std::byte* src = bytes > 0 ? arenas_[r.src.arena].memory.get() + r.src.offset : nullptr;
  std::byte* dst = bytes > 0 ? arenas_[r.dst.arena].memory.get() + r.dst.offset : nullptr;
  {
    // The clock is read under the lock, so the network sees starts and ends in time order.
    const std::lock_guard lock(pace_m_);
    const Time t = now();
    job.flow = net_.start(r.resources, total, t);
    net_.solve(t);
  }
  // Fluid pacing: in slices, the transfer moves at its max-min fair rate (set again as
  // others start and end); bytes are copied as they are due.
  const double ps_per_real_ns = 1000.0 / options_.time_scale;
  double moved = 0;  // logical bytes
  uint64_t copied = 0;
  Clock::time_point last = active;
  while (moved < total) {
    double rate = 0;  // bytes per plan second
    {
      const std::lock_guard lock(pace_m_);
      rate = net_.rate(job.flow);
    }
    const double left_ns = (total - moved) / rate * double(kPsPerS) / 1000.0 / ps_per_real_ns;
    if (left_ns > kSliceNs) {
      // A slice: sleeping may overshoot, which the progress below accounts for.
      std::this_thread::sleep_until(last + std::chrono::nanoseconds(std::llround(kSliceNs)));
    } else {
      TimedEngines::wait_until(last + std::chrono::nanoseconds(std::llround(std::ceil(left_ns))));
    }
    const Clock::time_point t = Clock::now();
    const double elapsed_ps =
        static_cast<double>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t - last).count()) *
        ps_per_real_ns;
    moved += rate * elapsed_ps / double(kPsPerS);
    last = t;
    const uint64_t due =
        moved >= total ? bytes
                       : std::min(bytes, static_cast<uint64_t>(moved / total * double(bytes)));
    copy_chunks(dst + copied, src + copied, due - copied);
    copied = due;
  }
  const std::lock_guard lock(pace_m_);
  const Time t = now();
  net_.finish(job.flow, t);
  job.flow = hw::kNoFlow;
  net_.solve(t);
}

void CpuBackend::copy_worker() {
  while (true) {
    Job* job = nullptr;
    {
      std::unique_lock lock(copy_m_);
      copy_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) return;
      job = &jobs_[ready_.front()];
      ready_.pop_front();
    }
    run_copy(*job);
    const Time end = now();
    std::vector<uint32_t> started;
    Completion done;
    {
      const std::lock_guard lock(copy_m_);
      queues_.release(job->req.engines, job->held);
      for (const uint32_t g : job->req.engines) --busy_[g];
      start_ready(started);
      ready_.insert(ready_.end(), started.begin(), started.end());
      done = std::move(job->done);
      --unfinished_;
    }
    copy_cv_.notify_all();
    done(job->start, end);
  }
}

void CpuBackend::compute(uint32_t program, const ComputeWork& work, Completion done) {
  computes_.run(program, work.duration, std::move(done));
}

void CpuBackend::host_compute(uint32_t program, const ComputeWork& work, Completion done) {
  TF_ASSERT(program < programs_, "no program {}", program);
  computes_.run(programs_ + program, work.duration, std::move(done));
}

void CpuBackend::stop() {
  if (!started_) return;
  {
    std::unique_lock lock(copy_m_);
    copy_cv_.wait(lock, [this] { return unfinished_ == 0; });
    stopping_ = true;
  }
  copy_cv_.notify_all();
  for (std::thread& th : copy_threads_) th.join();
  copy_threads_.clear();
  computes_.stop();
  started_ = false;
}

}  // namespace tierflow::replay
