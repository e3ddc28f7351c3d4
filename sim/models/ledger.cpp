#include "sim/models/ledger.h"

#include <algorithm>

#include "core/diagnostics.h"

namespace tierflow::sim {

MemoryLedger::MemoryLedger(std::vector<uint64_t> capacity)
    : slots_(capacity.size()), kept_(capacity.size()), kept_head_(capacity.size()) {
  for (size_t i = 0; i < capacity.size(); ++i) slots_[i].capacity = slots_[i].limit = capacity[i];
}

void MemoryLedger::hold_to(uint32_t slot, uint64_t bytes) {
  SlotStats& s = slots_[slot];
  s.limit = std::min(s.capacity, bytes);
}

void MemoryLedger::change(SlotStats& s, Time now) {
  s.byte_ps += static_cast<double>(s.level) * static_cast<double>(now - s.last_change);
  s.last_change = now;
}

void MemoryLedger::add_static(uint32_t slot, uint64_t bytes) {
  SlotStats& s = slots_[slot];
  s.level += bytes;
  if (s.level > s.peak) {
    s.peak = s.level;
    s.peak_seq = 0;
  }
}

uint32_t MemoryLedger::allocate(uint32_t slot, uint64_t bytes, uint32_t what, uint32_t program,
                                Time now) {
  SlotStats& s = slots_[slot];
  change(s, now);
  s.level += bytes;
  const uint64_t seq = ++seq_;
  if (s.level > s.peak) {
    s.peak = s.level;
    s.peak_time = now;
    s.peak_seq = seq;
    // Kept records freed before this peak can no longer be live at the final one; they
    // were appended in free order, so they form a prefix.
    auto& kept = kept_[slot];
    size_t& head = kept_head_[slot];
    while (head < kept.size() && kept[head].free_seq <= seq) ++head;
    if (head > 4096 && head * 2 > kept.size()) {
      kept.erase(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(head));
      head = 0;
    }
  }
  uint32_t id;
  if (free_.empty()) {
    id = static_cast<uint32_t>(pool_.size());
    pool_.emplace_back();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  pool_[id] = Allocation{bytes, seq, UINT64_MAX, what, program, slot};
  return id;
}

void MemoryLedger::release(uint32_t record, Time now) {
  Allocation& a = pool_[record];
  TF_ASSERT(a.free_seq == UINT64_MAX, "record {} released twice", record);
  SlotStats& s = slots_[a.slot];
  change(s, now);
  TF_ASSERT(s.level >= a.bytes, "slot {} level {} below a record of {} bytes", a.slot, s.level,
            a.bytes);
  s.level -= a.bytes;
  a.free_seq = ++seq_;
  if (a.alloc_seq <= s.peak_seq) kept_[a.slot].push_back(a);
  a.free_seq = UINT64_MAX - 1;  // a free pool entry
  free_.push_back(record);
}

double MemoryLedger::average(uint32_t slot, Time end) const {
  const SlotStats& s = slots_[slot];
  if (end <= 0) return static_cast<double>(s.level);
  const double total =
      s.byte_ps + static_cast<double>(s.level) * static_cast<double>(end - s.last_change);
  return total / static_cast<double>(end);
}

std::vector<Allocation> MemoryLedger::live_now(uint32_t slot) const {
  std::vector<Allocation> out;
  for (const Allocation& a : pool_) {
    if (a.slot == slot && a.free_seq == UINT64_MAX) out.push_back(a);
  }
  return out;
}

}  // namespace tierflow::sim
