// Bytes held in every tier instance over time: the memory ledger.
//
// Glossary
//   slot        one tier instance (see Fabric::tier_slot).
//   static      bytes present from time zero that never leave during the step: the home
//               copies of external tensors. Counted in the level, not kept as records.
//   record      one dynamic allocation: a tensor's copy (prefetched, produced or stored)
//               or an op's workspace, with the allocation sequence numbers that bound it.
//   peak        the highest level a slot reaches, first reached at allocation `peak_seq`.
//   live set    the records with alloc_seq <= peak_seq < free_seq, plus the static bytes.
//
// Records freed before a slot's current peak was set can never be live at its final
// peak, so only records that were live across some peak are kept once freed.
#pragma once

#include <cstdint>
#include <vector>

#include "core/stepper.h"
#include "sim/kernel/event_queue.h"

namespace tierflow::sim {

using tierflow::kWorkspaceBit;  ///< `what` of a workspace: op | bit (core/stepper.h)
inline constexpr uint32_t kNoRecord = UINT32_MAX;

struct Allocation {
  uint64_t bytes = 0;
  uint64_t alloc_seq = 0;
  uint64_t free_seq = UINT64_MAX;  ///< UINT64_MAX while allocated
  uint32_t what = 0;               ///< tensor id, or op id | kWorkspaceBit
  uint32_t program = 0;
  uint32_t slot = 0;
};

struct SlotStats {
  uint64_t capacity = 0;
  uint64_t limit = 0;  ///< what the level may reach: the capacity, or less (hold_to)
  uint64_t level = 0;
  uint64_t peak = 0;
  Time peak_time = 0;
  uint64_t peak_seq = 0;
  double byte_ps = 0;  ///< integral of the level over time
  Time last_change = 0;
};

class MemoryLedger {
 public:
  explicit MemoryLedger(std::vector<uint64_t> capacity);

  [[nodiscard]] size_t slots() const { return slots_.size(); }
  [[nodiscard]] bool fits(uint32_t slot, uint64_t bytes) const {
    const SlotStats& s = slots_[slot];
    return s.level <= s.limit && bytes <= s.limit - s.level;
  }
  /// Holds the slot to `bytes` when that is below its capacity (a plan's budget).
  void hold_to(uint32_t slot, uint64_t bytes);
  /// Adds bytes present from time zero (home copies).
  void add_static(uint32_t slot, uint64_t bytes);
  /// Allocates at `now` (the caller decided it may); returns the record id.
  uint32_t allocate(uint32_t slot, uint64_t bytes, uint32_t what, uint32_t program, Time now);
  /// Frees a record at `now`.
  void release(uint32_t record, Time now);

  [[nodiscard]] const SlotStats& stats(uint32_t slot) const { return slots_[slot]; }
  /// An allocation record (from allocate(), not yet released).
  [[nodiscard]] const Allocation& record(uint32_t id) const { return pool_[id]; }
  /// Time-weighted mean level over [0, end].
  [[nodiscard]] double average(uint32_t slot, Time end) const;
  /// Calls f(allocation) for each dynamic allocation live at its slot's peak (the static
  /// bytes are not listed): one pass over the records for all slots, not one per slot (a
  /// topology of 100,000 devices has as many device slots), and nothing gathered. The
  /// allocations of one slot come in the same order on every run.
  template <class F>
  void for_each_live_at_peak(F&& f) const {
    for (size_t slot = 0; slot < slots_.size(); ++slot) {
      const uint64_t peak = slots_[slot].peak_seq;
      const auto& kept = kept_[slot];
      for (size_t i = kept_head_[slot]; i < kept.size(); ++i) {
        if (kept[i].alloc_seq <= peak && peak < kept[i].free_seq) f(kept[i]);
      }
    }
    for (const Allocation& a : pool_) {
      if (a.free_seq == UINT64_MAX && a.alloc_seq <= slots_[a.slot].peak_seq) f(a);
    }
  }
  /// Dynamic allocations of the slot live now.
  [[nodiscard]] std::vector<Allocation> live_now(uint32_t slot) const;

 private:
  void change(SlotStats& s, Time now);

  std::vector<SlotStats> slots_;
  std::vector<Allocation> pool_;  ///< open records (free_seq == UINT64_MAX) and free entries
  std::vector<uint32_t> free_;
  std::vector<std::vector<Allocation>> kept_;  ///< freed records that were live at a peak
  std::vector<size_t> kept_head_;              ///< kept_[slot][0, head) are dead for good
  uint64_t seq_ = 0;
};

}  // namespace tierflow::sim
