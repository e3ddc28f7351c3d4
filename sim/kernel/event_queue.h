// The discrete-event kernel: a queue of timed events. It knows nothing of memories,
// links or plans; models give meaning to an event's tag and data.
//
// Glossary
//   time      integer picoseconds since the start of the simulation (Time).
//   sequence  a counter stamped on each event when it is scheduled; events at the same
//             time run in scheduling order, so runs are deterministic.
//   cancel    lazy: a cancelled event stays in the heap and is skipped when it surfaces.
//   now       the time of the last event popped; scheduling before it is a bug (asserted).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tierflow::sim {

/// Simulated time in picoseconds.
using Time = int64_t;

struct Event {
  Time time = 0;
  uint64_t seq = 0;   ///< scheduling order; also the event's id for cancel()
  uint32_t tag = 0;   ///< what kind of event, for the model that scheduled it
  uint32_t data = 0;  ///< which object it concerns, for that model
};

/// Binary min-heap of events ordered by (time, seq).
class EventQueue {
 public:
  /// Schedules an event at `time` (never before now()); returns its id.
  uint64_t schedule(Time time, uint32_t tag, uint32_t data);
  /// Marks the event `id` cancelled; it will never be returned by pop().
  void cancel(uint64_t id);
  /// Removes the earliest live event into `out` and advances now(); false when none is left.
  bool pop(Event& out);
  /// Time of the earliest live event, if any (drops cancelled events on the way).
  std::optional<Time> next_time();
  [[nodiscard]] Time now() const { return now_; }
  /// Events in the heap, cancelled ones not yet skipped included.
  [[nodiscard]] size_t size() const { return heap_.size(); }
  [[nodiscard]] uint64_t scheduled() const { return next_seq_; }
  void reserve(size_t n) { heap_.reserve(n); }

 private:
  static bool before(const Event& a, const Event& b) {
    return a.time < b.time || (a.time == b.time && a.seq < b.seq);
  }
  [[nodiscard]] bool cancelled(uint64_t seq) const {
    return (cancelled_[seq >> 6] >> (seq & 63)) & 1U;
  }
  void remove_top();
  void drop_cancelled();

  std::vector<Event> heap_;
  std::vector<uint64_t> cancelled_;  ///< one bit per sequence number
  uint64_t next_seq_ = 0;
  uint64_t cancelled_pending_ = 0;  ///< cancelled events still in the heap
  Time now_ = 0;
};

}  // namespace tierflow::sim
