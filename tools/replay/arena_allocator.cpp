#include "tools/replay/arena_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "core/diagnostics.h"

namespace tierflow::replay {

ArenaAllocator::ArenaAllocator(uint64_t size) : size_(size / kAlignment * kAlignment) {
  if (size_ > 0) insert_free(0, size_);
}

void ArenaAllocator::insert_free(uint64_t offset, uint64_t size) {
  by_offset_.emplace(offset, size);
  by_size_.emplace(size, offset);
}

void ArenaAllocator::erase_free(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_offset_.erase(it);
}

std::optional<uint64_t> ArenaAllocator::allocate(uint64_t bytes, uint64_t logical) {
  uint64_t offset = 0;
  if (bytes > 0) {
    const uint64_t need = footprint(bytes);
    auto fit = by_size_.lower_bound({need, 0});
    if (fit == by_size_.end()) return std::nullopt;
    const bool small = need <= size_ / 256;
    if (small) fit = std::prev(by_size_.upper_bound({fit->first, UINT64_MAX}));
    const auto [range, at] = *fit;
    erase_free(by_offset_.find(at));
    if (small) {
      offset = at + range - need;
      if (range > need) insert_free(at, range - need);
    } else {
      offset = at;
      if (range > need) insert_free(at + need, range - need);
    }
    high_water_ = std::max(high_water_, size_ - largest_free());
  }
  ++blocks_;
  in_use_ += bytes;
  logical_in_use_ += logical;
  peak_ = std::max(peak_, in_use_);
  logical_peak_ = std::max(logical_peak_, logical_in_use_);
  return offset;
}

void ArenaAllocator::free(uint64_t offset, uint64_t bytes, uint64_t logical) {
  TF_ASSERT(in_use_ >= bytes && logical_in_use_ >= logical, "free of {} bytes with {} in use",
            bytes, in_use_);
  in_use_ -= bytes;
  logical_in_use_ -= logical;
  if (bytes == 0) return;
  uint64_t start = offset;
  uint64_t size = footprint(bytes);
  TF_ASSERT(start + size <= size_, "block [{}, {}) outside the arena", start, start + size);
  // Merge with the free range after, then with the one before.
  auto next = by_offset_.lower_bound(start);
  TF_ASSERT(next == by_offset_.end() || next->first >= start + size, "double free at {}", start);
  if (next != by_offset_.end() && next->first == start + size) {
    size += next->second;
    erase_free(next);
  }
  auto after = by_offset_.lower_bound(start);
  if (after != by_offset_.begin()) {
    const auto prev = std::prev(after);
    TF_ASSERT(prev->first + prev->second <= start, "double free at {}", start);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  insert_free(start, size);
}

uint64_t ArenaAllocator::free_bytes() const {
  uint64_t n = 0;
  for (const auto& [offset, size] : by_offset_) n += size;
  return n;
}

uint64_t ArenaAllocator::largest_free() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

}  // namespace tierflow::replay
