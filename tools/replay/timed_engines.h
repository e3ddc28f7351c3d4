// Engines that run a step by letting its plan time pass on a steady clock: the CPU
// backend's compute engines, and every backend's host engines (the host CPU that runs a
// plan's host steps, core/plan.h). One thread per engine, one step at a time.
//
// Glossary
//   clock      plan time = (steady clock - t0) / scale: t0 and scale are the backend's own,
//              so an engine's start and end read the clock the backend's now() reads.
//   step       handed over at plan time `handed`; the engine waits (sleeping, then
//              spinning on the clock for the last stretch) until `handed + duration`, then
//              calls the completion with (handed, the clock's reading): the hand-off is
//              part of the step, as launch overhead is part of the simulator's op time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/replay/backend.h"

namespace tierflow::replay {

class TimedEngines {
 public:
  using Clock = std::chrono::steady_clock;

  TimedEngines() = default;
  ~TimedEngines() { stop(); }
  TimedEngines(const TimedEngines&) = delete;
  TimedEngines& operator=(const TimedEngines&) = delete;

  /// Starts `count` engines on the clock that reads 0 at `t0` and runs `scale` real
  /// seconds per plan second (> 0).
  void start(uint32_t count, Clock::time_point t0, double scale);
  /// Plan time on the engines' clock.
  [[nodiscard]] Time now() const;
  /// Real time of plan time `plan`.
  [[nodiscard]] Clock::time_point real(Time plan) const;
  /// Runs a step of `duration` on engine `engine`, which runs none: see the glossary.
  void run(uint32_t engine, Time duration, Completion done);
  /// Lets every engine finish its step, then joins the threads. Idempotent.
  void stop();

  /// Sleeps, then spins, until `deadline`.
  static void wait_until(Clock::time_point deadline);

 private:
  struct Engine {
    std::mutex m;
    std::condition_variable cv;
    bool has_job = false;
    bool stopping = false;
    Time handed = 0;
    Time duration = 0;
    Completion done;
    std::thread thread;
  };
  void work(Engine& e);

  Clock::time_point t0_;
  double scale_ = 1;
  std::vector<std::unique_ptr<Engine>> engines_;
};

}  // namespace tierflow::replay
