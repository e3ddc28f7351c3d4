// A max-priority queue whose scores only drop over time and are re-scored lazily, with the
// exact pick order of the textbook version, at a cost that does not grow with the number
// of entries that score alike.
//
// Glossary
//   entry   an index (0..n-1) with an initial score.
//   group   entries that always score the same (select: one tier, one base score, one
//           added copy time); `now(g)` is group g's current score, at most its last one.
//   key     the score an entry was last pushed with (at least its current score).
//
// The textbook version is a binary max-heap of (key, entry), ties to the lower entry:
// pop the top; if its current score is below its key and below the next top's key, push
// it back with the current score; otherwise return it. RescoredQueue returns the same
// entries in the same order. Entries of a group with the same key sit in one bucket, so a
// pop costs the buckets whose key is at least the best current score, not one heap
// operation per entry re-scored. Which entry the textbook heap returns:
//   M = the best current score; G = entries scoring M now; R = entries with key > M,
//   popped (and pushed back) in order of key, highest first, ties to the lower entry.
//   - the last of R (lowest key, ties to the higher entry) when it is in G;
//   - else the lowest entry of G once every key above M has dropped to its current
//     score (entries not in G whose key is exactly M and that come before it drop too).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace tierflow::planner {

class RescoredQueue {
 public:
  /// `group[i]` and `score[i]`: entry i's group and initial score (equal within a group).
  RescoredQueue(const std::vector<uint32_t>& group, const std::vector<double>& score);

  /// The next entry, or UINT32_MAX when empty. `now(g)`: group g's current score.
  uint32_t pop(const std::function<double(uint32_t)>& now);

  [[nodiscard]] bool empty() const { return order_.empty(); }

 private:
  struct Bucket {
    double key = 0;
    uint32_t group = 0;
    std::vector<uint32_t> entries;  ///< ascending
  };
  /// Moves `entries` (ascending) of `group` to key `key`, joining a bucket already there.
  void put(uint32_t group, double key, std::vector<uint32_t> entries);
  /// Takes bucket `id` out of the order (its entries are moved out or gone).
  void drop(uint32_t id);

  std::vector<Bucket> buckets_;
  std::vector<uint32_t> free_, retired_;
  std::set<std::pair<double, uint32_t>, std::greater<>> order_;  ///< (key, bucket), highest first
  std::map<std::pair<uint32_t, double>, uint32_t> at_;           ///< (group, key) -> bucket
};

}  // namespace tierflow::planner
