// Best-fit allocator over one arena, with coalescing of neighbouring free ranges, that
// measures exactly how many bytes are in use and their peak.
//
// Glossary
//   range      [offset, offset + size) of the arena; free ranges never touch (they are
//              merged when a block between them is freed).
//   best fit   the smallest free range that holds the request, which keeps large ranges
//              whole for large tensors.
//   small      a block of at most 1/256 of the arena (norm weights, a token's
//              activations): placed at the top of its range (ties: the highest range),
//              large blocks at the bottom (ties: the lowest), so that long-lived small
//              blocks do not cut the arena's large ranges apart.
//   high water the most bytes the arena ever had outside its largest free range: the live
//              blocks and the holes between them (fragmentation shows here).
//   in use     the sum of the sizes asked for by live blocks (not rounded): the figure the
//              simulator's memory ledger also keeps, so peaks compare exactly.
//   footprint  a block's rounded size (kAlignment) in the arena.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace tierflow::replay {

class ArenaAllocator {
 public:
  static constexpr uint64_t kAlignment = 16;

  explicit ArenaAllocator(uint64_t size);

  /// Offset of a new block of `bytes` (counted as `logical` plan bytes); nullopt when no
  /// free range holds it. A block of 0 bytes takes no range and sits at offset 0.
  std::optional<uint64_t> allocate(uint64_t bytes, uint64_t logical);
  /// Frees the block at `offset` that was allocated with these sizes.
  void free(uint64_t offset, uint64_t bytes, uint64_t logical);

  [[nodiscard]] uint64_t size() const { return size_; }
  [[nodiscard]] uint64_t in_use() const { return in_use_; }
  [[nodiscard]] uint64_t peak() const { return peak_; }
  [[nodiscard]] uint64_t logical_in_use() const { return logical_in_use_; }
  [[nodiscard]] uint64_t logical_peak() const { return logical_peak_; }
  [[nodiscard]] uint64_t high_water() const { return high_water_; }
  [[nodiscard]] uint64_t blocks() const { return blocks_; }
  /// Bytes in free ranges (the arena less the footprints of live blocks).
  [[nodiscard]] uint64_t free_bytes() const;
  /// The largest free range.
  [[nodiscard]] uint64_t largest_free() const;
  [[nodiscard]] size_t free_ranges() const { return by_offset_.size(); }

  static uint64_t footprint(uint64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }

 private:
  void insert_free(uint64_t offset, uint64_t size);
  void erase_free(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t size_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;           ///< free ranges: offset -> size
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  ///< free ranges: (size, offset)
  uint64_t in_use_ = 0;
  uint64_t peak_ = 0;
  uint64_t logical_in_use_ = 0;
  uint64_t logical_peak_ = 0;
  uint64_t high_water_ = 0;
  uint64_t blocks_ = 0;
};

}  // namespace tierflow::replay
