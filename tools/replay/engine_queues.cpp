#include "tools/replay/engine_queues.h"

#include <algorithm>

#include "core/diagnostics.h"

namespace tierflow::replay {

EngineQueues::EngineQueues(std::vector<std::vector<uint32_t>> engines) {
  groups_.resize(engines.size());
  for (size_t g = 0; g < engines.size(); ++g) {
    // Taken from the back: the first engine of a group is used first.
    groups_[g].idle.assign(engines[g].rbegin(), engines[g].rend());
  }
}

EngineQueues EngineQueues::numbered(std::span<const int> count) {
  std::vector<std::vector<uint32_t>> engines(count.size());
  for (size_t g = 0; g < count.size(); ++g) {
    for (int e = 0; e < count[g]; ++e) engines[g].push_back(static_cast<uint32_t>(e));
  }
  return EngineQueues(std::move(engines));
}

void EngineQueues::enqueue(uint32_t x, std::span<const uint32_t> route) {
  for (uint32_t e : route) {
    TF_ASSERT(e < groups_.size(), "copy {} queues on engine group {} of {}", x, e, groups_.size());
    groups_[e].queue.push_back(x);
  }
}

bool EngineQueues::ready(uint32_t x, std::span<const uint32_t> route) const {
  return std::all_of(route.begin(), route.end(), [&](uint32_t e) {
    return !groups_[e].idle.empty() && groups_[e].queue.front() == x;
  });
}

void EngineQueues::release(std::span<const uint32_t> route, std::span<const uint32_t> held) {
  TF_ASSERT(route.size() == held.size(), "{} engines held on a route of {} groups", held.size(),
            route.size());
  for (size_t i = 0; i < route.size(); ++i) groups_[route[i]].idle.push_back(held[i]);
}

}  // namespace tierflow::replay
