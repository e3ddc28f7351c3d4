#include "planner/rescored_queue.h"

#include <algorithm>
#include <iterator>
#include <limits>

namespace tierflow::planner {

RescoredQueue::RescoredQueue(const std::vector<uint32_t>& group, const std::vector<double>& score) {
  std::map<std::pair<uint32_t, double>, std::vector<uint32_t>> start;
  for (uint32_t i = 0; i < group.size(); ++i) start[{group[i], score[i]}].push_back(i);
  for (auto& [gk, entries] : start) put(gk.first, gk.second, std::move(entries));
}

void RescoredQueue::put(uint32_t group, double key, std::vector<uint32_t> entries) {
  if (entries.empty()) return;
  const auto it = at_.find({group, key});
  if (it != at_.end()) {
    std::vector<uint32_t>& into = buckets_[it->second].entries;
    std::vector<uint32_t> merged;
    merged.reserve(into.size() + entries.size());
    std::merge(into.begin(), into.end(), entries.begin(), entries.end(),
               std::back_inserter(merged));
    into = std::move(merged);
    return;
  }
  uint32_t id = 0;
  if (free_.empty()) {
    id = static_cast<uint32_t>(buckets_.size());
    buckets_.emplace_back();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  buckets_[id] = Bucket{key, group, std::move(entries)};
  order_.emplace(key, id);
  at_.emplace(std::make_pair(group, key), id);
}

void RescoredQueue::drop(uint32_t id) {
  Bucket& b = buckets_[id];
  order_.erase({b.key, id});
  at_.erase({b.group, b.key});
  b.entries.clear();
  retired_.push_back(id);  // reused after this pop: ids in `seen` must stay what they were
}

uint32_t RescoredQueue::pop(const std::function<double(uint32_t)>& now) {
  if (order_.empty()) return std::numeric_limits<uint32_t>::max();
  // Every bucket whose key is at least the best current score M (keys never fall below
  // current scores, so the scan stops at the first key below the best seen).
  struct Seen {
    uint32_t id;
    double now;
  };
  std::vector<Seen> seen;
  double m = -std::numeric_limits<double>::infinity();
  for (auto it = order_.begin(); it != order_.end() && it->first >= m; ++it) {
    const double c = now(buckets_[it->second].group);
    m = std::max(m, c);
    seen.push_back({it->second, c});
  }
  // The last of R: the lowest key above M, ties to the higher entry.
  const Seen* last = nullptr;
  for (const Seen& v : seen) {
    const Bucket& b = buckets_[v.id];
    if (b.key <= m) continue;
    if (last == nullptr) {
      last = &v;
      continue;
    }
    const Bucket& l = buckets_[last->id];
    if (b.key < l.key || (b.key == l.key && b.entries.back() > l.entries.back())) last = &v;
  }
  uint32_t from = 0;
  uint32_t pick = 0;
  const bool last_in_g = last != nullptr && last->now == m;
  if (last_in_g) {
    from = last->id;
    pick = buckets_[from].entries.back();
    buckets_[from].entries.pop_back();
  } else {
    pick = std::numeric_limits<uint32_t>::max();
    for (const Seen& v : seen) {
      if (v.now == m && buckets_[v.id].entries.front() < pick) {
        pick = buckets_[v.id].entries.front();
        from = v.id;
      }
    }
    buckets_[from].entries.erase(buckets_[from].entries.begin());
  }
  if (buckets_[from].entries.empty()) drop(from);
  // Re-score what the textbook heap pops before `pick`: every key above M, and when the
  // pick has key M, the entries before it at key M that score lower now.
  for (const Seen& v : seen) {
    Bucket& b = buckets_[v.id];
    if (b.entries.empty()) continue;
    if (b.key > m) {
      std::vector<uint32_t> entries = std::move(b.entries);
      const uint32_t group = b.group;
      drop(v.id);
      put(group, v.now, std::move(entries));
    } else if (!last_in_g && b.key == m && v.now < m && b.entries.front() < pick) {
      const auto split = std::lower_bound(b.entries.begin(), b.entries.end(), pick);
      std::vector<uint32_t> before(b.entries.begin(), split);
      b.entries.erase(b.entries.begin(), split);
      const uint32_t group = b.group;
      if (b.entries.empty()) drop(v.id);
      put(group, v.now, std::move(before));
    }
  }
  free_.insert(free_.end(), retired_.begin(), retired_.end());
  retired_.clear();
  return pick;
}

}  // namespace tierflow::planner
