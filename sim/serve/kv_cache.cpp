#include "sim/serve/kv_cache.h"

#include <algorithm>
#include <utility>

#include "core/diagnostics.h"

namespace tierflow::serve {

LevelId TieredCache::add_level(LevelSpec spec) {
  TF_ASSERT(spec.capacity_blocks >= 1, "level '{}' holds no block", spec.name);
  const uint64_t capacity = spec.capacity_blocks;
  const EvictionKind eviction = spec.eviction;
  const uint64_t ghost = spec.admission == AdmissionKind::kSecond ? capacity : 0;
  levels_.push_back(Level{.spec = std::move(spec),
                          .store = CacheLevel(eviction, capacity),
                          .admission_ghost = GhostList(ghost)});
  return static_cast<LevelId>(levels_.size() - 1);
}

PathId TieredCache::add_path(std::vector<LevelId> levels) {
  TF_ASSERT(!levels.empty(), "a path has a device level");
  for (size_t i = 0; i < levels.size(); ++i) {
    TF_ASSERT(levels[i] < levels_.size(), "no level {}", levels[i]);
    Level& lv = levels_[levels[i]];
    if (i == 0) {
      TF_ASSERT(!lv.lower, "level '{}' is below another path's device level", lv.spec.name);
      TF_ASSERT(lv.spec.admission == AdmissionKind::kAll, "device level '{}' keeps every block",
                lv.spec.name);
      lv.device = true;
    } else {
      TF_ASSERT(!lv.device, "device level '{}' is below another level", lv.spec.name);
      lv.lower = true;
    }
    if (i + 1 < levels.size()) {
      TF_ASSERT(lv.below == kNoLevel || lv.below == levels[i + 1],
                "level '{}' has two levels below it", lv.spec.name);
      lv.below = levels[i + 1];
    }
  }
  // Evictions cascade along `below`: it must end. Only this path's levels changed theirs,
  // so a cycle would pass through one of them (walking every level made adding a path per
  // replica quadratic in the replicas).
  for (const LevelId l : levels) {
    size_t steps = 0;
    for (LevelId at = l; at != kNoLevel; at = levels_[at].below) {
      TF_ASSERT(++steps <= levels_.size(), "the levels below '{}' form a cycle",
                levels_[l].spec.name);
    }
  }
  paths_.push_back(std::move(levels));
  return static_cast<PathId>(paths_.size() - 1);
}

size_t TieredCache::nearest(const std::vector<LevelId>& levels, uint64_t hash) const {
  size_t pos = 0;
  while (pos < levels.size() && !levels_[levels[pos]].store.holds(hash)) ++pos;
  return pos;
}

size_t TieredCache::lookup(PathId path, std::span<const uint64_t> hashes,
                           std::vector<LevelId>& where) const {
  const std::vector<LevelId>& levels = paths_[path];
  where.clear();
  for (const uint64_t h : hashes) {
    const size_t pos = nearest(levels, h);
    if (pos == levels.size()) break;
    where.push_back(levels[pos]);
  }
  return where.size();
}

bool TieredCache::acquire(PathId path, std::span<const uint64_t> hashes, size_t matched,
                          std::vector<Move>& moves) {
  const std::vector<LevelId>& levels = paths_[path];
  TF_ASSERT(matched <= hashes.size(), "acquire of {} blocks out of {}", matched, hashes.size());
  CacheLevel& device = levels_[levels[0]].store;
  // The loads need device slots: free ones, or unpinned blocks not acquired here.
  scratch_.clear();
  uint64_t loads = 0, newly_pinned = 0;
  for (size_t i = 0; i < matched; ++i) {
    const size_t pos = nearest(levels, hashes[i]);
    TF_ASSERT(pos < levels.size(), "acquired block {} is held by no level", hashes[i]);
    const uint32_t slot = levels_[levels[pos]].store.find(hashes[i]);
    scratch_.push_back(Source{.pos = static_cast<uint32_t>(pos), .slot = slot});
    if (pos > 0) {
      ++loads;
    } else if (device.pins(slot) == 0) {
      ++newly_pinned;
    }
  }
  if (loads > device.capacity() - device.size() + device.evictable() - newly_pinned) return false;
  // Every source is pinned first so that no load's evictions remove another's source (a
  // pinned block keeps its slot).
  for (const Source& s : scratch_) levels_[levels[s.pos]].store.pin(s.slot);
  for (size_t i = 0; i < matched; ++i) {
    const Source s = scratch_[i];
    Level& src = levels_[levels[s.pos]];
    ++src.stats.hits;
    for (size_t k = 0; k < s.pos; ++k) ++levels_[levels[k]].stats.misses;
    src.store.touch(s.slot);
    if (s.pos == 0) continue;
    place(levels[0], hashes[i], levels[s.pos], MoveKind::kLoad, /*pinned=*/true, moves);
    src.store.unpin(s.slot);
  }
  return true;
}

bool TieredCache::insert(PathId path, uint64_t hash, std::vector<Move>& moves, bool whole) {
  const std::vector<LevelId>& levels = paths_[path];
  for (const LevelId l : levels) ++levels_[l].stats.misses;
  CacheLevel& device = levels_[levels[0]].store;
  if (const uint32_t slot = device.find(hash); slot != kNoSlot) {
    device.pin(slot);
    device.touch(slot);
    return true;
  }
  if (device.full() && device.evictable() == 0) return false;
  place(levels[0], hash, kNoLevel, MoveKind::kLoad, /*pinned=*/true, moves, whole);
  return true;
}

void TieredCache::release(PathId path, std::span<const uint64_t> hashes) {
  CacheLevel& device = levels_[paths_[path][0]].store;
  for (const uint64_t h : hashes) {
    const uint32_t slot = device.find(h);
    TF_ASSERT(slot != kNoSlot, "release of block {} that the device level does not hold", h);
    device.unpin(slot);
  }
}

bool TieredCache::rehash(PathId path, uint64_t from, uint64_t to, std::vector<Move>& moves) {
  const LevelId top = paths_[path][0];
  CacheLevel& device = levels_[top].store;
  const uint32_t slot = device.find(from);
  TF_ASSERT(slot != kNoSlot && device.pins(slot) > 0, "rehash of block {} that is not pinned",
            from);
  const uint32_t held = device.find(to);
  if (device.pins(slot) > 1) {
    if (held == kNoSlot && device.full() && device.evictable() == 0) return false;
    device.unpin(slot);
    const bool ok = insert(path, to, moves);
    TF_ASSERT(ok, "block {} lost its room", to);
    return true;
  }
  if (held != kNoSlot) {
    device.discard(slot);
    device.pin(held);
    device.touch(held);
    return true;
  }
  device.rename(slot, to);
  write_through(top, to, moves);
  return true;
}

void TieredCache::discard(PathId path, uint64_t from) {
  CacheLevel& device = levels_[paths_[path][0]].store;
  const uint32_t slot = device.find(from);
  TF_ASSERT(slot != kNoSlot, "discard of block {} that the device level does not hold", from);
  device.discard(slot);
}

void TieredCache::emit(const Move& m, std::vector<Move>& moves) {
  const auto k = static_cast<size_t>(m.kind);
  ++levels_[m.from].stats.moves_out[k];
  ++levels_[m.to].stats.moves_in[k];
  moves.push_back(m);
}

void TieredCache::place(LevelId level, uint64_t hash, LevelId from, MoveKind kind, bool pinned,
                        std::vector<Move>& moves, bool whole) {
  Level& lv = levels_[level];
  if (lv.store.full()) {
    // The victim leaves (and its demotions below happen) before the block arrives.
    uint64_t victim = 0;
    const bool evicted_one = lv.store.evict(victim);
    TF_ASSERT(evicted_one, "level '{}' has no room for block {}", lv.spec.name, hash);
    ++lv.stats.evictions;
    evicted(level, victim, moves);
  }
  if (from != kNoLevel) emit(Move{.hash = hash, .from = from, .to = level, .kind = kind}, moves);
  lv.store.insert(hash, pinned);
  ++lv.stats.inserts;
  lv.stats.peak_occupancy = std::max(lv.stats.peak_occupancy, lv.store.size());
  if (whole) write_through(level, hash, moves);
}

void TieredCache::write_through(LevelId level, uint64_t hash, std::vector<Move>& moves) {
  const LevelId b = levels_[level].below;
  if (b != kNoLevel && levels_[b].spec.write == WriteKind::kThrough &&
      !levels_[b].store.holds(hash)) {
    offer(b, hash, level, MoveKind::kStore, moves);
  }
}

bool TieredCache::offer(LevelId level, uint64_t hash, LevelId from, MoveKind kind,
                        std::vector<Move>& moves) {
  Level& lv = levels_[level];
  if (lv.spec.admission == AdmissionKind::kSecond && !lv.admission_ghost.erase(hash)) {
    lv.admission_ghost.push(hash);
    ++lv.stats.rejections;
    return false;
  }
  // Only the sources of an acquire's loads are pinned below the device level.
  if (lv.store.full() && lv.store.evictable() == 0) {
    ++lv.stats.rejections;
    return false;
  }
  place(level, hash, from, kind, /*pinned=*/false, moves);
  return true;
}

void TieredCache::evicted(LevelId level, uint64_t hash, std::vector<Move>& moves) {
  Level& lv = levels_[level];
  const LevelId b = lv.below;
  if (b == kNoLevel) {
    ++lv.stats.drops;
    return;
  }
  if (levels_[b].store.holds(hash)) return;  // the copy below remains
  if (levels_[b].spec.write == WriteKind::kThrough ||
      !offer(b, hash, level, MoveKind::kDemotion, moves)) {
    ++lv.stats.drops;
  }
}

LevelStats TieredCache::stats(LevelId level) const {
  LevelStats s = levels_[level].stats;
  s.occupancy = levels_[level].store.size();
  return s;
}

uint32_t TieredCache::pins(LevelId level, uint64_t hash) const {
  const CacheLevel& store = levels_[level].store;
  const uint32_t slot = store.find(hash);
  return slot == kNoSlot ? 0 : store.pins(slot);
}

CacheOnlyResult replay_cache_only(TieredCache& cache, std::span<const CacheRequest> requests,
                                  uint32_t block_tokens) {
  TF_ASSERT(block_tokens > 0, "blocks hold tokens");
  CacheOnlyResult result;
  const size_t level_count = cache.level_count();
  result.levels.resize(level_count);
  std::vector<LevelStats> before(level_count);
  for (LevelId l = 0; l < level_count; ++l) before[l] = cache.stats(l);

  std::vector<LevelId> where;
  std::vector<Move> moves;
  std::vector<uint64_t> pinned;
  for (const CacheRequest& r : requests) {
    const size_t n = r.hashes.size();
    TF_ASSERT(n == (uint64_t{r.prompt_tokens} + block_tokens - 1) / block_tokens,
              "{} hashes for a prompt of {} tokens in blocks of {}", n, r.prompt_tokens,
              block_tokens);
    const LevelId device = cache.path(r.path)[0];
    size_t matched = cache.lookup(r.path, r.hashes, where);
    // The device level must pin the whole matched prefix; a longer one is cut.
    matched =
        std::min<size_t>(matched, cache.spec(device).capacity_blocks - cache.pinned_blocks(device));
    moves.clear();
    const bool acquired = cache.acquire(r.path, r.hashes, matched, moves);
    TF_ASSERT(acquired, "the device level refused a prefix it has room for");
    uint64_t hit_tokens = 0;
    for (size_t i = 0; i < matched; ++i) {
      const uint64_t tokens =
          i + 1 == n ? r.prompt_tokens - uint64_t{block_tokens} * (n - 1) : block_tokens;
      result.levels[where[i]].hit_tokens += tokens;
      ++result.levels[where[i]].hit_blocks;
      hit_tokens += tokens;
    }
    ++result.requests;
    result.prompt_tokens += r.prompt_tokens;
    result.computed_tokens += r.prompt_tokens - hit_tokens;
    pinned.assign(r.hashes.begin(), r.hashes.begin() + static_cast<std::ptrdiff_t>(matched));
    for (size_t i = matched; i < n; ++i) {
      if (cache.insert(r.path, r.hashes[i], moves)) {
        pinned.push_back(r.hashes[i]);
      } else {
        ++result.uncached_blocks;
      }
    }
    cache.release(r.path, pinned);
  }

  for (LevelId l = 0; l < level_count; ++l) {
    LevelStats now = cache.stats(l);
    const LevelStats& was = before[l];
    LevelStats& d = result.levels[l].stats;
    d.hits = now.hits - was.hits;
    d.misses = now.misses - was.misses;
    d.inserts = now.inserts - was.inserts;
    d.evictions = now.evictions - was.evictions;
    d.drops = now.drops - was.drops;
    d.rejections = now.rejections - was.rejections;
    for (size_t k = 0; k < kMoveKinds; ++k) {
      d.moves_in[k] = now.moves_in[k] - was.moves_in[k];
      d.moves_out[k] = now.moves_out[k] - was.moves_out[k];
    }
    d.occupancy = now.occupancy;
    d.peak_occupancy = now.peak_occupancy;
  }
  return result;
}

}  // namespace tierflow::serve
