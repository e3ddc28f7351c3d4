#include "sim/serve/cache_policy.h"

#include <algorithm>
#include <bit>

#include "core/diagnostics.h"

namespace tierflow::serve {

// ---- HashIndex -------------------------------------------------------------------------

void HashIndex::insert(uint64_t hash, uint32_t slot) {
  TF_ASSERT(slot != kNoSlot, "slot {} is reserved", slot);
  if ((size_ + 1) * 2 > cells_.size()) grow();
  size_t i = home(hash);
  while (cells_[i].slot != kNoSlot) {
    TF_ASSERT(cells_[i].hash != hash, "hash {} is already indexed", hash);
    i = (i + 1) & mask_;
  }
  cells_[i] = Cell{.hash = hash, .slot = slot};
  ++size_;
}

void HashIndex::erase(uint64_t hash) {
  if (cells_.empty()) return;
  size_t i = home(hash);
  while (true) {
    if (cells_[i].slot == kNoSlot) return;
    if (cells_[i].hash == hash) break;
    i = (i + 1) & mask_;
  }
  // Backward shift: pull later cells of the run into the hole when their home allows it.
  for (size_t j = (i + 1) & mask_; cells_[j].slot != kNoSlot; j = (j + 1) & mask_) {
    const size_t h = home(cells_[j].hash);
    // Cell j may move to the hole i unless its home lies cyclically in (i, j].
    const bool home_after_hole = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (home_after_hole) continue;
    cells_[i] = cells_[j];
    i = j;
  }
  cells_[i].slot = kNoSlot;
  --size_;
}

void HashIndex::grow() {
  std::vector<Cell> old = std::move(cells_);
  const size_t count = std::max<size_t>(16, old.size() * 2);
  cells_.assign(count, Cell{});
  mask_ = count - 1;
  shift_ = 64 - std::countr_zero(count);
  size_ = 0;
  for (const Cell& c : old) {
    if (c.slot != kNoSlot) insert(c.hash, c.slot);
  }
}

// ---- GhostList -------------------------------------------------------------------------

bool GhostList::erase(uint64_t hash) {
  const uint32_t n = index_.find(hash);
  if (n == kNoSlot) return false;
  Node& node = nodes_[n];
  (node.prev == kNoSlot ? list_.head : nodes_[node.prev].next) = node.next;
  (node.next == kNoSlot ? list_.tail : nodes_[node.next].prev) = node.prev;
  --list_.size;
  index_.erase(hash);
  free_.push_back(n);
  return true;
}

void GhostList::push(uint64_t hash) {
  if (capacity_ == 0) return;
  if (list_.size >= capacity_) erase(nodes_[list_.tail].hash);
  uint32_t n;
  if (free_.empty()) {
    n = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  } else {
    n = free_.back();
    free_.pop_back();
  }
  nodes_[n] = Node{.hash = hash, .prev = kNoSlot, .next = list_.head};
  (list_.head == kNoSlot ? list_.tail : nodes_[list_.head].prev) = n;
  list_.head = n;
  ++list_.size;
  index_.insert(hash, n);
}

// ---- CacheLevel ------------------------------------------------------------------------

CacheLevel::CacheLevel(EvictionKind eviction, uint64_t capacity)
    : eviction_(eviction), capacity_(capacity) {
  TF_ASSERT(capacity >= 1, "a cache level holds at least one block");
  if (eviction_ == EvictionKind::kLfu) buckets_.resize(kMaxLfuCount + 1);
  if (eviction_ == EvictionKind::kS3Fifo) {
    small_capacity_ = std::max<uint64_t>(1, capacity / 10);
    ghost_ = GhostList(capacity - small_capacity_);
  }
}

void CacheLevel::link_front(ListHead& list, uint32_t slot) {
  Entry& e = entries_[slot];
  e.prev = kNoSlot;
  e.next = list.head;
  (list.head == kNoSlot ? list.tail : entries_[list.head].prev) = slot;
  list.head = slot;
  ++list.size;
  if (eviction_ == EvictionKind::kS3Fifo) {
    e.order = ++next_order_;
    if (e.pins == 0) unpinned_[e.queue].emplace(e.order, slot);
  }
}

void CacheLevel::unlink(ListHead& list, uint32_t slot) {
  Entry& e = entries_[slot];
  if (eviction_ == EvictionKind::kS3Fifo && e.pins == 0) unpinned_[e.queue].erase({e.order, slot});
  (e.prev == kNoSlot ? list.head : entries_[e.prev].next) = e.next;
  (e.next == kNoSlot ? list.tail : entries_[e.next].prev) = e.prev;
  e.prev = e.next = kNoSlot;
  --list.size;
}

ListHead& CacheLevel::list_of(uint32_t slot) {
  if (eviction_ == EvictionKind::kLfu) return buckets_[entries_[slot].count];
  if (eviction_ == EvictionKind::kS3Fifo && entries_[slot].queue == kMain) return main_;
  return lru_;  // LRU, or S3-FIFO's small queue
}

void CacheLevel::link_newest(uint32_t slot) {
  link_front(list_of(slot), slot);
  if (eviction_ == EvictionKind::kLfu) {
    const uint32_t c = entries_[slot].count;
    nonempty_[c / 64] |= uint64_t{1} << (c % 64);
  }
}

void CacheLevel::remove(uint32_t slot) {
  ListHead& list = list_of(slot);
  unlink(list, slot);
  if (eviction_ == EvictionKind::kLfu && list.size == 0) {
    const uint32_t c = entries_[slot].count;
    nonempty_[c / 64] &= ~(uint64_t{1} << (c % 64));
  }
}

uint32_t CacheLevel::insert(uint64_t hash, bool pinned) {
  TF_ASSERT(!full(), "insert into a full level");
  uint32_t slot;
  if (free_.empty()) {
    slot = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  } else {
    slot = free_.back();
    free_.pop_back();
  }
  Entry& e = entries_[slot];
  e = Entry{.hash = hash};
  if (eviction_ == EvictionKind::kLfu) e.count = 1;
  if (eviction_ == EvictionKind::kS3Fifo) {
    // A hash remembered by the ghost was evicted from small too soon: it goes to main.
    e.queue = ghost_.erase(hash) ? kMain : kSmall;
  }
  index_.insert(hash, slot);
  if (pinned) {
    // Pinned from the start: LRU and LFU link it when its pin goes.
    e.pins = 1;
    ++pinned_;
    if (eviction_ == EvictionKind::kS3Fifo) link_newest(slot);
  } else {
    if (eviction_ == EvictionKind::kS3Fifo)
      ++(e.queue == kSmall ? unpinned_small_ : unpinned_main_);
    link_newest(slot);
  }
  return slot;
}

void CacheLevel::touch(uint32_t slot) {
  Entry& e = entries_[slot];
  switch (eviction_) {
    case EvictionKind::kLru:
      if (e.pins == 0) {
        unlink(lru_, slot);
        link_front(lru_, slot);
      }
      return;
    case EvictionKind::kLfu:
      if (e.pins == 0) remove(slot);
      e.count = static_cast<uint16_t>(std::min<uint32_t>(e.count + 1U, kMaxLfuCount));
      if (e.pins == 0) link_newest(slot);
      return;
    case EvictionKind::kS3Fifo:
      e.count = static_cast<uint16_t>(std::min<uint32_t>(e.count + 1U, kMaxS3Freq));
      return;
  }
}

void CacheLevel::pin(uint32_t slot) {
  Entry& e = entries_[slot];
  if (e.pins++ > 0) return;
  ++pinned_;
  if (eviction_ == EvictionKind::kS3Fifo) {
    --(e.queue == kSmall ? unpinned_small_ : unpinned_main_);
    unpinned_[e.queue].erase({e.order, slot});
  } else {
    remove(slot);
  }
}

void CacheLevel::unpin(uint32_t slot) {
  Entry& e = entries_[slot];
  TF_ASSERT(e.pins > 0, "unpin of block {} that is not pinned", e.hash);
  if (--e.pins > 0) return;
  --pinned_;
  if (eviction_ == EvictionKind::kS3Fifo) {
    ++(e.queue == kSmall ? unpinned_small_ : unpinned_main_);
    unpinned_[e.queue].emplace(e.order, slot);  // where it was: S3-FIFO leaves it in place
  } else {
    link_newest(slot);
  }
}

void CacheLevel::rename(uint32_t slot, uint64_t hash) {
  Entry& e = entries_[slot];
  TF_ASSERT(e.pins > 0, "rename of block {} that is not pinned", e.hash);
  index_.erase(e.hash);
  index_.insert(hash, slot);
  e.hash = hash;
  // As when stored under `hash`: one S3-FIFO's ghost remembers goes to main.
  if (eviction_ == EvictionKind::kS3Fifo && ghost_.erase(hash) && e.queue == kSmall) {
    unlink(lru_, slot);
    e.queue = kMain;
    link_front(main_, slot);
  }
}

void CacheLevel::discard(uint32_t slot) {
  Entry& e = entries_[slot];
  TF_ASSERT(e.pins == 1, "discard of block {} held by {} pins", e.hash, e.pins);
  // A pinned block is out of the LRU and LFU orders; S3-FIFO keeps it in its queue.
  if (eviction_ == EvictionKind::kS3Fifo) unlink(list_of(slot), slot);
  e.pins = 0;
  --pinned_;
  index_.erase(e.hash);
  free_.push_back(slot);
}

uint32_t CacheLevel::oldest_unpinned(const ListHead& list) const {
  const auto& unpinned = unpinned_[&list == &main_ ? kMain : kSmall];
  return unpinned.empty() ? kNoSlot : unpinned.begin()->second;
}

bool CacheLevel::evict_lfu(uint32_t& slot) {
  for (size_t w = 0; w < nonempty_.size(); ++w) {
    if (nonempty_[w] == 0) continue;
    const auto c =
        static_cast<uint32_t>(w * 64 + static_cast<size_t>(std::countr_zero(nonempty_[w])));
    slot = buckets_[c].tail;
    return true;
  }
  return false;
}

bool CacheLevel::evict_s3fifo(uint32_t& slot) {
  while (unpinned_small_ + unpinned_main_ > 0) {
    if (unpinned_small_ > 0 && (lru_.size >= small_capacity_ || unpinned_main_ == 0)) {
      const uint32_t t = oldest_unpinned(lru_);
      Entry& e = entries_[t];
      if (e.count > 0) {
        // Accessed while in small: promoted to main, the accesses spent.
        unlink(lru_, t);
        e.count = 0;
        e.queue = kMain;
        --unpinned_small_;
        ++unpinned_main_;
        link_front(main_, t);
        continue;
      }
      ghost_.push(e.hash);
      slot = t;
      return true;
    }
    const uint32_t t = oldest_unpinned(main_);
    Entry& e = entries_[t];
    if (e.count > 0) {
      // Lazy promotion: reinserted at the head, one access spent.
      --e.count;
      unlink(main_, t);
      link_front(main_, t);
      continue;
    }
    slot = t;
    return true;
  }
  return false;
}

bool CacheLevel::evict(uint64_t& victim) {
  uint32_t slot = kNoSlot;
  bool found = false;
  switch (eviction_) {
    case EvictionKind::kLru:
      slot = lru_.tail;
      found = slot != kNoSlot;
      break;
    case EvictionKind::kLfu:
      found = evict_lfu(slot);
      break;
    case EvictionKind::kS3Fifo:
      found = evict_s3fifo(slot);
      break;
  }
  if (!found) return false;
  Entry& e = entries_[slot];
  TF_ASSERT(e.pins == 0, "eviction chose pinned block {}", e.hash);
  victim = e.hash;
  remove(slot);
  if (eviction_ == EvictionKind::kS3Fifo) --(e.queue == kSmall ? unpinned_small_ : unpinned_main_);
  index_.erase(e.hash);
  free_.push_back(slot);
  return true;
}

}  // namespace tierflow::serve
