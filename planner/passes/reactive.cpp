// reactive (baseline): what a runtime does that fetches on a miss and evicts the least
// recently used tensor when the device is full, with no look-ahead.
//
// When everything fits, nothing moves. Otherwise every external tensor starts on its
// offload tier. Before each op: its missing inputs are fetched in the slot right before
// it (the op waits); while its inputs, outputs and workspace do not fit, the resident
// tensor used longest ago (not by this op; ties by tensor id) is evicted in the same slot:
// stored first when the device copy is the only current one and it is needed later, and
// the fetches and the op wait for that store (hold 0) as a runtime reusing the memory
// would. Produced tensors are freed after their last use, as a caching allocator does.
//
// Options: `evict=furthest` evicts the tensor whose next use is furthest away instead
// (Belady's MIN, the fewest fetches for tensors of one size: what an offline planner with
// the whole trace can do), releasing it right after its last use (room for `schedule` to
// fetch its replacement early); `headroom=X` keeps that fraction of the budget free, for the
// schedule pass to prefetch into; `keep=X` keeps the most used external tensors (most
// uses first) homed on the device up to that fraction of the budget, so that they are never
// fetched, and pages only the rest; `warm=true` starts with the external tensors used first
// homed on the device (no cold fetches), each stored once when first evicted; `ahead=K`
// (with furthest) also fetches what the next K ops read, evicting only tensors used later
// than the one fetched. Gives up before an op once the context's fetch limit is reached.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "planner/offload.h"
#include "core/diagnostics.h"
#include "core/units.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct ReactiveOptions {
  bool furthest = false;  ///< evict the tensor used furthest in the future (Belady's MIN)
  double headroom = 0.0;  ///< fraction of the budget left for the schedule to prefetch into
  double keep = 0.0;      ///< fraction of the budget for the most used tensors, never moved
  bool warm = false;      ///< start with the tensors used first on the device
  uint32_t ahead = 0;     ///< furthest mode: also fetch what the next ops read
};

/// The evictable tensors, least (key, tensor) first, as a binary heap: a removed tensor's
/// entry is dropped when it surfaces (an entry is current while its tensor is in the queue
/// and was last inserted with it). Each tensor is in the queue at most once, so the order
/// is a strict one: that of a sorted set of (key, tensor).
class EvictionQueue {
 public:
  explicit EvictionQueue(size_t tensors)
      : in_(tensors, false), key_(tensors, 0), version_(tensors, 0) {}
  [[nodiscard]] bool empty() const { return live_ == 0; }
  /// Makes t evictable with `key` (again: its key is then `key`).
  void insert(int64_t key, uint32_t t) {
    if (in_[t] && key_[t] == key) return;
    if (!in_[t]) ++live_;
    in_[t] = true;
    key_[t] = key;
    push(Entry{key, t, ++version_[t]});
  }
  void erase(uint32_t t) {
    if (!in_[t]) return;
    in_[t] = false;
    --live_;
  }
  /// The least entry (the queue is not empty).
  [[nodiscard]] std::pair<int64_t, uint32_t> top() {
    drop_stale();
    return {heap_.front().key, heap_.front().tensor};
  }
  /// Removes and returns the least entry whose tensor is not in `skip`; none when every
  /// tensor left is.
  std::optional<uint32_t> take_least_not_in(std::span<const uint32_t> skip) {
    std::optional<uint32_t> out;
    skipped_.clear();
    while (!out && live_ > skipped_.size()) {
      drop_stale();
      const Entry e = heap_.front();
      std::pop_heap(heap_.begin(), heap_.end(), Later{});
      heap_.pop_back();
      if (std::find(skip.begin(), skip.end(), e.tensor) != skip.end()) {
        skipped_.push_back(e);
      } else {
        in_[e.tensor] = false;
        --live_;
        out = e.tensor;
      }
    }
    for (const Entry& e : skipped_) push(e);
    return out;
  }

 private:
  struct Entry {
    int64_t key;
    uint32_t tensor;
    uint32_t version;
  };
  struct Later {  // heap order: the least (key, tensor) on top
    bool operator()(const Entry& a, const Entry& b) const {
      return a.key != b.key ? a.key > b.key : a.tensor > b.tensor;
    }
  };
  [[nodiscard]] bool current(const Entry& e) const {
    return in_[e.tensor] && version_[e.tensor] == e.version;
  }
  void push(const Entry& e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }
  /// Pops stale entries off the top; rebuilds the heap when they outnumber the live ones.
  void drop_stale() {
    if (heap_.size() > 2 * live_ + 64) {
      std::erase_if(heap_, [&](const Entry& e) { return !current(e); });
      std::make_heap(heap_.begin(), heap_.end(), Later{});
    }
    while (!current(heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), Later{});
      heap_.pop_back();
    }
  }

  std::vector<Entry> heap_;
  std::vector<bool> in_;
  std::vector<int64_t> key_;
  std::vector<uint32_t> version_;
  size_t live_ = 0;
  std::vector<Entry> skipped_;
};

/// The look-ahead's work list (furthest mode): the uses within positions (j, j + ahead] of
/// the external tensors the pass may fetch early, those not on the device, in position
/// then operand order. Kept up to date as tensors arrive and leave, so that a step visits
/// these only instead of every use ahead. A tree of the least size below each node finds
/// the next listed use that fits a given room without visiting those that do not.
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

/// One run of the pass over a state: the device as a runtime sees it, op by op.
class ReactivePager {
 public:
  ReactivePager(PlanState& s, PassContext& ctx, const ReactiveOptions& o)
      : s_(s),
        ctx_(ctx),
        o_(o),
        l_(*s.liveness),
        n_(s.positions()),
        budget_(static_cast<uint64_t>(static_cast<double>(s.target.budget) *
                                      std::max(0.0, 1.0 - o.headroom))),
        st_(s.w.tensors.size()),
        kept_(s.w.tensors.size(), false),
        warm_(s.w.tensors.size(), false),
        lru_(s.w.tensors.size()) {}

  PassResult run() {
    if (o_.keep > 0) keep_most_used();
    if (!home_off_device()) return PassResult::kFailed;
    // Pinned and kept tensors keep their runs; their bytes count as fixed.
    std::vector<bool> mine(s_.w.tensors.size());
    for (uint32_t t = 0; t < s_.w.tensors.size(); ++t) mine[t] = managed(t);
    fixed_ = fixed_profile(s_, mine);
    if (o_.warm) warm_start();
    if (o_.furthest && o_.ahead > 0) make_ahead_list();
    for (uint32_t j = 0; j < n_; ++j) {
      if (gives_up(ctx_, s_, j, fetched_)) return PassResult::kFailed;
      if (!step(j)) return PassResult::kFailed;
    }
    finish();
    s_.stat("reactive", "fetches", static_cast<double>(fetches_));
    s_.stat("reactive", "evictions", static_cast<double>(evictions_));
    return PassResult::kChanged;
  }

 private:
  struct Live {
    bool resident = false;
    bool dirty = false;
    uint32_t used = 0;   ///< position of the last use so far
    size_t next = 0;     ///< index of the next use in l.uses
    bool ahead = false;  ///< fetched ahead and not read yet (the fetch may be dropped)
  };

  [[nodiscard]] uint64_t bytes(uint32_t t) const { return s_.w.tensors[t].bytes; }
  /// Whether this pass decides t's runs.
  [[nodiscard]] bool managed(uint32_t t) const {
    return !s_.tensors[t].pinned &&
           (s_.tensors[t].home_off_device || l_.born[t] != kNone || warm_[t]);
  }
  /// Evictable tensors, the first evicted first: (last use, tensor) for least recently
  /// used; (-next use, tensor) for furthest next use.
  [[nodiscard]] int64_t evict_key(uint32_t t, uint32_t j) const {
    if (!o_.furthest) return j;
    const auto& u = l_.uses[t];
    const size_t next = st_[t].next;
    return next < u.size() ? -static_cast<int64_t>(u[next]) : INT64_MIN;
  }

  /// Kept: the most used external tensors, up to `keep` of the budget, stay homed on the
  /// device and never move (ties: smaller first, then tensor id).
  void keep_most_used() {
    std::vector<uint32_t> order;
    for (uint32_t t = 0; t < s_.w.tensors.size(); ++t) {
      if (l_.born[t] == kNone && !s_.tensors[t].pinned && !l_.uses[t].empty()) order.push_back(t);
    }
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      if (l_.uses[a].size() != l_.uses[b].size()) return l_.uses[a].size() > l_.uses[b].size();
      return bytes(a) < bytes(b);
    });
    const auto room = static_cast<uint64_t>(static_cast<double>(budget_) * o_.keep);
    uint64_t held = 0;
    for (uint32_t t : order) {
      if (held + bytes(t) > room) continue;
      held += bytes(t);
      kept_[t] = true;
    }
  }

  /// Every external tensor not kept or pinned starts on its offload tier; false (the
  /// target infeasible) when one has none.
  bool home_off_device() {
    for (uint32_t t = 0; t < s_.w.tensors.size(); ++t) {
      Residency& r = s_.tensors[t];
      if (r.pinned || kept_[t]) continue;
      if (l_.born[t] == kNone && r.tier == kNone && !l_.uses[t].empty()) {
        ctx_.failure = fmt::format(
            "tensor '{}' ({}) has no offload tier with room ({}): the offload tiers, not the "
            "device, are the limit",
            s_.w.tensors[t].name, to_string_approx(Bytes{bytes(t)}), offload_rooms(s_));
        s_.infeasible = true;
        return false;
      }
      if (l_.born[t] == kNone && r.tier != kNone) {
        r.home_off_device = true;
        r.runs.clear();
      }
    }
    return true;
  }

  /// Warm start: the external tensors used first stay homed on the device, as many as
  /// leave room for the largest op and what this pass does not manage; evicting one the
  /// first time stores it (the reverse direction of the link is otherwise idle).
  void warm_start() {
    uint64_t fixed_max = 0, op_max = 0;
    for (uint32_t i = 0; i < n_; ++i) {
      fixed_max = std::max(fixed_max, fixed_[i]);
      const Op& op = s_.w.ops[s_.order[i]];
      uint64_t need = op.workspace;
      for (const auto* list : {&op.inputs, &op.updates, &op.outputs}) {
        for (uint32_t t : *list) need += bytes(t);
      }
      op_max = std::max(op_max, need);
    }
    const uint64_t room = budget_ > fixed_max + op_max ? budget_ - fixed_max - op_max : 0;
    std::vector<uint32_t> order;
    for (uint32_t t = 0; t < s_.w.tensors.size(); ++t) {
      if (s_.tensors[t].home_off_device && !l_.uses[t].empty()) order.push_back(t);
    }
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return l_.uses[a].front() < l_.uses[b].front();
    });
    for (uint32_t t : order) {
      if (used_ + bytes(t) > room) break;
      warm_[t] = true;
      Residency& r = s_.tensors[t];
      r.home_off_device = false;
      r.runs = {Run{0, l_.uses[t].front(), l_.uses[t].front(), kNone}};
      st_[t].resident = true;
      st_[t].dirty = true;  // the device holds the only copy
      used_ += bytes(t);
      lru_.insert(evict_key(t, 0), t);
    }
  }

  /// What the look-ahead may fetch: per position, the external tensors it reads or updates
  /// that this pass manages, in operand order.
  void make_ahead_list() {
    std::vector<uint32_t> at(n_ + 1, 0), of;
    for (uint32_t k = 0; k < n_; ++k) {
      const Op& op = s_.w.ops[s_.order[k]];
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) {
          if (managed(t) && l_.born[t] == kNone) of.push_back(t);
        }
      }
      at[k + 1] = static_cast<uint32_t>(of.size());
    }
    std::vector<uint64_t> size(s_.w.tensors.size());
    for (uint32_t t = 0; t < size.size(); ++t) size[t] = bytes(t);
    ahead_.emplace(std::move(at), std::move(of), size, o_.ahead);
  }

  void arrived(uint32_t t) {
    st_[t].resident = true;
    if (ahead_) ahead_->arrived(t);
  }
  void left(uint32_t t) {
    st_[t].resident = false;
    if (ahead_) ahead_->left(t);
  }
  /// Fetches t in slot j for its use at position k.
  void fetch(uint32_t t, uint32_t j, uint32_t k) {
    s_.tensors[t].runs.push_back(Run{j, k, k, kNone, /*fetched=*/true});
    arrived(t);
    used_ += bytes(t);
    ++fetches_;
  }
  /// Evicts t for the room op j needs.
  void evict_for(uint32_t t, uint32_t j) {
    lru_.erase(t);
    if (release(st_[t].dirty, t, j)) st_[t].ahead = false;
    left(t);
    st_[t].dirty = false;
    used_ -= bytes(t);
    ++evictions_;
  }

  /// Releases t's current run for the room the op at position j needs, or drops it when it
  /// was fetched ahead and not read yet. Furthest mode (an offline planner) releases it
  /// right after its last use instead: nothing uses it in between, so the evictions and
  /// fetches stay the same, and the room it leaves is where `schedule` can start the
  /// fetches that replace it early. Its store (if any) is counted until it is estimated to
  /// land, at most until j. Returns whether it dropped a fetch (the plan copies less).
  bool release(bool dirty, uint32_t t, uint32_t j) {
    auto& runs = s_.tensors[t].runs;
    if (runs.back().fetched && runs.back().first >= j) {
      // Fetched ahead and not read yet: that fetch is not made at all.
      runs.pop_back();
      return true;
    }
    Run& r = runs.back();
    r.release = o_.furthest && r.last < j ? r.last + 1 : j;
    const bool needed_later = !l_.uses[t].empty() && l_.uses[t].back() >= j;
    r.store = dirty && (needed_later || l_.born[t] == kNone || l_.persists[t]);
    r.hold = r.store && r.release < j
                 ? std::min(store_hold(s_, s_.tensors[t].tier, bytes(t), r.release), j - r.release)
                 : 0;
    return false;
  }

  /// Op j: room for what it needs, its missing inputs fetched, its outputs placed, the
  /// look-ahead's fetches, then what is dead freed. False when the op cannot fit.
  bool step(uint32_t j) {
    if (ahead_) ahead_->advance(j, [&](uint32_t t) { return !st_[t].resident; });
    const Op& op = s_.w.ops[s_.order[j]];
    mine_.clear();
    for (const auto* list : {&op.inputs, &op.updates}) {
      mine_.insert(mine_.end(), list->begin(), list->end());
    }
    if (!make_room(j, op)) return false;
    read_inputs(j);
    for (uint32_t t : op.updates) st_[t].dirty = true;
    for (uint32_t t : op.outputs) {
      if (!managed(t)) continue;
      Run r;
      r.alloc = j;
      r.first = j;
      r.last = j;
      s_.tensors[t].runs = {r};
      st_[t] = Live{true, true, j, 0};
      used_ += bytes(t);
    }
    if (ahead_) look_ahead(j);
    free_dead(j, op);
    return true;
  }

  /// Evicts until op j's missing inputs, outputs and workspace fit.
  bool make_room(uint32_t j, const Op& op) {
    uint64_t need = op.workspace;
    for (uint32_t t : op.outputs) {
      if (managed(t)) need += bytes(t);
    }
    for (uint32_t t : mine_) {
      if (managed(t) && !st_[t].resident) need += bytes(t);
    }
    while (used_ + need + fixed_[j] > budget_ && !lru_.empty()) {
      const std::optional<uint32_t> victim = lru_.take_least_not_in(mine_);
      if (!victim) break;
      evict_for(*victim, j);
    }
    if (used_ + need + fixed_[j] <= budget_) return true;
    ctx_.failure = fmt::format(
        "does not fit: op {} '{}' needs {} more with {} on the device it cannot evict, "
        "budget {}",
        s_.order[j], op.name, to_string_approx(Bytes{need}),
        to_string_approx(Bytes{used_ + fixed_[j]}), to_string_approx(Bytes{budget_}));
    s_.infeasible = true;
    return false;
  }

  /// Op j's inputs: fetched when missing; a fetch made ahead counts once read.
  void read_inputs(uint32_t j) {
    for (uint32_t t : mine_) {
      if (!managed(t)) continue;
      if (!st_[t].resident) {
        fetch(t, j, j);
        fetched_ += bytes(t);
      } else {
        lru_.erase(t);
        if (st_[t].ahead) {
          st_[t].ahead = false;
          fetched_ += bytes(t);
        }
      }
      st_[t].used = j;
      s_.tensors[t].runs.back().last = j;
      ++st_[t].next;
    }
  }

  /// Look-ahead (furthest mode): fetch now what the next `ahead` ops read, evicting only
  /// tensors used later than the one fetched, so no eviction is regretted sooner than the
  /// fetch would have been made anyway.
  ///
  /// Once a fetch finds no room, nothing more is evicted at this op: uses are visited in
  /// position order, so every victim left (and every tensor fetched since) is used no
  /// later than the next one's position. The rest of the window only fills what is free.
  void look_ahead(uint32_t j) {
    uint64_t room = UINT64_MAX;  // any size until a fetch finds no room
    for (uint32_t x = ahead_->next(kNone, room); x != kNone; x = ahead_->next(x, room)) {
      const uint64_t size = ahead_->bytes(x);
      const uint32_t k = ahead_->position(x);
      const uint32_t t = ahead_->tensor(x);
      while (room == UINT64_MAX && used_ + size + fixed_[j] > budget_ && !lru_.empty()) {
        const auto [vkey, victim] = lru_.top();
        if (vkey >= -static_cast<int64_t>(k) ||
            std::find(mine_.begin(), mine_.end(), victim) != mine_.end()) {
          break;  // used no later than t, or by this op
        }
        evict_for(victim, j);
      }
      if (used_ + size + fixed_[j] > budget_) {
        room = free_at(j);
        continue;
      }
      fetch(t, j, k);
      st_[t].ahead = true;
      lru_.insert(evict_key(t, j), t);
      if (room != UINT64_MAX) room = free_at(j);
    }
  }

  /// The device bytes free at op j.
  [[nodiscard]] uint64_t free_at(uint32_t j) const {
    const uint64_t held = used_ + fixed_[j];
    return held < budget_ ? budget_ - held : 0;
  }

  /// Frees what op j leaves dead; the rest of what it touched becomes evictable.
  void free_dead(uint32_t j, const Op& op) {
    touched_.assign(mine_.begin(), mine_.end());
    touched_.insert(touched_.end(), op.outputs.begin(), op.outputs.end());
    for (uint32_t t : touched_) {
      if (!managed(t) || !st_[t].resident) continue;
      const bool dead = st_[t].next >= l_.uses[t].size();
      const bool produced = l_.born[t] != kNone;
      if (dead && l_.persists[t]) {
        s_.tensors[t].runs.back().release = kNone;
        continue;
      }
      if (dead && (produced || !st_[t].dirty)) {
        s_.tensors[t].runs.back().release = j + 1;
        left(t);
        used_ -= bytes(t);
        continue;
      }
      if (s_.tensors[t].tier != kNone) lru_.insert(evict_key(t, j), t);
    }
  }

  /// External tensors still resident at the end are released; modified ones stored home.
  void finish() {
    for (uint32_t t = 0; t < s_.w.tensors.size(); ++t) {
      if (!managed(t) || !st_[t].resident) continue;
      Run& r = s_.tensors[t].runs.back();
      if (r.release != kNone) continue;
      if (l_.persists[t] || warm_[t]) continue;  // kept where they are homed
      r.release = n_;
      r.store = st_[t].dirty && l_.born[t] == kNone;
    }
  }

  PlanState& s_;
  PassContext& ctx_;
  const ReactiveOptions& o_;
  const Liveness& l_;
  uint32_t n_;
  uint64_t budget_;  ///< the target's less the headroom
  std::vector<Live> st_;
  std::vector<bool> kept_;
  std::vector<bool> warm_;
  std::vector<uint64_t> fixed_;  ///< per position: bytes of runs this pass does not manage
  EvictionQueue lru_;
  std::optional<AheadList> ahead_;
  uint64_t used_ = 0;
  /// Bytes of the fetches the plan surely makes (a fetch made ahead counts once read:
  /// until then a later eviction may drop it), what the search's limit is held against.
  uint64_t fetched_ = 0;
  uint64_t fetches_ = 0, evictions_ = 0;
  std::vector<uint32_t> mine_, touched_;  ///< op j's inputs and updates; and its outputs
};

class Reactive : public Pass {
 public:
  explicit Reactive(ReactiveOptions o) : o_(o) {}
  [[nodiscard]] std::string_view name() const override { return "reactive"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    if (begin_fitting(s).fits()) return PassResult::kUnchanged;
    return ReactivePager(s, ctx, o_).run();
  }

 private:
  ReactiveOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_reactive(PassOptions& o) {
  ReactiveOptions r;
  r.furthest = o.choice("evict", {"lru", "furthest"}) == "furthest";
  r.headroom = o.number("headroom", 0.0);
  r.keep = o.number("keep", 0.0);
  r.warm = o.flag("warm", false);
  r.ahead = o.count("ahead", 0);
  return std::make_unique<Reactive>(r);
}

}  // namespace tierflow::planner
