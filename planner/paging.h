// Paging: the `page` pass's machinery. The device tier is treated as a cache of the
// offload tiers: tensors are fetched for their reads and evicted when room runs out, one
// pager walking the execution order with three injected strategies.
//
// Glossary
//   paged      a tensor whose runs the pager decides (the clock says which); the others
//              keep their runs, and their bytes count as fixed.
//   victim     a resident paged tensor evicted for room; stored first when the device holds
//              its only current copy and something needs it later.
//   eviction order   which victim leaves first: the least recently used, or the one whose
//              next use is furthest away (Belady's MIN).
//   clock      how the pager sees the step: in positions (ops; the room is checked per op,
//              a store is counted until it is estimated to land) or in estimated time (ops
//              take their estimated time and wait for their fetches, fetches queue on one
//              ingress link, stores on one egress link, and a fetch waits for its victims'
//              stores).
//   prefetch   how far ahead fetches go: on a miss (the op that reads waits), `ahead` K ops,
//              or as the link frees (estimated time only). A fetch ahead evicts only tensors
//              used later than the one fetched.
//   kept       the most used external tensors, homed on the device and never paged.
//   warm       the tensors read first start homed on the device instead of being fetched.
//
// `reactive` and `belady` are presets of `page` (planner/passes/page.cpp).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "planner/pass.h"
#include "planner/state.h"

namespace tierflow::planner {

enum class EvictKind { kLeastRecent, kFurthest };
enum class ClockKind { kOps, kTime };
enum class PrefetchKind { kMiss, kAhead, kLink };

/// The strategies and options of one `page` pass.
struct PageOptions {
  EvictKind evict = EvictKind::kLeastRecent;
  ClockKind clock = ClockKind::kOps;
  PrefetchKind prefetch = PrefetchKind::kMiss;
  uint32_t ahead = 0;     ///< prefetch=ahead: how many ops ahead
  double headroom = 0.0;  ///< fraction of the budget left free (for `schedule` to prefetch into)
  double keep = 0.0;      ///< fraction of the budget for the most used tensors, never paged
  bool warm = false;      ///< start with the tensors read first on the device
};

/// An eviction key: the least key leaves first; equal keys by tensor id.
struct EvictKey {
  int64_t first = 0;
  int64_t second = 0;
  int64_t third = 0;
  friend auto operator<=>(const EvictKey&, const EvictKey&) = default;
};

/// The evictable tensors, least (key, tensor) first, as a binary heap: a removed tensor's
/// entry is dropped when it surfaces (an entry is current while its tensor is in the queue
/// and was last inserted with it). Each tensor is in the queue at most once, so the order
/// is a strict one: that of a sorted set of (key, tensor).
class EvictionQueue {
 public:
  explicit EvictionQueue(size_t tensors)
      : in_(tensors, false), key_(tensors), version_(tensors, 0) {}
  [[nodiscard]] bool empty() const { return live_ == 0; }
  /// Makes t evictable with `key` (again: its key is then `key`).
  void insert(EvictKey key, uint32_t t);
  void erase(uint32_t t);
  /// The least entry (the queue is not empty).
  [[nodiscard]] std::pair<EvictKey, uint32_t> top();
  /// Removes and returns the least entry whose tensor is not in `skip`; none when every
  /// tensor left is.
  std::optional<uint32_t> take_least_not_in(std::span<const uint32_t> skip);
  /// Visits the entries least first while `more(tensor)` says so; removes none.
  template <class More>
  void visit(const More& more) {
    visited_.clear();
    while (live_ > visited_.size()) {
      drop_stale();
      const Entry e = pop();
      visited_.push_back(e);
      if (!more(e.tensor)) break;
    }
    for (const Entry& e : visited_) push(e);
  }

 private:
  struct Entry {
    EvictKey key;
    uint32_t tensor;
    uint32_t version;
  };
  [[nodiscard]] bool current(const Entry& e) const {
    return in_[e.tensor] && version_[e.tensor] == e.version;
  }
  void push(const Entry& e);
  Entry pop();
  /// Pops stale entries off the top; rebuilds the heap when they outnumber the live ones.
  void drop_stale();

  std::vector<Entry> heap_;
  std::vector<bool> in_;
  std::vector<EvictKey> key_;
  std::vector<uint32_t> version_;
  size_t live_ = 0;
  std::vector<Entry> skipped_, visited_;
};

/// One paged tensor as the pager sees it.
struct Paged {
  bool resident = false;
  bool dirty = false;  ///< the device holds the only current copy
  bool warm = false;   ///< homed on the device by the warm start, not evicted since
  bool ahead = false;  ///< fetched ahead and not read yet (the fetch may be dropped)
  size_t next = 0;     ///< index into Liveness::uses of the next use
  int64_t landed = 0;  ///< estimated time its fetch lands (time clock)
};

class Pager;

/// Which resident tensor leaves first.
class EvictionOrder {
 public:
  virtual ~EvictionOrder() = default;
  /// The key of resident tensor t as of position j, its reads there counted.
  [[nodiscard]] virtual EvictKey key(const Pager& p, uint32_t t, uint32_t j) const = 0;
};

/// The least recently used first.
std::unique_ptr<EvictionOrder> least_recently_used();
/// The furthest next use first (no further use: first of all). Among equal next uses,
/// `clean_first` puts those with a current copy elsewhere first (they leave without a
/// store), then the highest tensor id; otherwise the lowest tensor id.
std::unique_ptr<EvictionOrder> furthest_next_use(bool clean_first);

/// How the pager sees the step (see the glossary): which tensors it pages, the room they
/// have, one op's fetches, reads and releases, and where a victim's store and the fetch
/// that replaces it are anchored.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Decides what is paged and the room; false (ctx.failure set) when the target cannot
  /// be met.
  virtual bool begin(Pager& p) = 0;
  /// Position i: its fetches, its reads, what it leaves. False when op i cannot fit.
  virtual bool step(Pager& p, uint32_t i) = 0;
  /// After the last op: what is still resident, and the counters.
  virtual void end(Pager& p) = 0;
};

/// Positions in ops: what a runtime sees (planner/paging_ops.cpp). Pages the external and
/// the produced tensors; prefetches on a miss or `ahead` ops ahead.
std::unique_ptr<Clock> ops_clock(const PageOptions& o);
/// Estimated time with the link model (planner/paging_time.cpp). Pages the external
/// tensors; prefetches on a miss, `ahead` ops ahead or as the link frees.
std::unique_ptr<Clock> time_clock(const PageOptions& o);

/// One run of the `page` pass over a state: what every clock shares.
class Pager {
 public:
  Pager(PlanState& s, PassContext& ctx, std::string_view pass, const PageOptions& o,
        const EvictionOrder& order);

  /// Walks the execution order; stops before an op once the fetch limit is reached.
  PassResult run(Clock& clock);

  // The state the clocks read and update.
  PlanState& s;
  PassContext& ctx;
  const PageOptions& o;
  const Liveness& l;
  const uint32_t n;  ///< positions
  const size_t nt;   ///< tensors
  /// The target's budget less the headroom.
  const uint64_t budget;
  std::vector<Paged> st;
  std::vector<bool> kept;  ///< homed on the device by `keep`
  EvictionQueue queue;
  uint64_t used = 0;  ///< device bytes of the resident paged tensors
  /// Bytes of the fetches the plan surely makes, what the search's limit is held against.
  uint64_t fetched = 0;
  uint64_t fetches = 0, evictions = 0, stores = 0;

  [[nodiscard]] uint64_t bytes(uint32_t t) const { return s.w.tensors[t].bytes; }
  /// The position of t's next use, or kNone.
  [[nodiscard]] uint32_t next_use(uint32_t t) const {
    return st[t].next < l.uses[t].size() ? l.uses[t][st[t].next] : kNone;
  }
  /// t's key in the eviction order as of position j.
  [[nodiscard]] EvictKey key(uint32_t t, uint32_t j) const { return order_.key(*this, t, j); }
  /// Records why the target cannot be met.
  template <class... Args>
  void infeasible(fmt::format_string<Args...> f, Args&&... args) {
    ctx.failure = fmt::format(f, std::forward<Args>(args)...);
    ctx.report.infeasible = true;
  }
  /// Counters for --stats, under the pass's name as written.
  void stat(std::string_view name, double value) { ctx.report.stat(pass_, name, value); }

  /// Keep: the most used external tensors not pinned, up to `keep` of the budget, stay
  /// homed on the device (ties: smaller first, then tensor id).
  void keep_most_used();
  /// The external tensors `paged` says yes to start on their offload tier.
  void home_off_device(const std::vector<bool>& paged);
  /// Warm start: of the tensors `candidate` allows, those read first stay homed on the
  /// device, as many as `room` holds (the device holds their only copy: stored when first
  /// evicted after a read). Returns them.
  std::vector<uint32_t> warm_start(const std::vector<bool>& candidate, uint64_t room);
  /// A read of resident t at position i (`modifies`: an update): its run reaches i, its
  /// next use moves on, and a modified device copy is the only current one.
  void read(uint32_t t, uint32_t i, bool modifies) {
    s.tensors[t].runs.back().last = i;
    ++st[t].next;
    st[t].dirty |= modifies;
  }
  /// The bookkeeping of deciding to fetch t (its run is the clock's to add).
  void fetch(uint32_t t);
  /// The bookkeeping of evicting t (its run is the clock's to release).
  void evict(uint32_t t);

 private:
  std::string_view pass_;
  const EvictionOrder& order_;
};

}  // namespace tierflow::planner
