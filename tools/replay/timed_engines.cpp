#include "tools/replay/timed_engines.h"

#include <cmath>

#include "core/diagnostics.h"

namespace tierflow::replay {

void TimedEngines::start(uint32_t count, Clock::time_point t0, double scale) {
  TF_ASSERT(engines_.empty(), "timed engines started twice");
  TF_ASSERT(scale > 0 && std::isfinite(scale), "time scale must be positive");
  t0_ = t0;
  scale_ = scale;
  for (uint32_t i = 0; i < count; ++i) {
    auto e = std::make_unique<Engine>();
    Engine& ref = *e;
    e->thread = std::thread([this, &ref] { work(ref); });
    engines_.push_back(std::move(e));
  }
}

Time TimedEngines::now() const {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
  return static_cast<Time>(std::llround(static_cast<double>(ns) * 1000.0 / scale_));
}

TimedEngines::Clock::time_point TimedEngines::real(Time plan) const {
  const double ns = static_cast<double>(plan) * scale_ / 1000.0;
  return t0_ + std::chrono::nanoseconds(std::llround(ns));
}

void TimedEngines::wait_until(Clock::time_point deadline) {
  using std::chrono::microseconds;
  while (true) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return;
    // Sleeping overshoots by tens of microseconds: sleep through all but the last stretch,
    // then spin on the clock.
    if (left > microseconds(200)) {
      std::this_thread::sleep_for(left - microseconds(100));
    } else {
      std::this_thread::yield();
    }
  }
}

void TimedEngines::run(uint32_t engine, Time duration, Completion done) {
  Engine& e = *engines_.at(engine);
  {
    const std::lock_guard lock(e.m);
    TF_ASSERT(!e.has_job, "engine {} was handed a step while one runs", engine);
    e.has_job = true;
    e.handed = now();
    e.duration = duration;
    e.done = std::move(done);
  }
  e.cv.notify_one();
}

void TimedEngines::work(Engine& e) {
  while (true) {
    Time start = 0;
    Time duration = 0;
    Completion done;
    {
      std::unique_lock lock(e.m);
      e.cv.wait(lock, [&] { return e.stopping || e.has_job; });
      if (!e.has_job) return;
      start = e.handed;
      duration = e.duration;
      done = std::move(e.done);
    }
    wait_until(real(start + duration));
    const Time end = now();
    {
      const std::lock_guard lock(e.m);
      e.has_job = false;
    }
    done(start, end);
  }
}

void TimedEngines::stop() {
  for (auto& e : engines_) {
    {
      const std::lock_guard lock(e->m);
      e->stopping = true;
    }
    e->cv.notify_all();
    e->thread.join();
  }
  engines_.clear();
}

}  // namespace tierflow::replay
