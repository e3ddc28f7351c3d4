// One level of the tiered KV block cache: the blocks it holds, found by hash, and the
// order in which its eviction policy gives them up.
//
// Glossary
//   slot        an index into a level's entry table; a block keeps its slot while held.
//   pinned      a block with a positive pin count: never evicted. LRU and LFU take a pinned
//               block out of their order and put it back at the newest end when its last
//               pin goes; S3-FIFO leaves it in its queue and passes over it.
//   ghost       a bounded FIFO of hashes (no data) remembering what was recently refused
//               or evicted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

namespace tierflow::serve {

/// An eviction policy of one cache level.
enum class EvictionKind : uint8_t {
  kLru,     ///< least recently used
  kLfu,     ///< least frequently used; ties by least recently used
  kS3Fifo,  ///< S3-FIFO (Yang et al., SOSP'23): small, main and ghost FIFOs
};
inline constexpr std::array<std::string_view, 3> kEvictionNames = {"lru", "lfu", "s3fifo"};

inline constexpr uint32_t kNoSlot = UINT32_MAX;

/// Hash -> slot, open addressing with linear probing and backward-shift deletion.
class HashIndex {
 public:
  [[nodiscard]] uint32_t find(uint64_t hash) const {
    if (cells_.empty()) return kNoSlot;
    for (size_t i = home(hash);; i = (i + 1) & mask_) {
      const Cell& c = cells_[i];
      if (c.slot == kNoSlot || c.hash == hash) return c.slot;
    }
  }
  /// `hash` must be absent.
  void insert(uint64_t hash, uint32_t slot);
  /// Removes `hash` if present.
  void erase(uint64_t hash);
  [[nodiscard]] size_t size() const { return size_; }

 private:
  struct Cell {
    uint64_t hash = 0;
    uint32_t slot = kNoSlot;  // kNoSlot marks an empty cell
  };
  // Fibonacci hashing: the top bits of the product spread trace hashes, which are often
  // small consecutive integers.
  [[nodiscard]] size_t home(uint64_t hash) const {
    return static_cast<size_t>((hash * 0x9e3779b97f4a7c15ULL) >> shift_);
  }
  void grow();
  std::vector<Cell> cells_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

/// A doubly linked list threaded through a table's `prev`/`next` fields: head newest.
struct ListHead {
  uint32_t head = kNoSlot;
  uint32_t tail = kNoSlot;
  uint32_t size = 0;
};

/// A FIFO of at most `capacity` distinct hashes; the oldest leaves when a new one comes.
class GhostList {
 public:
  explicit GhostList(uint64_t capacity = 0) : capacity_(capacity) {}
  [[nodiscard]] bool contains(uint64_t hash) const { return index_.find(hash) != kNoSlot; }
  /// Removes `hash`; whether it was there.
  bool erase(uint64_t hash);
  /// Appends `hash` (absent) as the newest, dropping the oldest when full.
  void push(uint64_t hash);
  [[nodiscard]] uint64_t size() const { return list_.size; }

 private:
  struct Node {
    uint64_t hash = 0;
    uint32_t prev = kNoSlot, next = kNoSlot;
  };
  uint64_t capacity_;
  HashIndex index_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  ListHead list_;
};

/// The blocks of one level and its eviction order. Knows nothing of other levels.
class CacheLevel {
 public:
  /// Counts kept by LFU saturate here (ties among saturated blocks go by recency).
  static constexpr uint16_t kMaxLfuCount = 1023;
  /// S3-FIFO's frequency is 2 bits.
  static constexpr uint8_t kMaxS3Freq = 3;

  CacheLevel(EvictionKind eviction, uint64_t capacity);

  [[nodiscard]] uint32_t find(uint64_t hash) const { return index_.find(hash); }
  [[nodiscard]] bool holds(uint64_t hash) const { return find(hash) != kNoSlot; }
  [[nodiscard]] uint64_t size() const { return index_.size(); }
  [[nodiscard]] uint64_t capacity() const { return capacity_; }
  [[nodiscard]] bool full() const { return size() >= capacity_; }
  [[nodiscard]] uint64_t pinned_blocks() const { return pinned_; }
  [[nodiscard]] uint64_t evictable() const { return size() - pinned_; }
  [[nodiscard]] uint32_t pins(uint32_t slot) const { return entries_[slot].pins; }

  /// Stores `hash` (absent; the level not full) as the newest, pinned once if `pinned`.
  /// Returns its slot.
  uint32_t insert(uint64_t hash, bool pinned = false);
  /// Removes the policy's victim among the unpinned blocks into `victim`; false if every
  /// block is pinned (or the level is empty).
  bool evict(uint64_t& victim);
  /// Records an access: LFU counts it, S3-FIFO raises the frequency, LRU makes the block
  /// the most recent (a pinned block becomes the most recent when its last pin goes).
  void touch(uint32_t slot);
  void pin(uint32_t slot);
  void unpin(uint32_t slot);
  /// Gives the pinned block at `slot` the hash `hash` (absent), keeping its pins and its
  /// place in the eviction order; but S3-FIFO moves it to main, as it would store it, when
  /// its ghost remembers `hash`.
  void rename(uint32_t slot, uint64_t hash);
  /// Removes the block at `slot`, held by exactly one pin, whose data is not wanted: not
  /// an eviction (S3-FIFO's ghost does not remember it).
  void discard(uint32_t slot);

 private:
  struct Entry {
    uint64_t hash = 0;
    uint32_t prev = kNoSlot, next = kNoSlot;
    uint32_t pins = 0;
    uint16_t count = 0;  // LFU: accesses since stored; S3-FIFO: 2-bit frequency
    uint8_t queue = 0;   // S3-FIFO: kSmall or kMain
    uint64_t order = 0;  // S3-FIFO: when it entered its queue's newest end (larger: newer)
  };
  static constexpr uint8_t kSmall = 0, kMain = 1;

  void link_front(ListHead& list, uint32_t slot);
  void unlink(ListHead& list, uint32_t slot);
  /// The list the entry at `slot` belongs to (the LFU bucket of its count).
  ListHead& list_of(uint32_t slot);
  void link_newest(uint32_t slot);
  void remove(uint32_t slot);
  /// The oldest unpinned entry of `list` (S3-FIFO keeps pinned entries in its queues).
  [[nodiscard]] uint32_t oldest_unpinned(const ListHead& list) const;
  bool evict_lfu(uint32_t& slot);
  bool evict_s3fifo(uint32_t& slot);

  EvictionKind eviction_;
  uint64_t capacity_;
  uint64_t pinned_ = 0;
  HashIndex index_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
  ListHead lru_;   // LRU order, or S3-FIFO's small queue
  ListHead main_;  // S3-FIFO's main queue
  // LFU: one list per count (index = count), and which are non-empty.
  std::vector<ListHead> buckets_;
  std::array<uint64_t, (kMaxLfuCount + 64) / 64> nonempty_{};
  uint64_t small_capacity_ = 0;
  uint64_t unpinned_small_ = 0, unpinned_main_ = 0;
  /// S3-FIFO: each queue's unpinned entries by `order`, oldest first, so that the oldest
  /// unpinned one is found at once however many pinned ones lie behind it in the queue.
  std::array<std::set<std::pair<uint64_t, uint32_t>>, 2> unpinned_;
  uint64_t next_order_ = 0;
  GhostList ghost_;
};

}  // namespace tierflow::serve
