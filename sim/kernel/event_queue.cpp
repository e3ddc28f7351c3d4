#include "sim/kernel/event_queue.h"

#include "core/diagnostics.h"

namespace tierflow::sim {

uint64_t EventQueue::schedule(Time time, uint32_t tag, uint32_t data) {
  TF_ASSERT(time >= now_, "event scheduled at {} ps, before now ({} ps)", time, now_);
  const uint64_t seq = next_seq_++;
  if ((seq >> 6) >= cancelled_.size()) cancelled_.push_back(0);
  // Sift up with a hole instead of swaps.
  const Event ev{time, seq, tag, data};
  size_t i = heap_.size();
  heap_.push_back(ev);
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!before(ev, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = ev;
  return seq;
}

void EventQueue::cancel(uint64_t id) {
  TF_ASSERT(id < next_seq_, "cancel of event {} that was never scheduled", id);
  const uint64_t bit = uint64_t{1} << (id & 63);
  if ((cancelled_[id >> 6] & bit) == 0) ++cancelled_pending_;
  cancelled_[id >> 6] |= bit;
}

void EventQueue::remove_top() {
  const Event last = heap_.back();
  heap_.pop_back();
  const size_t n = heap_.size();
  if (n == 0) return;
  size_t i = 0;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && before(heap_[child + 1], heap_[child])) ++child;
    if (!before(heap_[child], last)) break;
    heap_[i] = heap_[child];
    i = child;
  }
  heap_[i] = last;
}

void EventQueue::drop_cancelled() {
  // Cancelled events are rare; without any, no bit needs looking up.
  while (cancelled_pending_ > 0 && !heap_.empty() && cancelled(heap_.front().seq)) {
    remove_top();
    --cancelled_pending_;
  }
}

bool EventQueue::pop(Event& out) {
  drop_cancelled();
  if (heap_.empty()) return false;
  out = heap_.front();
  remove_top();
  TF_ASSERT(out.time >= now_, "time went backwards: {} ps after {} ps", out.time, now_);
  now_ = out.time;
  return true;
}

std::optional<Time> EventQueue::next_time() {
  drop_cancelled();
  if (heap_.empty()) return std::nullopt;
  return heap_.front().time;
}

}  // namespace tierflow::sim
