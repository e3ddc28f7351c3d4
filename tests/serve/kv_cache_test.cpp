// The tiered KV block cache: equal, move for move, to a reference written with plain
// vectors scanned linearly; hand-worked LFU and S3-FIFO sequences; pinning; conservation;
// a lower level shared by two replicas.
#include "sim/serve/kv_cache.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace tierflow::serve;

namespace {

// ---- The reference -------------------------------------------------------------------
// The same rules as docs/serving.md states them, on vectors: every search is a scan.

struct RefBlock {
  uint64_t hash = 0;
  uint32_t pins = 0;
  uint64_t stamp = 0;  // LRU/LFU: when it last became the newest
  uint32_t count = 0;  // LFU count or S3-FIFO frequency
  bool main = false;   // S3-FIFO queue
};

struct RefLevel {
  LevelSpec spec;
  std::vector<RefBlock> blocks;  // LRU/LFU: any order; S3-FIFO: the small queue, oldest first
  std::vector<RefBlock> main;    // S3-FIFO: the main queue, oldest first
  std::vector<uint64_t> ghost;   // S3-FIFO ghost, oldest first
  std::vector<uint64_t> admission_ghost;
  LevelStats stats;
  LevelId below = kNoLevel;
  uint64_t clock = 0;

  [[nodiscard]] uint64_t small_capacity() const {
    return std::max<uint64_t>(1, spec.capacity_blocks / 10);
  }
  [[nodiscard]] size_t size() const { return blocks.size() + main.size(); }
  RefBlock* find(uint64_t h) {
    for (RefBlock& b : blocks)
      if (b.hash == h) return &b;
    for (RefBlock& b : main)
      if (b.hash == h) return &b;
    return nullptr;
  }
  [[nodiscard]] size_t unpinned() const {
    size_t n = 0;
    for (const RefBlock& b : blocks) n += b.pins == 0 ? 1 : 0;
    for (const RefBlock& b : main) n += b.pins == 0 ? 1 : 0;
    return n;
  }
  void insert(uint64_t h) {
    RefBlock b{.hash = h, .stamp = ++clock};
    if (spec.eviction == EvictionKind::kLfu) b.count = 1;
    if (spec.eviction == EvictionKind::kS3Fifo) {
      auto g = std::find(ghost.begin(), ghost.end(), h);
      if (g != ghost.end()) {
        ghost.erase(g);
        b.main = true;
        main.push_back(b);
        return;
      }
    }
    blocks.push_back(b);
  }
  void touch(uint64_t h) {
    RefBlock& b = *find(h);
    if (spec.eviction == EvictionKind::kS3Fifo) {
      b.count = std::min<uint32_t>(b.count + 1, 3);
      return;
    }
    if (spec.eviction == EvictionKind::kLfu)
      b.count = std::min<uint32_t>(b.count + 1, CacheLevel::kMaxLfuCount);
    if (b.pins == 0) b.stamp = ++clock;
  }
  void pin(uint64_t h) { ++find(h)->pins; }
  /// Removes `h` from wherever it is (its queue's order kept for the others).
  void drop(uint64_t h) {
    for (std::vector<RefBlock>* q : {&blocks, &main}) {
      auto it = std::find_if(q->begin(), q->end(), [h](const RefBlock& b) { return b.hash == h; });
      if (it != q->end()) {
        q->erase(it);
        return;
      }
    }
    FAIL("drop of a block not held");
  }
  void unpin(uint64_t h) {
    RefBlock& b = *find(h);
    if (b.pins == 0) FAIL("unpin of an unpinned block");  // a plain `if`: this runs per block
    if (--b.pins == 0) b.stamp = ++clock;
  }
  std::optional<uint64_t> evict() {
    if (spec.eviction != EvictionKind::kS3Fifo) {
      std::optional<size_t> best;
      for (size_t i = 0; i < blocks.size(); ++i) {
        const RefBlock& b = blocks[i];
        if (b.pins > 0) continue;
        if (!best || (spec.eviction == EvictionKind::kLfu && b.count < blocks[*best].count) ||
            ((spec.eviction == EvictionKind::kLru || b.count == blocks[*best].count) &&
             b.stamp < blocks[*best].stamp)) {
          best = i;
        }
      }
      if (!best) return std::nullopt;
      const uint64_t h = blocks[*best].hash;
      blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(*best));
      return h;
    }
    auto first_unpinned = [](std::vector<RefBlock>& q) {
      return std::find_if(q.begin(), q.end(), [](const RefBlock& b) { return b.pins == 0; });
    };
    while (unpinned() > 0) {
      auto s = first_unpinned(blocks);
      const bool main_has = first_unpinned(main) != main.end();
      if (s != blocks.end() && (blocks.size() >= small_capacity() || !main_has)) {
        RefBlock b = *s;
        blocks.erase(s);
        if (b.count > 0) {
          b.count = 0;
          b.main = true;
          main.push_back(b);
          continue;
        }
        ghost.push_back(b.hash);
        if (ghost.size() > spec.capacity_blocks - small_capacity()) ghost.erase(ghost.begin());
        return b.hash;
      }
      auto m = first_unpinned(main);
      RefBlock b = *m;
      main.erase(m);
      if (b.count > 0) {
        --b.count;
        main.push_back(b);
        continue;
      }
      return b.hash;
    }
    return std::nullopt;
  }
};

class RefCache {
 public:
  LevelId add_level(LevelSpec spec) {
    levels_.push_back(RefLevel{.spec = std::move(spec)});
    return static_cast<LevelId>(levels_.size() - 1);
  }
  PathId add_path(std::vector<LevelId> levels) {
    for (size_t i = 0; i + 1 < levels.size(); ++i) levels_[levels[i]].below = levels[i + 1];
    paths_.push_back(std::move(levels));
    return static_cast<PathId>(paths_.size() - 1);
  }
  size_t nearest(PathId p, uint64_t h) {
    size_t pos = 0;
    while (pos < paths_[p].size() && levels_[paths_[p][pos]].find(h) == nullptr) ++pos;
    return pos;
  }
  size_t lookup(PathId p, const std::vector<uint64_t>& hashes, std::vector<LevelId>& where) {
    where.clear();
    for (const uint64_t h : hashes) {
      const size_t pos = nearest(p, h);
      if (pos == paths_[p].size()) break;
      where.push_back(paths_[p][pos]);
    }
    return where.size();
  }
  bool acquire(PathId p, const std::vector<uint64_t>& hashes, size_t matched,
               std::vector<Move>& moves) {
    const std::vector<LevelId>& path = paths_[p];
    RefLevel& device = levels_[path[0]];
    std::vector<size_t> pos;
    size_t loads = 0, newly_pinned = 0;
    for (size_t i = 0; i < matched; ++i) {
      pos.push_back(nearest(p, hashes[i]));
      if (pos[i] > 0)
        ++loads;
      else if (device.find(hashes[i])->pins == 0)
        ++newly_pinned;
    }
    if (loads + device.size() + newly_pinned > device.spec.capacity_blocks + device.unpinned())
      return false;
    for (size_t i = 0; i < matched; ++i) levels_[path[pos[i]]].pin(hashes[i]);
    for (size_t i = 0; i < matched; ++i) {
      RefLevel& src = levels_[path[pos[i]]];
      ++src.stats.hits;
      for (size_t k = 0; k < pos[i]; ++k) ++levels_[path[k]].stats.misses;
      src.touch(hashes[i]);
      if (pos[i] == 0) continue;
      place(path[0], hashes[i], path[pos[i]], MoveKind::kLoad, true, moves);
      levels_[path[pos[i]]].unpin(hashes[i]);
    }
    return true;
  }
  bool insert(PathId p, uint64_t h, std::vector<Move>& moves, bool whole = true) {
    for (const LevelId l : paths_[p]) ++levels_[l].stats.misses;
    RefLevel& device = levels_[paths_[p][0]];
    if (device.find(h) != nullptr) {
      device.pin(h);
      device.touch(h);
      return true;
    }
    if (device.size() == device.spec.capacity_blocks && device.unpinned() == 0) return false;
    place(paths_[p][0], h, kNoLevel, MoveKind::kLoad, true, moves, whole);
    return true;
  }
  void release(PathId p, const std::vector<uint64_t>& hashes) {
    for (const uint64_t h : hashes) levels_[paths_[p][0]].unpin(h);
  }
  bool rehash(PathId p, uint64_t from, uint64_t to, std::vector<Move>& moves) {
    const LevelId top = paths_[p][0];
    RefLevel& device = levels_[top];
    RefBlock& block = *device.find(from);
    if (block.pins > 1) {
      if (device.find(to) == nullptr && device.size() == device.spec.capacity_blocks &&
          device.unpinned() == 0) {
        return false;
      }
      device.unpin(from);
      return insert(p, to, moves);
    }
    if (device.find(to) != nullptr) {
      device.drop(from);
      device.pin(to);
      device.touch(to);
      return true;
    }
    block.hash = to;
    if (device.spec.eviction == EvictionKind::kS3Fifo) {
      auto g = std::find(device.ghost.begin(), device.ghost.end(), to);
      if (g != device.ghost.end()) {
        device.ghost.erase(g);
        if (!block.main) {
          RefBlock moved = block;
          moved.main = true;
          device.drop(to);
          device.main.push_back(moved);
        }
      }
    }
    write_through(top, to, moves);
    return true;
  }
  void discard(PathId p, uint64_t from) {
    if (levels_[paths_[p][0]].find(from)->pins != 1) FAIL("discard of a shared block");
    levels_[paths_[p][0]].drop(from);
  }
  RefLevel& level(LevelId l) { return levels_[l]; }

 private:
  void place(LevelId l, uint64_t h, LevelId from, MoveKind kind, bool pinned,
             std::vector<Move>& moves, bool whole = true) {
    if (levels_[l].size() == levels_[l].spec.capacity_blocks) {
      const std::optional<uint64_t> victim = levels_[l].evict();
      if (!victim) FAIL("no victim");
      ++levels_[l].stats.evictions;
      evicted(l, *victim, moves);
    }
    if (from != kNoLevel) {
      moves.push_back(Move{.hash = h, .from = from, .to = l, .kind = kind});
      ++levels_[from].stats.moves_out[static_cast<size_t>(kind)];
      ++levels_[l].stats.moves_in[static_cast<size_t>(kind)];
    }
    levels_[l].insert(h);
    if (pinned) levels_[l].pin(h);
    ++levels_[l].stats.inserts;
    levels_[l].stats.peak_occupancy =
        std::max<uint64_t>(levels_[l].stats.peak_occupancy, levels_[l].size());
    if (whole) write_through(l, h, moves);
  }
  void write_through(LevelId l, uint64_t h, std::vector<Move>& moves) {
    const LevelId b = levels_[l].below;
    if (b != kNoLevel && levels_[b].spec.write == WriteKind::kThrough &&
        levels_[b].find(h) == nullptr) {
      offer(b, h, l, MoveKind::kStore, moves);
    }
  }
  bool offer(LevelId l, uint64_t h, LevelId from, MoveKind kind, std::vector<Move>& moves) {
    RefLevel& lv = levels_[l];
    if (lv.spec.admission == AdmissionKind::kSecond) {
      auto g = std::find(lv.admission_ghost.begin(), lv.admission_ghost.end(), h);
      if (g == lv.admission_ghost.end()) {
        lv.admission_ghost.push_back(h);
        if (lv.admission_ghost.size() > lv.spec.capacity_blocks)
          lv.admission_ghost.erase(lv.admission_ghost.begin());
        ++lv.stats.rejections;
        return false;
      }
      lv.admission_ghost.erase(g);
    }
    if (lv.size() == lv.spec.capacity_blocks && lv.unpinned() == 0) {
      ++lv.stats.rejections;
      return false;
    }
    place(l, h, from, kind, false, moves);
    return true;
  }
  void evicted(LevelId l, uint64_t h, std::vector<Move>& moves) {
    const LevelId b = levels_[l].below;
    if (b == kNoLevel) {
      ++levels_[l].stats.drops;
      return;
    }
    if (levels_[b].find(h) != nullptr) return;
    if (levels_[b].spec.write == WriteKind::kThrough ||
        !offer(b, h, l, MoveKind::kDemotion, moves)) {
      ++levels_[l].stats.drops;
    }
  }

  std::vector<RefLevel> levels_;
  std::vector<std::vector<LevelId>> paths_;
};

// ---- Traces and shapes -----------------------------------------------------------------

struct Req {
  std::vector<uint64_t> hashes;
  uint32_t prompt_tokens = 0;
  uint32_t path = 0;
};

/// Prompts that continue earlier ones (recent ones more often) or start anew.
std::vector<Req> random_trace(uint32_t seed, size_t count, uint32_t block_tokens, uint32_t paths) {
  std::mt19937_64 rng(seed);
  std::vector<Req> out;
  uint64_t next_hash = 1000;
  auto below = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  for (size_t i = 0; i < count; ++i) {
    Req r;
    if (!out.empty() && below(10) < 8) {
      // Recent prompts are shared more: pick among the last 1 + below(min(n, 40)).
      const size_t back = static_cast<size_t>(below(std::min<uint64_t>(out.size(), 40)));
      const std::vector<uint64_t>& base = out[out.size() - 1 - back].hashes;
      const size_t keep = 1 + static_cast<size_t>(below(base.size()));
      r.hashes.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(keep));
    }
    const size_t fresh =
        static_cast<size_t>(below(r.hashes.empty() ? 24 : 12)) + (r.hashes.empty() ? 1 : 0);
    for (size_t k = 0; k < fresh; ++k) r.hashes.push_back(next_hash++);
    r.prompt_tokens =
        static_cast<uint32_t>(block_tokens * (r.hashes.size() - 1) + 1 + below(block_tokens));
    r.path = static_cast<uint32_t>(below(paths));
    out.push_back(std::move(r));
  }
  return out;
}

const std::string kFullTrace = "/work/shared/data/mooncake/conversation_trace.jsonl";

/// The first `limit` requests of the Mooncake trace (512-token blocks), empty if absent.
std::vector<Req> mooncake(size_t limit) {
  std::vector<Req> out;
  std::ifstream in(kFullTrace);
  std::string line;
  while (out.size() < limit && std::getline(in, line)) {
    Req r;
    const size_t len = line.find("\"input_length\":");
    r.prompt_tokens = static_cast<uint32_t>(std::stoul(line.substr(len + 15)));
    size_t i = line.find('[', line.find("\"hash_ids\"")) + 1;
    const size_t end = line.find(']', i);
    while (i < end) {
      while (i < end && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i >= end) break;
      size_t used = 0;
      r.hashes.push_back(std::stoull(line.substr(i, end - i), &used));
      i += used;
    }
    out.push_back(std::move(r));
  }
  return out;
}

struct Shape {
  std::vector<LevelSpec> levels;
  std::vector<std::vector<LevelId>> paths;
};

/// `replicas` device levels of `caps[0]` blocks over a chain of shared lower levels.
Shape chain(std::vector<uint64_t> caps, EvictionKind eviction, WriteKind write,
            AdmissionKind admission, uint32_t replicas = 1) {
  Shape s;
  for (uint32_t r = 0; r < replicas; ++r) {
    s.levels.push_back(
        {.name = fmt::format("hbm{}", r), .capacity_blocks = caps[0], .eviction = eviction});
  }
  std::vector<LevelId> shared;
  for (size_t i = 1; i < caps.size(); ++i) {
    shared.push_back(static_cast<LevelId>(s.levels.size()));
    s.levels.push_back({.name = fmt::format("lower{}", i),
                        .capacity_blocks = caps[i],
                        .eviction = eviction,
                        .admission = admission,
                        .write = write});
  }
  for (uint32_t r = 0; r < replicas; ++r) {
    std::vector<LevelId> p{r};
    p.insert(p.end(), shared.begin(), shared.end());
    s.paths.push_back(p);
  }
  return s;
}

template <class C>
void build(C& cache, const Shape& s) {
  for (const LevelSpec& l : s.levels) cache.add_level(l);
  for (const std::vector<LevelId>& p : s.paths) cache.add_path(p);
}

void check_stats(const LevelStats& got, const LevelStats& want, size_t level) {
  INFO("level " << level);
  CHECK(got.hits == want.hits);
  CHECK(got.misses == want.misses);
  CHECK(got.inserts == want.inserts);
  CHECK(got.evictions == want.evictions);
  CHECK(got.drops == want.drops);
  CHECK(got.rejections == want.rejections);
  CHECK(got.moves_in == want.moves_in);
  CHECK(got.moves_out == want.moves_out);
  CHECK(got.peak_occupancy == want.peak_occupancy);
}

/// How often the `partial` steps below took each branch of `rehash`.
struct PartialCounts {
  uint64_t renamed = 0, merged = 0, shared = 0, discarded = 0;
};

/// Drives the cache and the reference with the cache-only replay's steps, request by
/// request, and compares every lookup and move; then replays the trace on a fresh cache
/// through replay_cache_only and compares its totals with the reference's.
/// With `partial`, as the engine does with a prefill that stops inside a block, each
/// request's last block is stored first in part (a hash of its own, not written through),
/// then made whole (odd requests: `rehash` gives it its hash) or given up (even ones:
/// `discard`); every fifth request also moves a second pin of its first block to a new
/// hash (the block shared); no replay to compare then.
void compare_with_reference(const Shape& shape, const std::vector<Req>& trace,
                            uint32_t block_tokens, PartialCounts* partial = nullptr) {
  TieredCache cache;
  RefCache ref;
  build(cache, shape);
  build(ref, shape);
  std::vector<uint64_t> hit_tokens(shape.levels.size(), 0);
  uint64_t computed = 0, prompt = 0;
  std::vector<LevelId> where, ref_where;
  std::vector<Move> moves, ref_moves;
  for (size_t n = 0; n < trace.size(); ++n) {
    const Req& r = trace[n];
    INFO("request " << n);
    size_t matched = cache.lookup(r.path, r.hashes, where);
    REQUIRE(ref.lookup(r.path, r.hashes, ref_where) == matched);
    REQUIRE(where == ref_where);
    const LevelId device = shape.paths[r.path][0];
    matched = std::min<size_t>(matched,
                               shape.levels[device].capacity_blocks - cache.pinned_blocks(device));
    moves.clear();
    ref_moves.clear();
    REQUIRE(cache.acquire(r.path, r.hashes, matched, moves));
    REQUIRE(ref.acquire(r.path, r.hashes, matched, ref_moves));
    uint64_t hits = 0;
    for (size_t i = 0; i < matched; ++i) {
      const uint64_t t = i + 1 == r.hashes.size()
                             ? r.prompt_tokens - block_tokens * (r.hashes.size() - 1)
                             : block_tokens;
      hit_tokens[where[i]] += t;
      hits += t;
    }
    // Conservation: every load into the device level is a hit below it.
    size_t loads = 0;
    for (const Move& m : moves) loads += m.kind == MoveKind::kLoad ? 1 : 0;
    CHECK(loads == static_cast<size_t>(std::count_if(
                       where.begin(), where.begin() + static_cast<std::ptrdiff_t>(matched),
                       [&](LevelId l) { return l != device; })));
    computed += r.prompt_tokens - hits;
    prompt += r.prompt_tokens;
    std::vector<uint64_t> pinned(r.hashes.begin(),
                                 r.hashes.begin() + static_cast<std::ptrdiff_t>(matched));
    for (size_t i = matched; i < r.hashes.size(); ++i) {
      const bool part = partial != nullptr && i + 1 == r.hashes.size();
      const uint64_t h = part ? (uint64_t{1} << 62) + n : r.hashes[i];
      const bool stored = cache.insert(r.path, h, moves, !part);
      if (ref.insert(r.path, h, ref_moves, !part) != stored) FAIL("insert of block " << i);
      if (!stored) continue;
      if (!part) {
        pinned.push_back(h);
      } else if (n % 2 == 1) {
        // One in two takes a hash the level holds (its first block's): merged.
        const uint64_t to = n % 4 == 3 && !pinned.empty() ? pinned.front() : r.hashes[i];
        ++(cache.holds(device, to) ? partial->merged : partial->renamed);
        REQUIRE(cache.rehash(r.path, h, to, moves));
        REQUIRE(ref.rehash(r.path, h, to, ref_moves));
        pinned.push_back(to);
      } else {
        ++partial->discarded;
        cache.discard(r.path, h);
        ref.discard(r.path, h);
        REQUIRE_FALSE(cache.holds(device, h));
      }
    }
    if (partial != nullptr && n % 5 == 0 && !pinned.empty()) {
      const uint64_t first = pinned.front(), renamed = (uint64_t{1} << 61) + n;
      REQUIRE(cache.insert(r.path, first, moves));
      REQUIRE(ref.insert(r.path, first, ref_moves));
      const bool ok = cache.rehash(r.path, first, renamed, moves);
      if (ref.rehash(r.path, first, renamed, ref_moves) != ok) FAIL("rehash of a shared block");
      CHECK(cache.holds(device, first));
      partial->shared += ok ? 1 : 0;
      pinned.push_back(ok ? renamed : first);
    }
    REQUIRE(moves == ref_moves);
    cache.release(r.path, pinned);
    ref.release(r.path, pinned);
  }
  for (LevelId l = 0; l < shape.levels.size(); ++l) {
    check_stats(cache.stats(l), ref.level(l).stats, l);
    CHECK(cache.stats(l).occupancy == ref.level(l).size());
    CHECK(cache.pinned_blocks(l) == 0);
  }
  if (partial != nullptr) return;

  TieredCache fresh;
  build(fresh, shape);
  std::vector<CacheRequest> requests;
  for (const Req& r : trace)
    requests.push_back({.hashes = r.hashes, .prompt_tokens = r.prompt_tokens, .path = r.path});
  const CacheOnlyResult result = replay_cache_only(fresh, requests, block_tokens);
  CHECK(result.requests == trace.size());
  CHECK(result.prompt_tokens == prompt);
  CHECK(result.computed_tokens == computed);
  uint64_t all_hits = 0;
  for (LevelId l = 0; l < shape.levels.size(); ++l) {
    CHECK(result.levels[l].hit_tokens == hit_tokens[l]);
    CHECK(result.levels[l].hit_blocks == ref.level(l).stats.hits);
    check_stats(result.levels[l].stats, ref.level(l).stats, l);
    all_hits += result.levels[l].hit_tokens;
  }
  CHECK(all_hits + result.computed_tokens == result.prompt_tokens);
}

const char* name(EvictionKind k) {
  return k == EvictionKind::kLru ? "lru" : k == EvictionKind::kLfu ? "lfu" : "s3fifo";
}

/// Every combination the tests run on a trace: capacities, depths, write modes, admission.
using Chains = std::vector<std::vector<uint64_t>>;
const Chains kAllChains = {{8},        {64},          {1000},      {8, 64},
                           {64, 1000}, {8, 64, 1000}, {64, 8, 64}, {8, 8, 8}};

void compare_all(EvictionKind eviction, const std::vector<Req>& trace, uint32_t block_tokens,
                 uint32_t replicas, const Chains& chains = kAllChains,
                 PartialCounts* partial = nullptr) {
  for (const std::vector<uint64_t>& caps : chains) {
    for (const WriteKind write : {WriteKind::kBack, WriteKind::kThrough}) {
      for (const AdmissionKind admission : {AdmissionKind::kAll, AdmissionKind::kSecond}) {
        if (caps.size() == 1 && (write != WriteKind::kBack || admission != AdmissionKind::kAll))
          continue;
        std::string label = name(eviction);
        for (const uint64_t c : caps) label += fmt::format(" {}", c);
        label += write == WriteKind::kBack ? " back" : " through";
        label += admission == AdmissionKind::kAll ? " all" : " second";
        INFO(label << ", replicas " << replicas);
        compare_with_reference(chain(caps, eviction, write, admission, replicas), trace,
                               block_tokens, partial);
      }
    }
  }
}

}  // namespace

TEST_CASE("LRU equals the reference on seeded random traces with shared prefixes") {
  compare_all(EvictionKind::kLru, random_trace(/*seed=*/1, 1000, 16, 1), 16, 1);
  compare_all(EvictionKind::kLru, random_trace(/*seed=*/2, 1000, 16, 3), 16, 3);
}

TEST_CASE("the random traces reach every level, refusal and drop the comparisons rely on") {
  // Not a rule of the cache: a guard that the seeded traces above stay worth comparing on.
  const std::vector<Req> trace = random_trace(/*seed=*/1, 1000, 16, 1);
  std::vector<CacheRequest> requests;
  for (const Req& r : trace)
    requests.push_back({.hashes = r.hashes, .prompt_tokens = r.prompt_tokens});
  for (const AdmissionKind admission : {AdmissionKind::kAll, AdmissionKind::kSecond}) {
    TieredCache cache;
    build(cache, chain({8, 64, 1000}, EvictionKind::kLru, WriteKind::kBack, admission));
    const CacheOnlyResult r = replay_cache_only(cache, requests, 16);
    for (const LevelReplay& l : r.levels) CHECK(l.hit_blocks > 0);
    CHECK(r.levels[0].stats.evictions > 0);
    CHECK(r.levels[1].stats.evictions > 0);
    CHECK(r.uncached_blocks > 0);
    if (admission == AdmissionKind::kSecond) CHECK(r.levels[1].stats.rejections > 0);
  }
}

TEST_CASE("LFU and S3-FIFO equal the reference on seeded random traces") {
  for (const EvictionKind k : {EvictionKind::kLfu, EvictionKind::kS3Fifo}) {
    compare_all(k, random_trace(/*seed=*/3, 1000, 16, 1), 16, 1);
    compare_all(k, random_trace(/*seed=*/4, 800, 16, 2), 16, 2,
                {{8, 64}, {8, 64, 1000}, {64, 8, 64}});
  }
}

TEST_CASE("blocks stored in part, then renamed, merged or discarded, equal the reference") {
  for (const EvictionKind k : {EvictionKind::kLru, EvictionKind::kLfu, EvictionKind::kS3Fifo}) {
    INFO(std::string(name(k)));
    PartialCounts counts;
    compare_all(k, random_trace(/*seed=*/5, 1000, 16, 1), 16, 1, kAllChains, &counts);
    compare_all(k, random_trace(/*seed=*/6, 800, 16, 2), 16, 2, {{8, 64}, {8, 64, 1000}}, &counts);
    // Every branch taken (a guard that the steps above stay worth comparing on).
    CHECK(counts.renamed > 0);
    CHECK(counts.merged > 0);
    CHECK(counts.shared > 0);
    CHECK(counts.discarded > 0);
  }
}

TEST_CASE("LRU, LFU and S3-FIFO equal the reference on the first 2,000 Mooncake requests") {
  const std::vector<Req> trace = mooncake(2000);
  if (trace.empty()) {
    MESSAGE("skipped: " << kFullTrace << " is absent");
    return;
  }
  REQUIRE(trace.size() == 2000);
  compare_all(EvictionKind::kLru, trace, 512, 1,
              {{8}, {64}, {1000}, {8, 64}, {64, 1000}, {8, 64, 1000}});
  compare_all(EvictionKind::kLfu, trace, 512, 1, {{8, 64, 1000}});
  compare_all(EvictionKind::kS3Fifo, trace, 512, 1, {{8, 64, 1000}});
}

namespace {

/// One prompt computed and finished: insert each block, then release them all.
std::vector<Move> compute(TieredCache& c, PathId p, std::vector<uint64_t> hashes) {
  std::vector<Move> moves;
  for (const uint64_t h : hashes) REQUIRE(c.insert(p, h, moves));
  c.release(p, hashes);
  return moves;
}

/// One prompt served from the cache: acquire all its blocks, then release them.
std::vector<Move> reuse(TieredCache& c, PathId p, std::vector<uint64_t> hashes) {
  std::vector<Move> moves;
  REQUIRE(c.acquire(p, hashes, hashes.size(), moves));
  c.release(p, hashes);
  return moves;
}

std::vector<uint64_t> held(const TieredCache& c, LevelId l, std::vector<uint64_t> candidates) {
  std::vector<uint64_t> out;
  for (const uint64_t h : candidates) {
    if (c.holds(l, h)) out.push_back(h);
  }
  return out;
}

constexpr uint64_t a = 1, b = 2, c_ = 3, d = 4, e = 5, f = 6, g = 7;
const std::vector<uint64_t> kAll = {a, b, c_, d, e, f, g};

}  // namespace

TEST_CASE("LFU evicts the least counted block, the least recent among equals") {
  // One level of 3 blocks. Counts start at 1 when stored and rise by one per use.
  //   compute a, b, c         counts a1 b1 c1; recency a < b < c
  //   reuse a                 a2
  //   compute d               victim among count 1: b (older than c)   -> {a, c, d}
  //   reuse c                 c2
  //   compute e               victim: d (count 1)                      -> {a, c, e}
  //   reuse e twice           e3
  //   compute f               victim among count 2: a (older than c)   -> {c, e, f}
  // (LRU would have evicted a at the first compute of d.)
  TieredCache cache;
  const LevelId l =
      cache.add_level({.name = "hbm", .capacity_blocks = 3, .eviction = EvictionKind::kLfu});
  const PathId p = cache.add_path({l});
  compute(cache, p, {a, b, c_});
  reuse(cache, p, {a});
  compute(cache, p, {d});
  CHECK(held(cache, l, kAll) == std::vector<uint64_t>{a, c_, d});
  reuse(cache, p, {c_});
  compute(cache, p, {e});
  CHECK(held(cache, l, kAll) == std::vector<uint64_t>{a, c_, e});
  reuse(cache, p, {e});
  reuse(cache, p, {e});
  compute(cache, p, {f});
  CHECK(held(cache, l, kAll) == std::vector<uint64_t>{c_, e, f});
  CHECK(cache.stats(l).evictions == 3);
  CHECK(cache.stats(l).drops == 3);  // nothing below
  CHECK(cache.stats(l).hits == 4);
}

TEST_CASE("S3-FIFO: small filters one-time blocks, the ghost and main keep reused ones") {
  // One level of 3 blocks: small target max(1, 3/10) = 1, main 2, ghost 2 hashes.
  // Queues are written oldest first; freq in brackets.
  //   compute a, b, c     S=[a0 b0 c0]                       (room: nothing evicted)
  //   reuse a             a1
  //   compute d           full; |S|=3 >= 1: tail a has freq 1 -> main M=[a0];
  //                       tail b freq 0 -> evicted, G=[b];   S=[c0 d0]
  //   compute b           b is in G: evict first: tail c freq 0 -> G=[b c];
  //                       then b enters main (leaving G): M=[a0 b0], G=[c], S=[d0]
  //   compute e           tail d freq 0 -> evicted, G=[c d]; S=[e0]
  //   reuse e, reuse a    e1, a1
  //   compute f           tail e freq 1 -> main M=[a1 b0 e0]; S empty, so main:
  //                       tail a freq 1 -> reinserted with freq 0, M=[b0 e0 a0];
  //                       tail b freq 0 -> evicted (main evictions skip the ghost)
  //                       f not in G -> S=[f0]                  -> {a, e, f}
  TieredCache cache;
  const LevelId l =
      cache.add_level({.name = "hbm", .capacity_blocks = 3, .eviction = EvictionKind::kS3Fifo});
  const PathId p = cache.add_path({l});
  compute(cache, p, {a, b, c_});
  reuse(cache, p, {a});
  compute(cache, p, {d});
  CHECK(held(cache, l, kAll) == std::vector<uint64_t>{a, c_, d});
  compute(cache, p, {b});
  CHECK(held(cache, l, kAll) == std::vector<uint64_t>{a, b, d});
  compute(cache, p, {e});
  CHECK(held(cache, l, kAll) == std::vector<uint64_t>{a, b, e});
  reuse(cache, p, {e});
  reuse(cache, p, {a});
  compute(cache, p, {f});
  CHECK(held(cache, l, kAll) == std::vector<uint64_t>{a, e, f});
  CHECK(cache.stats(l).evictions == 4);
}

TEST_CASE("a full device level of pinned blocks refuses; release makes them evictable") {
  // HBM 2 blocks over DDR 4 blocks, LRU, write-back.
  //   compute a, b, c, d   HBM {c, d}; DDR {a, b} (demoted as c and d arrived)
  //   insert x, y pinned   c, d demoted: HBM {x, y} pinned; DDR {a, b, c, d}
  TieredCache cache;
  const LevelId hbm = cache.add_level({.name = "hbm", .capacity_blocks = 2});
  const LevelId ddr = cache.add_level({.name = "ddr", .capacity_blocks = 4});
  const PathId p = cache.add_path({hbm, ddr});
  constexpr uint64_t x = 10, y = 11, z = 12;
  compute(cache, p, {a, b});
  compute(cache, p, {c_});
  compute(cache, p, {d});
  std::vector<Move> moves;
  REQUIRE(cache.insert(p, x, moves));
  REQUIRE(cache.insert(p, y, moves));
  CHECK(cache.pins(hbm, x) == 1);
  CHECK(held(cache, ddr, kAll) == std::vector<uint64_t>{a, b, c_, d});

  // Nothing evictable: the insert and the load are refused and change nothing.
  const LevelStats before = cache.stats(hbm);
  moves.clear();
  CHECK_FALSE(cache.insert(p, z, moves));
  const std::vector<uint64_t> prompt = {a};
  CHECK_FALSE(cache.acquire(p, prompt, 1, moves));
  CHECK(moves.empty());
  CHECK(cache.stats(hbm).inserts == before.inserts);
  CHECK(cache.stats(ddr).hits == 0);

  // Lookup is read-only: it finds a in DDR and touches nothing (a stays DDR's LRU).
  std::vector<LevelId> where;
  const LevelStats ddr_before = cache.stats(ddr);
  CHECK(cache.lookup(p, prompt, where) == 1);
  CHECK(where == std::vector<LevelId>{ddr});
  CHECK(cache.stats(ddr).hits == ddr_before.hits);
  CHECK(cache.stats(ddr).misses == ddr_before.misses);

  // Release x: it is evictable again. Acquiring a pins a in DDR (its source), evicts x
  // from HBM, whose demotion evicts DDR's least recent unpinned block, b (a is pinned),
  // dropped for want of a lower level; then x moves down and a moves up:
  //   moves: x hbm->ddr demotion, a ddr->hbm load.   HBM {y, a}; DDR {a, c, d, x}
  const std::vector<uint64_t> just_x = {x};
  cache.release(p, just_x);
  moves.clear();
  REQUIRE(cache.acquire(p, prompt, 1, moves));
  CHECK(moves ==
        std::vector<Move>{{x, hbm, ddr, MoveKind::kDemotion}, {a, ddr, hbm, MoveKind::kLoad}});
  CHECK(held(cache, hbm, {a, b, c_, d, x, y}) == std::vector<uint64_t>{a, y});
  CHECK(held(cache, ddr, {a, b, c_, d, x, y}) == std::vector<uint64_t>{a, c_, d, x});
  CHECK(cache.stats(ddr).drops == 1);
  CHECK(cache.stats(ddr).hits == 1);
  // Six blocks computed and stored, z computed and refused (a miss all the same), a
  // acquired from below.
  CHECK(cache.stats(hbm).misses == 6 + 1 + 1);
  CHECK(cache.pins(hbm, a) == 1);
  CHECK(cache.pins(ddr, a) == 0);  // lower levels keep no pin after the operation
}

TEST_CASE("moves come in an order that can be carried out one after another") {
  // Three levels of one block each, write-back.
  //   compute a            HBM {a}
  //   compute b            a hbm->ddr                           HBM {b}, DDR {a}
  //   compute c            DDR must make room first: a ddr->ssd, then b hbm->ddr
  TieredCache cache;
  const LevelId hbm = cache.add_level({.name = "hbm", .capacity_blocks = 1});
  const LevelId ddr = cache.add_level({.name = "ddr", .capacity_blocks = 1});
  const LevelId ssd = cache.add_level({.name = "ssd", .capacity_blocks = 1});
  const PathId p = cache.add_path({hbm, ddr, ssd});
  CHECK(compute(cache, p, {a}).empty());
  CHECK(compute(cache, p, {b}) == std::vector<Move>{{a, hbm, ddr, MoveKind::kDemotion}});
  CHECK(compute(cache, p, {c_}) ==
        std::vector<Move>{{a, ddr, ssd, MoveKind::kDemotion}, {b, hbm, ddr, MoveKind::kDemotion}});
  // Reusing a (in SSD): c leaves HBM first (b goes ssd-ward: b ddr->ssd would evict a, the
  // load's source, which is pinned; SSD has nothing else, so b is refused and dropped);
  // c hbm->ddr; then a ssd->hbm. SSD keeps its copy of a.
  CHECK(reuse(cache, p, {a}) ==
        std::vector<Move>{{c_, hbm, ddr, MoveKind::kDemotion}, {a, ssd, hbm, MoveKind::kLoad}});
  CHECK(cache.stats(ssd).rejections == 1);
  CHECK(cache.stats(ddr).drops == 1);
  CHECK(cache.holds(ssd, a));
  CHECK(cache.holds(hbm, a));
}

TEST_CASE("write-through stores when a block is stored above; evicting above just drops the copy") {
  // HBM 2 over DDR 4 write-through.
  //   compute a, b     stores a hbm->ddr, b hbm->ddr (each right after its insert)
  //   compute c        a leaves HBM: DDR holds it, no move; then c stored to DDR
  TieredCache cache;
  const LevelId hbm = cache.add_level({.name = "hbm", .capacity_blocks = 2});
  const LevelId ddr =
      cache.add_level({.name = "ddr", .capacity_blocks = 4, .write = WriteKind::kThrough});
  const PathId p = cache.add_path({hbm, ddr});
  CHECK(compute(cache, p, {a, b}) ==
        std::vector<Move>{{a, hbm, ddr, MoveKind::kStore}, {b, hbm, ddr, MoveKind::kStore}});
  CHECK(compute(cache, p, {c_}) == std::vector<Move>{{c_, hbm, ddr, MoveKind::kStore}});
  CHECK(cache.stats(hbm).evictions == 1);
  CHECK(cache.stats(hbm).drops == 0);
  CHECK(cache.stats(ddr).moves_in[static_cast<size_t>(MoveKind::kStore)] == 3);
  // a is found in DDR, loaded up; DDR keeps its copy; b leaves HBM cleanly.
  CHECK(reuse(cache, p, {a}) == std::vector<Move>{{a, ddr, hbm, MoveKind::kLoad}});
  CHECK(cache.holds(ddr, a));
}

TEST_CASE("admission `second` stores a block the second time it is offered") {
  // HBM 1 over DDR 4 write-back, admission second.
  //   compute a, then b   a demoted: first offer, recorded only (dropped)
  //   compute a, then b   b demoted: first offer; a demoted: second offer, stored
  TieredCache cache;
  const LevelId hbm = cache.add_level({.name = "hbm", .capacity_blocks = 1});
  const LevelId ddr =
      cache.add_level({.name = "ddr", .capacity_blocks = 4, .admission = AdmissionKind::kSecond});
  const PathId p = cache.add_path({hbm, ddr});
  compute(cache, p, {a});
  CHECK(compute(cache, p, {b}).empty());
  CHECK(cache.stats(ddr).rejections == 1);
  CHECK(cache.stats(hbm).drops == 1);
  CHECK(compute(cache, p, {a}).empty());  // b's first offer
  CHECK(compute(cache, p, {b}) == std::vector<Move>{{a, hbm, ddr, MoveKind::kDemotion}});
  CHECK(held(cache, ddr, kAll) == std::vector<uint64_t>{a});
}

TEST_CASE("two replicas sharing a DDR level see each other's demoted blocks") {
  // Replica 0's HBM (2) and replica 1's HBM (2) over one DDR (8).
  //   replica 0 computes a, b, then c, d     a, b demoted into DDR
  //   replica 1 looks up a, b, e        a, b found in DDR; e nowhere: matched 2
  TieredCache cache;
  const LevelId h0 = cache.add_level({.name = "hbm0", .capacity_blocks = 2});
  const LevelId h1 = cache.add_level({.name = "hbm1", .capacity_blocks = 2});
  const LevelId ddr = cache.add_level({.name = "ddr", .capacity_blocks = 8});
  const PathId p0 = cache.add_path({h0, ddr});
  const PathId p1 = cache.add_path({h1, ddr});
  compute(cache, p0, {a, b});
  compute(cache, p0, {c_, d});
  std::vector<LevelId> where;
  const std::vector<uint64_t> prompt = {a, b, e};
  CHECK(cache.lookup(p1, prompt, where) == 2);
  CHECK(where == std::vector<LevelId>{ddr, ddr});
  // c and d are in replica 0's HBM only: replica 1 cannot see them.
  const std::vector<uint64_t> other = {c_};
  CHECK(cache.lookup(p1, other, where) == 0);
  CHECK(reuse(cache, p1, {a, b}) ==
        std::vector<Move>{{a, ddr, h1, MoveKind::kLoad}, {b, ddr, h1, MoveKind::kLoad}});
  CHECK(cache.stats(ddr).hits == 2);
}

TEST_CASE("cache-only replay conserves tokens and counts partial last blocks by their tokens") {
  // Blocks of 4 tokens, HBM 3 over DDR 8, LRU.
  //   r0: [a b c] 10 tokens (c holds 2)   nothing cached: 10 computed       HBM {a b c}
  //   r1: [a b c] 10 tokens               all in HBM: 4 + 4 + 2 hit
  //   r2: [a b d]  9 tokens               a, b hit (8); d computed (1 token); storing d
  //                                       evicts c (a, b are pinned): c -> DDR
  //   r3: [a b c] 10 tokens               a, b hit in HBM (8); c in DDR (2 tokens): loaded
  TieredCache cache;
  const LevelId hbm = cache.add_level({.name = "hbm", .capacity_blocks = 3});
  const LevelId ddr = cache.add_level({.name = "ddr", .capacity_blocks = 8});
  cache.add_path({hbm, ddr});
  const std::vector<uint64_t> abc = {a, b, c_}, abd = {a, b, d};
  const std::vector<CacheRequest> requests = {{.hashes = abc, .prompt_tokens = 10},
                                              {.hashes = abc, .prompt_tokens = 10},
                                              {.hashes = abd, .prompt_tokens = 9},
                                              {.hashes = abc, .prompt_tokens = 10}};
  const CacheOnlyResult r = replay_cache_only(cache, requests, 4);
  CHECK(r.requests == 4);
  CHECK(r.prompt_tokens == 39);
  CHECK(r.computed_tokens == 10 + 0 + 1 + 0);
  CHECK(r.levels[hbm].hit_tokens == 10 + 8 + 8);
  CHECK(r.levels[ddr].hit_tokens == 2);
  CHECK(r.levels[ddr].hit_blocks == 1);
  CHECK(r.levels[hbm].hit_tokens + r.levels[ddr].hit_tokens + r.computed_tokens == r.prompt_tokens);
  // Every load into HBM is a hit below it.
  CHECK(r.levels[hbm].stats.moves_in[static_cast<size_t>(MoveKind::kLoad)] ==
        r.levels[ddr].hit_blocks);
  CHECK(r.uncached_blocks == 0);
}

TEST_CASE(
    "cache-only replay cuts a prefix longer than the device level and counts what it cannot keep") {
  // HBM 2 alone, blocks of 1 token. r0 [a b c]: a, b stored and pinned, c computed and
  // not kept (HBM full of r0's pins). r1 [a b c]: a, b hit (the matched prefix fits);
  // c computed again, not kept.
  TieredCache cache;
  const LevelId hbm = cache.add_level({.name = "hbm", .capacity_blocks = 2});
  cache.add_path({hbm});
  const std::vector<uint64_t> abc = {a, b, c_};
  const std::vector<CacheRequest> requests = {{.hashes = abc, .prompt_tokens = 3},
                                              {.hashes = abc, .prompt_tokens = 3}};
  const CacheOnlyResult r = replay_cache_only(cache, requests, 1);
  CHECK(r.uncached_blocks == 2);
  CHECK(r.levels[hbm].hit_tokens == 2);
  CHECK(r.computed_tokens == 3 + 1);
  CHECK(cache.pinned_blocks(hbm) == 0);
}
