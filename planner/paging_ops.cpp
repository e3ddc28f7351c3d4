// The pager's clock in positions (ops): what a runtime that pages sees. Before each op its
// missing inputs are fetched in the slot right before it (the op waits); while its inputs,
// outputs and workspace do not fit, victims leave in the same slot: stored first when the
// device copy is the only current one and it is needed later, and the fetches and the op
// wait for that store (hold 0) as a runtime reusing the memory would. Produced tensors are
// paged too, freed after their last use as a caching allocator does.
//
// With the furthest-next-use order a victim is released right after its last use instead
// (nothing uses it in between, so the evictions and fetches stay the same, and the room it
// leaves is where `schedule` can start the fetches that replace it early), and
// `prefetch=ahead` also fetches what the next K ops read, evicting only tensors used later
// than the one fetched. A warm tensor stays homed on the device: its last run is never
// released.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/units.h"
#include "planner/offload.h"
#include "planner/paging.h"

namespace tierflow::planner {
namespace {

class AheadList {
 public:
  /// `at[k]`..`at[k + 1]`: the indices of position k's uses; `of[x]`: the tensor of use x;
  /// `size[t]`: tensor t's bytes.
  AheadList(std::vector<uint32_t> at, std::vector<uint32_t> of, std::span<const uint64_t> size,
            uint32_t ahead)
      : at_(std::move(at)), of_(std::move(of)), ahead_(ahead) {
    const size_t tensors = size.size();
    const auto n = static_cast<uint32_t>(at_.size() - 1);
    pos_.resize(of_.size());
    for (uint32_t k = 0; k < n; ++k) {
      for (uint32_t x = at_[k]; x < at_[k + 1]; ++x) pos_[x] = k;
    }
    bytes_.reserve(of_.size());
    for (uint32_t t : of_) bytes_.push_back(size[t]);
    first_.assign(tensors + 1, 0);
    for (uint32_t t : of_) ++first_[t + 1];
    for (size_t t = 0; t < tensors; ++t) first_[t + 1] += first_[t];
    uses_.resize(of_.size());
    std::vector<uint32_t> fill(first_.begin(), first_.end() - 1);
    for (uint32_t x = 0; x < of_.size(); ++x) uses_[fill[of_[x]]++] = x;
    leaves_ = std::bit_ceil(std::max<size_t>(of_.size(), 1));
    least_.assign(2 * leaves_, kUnlisted);
  }

  /// Moves the window to positions (j, j + ahead]; `absent(t)`: t is not on the device.
  template <class Absent>
  void advance(uint32_t j, const Absent& absent) {
    const auto n = static_cast<uint32_t>(at_.size() - 1);
    const uint32_t lo = at_[std::min(n, j + 1)];
    const uint32_t hi = at_[std::min<uint64_t>(n, uint64_t{j} + 1 + ahead_)];
    for (uint32_t x = lo_; x < std::min(lo, hi_); ++x) put(x, kUnlisted);
    for (uint32_t x = std::max(hi_, lo); x < hi; ++x) {
      if (absent(of_[x])) put(x, bytes_[x]);
    }
    lo_ = lo;
    hi_ = hi;
  }
  /// Tensor t arrived on the device (its uses leave the list) or left it (they join).
  void arrived(uint32_t t) { update(t, false); }
  void left(uint32_t t) { update(t, true); }

  /// The first listed use after x (kNone: from the start) whose tensor takes at most
  /// `room` bytes, or kNone.
  [[nodiscard]] uint32_t next(uint32_t x, uint64_t room) const {
    const uint32_t from = x == kNone ? lo_ : x + 1;
    if (from >= hi_) return kNone;
    room = std::min(room, kUnlisted - 1);
    size_t p = leaves_ + from;
    while (least_[p] > room) {
      while (p & 1) {  // a right child: up to the first ancestor with a right sibling
        if (p == 1) return kNone;
        p >>= 1;
      }
      ++p;
    }
    while (p < leaves_) {
      p *= 2;
      if (least_[p] > room) ++p;
    }
    const auto found = static_cast<uint32_t>(p - leaves_);
    return found < hi_ ? found : kNone;
  }
  [[nodiscard]] uint32_t tensor(uint32_t x) const { return of_[x]; }
  [[nodiscard]] uint32_t position(uint32_t x) const { return pos_[x]; }
  [[nodiscard]] uint64_t bytes(uint32_t x) const { return bytes_[x]; }

 private:
  static constexpr uint64_t kUnlisted = UINT64_MAX;

  /// Use x listed with its size, or unlisted.
  void put(uint32_t x, uint64_t value) {
    size_t p = leaves_ + x;
    if (least_[p] == value) return;
    least_[p] = value;
    for (p >>= 1; p >= 1; p >>= 1) {
      const uint64_t least = std::min(least_[2 * p], least_[2 * p + 1]);
      if (least_[p] == least) break;
      least_[p] = least;
    }
  }
  void update(uint32_t t, bool join) {
    const auto begin = uses_.begin() + first_[t];
    const auto end = uses_.begin() + first_[t + 1];
    for (auto it = std::lower_bound(begin, end, lo_); it != end && *it < hi_; ++it) {
      put(*it, join ? bytes_[*it] : kUnlisted);
    }
  }

  std::vector<uint32_t> at_, of_, pos_;
  std::vector<uint64_t> bytes_;         ///< per use index: its tensor's bytes
  std::vector<uint32_t> first_, uses_;  ///< per tensor, its use indices (ascending)
  uint32_t ahead_ = 0;
  uint32_t lo_ = 0, hi_ = 0;  ///< the window as use indices [lo_, hi_)
  size_t leaves_ = 1;
  std::vector<uint64_t> least_;  ///< a tree: the least listed size below each node
};

class OpsClock final : public Clock {
 public:
  explicit OpsClock(const PageOptions& o) : o_(o) {}

  bool begin(Pager& p) override {
    warm_.assign(p.nt, false);
    if (o_.keep > 0) p.keep_most_used();
    std::vector<bool> paged(p.nt, false);
    for (uint32_t t = 0; t < p.nt; ++t) {
      const Residency& r = p.s.tensors[t];
      if (r.pinned || p.kept[t] || p.l.born[t] != kNone) continue;
      if (r.tier == kNone && !p.l.uses[t].empty()) {
        p.infeasible(
            "tensor '{}' ({}) has no offload tier with room ({}): the offload tiers, not the "
            "device, are the limit",
            p.s.w.tensors[t].name, to_string_approx(Bytes{p.bytes(t)}), offload_rooms(p.s));
        return false;
      }
      paged[t] = r.tier != kNone;
    }
    p.home_off_device(paged);
    // Pinned and kept tensors keep their runs; their bytes count as fixed.
    std::vector<bool> mine(p.nt);
    for (uint32_t t = 0; t < p.nt; ++t) mine[t] = managed(p, t);
    fixed_ = fixed_profile(p.s, mine);
    if (o_.warm) warm_start(p);
    if (o_.evict == EvictKind::kFurthest && o_.prefetch == PrefetchKind::kAhead && o_.ahead > 0) {
      make_ahead_list(p);
    }
    return true;
  }

  /// Op j: room for what it needs, its missing inputs fetched, its outputs placed, the
  /// look-ahead's fetches, then what is dead freed. False when the op cannot fit.
  bool step(Pager& p, uint32_t j) override {
    if (ahead_) ahead_->advance(j, [&](uint32_t t) { return !p.st[t].resident; });
    const Op& op = p.s.w.ops[p.s.order[j]];
    mine_.clear();
    for (const auto* list : {&op.inputs, &op.updates}) {
      mine_.insert(mine_.end(), list->begin(), list->end());
    }
    if (!make_room(p, j, op)) return false;
    read_inputs(p, j, op);
    for (uint32_t t : op.outputs) {
      if (!managed(p, t)) continue;
      Run r;
      r.alloc = j;
      r.first = j;
      r.last = j;
      p.s.tensors[t].runs = {r};
      p.st[t] = Paged{};
      p.st[t].resident = true;
      p.st[t].dirty = true;
      p.used += p.bytes(t);
    }
    if (ahead_) look_ahead(p, j);
    free_dead(p, j, op);
    return true;
  }

  /// Tensors still resident at the end are released; modified external ones stored home.
  void end(Pager& p) override {
    for (uint32_t t = 0; t < p.nt; ++t) {
      if (!managed(p, t) || !p.st[t].resident) continue;
      Run& r = p.s.tensors[t].runs.back();
      if (r.release != kNone) continue;
      if (p.l.persists[t] || warm_[t]) continue;  // kept where they are homed
      r.release = p.n;
      r.store = p.st[t].dirty && p.l.born[t] == kNone;
    }
    p.stat("fetches", static_cast<double>(p.fetches));
    p.stat("evictions", static_cast<double>(p.evictions));
  }

 private:
  /// Whether the pager decides t's runs.
  [[nodiscard]] bool managed(const Pager& p, uint32_t t) const {
    const Residency& r = p.s.tensors[t];
    return !r.pinned && (r.home_off_device || p.l.born[t] != kNone || warm_[t]);
  }

  /// The warm start's room: what leaves room for the largest op and the fixed bytes.
  void warm_start(Pager& p) {
    uint64_t fixed_max = 0, op_max = 0;
    for (uint32_t i = 0; i < p.n; ++i) {
      fixed_max = std::max(fixed_max, fixed_[i]);
      const Op& op = p.s.w.ops[p.s.order[i]];
      uint64_t need = op.workspace;
      for (const auto* list : {&op.inputs, &op.updates, &op.outputs}) {
        for (uint32_t t : *list) need += p.bytes(t);
      }
      op_max = std::max(op_max, need);
    }
    const uint64_t room = p.budget > fixed_max + op_max ? p.budget - fixed_max - op_max : 0;
    std::vector<bool> candidate(p.nt);
    for (uint32_t t = 0; t < p.nt; ++t) candidate[t] = p.s.tensors[t].home_off_device;
    for (uint32_t t : p.warm_start(candidate, room)) warm_[t] = true;
  }

  /// What the look-ahead may fetch: per position, the external tensors it reads or updates
  /// that the pager manages, in operand order.
  void make_ahead_list(const Pager& p) {
    std::vector<uint32_t> at(p.n + 1, 0), of;
    for (uint32_t k = 0; k < p.n; ++k) {
      const Op& op = p.s.w.ops[p.s.order[k]];
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) {
          if (managed(p, t) && p.l.born[t] == kNone) of.push_back(t);
        }
      }
      at[k + 1] = static_cast<uint32_t>(of.size());
    }
    std::vector<uint64_t> size(p.nt);
    for (uint32_t t = 0; t < size.size(); ++t) size[t] = p.bytes(t);
    ahead_.emplace(std::move(at), std::move(of), size, o_.ahead);
  }

  /// Fetches t in slot j for its use at position k.
  void fetch(Pager& p, uint32_t t, uint32_t j, uint32_t k) {
    p.s.tensors[t].runs.push_back(Run{j, k, k, kNone, /*fetched=*/true});
    p.fetch(t);
    if (ahead_) ahead_->arrived(t);
  }
  void left(Pager& p, uint32_t t) {
    p.st[t].resident = false;
    if (ahead_) ahead_->left(t);
  }
  /// Evicts t for the room op j needs.
  void evict_for(Pager& p, uint32_t t, uint32_t j) {
    if (release(p, t, j)) p.st[t].ahead = false;
    p.evict(t);
    if (ahead_) ahead_->left(t);
    p.st[t].dirty = false;
  }

  /// Releases t's current run for the room the op at position j needs, or drops it when it
  /// was fetched ahead and not read yet. By furthest next use (an offline planner) it is
  /// released right after its last use instead. Its store (if any) is counted until it is
  /// estimated to land, at most until j. Returns whether it dropped a fetch (the plan copies
  /// less).
  bool release(Pager& p, uint32_t t, uint32_t j) {
    auto& runs = p.s.tensors[t].runs;
    if (runs.back().fetched && runs.back().first >= j) {
      // Fetched ahead and not read yet: that fetch is not made at all.
      runs.pop_back();
      return true;
    }
    Run& r = runs.back();
    r.release = o_.evict == EvictKind::kFurthest && r.last < j ? r.last + 1 : j;
    const bool needed_later = !p.l.uses[t].empty() && p.l.uses[t].back() >= j;
    r.store = p.st[t].dirty && (needed_later || p.l.born[t] == kNone || p.l.persists[t]);
    r.hold =
        r.store && r.release < j
            ? std::min(store_hold(p.s, p.s.tensors[t].tier, p.bytes(t), r.release), j - r.release)
            : 0;
    return false;
  }

  /// Evicts until op j's missing inputs, outputs and workspace fit.
  bool make_room(Pager& p, uint32_t j, const Op& op) {
    uint64_t need = op.workspace;
    for (uint32_t t : op.outputs) {
      if (managed(p, t)) need += p.bytes(t);
    }
    for (uint32_t t : mine_) {
      if (managed(p, t) && !p.st[t].resident) need += p.bytes(t);
    }
    while (p.used + need + fixed_[j] > p.budget && !p.queue.empty()) {
      const std::optional<uint32_t> victim = p.queue.take_least_not_in(mine_);
      if (!victim) break;
      evict_for(p, *victim, j);
    }
    if (p.used + need + fixed_[j] <= p.budget) return true;
    p.infeasible(
        "does not fit: op {} '{}' needs {} more with {} on the device it cannot evict, "
        "budget {}",
        p.s.order[j], op.name, to_string_approx(Bytes{need}),
        to_string_approx(Bytes{p.used + fixed_[j]}), to_string_approx(Bytes{p.budget}));
    return false;
  }

  /// Op j's inputs and updates: fetched when missing; a fetch made ahead counts once read.
  void read_inputs(Pager& p, uint32_t j, const Op& op) {
    for (size_t k = 0; k < mine_.size(); ++k) {
      const uint32_t t = mine_[k];
      if (!managed(p, t)) continue;
      if (!p.st[t].resident) {
        fetch(p, t, j, j);
        p.fetched += p.bytes(t);
      } else {
        p.queue.erase(t);
        if (p.st[t].ahead) {
          p.st[t].ahead = false;
          p.fetched += p.bytes(t);
        }
      }
      p.read(t, j, /*modifies=*/k >= op.inputs.size());
    }
  }

  /// Look-ahead: fetch now what the next `ahead` ops read, evicting only tensors used
  /// later than the one fetched, so no eviction is regretted sooner than the fetch would
  /// have been made anyway.
  ///
  /// Once a fetch finds no room, nothing more is evicted at this op: uses are visited in
  /// position order, so every victim left (and every tensor fetched since) is used no
  /// later than the next one's position. The rest of the window only fills what is free.
  void look_ahead(Pager& p, uint32_t j) {
    uint64_t room = UINT64_MAX;  // any size until a fetch finds no room
    for (uint32_t x = ahead_->next(kNone, room); x != kNone; x = ahead_->next(x, room)) {
      const uint64_t size = ahead_->bytes(x);
      const uint32_t k = ahead_->position(x);
      const uint32_t t = ahead_->tensor(x);
      while (room == UINT64_MAX && p.used + size + fixed_[j] > p.budget && !p.queue.empty()) {
        const auto [vkey, victim] = p.queue.top();
        if (vkey.first >= -static_cast<int64_t>(k) ||
            std::find(mine_.begin(), mine_.end(), victim) != mine_.end()) {
          break;  // used no later than t, or by this op
        }
        evict_for(p, victim, j);
      }
      if (p.used + size + fixed_[j] > p.budget) {
        room = free_at(p, j);
        continue;
      }
      fetch(p, t, j, k);
      p.st[t].ahead = true;
      p.queue.insert(p.key(t, j), t);
      if (room != UINT64_MAX) room = free_at(p, j);
    }
  }

  /// The device bytes free at op j.
  [[nodiscard]] uint64_t free_at(const Pager& p, uint32_t j) const {
    const uint64_t held = p.used + fixed_[j];
    return held < p.budget ? p.budget - held : 0;
  }

  /// Frees what op j leaves dead; the rest of what it touched becomes evictable.
  void free_dead(Pager& p, uint32_t j, const Op& op) {
    touched_.assign(mine_.begin(), mine_.end());
    touched_.insert(touched_.end(), op.outputs.begin(), op.outputs.end());
    for (uint32_t t : touched_) {
      if (!managed(p, t) || !p.st[t].resident) continue;
      const bool dead = p.st[t].next >= p.l.uses[t].size();
      const bool produced = p.l.born[t] != kNone;
      if (dead && p.l.persists[t]) {
        p.s.tensors[t].runs.back().release = kNone;
        continue;
      }
      if (dead && (produced || !p.st[t].dirty)) {
        p.s.tensors[t].runs.back().release = j + 1;
        left(p, t);
        p.used -= p.bytes(t);
        continue;
      }
      if (p.s.tensors[t].tier != kNone) p.queue.insert(p.key(t, j), t);
    }
  }

  const PageOptions& o_;
  std::vector<bool> warm_;       ///< homed on the device by the warm start (for good: see end())
  std::vector<uint64_t> fixed_;  ///< per position: bytes of runs the pager does not manage
  std::optional<AheadList> ahead_;
  std::vector<uint32_t> mine_, touched_;  ///< op j's inputs and updates; and its outputs
};

}  // namespace

std::unique_ptr<Clock> ops_clock(const PageOptions& o) {
  return std::make_unique<OpsClock>(o);
}

}  // namespace tierflow::planner
