// The pager's shared machinery: the eviction queue, the eviction orders, and what every
// clock does alike (keep, homing off the device, the warm start, fetch and eviction
// bookkeeping, the walk with its fetch limit).
#include "planner/paging.h"

#include <algorithm>

namespace tierflow::planner {

void EvictionQueue::insert(EvictKey key, uint32_t t) {
  if (in_[t] && key_[t] == key) return;
  if (!in_[t]) ++live_;
  in_[t] = true;
  key_[t] = key;
  push(Entry{key, t, ++version_[t]});
}

void EvictionQueue::erase(uint32_t t) {
  if (!in_[t]) return;
  in_[t] = false;
  --live_;
}

std::pair<EvictKey, uint32_t> EvictionQueue::top() {
  drop_stale();
  return {heap_.front().key, heap_.front().tensor};
}

std::optional<uint32_t> EvictionQueue::take_least_not_in(std::span<const uint32_t> skip) {
  std::optional<uint32_t> out;
  skipped_.clear();
  while (!out && live_ > skipped_.size()) {
    drop_stale();
    const Entry e = pop();
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

namespace {
struct Later {  // heap order: the least (key, tensor) on top
  template <class E>
  bool operator()(const E& a, const E& b) const {
    return a.key != b.key ? a.key > b.key : a.tensor > b.tensor;
  }
};
}  // namespace

void EvictionQueue::push(const Entry& e) {
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), Later{});
}

EvictionQueue::Entry EvictionQueue::pop() {
  const Entry e = heap_.front();
  std::pop_heap(heap_.begin(), heap_.end(), Later{});
  heap_.pop_back();
  return e;
}

void EvictionQueue::drop_stale() {
  if (heap_.size() > 2 * live_ + 64) {
    std::erase_if(heap_, [&](const Entry& e) { return !current(e); });
    std::make_heap(heap_.begin(), heap_.end(), Later{});
  }
  while (!current(heap_.front())) pop();
}

namespace {

class LeastRecentlyUsed final : public EvictionOrder {
 public:
  [[nodiscard]] EvictKey key(const Pager& /*p*/, uint32_t /*t*/, uint32_t j) const override {
    return EvictKey{j, 0, 0};
  }
};

class FurthestNextUse final : public EvictionOrder {
 public:
  explicit FurthestNextUse(bool clean_first) : clean_first_(clean_first) {}
  [[nodiscard]] EvictKey key(const Pager& p, uint32_t t, uint32_t /*j*/) const override {
    const uint32_t next = p.next_use(t);
    const int64_t when = next == kNone ? INT64_MIN : -static_cast<int64_t>(next);
    if (!clean_first_) return EvictKey{when, 0, 0};
    return EvictKey{when, p.st[t].dirty ? 1 : 0, -static_cast<int64_t>(t)};
  }

 private:
  bool clean_first_;
};

}  // namespace

std::unique_ptr<EvictionOrder> least_recently_used() {
  return std::make_unique<LeastRecentlyUsed>();
}

std::unique_ptr<EvictionOrder> furthest_next_use(bool clean_first) {
  return std::make_unique<FurthestNextUse>(clean_first);
}

Pager::Pager(PlanState& state, PassContext& context, std::string_view pass,
             const PageOptions& options, const EvictionOrder& order)
    : s(state),
      ctx(context),
      o(options),
      l(*state.liveness),
      n(state.positions()),
      nt(state.w.tensors.size()),
      budget(static_cast<uint64_t>(static_cast<double>(state.target.budget) *
                                   std::max(0.0, 1.0 - options.headroom))),
      st(nt),
      kept(nt, false),
      queue(nt),
      pass_(pass),
      order_(order) {}

PassResult Pager::run(Clock& clock) {
  if (!clock.begin(*this)) return PassResult::kFailed;
  for (uint32_t i = 0; i < n; ++i) {
    if (gives_up(ctx, s, i, fetched)) return PassResult::kFailed;
    if (!clock.step(*this, i)) return PassResult::kFailed;
  }
  clock.end(*this);
  return PassResult::kChanged;
}

void Pager::keep_most_used() {
  std::vector<uint32_t> most;
  for (uint32_t t = 0; t < nt; ++t) {
    if (l.born[t] == kNone && !s.tensors[t].pinned && !l.uses[t].empty()) most.push_back(t);
  }
  std::stable_sort(most.begin(), most.end(), [&](uint32_t a, uint32_t b) {
    if (l.uses[a].size() != l.uses[b].size()) return l.uses[a].size() > l.uses[b].size();
    return bytes(a) < bytes(b);
  });
  const auto room = static_cast<uint64_t>(static_cast<double>(budget) * o.keep);
  uint64_t held = 0;
  for (uint32_t t : most) {
    if (held + bytes(t) > room) continue;
    held += bytes(t);
    kept[t] = true;
  }
}

void Pager::home_off_device(const std::vector<bool>& paged) {
  for (uint32_t t = 0; t < nt; ++t) {
    if (!paged[t]) continue;
    Residency& r = s.tensors[t];
    r.home_off_device = true;
    r.runs.clear();
  }
}

std::vector<uint32_t> Pager::warm_start(const std::vector<bool>& candidate, uint64_t room) {
  std::vector<uint32_t> first;
  for (uint32_t t = 0; t < nt; ++t) {
    if (candidate[t] && !l.uses[t].empty()) first.push_back(t);
  }
  std::stable_sort(first.begin(), first.end(),
                   [&](uint32_t a, uint32_t b) { return l.uses[a].front() < l.uses[b].front(); });
  std::vector<uint32_t> warm;
  for (uint32_t t : first) {
    if (used + bytes(t) > room) break;
    used += bytes(t);
    Residency& r = s.tensors[t];
    r.home_off_device = false;
    r.runs = {Run{0, l.uses[t].front(), l.uses[t].front(), kNone}};
    st[t] = Paged{};
    st[t].resident = true;
    st[t].dirty = true;  // the device holds the only copy
    st[t].warm = true;
    queue.insert(key(t, 0), t);
    warm.push_back(t);
  }
  return warm;
}

void Pager::fetch(uint32_t t) {
  st[t].resident = true;
  used += bytes(t);
  ++fetches;
}

void Pager::evict(uint32_t t) {
  queue.erase(t);
  st[t].resident = false;
  used -= bytes(t);
  ++evictions;
}

}  // namespace tierflow::planner
