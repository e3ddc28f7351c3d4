// The discrete-event kernel: a queue of timed events. It knows nothing of memories,
// links or plans; models give meaning to an event's tag and data.
//
// Glossary
//   time      integer picoseconds since the start of the simulation (Time).
//   sequence  a counter stamped on each event when it is scheduled; events at the same
//             time run in scheduling order, so runs are deterministic.
//   cancel    lazy: a cancelled event stays queued and is skipped when it surfaces.
//   now       the time of the last event popped; scheduling before it is a bug (asserted).
//   base      the time the buckets are relative to: now, or the earliest pending time once
//             the queue has looked ahead (next_time, or a pop that emptied bucket 0).
//   bucket    bucket 0 holds the events at the base time in sequence order; bucket b >= 1
//             the events whose time first differs from the base in bit b - 1.
//
// Why a radix heap and not a binary heap ordered by (time, sequence): event times never go
// backwards, so a monotone queue suffices. An event is placed by one XOR and one
// count-leading-zeros, and moves to a lower bucket only when its bucket is the lowest
// non-empty one, in a sequential pass; a pop from bucket 0 is an index increment. Measured
// with the hold model (bench/sim_bench.cpp, BM_EventQueueHold) on the 2-core build
// machine, back to back with the binary heap: 10 k pending 7.7 -> 12.9 M events/s, 1 M
// pending 2.4-2.6 -> 7.9-8.2 M events/s (docs/performance.md). A 4-ary heap was tried
// before and was slower than the binary heap at 1 M pending. The pop order is exactly the
// binary heap's: by time, equal times by sequence.
#pragma once

#include <array>
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

/// Monotone priority queue of events (a radix heap on the time), popped by (time, seq).
class EventQueue {
 public:
  EventQueue();
  /// Schedules an event at `time` (never before now()); returns its id.
  uint64_t schedule(Time time, uint32_t tag, uint32_t data);
  /// Marks the event `id` cancelled; it will never be returned by pop().
  void cancel(uint64_t id);
  /// Removes the earliest live event into `out` and advances now(); false when none is left.
  bool pop(Event& out);
  /// Time of the earliest live event, if any (drops cancelled events on the way). Does not
  /// advance now(): events may still be scheduled at any time from now() on.
  std::optional<Time> next_time();
  [[nodiscard]] Time now() const { return now_; }
  /// Events queued, cancelled ones not yet skipped included.
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] uint64_t scheduled() const { return next_seq_; }
  /// Capacity hint for `n` pending events.
  void reserve(size_t n) { buckets_[0].reserve(n / 8); }

 private:
  /// Time bits: times are never negative, so bucket indexes stay below 64.
  static constexpr size_t kBuckets = 64;

  [[nodiscard]] bool cancelled(uint64_t seq) const {
    return (cancelled_[seq >> 6] >> (seq & 63)) & 1U;
  }
  /// Puts `ev` (time >= base_) into its bucket.
  void place(const Event& ev);
  /// Refills bucket 0 from the lowest non-empty bucket; false when all buckets are empty.
  bool refill();
  /// The earliest live event, cancelled ones before it dropped; nullptr when none.
  const Event* front();

  std::array<std::vector<Event>, kBuckets> buckets_;
  std::array<uint64_t, kBuckets> min_{};  ///< least time in each bucket b >= 1
  uint64_t occupied_ = 0;                 ///< bit b - 1 set when bucket b >= 1 holds events
  size_t head_ = 0;                       ///< next event of bucket 0
  uint64_t base_ = 0;
  /// Events scheduled in [now, base) after a look-ahead moved the base past now: a binary
  /// min-heap by (time, seq), all earlier than every bucketed event. Usually empty.
  std::vector<Event> early_;
  std::vector<Event> scratch_;       ///< the bucket being redistributed
  std::vector<uint64_t> cancelled_;  ///< one bit per sequence number
  uint64_t next_seq_ = 0;
  uint64_t cancelled_pending_ = 0;  ///< cancelled events still queued
  size_t size_ = 0;
  Time now_ = 0;
};

}  // namespace tierflow::sim
