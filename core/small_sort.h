// A stable sort for ranges that are usually a few elements long: an insertion sort up to
// 32 of them (std::stable_sort allocates a buffer at every call), std::stable_sort beyond.
#pragma once

#include <algorithm>
#include <iterator>
#include <utility>

namespace tierflow {

template <class It, class Less>
void stable_sort_small(It first, It last, Less less) {
  if (last - first > 32) {
    std::stable_sort(first, last, less);
    return;
  }
  for (It i = first + (first == last ? 0 : 1); i < last; ++i) {
    auto v = std::move(*i);
    It k = i;
    for (; k > first && less(v, *(k - 1)); --k) *k = std::move(*(k - 1));
    *k = std::move(v);
  }
}

}  // namespace tierflow
