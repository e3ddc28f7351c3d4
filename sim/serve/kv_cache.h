// The tiered KV block cache of the serving simulator, and its cache-only replay.
//
// Glossary
//   block      the KV cache of `block_tokens` consecutive prompt tokens, named by a 64-bit
//              hash of the whole prefix up to and including it; two prompts share a
//              prefix exactly as far as their leading hashes are equal. A prompt's hashes
//              are distinct (they name prefixes of different lengths).
//   level      one tier instance (the HBM of one replica, the DDR of a host, a pool shared
//              by all): a capacity in blocks, an eviction policy, an admission rule and a
//              write mode (how it is fed from the level above it).
//   path       the ordered levels one replica sees, its device level first. Paths may share
//              lower levels; every level has at most one level below it across all paths.
//   pin        a count per block of the device level: blocks of running sequences are
//              pinned and never evicted. Lower levels pin nothing a caller can see.
//   move       one block transfer an operation causes: a load (up, a hit below the device
//              level), a demotion (down, on eviction, into a write-back level) or a store
//              (down, into a write-through level when the block is stored above it).
//   drop       an evicted block whose data leaves the hierarchy; counted, never moved.
//
// docs/serving.md ("The KV block cache") states the rules; the tests hold them.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/serve/cache_policy.h"

namespace tierflow::serve {

using LevelId = uint32_t;
using PathId = uint32_t;
inline constexpr LevelId kNoLevel = UINT32_MAX;

/// Which blocks offered to a level below the first it keeps (the device level keeps all).
enum class AdmissionKind : uint8_t {
  kAll,     ///< every block offered is stored
  kSecond,  ///< stored on its second offer within a ghost of the level's capacity
};
inline constexpr std::array<std::string_view, 2> kAdmissionNames = {"all", "second"};

/// How a level below the first is fed from the level above it.
enum class WriteKind : uint8_t {
  kBack,     ///< a block arrives when evicted from above (a demotion)
  kThrough,  ///< a block is written when stored above (a store); evicting above drops it
};
inline constexpr std::array<std::string_view, 2> kWriteNames = {"back", "through"};

enum class MoveKind : uint8_t { kLoad, kDemotion, kStore };
inline constexpr size_t kMoveKinds = 3;

/// One level as built.
struct LevelSpec {
  std::string name;
  uint64_t capacity_blocks = 0;  ///< at least 1
  EvictionKind eviction = EvictionKind::kLru;
  AdmissionKind admission = AdmissionKind::kAll;
  WriteKind write = WriteKind::kBack;
};

/// A block transfer from one level to another. The data of a computed block starts in
/// the device level, so every move has a source level.
struct Move {
  uint64_t hash = 0;
  LevelId from = kNoLevel;
  LevelId to = kNoLevel;
  MoveKind kind = MoveKind::kLoad;
  friend bool operator==(const Move&, const Move&) = default;
};

/// Counters of one level since it was built.
struct LevelStats {
  uint64_t hits = 0;        ///< blocks acquired with this level the nearest holding them
  uint64_t misses = 0;      ///< blocks acquired from below it, or computed, on a path with it
  uint64_t inserts = 0;     ///< blocks stored here (computed, loaded, demoted or stored)
  uint64_t evictions = 0;   ///< blocks its policy removed to make room
  uint64_t drops = 0;       ///< evicted blocks neither demoted nor already held below
  uint64_t rejections = 0;  ///< demotions and stores offered here and not stored
  std::array<uint64_t, kMoveKinds> moves_in{};   ///< by MoveKind, arriving here
  std::array<uint64_t, kMoveKinds> moves_out{};  ///< by MoveKind, leaving here
  uint64_t occupancy = 0;                        ///< blocks held now
  uint64_t peak_occupancy = 0;                   ///< most blocks ever held
};

/// Levels, the paths over them, and the operations the serving engine calls. Every
/// operation appends the moves it causes to `moves`, in an order that can be carried out
/// one after another (each destination slot is free, each source still holds its block).
class TieredCache {
 public:
  LevelId add_level(LevelSpec spec);
  /// A replica's view, device level first. The device level of one path is never below
  /// another's; a level has one level below it across all paths, and no cycles.
  PathId add_path(std::vector<LevelId> levels);

  /// Read-only. For the leading blocks, the nearest level of `path` holding each, into
  /// `where` (cleared first); stops at the first block no level holds. Returns its size.
  size_t lookup(PathId path, std::span<const uint64_t> hashes, std::vector<LevelId>& where) const;
  /// Pins the first `matched` blocks (each held on the path) in the device level, loading
  /// those held only below. False, and nothing changed, when the device level cannot make
  /// room for the loads among its unpinned blocks.
  bool acquire(PathId path, std::span<const uint64_t> hashes, size_t matched,
               std::vector<Move>& moves);
  /// A computed block, stored and pinned in the device level (or pinned there if held);
  /// write-through levels below get stores. A block not `whole` (its tokens not all
  /// computed; under a hash no one else looks up) stays in the device level alone until
  /// `rehash` names it. False, and nothing stored, when the device level is full of
  /// pinned blocks.
  bool insert(PathId path, uint64_t hash, std::vector<Move>& moves, bool whole = true);
  /// Unpins each block in the device level; they stay cached and evictable.
  void release(PathId path, std::span<const uint64_t> hashes);
  /// The caller's pinned block `from` in the device level now holds what `to` names (it
  /// became whole): where the caller alone pins it, the block takes the hash `to`, or is
  /// dropped when the level holds `to` already (that copy is pinned instead); otherwise
  /// `from` stays for its other holders and `to` is stored as a computed block.
  /// Write-through levels below get `to` as a store. False, and nothing changed, when
  /// `to` needs a slot the device level, full of pinned blocks, lacks.
  bool rehash(PathId path, uint64_t from, uint64_t to, std::vector<Move>& moves);
  /// Removes `from`, pinned in the device level by the caller alone, whose data is not
  /// wanted (a block not whole of a sequence that gives up its KV); nothing moves.
  void discard(PathId path, uint64_t from);

  [[nodiscard]] size_t level_count() const { return levels_.size(); }
  [[nodiscard]] const LevelSpec& spec(LevelId level) const { return levels_[level].spec; }
  [[nodiscard]] const std::vector<LevelId>& path(PathId p) const { return paths_[p]; }
  [[nodiscard]] LevelStats stats(LevelId level) const;
  [[nodiscard]] bool holds(LevelId level, uint64_t hash) const {
    return levels_[level].store.holds(hash);
  }
  /// Pins of `hash` in `level` (0 when absent).
  [[nodiscard]] uint32_t pins(LevelId level, uint64_t hash) const;
  [[nodiscard]] LevelId below(LevelId level) const { return levels_[level].below; }
  [[nodiscard]] uint64_t pinned_blocks(LevelId level) const {
    return levels_[level].store.pinned_blocks();
  }

 private:
  struct Level {
    LevelSpec spec;
    CacheLevel store;
    GhostList admission_ghost;
    LevelStats stats;
    LevelId below = kNoLevel;
    bool device = false;  // first on some path
    bool lower = false;   // below the first on some path
  };

  [[nodiscard]] size_t nearest(const std::vector<LevelId>& levels, uint64_t hash) const;
  void emit(const Move& m, std::vector<Move>& moves);
  /// Stores `hash` at `level` after making room (the room must exist); `from` is the
  /// source of the move, kNoLevel for a computed block; a block not `whole` is not written
  /// through.
  void place(LevelId level, uint64_t hash, LevelId from, MoveKind kind, bool pinned,
             std::vector<Move>& moves, bool whole = true);
  /// Stores `hash`, just stored at `level`, into the level below when that level is
  /// written through and lacks it.
  void write_through(LevelId level, uint64_t hash, std::vector<Move>& moves);
  /// A demotion or store of `hash` (not held at `level`) from `from`: whether it is stored.
  bool offer(LevelId level, uint64_t hash, LevelId from, MoveKind kind, std::vector<Move>& moves);
  void evicted(LevelId level, uint64_t hash, std::vector<Move>& moves);

  std::vector<Level> levels_;
  std::vector<std::vector<LevelId>> paths_;
  struct Source {
    uint32_t pos;   // on the path
    uint32_t slot;  // in that level
  };
  std::vector<Source> scratch_;
};

// ---- Cache-only replay (`tierflow serve --cache-only`): no compute, no time ----

struct CacheRequest {
  std::span<const uint64_t> hashes;  ///< ceil(prompt_tokens / block_tokens) of them
  uint32_t prompt_tokens = 0;
  PathId path = 0;
};

struct LevelReplay {
  uint64_t hit_tokens = 0;  ///< prompt tokens served from this level (nearest holder)
  uint64_t hit_blocks = 0;
  LevelStats stats;  ///< counters accrued during the replay; occupancy at its end
};

struct CacheOnlyResult {
  std::vector<LevelReplay> levels;  ///< by LevelId
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t computed_tokens = 0;  ///< prompt tokens not served by any level
  uint64_t uncached_blocks = 0;  ///< computed blocks the full device level could not keep
};

/// For each request in order: lookup; acquire the matched prefix (cut to what the device
/// level can pin); insert every other block in order; release all it pinned.
CacheOnlyResult replay_cache_only(TieredCache& cache, std::span<const CacheRequest> requests,
                                  uint32_t block_tokens);

}  // namespace tierflow::serve
