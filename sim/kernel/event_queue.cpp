#include "sim/kernel/event_queue.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/diagnostics.h"

namespace tierflow::sim {

namespace {

constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();

/// Min-heap order for the early heap (std heap functions keep the greatest on top).
bool later(const Event& a, const Event& b) {
  return a.time > b.time || (a.time == b.time && a.seq > b.seq);
}

}  // namespace

EventQueue::EventQueue() { min_.fill(kEmpty); }

void EventQueue::place(const Event& ev) {
  const auto t = static_cast<uint64_t>(ev.time);
  const uint64_t diff = t ^ base_;
  if (diff == 0) {
    // Scheduled at the base time: after every event already there (larger sequence).
    buckets_[0].push_back(ev);
    return;
  }
  const auto b = static_cast<size_t>(std::bit_width(diff));
  buckets_[b].push_back(ev);
  min_[b] = std::min(min_[b], t);
  occupied_ |= uint64_t{1} << (b - 1);
}

uint64_t EventQueue::schedule(Time time, uint32_t tag, uint32_t data) {
  TF_ASSERT(time >= now_, "event scheduled at {} ps, before now ({} ps)", time, now_);
  const uint64_t seq = next_seq_++;
  if ((seq >> 6) >= cancelled_.size()) cancelled_.push_back(0);
  const Event ev{time, seq, tag, data};
  ++size_;
  if (static_cast<uint64_t>(time) >= base_) {
    place(ev);
  } else {
    early_.push_back(ev);
    std::push_heap(early_.begin(), early_.end(), later);
  }
  return seq;
}

void EventQueue::cancel(uint64_t id) {
  TF_ASSERT(id < next_seq_, "cancel of event {} that was never scheduled", id);
  const uint64_t bit = uint64_t{1} << (id & 63);
  if ((cancelled_[id >> 6] & bit) == 0) ++cancelled_pending_;
  cancelled_[id >> 6] |= bit;
}

bool EventQueue::refill() {
  std::vector<Event>& zero = buckets_[0];
  zero.clear();
  head_ = 0;
  while (zero.empty()) {
    if (occupied_ == 0) return false;
    const auto b = static_cast<size_t>(std::countr_zero(occupied_)) + 1;
    // Every event in bucket b is earlier than every event in a higher bucket, and the
    // buckets below b are empty: its least time is the earliest pending time.
    base_ = min_[b];
    min_[b] = kEmpty;
    occupied_ &= occupied_ - 1;
    scratch_.swap(buckets_[b]);
    // Relative to the new base every event lands in a bucket below b.
    if (cancelled_pending_ == 0) {
      for (const Event& ev : scratch_) place(ev);
    } else {
      for (const Event& ev : scratch_) {
        if (cancelled(ev.seq)) {
          --cancelled_pending_;
          --size_;
        } else {
          place(ev);
        }
      }
    }
    scratch_.clear();
  }
  // Events at the base time came from one bucket in the order they reached it, which need
  // not be their scheduling order.
  if (!std::is_sorted(zero.begin(), zero.end(),
                      [](const Event& a, const Event& c) { return a.seq < c.seq; })) {
    std::sort(zero.begin(), zero.end(),
              [](const Event& a, const Event& c) { return a.seq < c.seq; });
  }
  return true;
}

const Event* EventQueue::front() {
  for (;;) {
    if (!early_.empty()) {
      const Event& top = early_.front();
      if (cancelled_pending_ == 0 || !cancelled(top.seq)) return &top;
      std::pop_heap(early_.begin(), early_.end(), later);
      early_.pop_back();
    } else if (head_ < buckets_[0].size()) {
      const Event& ev = buckets_[0][head_];
      if (cancelled_pending_ == 0 || !cancelled(ev.seq)) return &ev;
      ++head_;
    } else {
      if (!refill()) return nullptr;
      continue;
    }
    --cancelled_pending_;
    --size_;
  }
}

bool EventQueue::pop(Event& out) {
  const Event* ev = front();
  if (ev == nullptr) return false;
  out = *ev;
  if (!early_.empty()) {
    std::pop_heap(early_.begin(), early_.end(), later);
    early_.pop_back();
  } else {
    ++head_;
  }
  --size_;
  TF_ASSERT(out.time >= now_, "time went backwards: {} ps after {} ps", out.time, now_);
  now_ = out.time;
  return true;
}

std::optional<Time> EventQueue::next_time() {
  const Event* ev = front();
  if (ev == nullptr) return std::nullopt;
  return ev->time;
}

}  // namespace tierflow::sim
