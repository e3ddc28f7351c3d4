#include "planner/pins.h"

#include <fmt/format.h>

#include <limits>

namespace tierflow::planner {
namespace {

constexpr uint32_t kUnpinned = std::numeric_limits<uint32_t>::max();

/// The last pin of each kind (a later pin replaces an earlier one), by kind.
std::vector<const Pin*> last_per_kind(const std::vector<Pin>& pins) {
  std::vector<const Pin*> by_kind(kTensorKindNames.size(), nullptr);
  for (const Pin& p : pins) by_kind[static_cast<size_t>(p.kind)] = &p;
  return by_kind;
}

}  // namespace

std::vector<uint32_t> pinned_tiers(const Workload& w, const std::vector<Pin>& pins) {
  std::vector<uint32_t> tier(w.tensors.size(), kUnpinned);
  for (const Pin* p : last_per_kind(pins)) {
    if (p == nullptr || p->shares.empty()) continue;
    // Shares, then the rest (unpinned) as the last share.
    const size_t k = p->shares.size();
    std::vector<double> want(k + 1, 0);
    double pinned = 0;
    for (size_t i = 0; i < k; ++i) {
      want[i] = p->shares[i].fraction;
      pinned += want[i];
    }
    want[k] = std::max(0.0, 1.0 - pinned);
    std::vector<double> got(k + 1, 0);
    double dealt = 0;
    for (uint32_t t = 0; t < w.tensors.size(); ++t) {
      if (w.tensors[t].kind != p->kind) continue;
      const auto bytes = static_cast<double>(w.tensors[t].bytes);
      dealt += bytes;
      // The share furthest below its fraction of the bytes dealt so far, this one included;
      // ties go to the share written first.
      size_t best = 0;
      double best_deficit = -std::numeric_limits<double>::infinity();
      for (size_t i = 0; i <= k; ++i) {
        if (want[i] <= 0) continue;
        const double deficit = want[i] * dealt - got[i];
        if (deficit > best_deficit) {
          best = i;
          best_deficit = deficit;
        }
      }
      got[best] += bytes;
      if (best < k) tier[t] = p->shares[best].tier;
    }
  }
  return tier;
}

std::vector<std::string> describe_pins(const Workload& w, const std::vector<Pin>& pins,
                                       const std::vector<std::string>& tier_ids) {
  const std::vector<uint32_t> tier = pinned_tiers(w, pins);
  std::vector<std::string> out;
  for (const Pin* p : last_per_kind(pins)) {
    if (p == nullptr) continue;
    uint64_t total = 0;
    for (uint32_t t = 0; t < w.tensors.size(); ++t) {
      if (w.tensors[t].kind == p->kind) total += w.tensors[t].bytes;
    }
    const std::string_view kind = kTensorKindNames[static_cast<size_t>(p->kind)];
    if (total == 0) {
      out.push_back(fmt::format("{}: no tensor of this kind in the workload", kind));
      continue;
    }
    for (const PinShare& s : p->shares) {
      uint64_t bytes = 0;
      for (uint32_t t = 0; t < w.tensors.size(); ++t) {
        if (w.tensors[t].kind == p->kind && tier[t] == s.tier) bytes += w.tensors[t].bytes;
      }
      out.push_back(fmt::format("{}: {:.1f}% on '{}' (asked {:g}%)", kind,
                                100.0 * static_cast<double>(bytes) / static_cast<double>(total),
                                tier_ids[s.tier], 100.0 * s.fraction));
    }
  }
  return out;
}

}  // namespace tierflow::planner
