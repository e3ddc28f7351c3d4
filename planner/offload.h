// Shared machinery of the passes that decide what leaves the device: the memory profile
// as a range-add / range-max tree, offload candidates (a tensor's new runs and the bytes
// they free where) and the greedy that applies candidates in order until the profile
// fits a target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/pass.h"
#include "planner/state.h"

namespace tierflow::planner {

/// Inclusive position ranges a run set occupies on the device.
struct Span {
  uint32_t from = 0;
  uint32_t to = 0;
};
std::vector<Span> occupancy(const std::vector<Run>& runs, uint32_t positions);

/// Per-position bytes with range add and range max. Two levels: the positions in blocks of
/// kBlock, each value kept as it is less the adds that covered its whole block; and a
/// range-add / range-max tree over the blocks, which holds those adds. An update or a query
/// walks at most two partial blocks and O(log(n / kBlock)) nodes of a tree small enough to
/// stay in cache (the schedule pass and the selections update it once per prefetch they
/// move or tensor they offload).
class ProfileTree {
 public:
  explicit ProfileTree(const std::vector<uint64_t>& levels);
  void add(uint32_t from, uint32_t to, int64_t delta);  ///< inclusive range
  /// add() of each (span, delta), the spans ascending and disjoint: the same tree.
  void add_all(const std::vector<std::pair<Span, int64_t>>& pieces);
  [[nodiscard]] uint64_t max(uint32_t from, uint32_t to) const;
  [[nodiscard]] uint64_t max() const;
  /// The first position holding the maximum.
  [[nodiscard]] uint32_t argmax() const;
  /// The last position in [from, to] whose value exceeds `threshold`, or kNone.
  [[nodiscard]] uint32_t last_above(uint32_t from, uint32_t to, uint64_t threshold) const;
  /// Moving an allocation of `bytes` earlier, from slot `was` toward `want` (< was), under
  /// `budget`: the earliest slot in [want, was] from which every position up to
  /// was - 1 has room for it (`was` when none has).
  [[nodiscard]] uint32_t earliest_room(uint32_t want, uint32_t was, uint64_t bytes,
                                       uint64_t budget) const;
  [[nodiscard]] uint32_t size() const { return size_; }

 private:
  static constexpr uint32_t kBlock = 16;  ///< positions per block (a power of two)
  /// Below every value (a padded position, an empty side of a query); adds cannot lift it
  /// near a real one.
  static constexpr int64_t kNothing = INT64_MIN / 4;
  /// A block tree node: the max of its blocks (its lazy add included) and the add covering
  /// it whole; side by side, so that a climb reads one cache line per level. A leaf's max
  /// is its block's largest stored value plus its lazy.
  struct Node {
    int64_t max = 0;
    int64_t lazy = 0;
  };
  [[nodiscard]] static uint32_t block_of(uint32_t i) { return i / kBlock; }
  [[nodiscard]] static uint32_t block_start(uint32_t b) { return b * kBlock; }
  [[nodiscard]] static uint32_t block_end(uint32_t b) { return b * kBlock + kBlock - 1; }
  /// The adds covering block b whole: its leaf's lazy and its ancestors'.
  [[nodiscard]] int64_t offset(uint32_t b) const;
  /// Adds `delta` to the stored values of positions [from, to] of block b (not the whole
  /// block) and sets its leaf; the caller recomputes the leaf's ancestors.
  void add_inside(uint32_t b, uint32_t from, uint32_t to, int64_t delta);
  /// Adds `delta` to the nodes covering blocks [from, to]; returns the two leaves whose
  /// ancestors need recomputing.
  std::pair<size_t, size_t> cover(uint32_t from, uint32_t to, int64_t delta);
  /// Adds `delta` to positions [from, to] (clamped): the partial blocks at either end by
  /// position, the blocks between covered whole. Calls changed(leaf, alone) for each leaf
  /// whose ancestors need recomputing, in ascending order; `alone`: only that leaf changed
  /// below them (its climb may stop where a max stays).
  template <class Changed>
  void add_range(uint32_t from, uint32_t to, int64_t delta, Changed&& changed);
  void recompute_above(size_t leaf);
  /// recompute_above() after a change of leaf p alone.
  void leaf_changed(size_t p);
  /// The max over blocks [from, to] (kNothing when empty).
  [[nodiscard]] int64_t blocks_max(uint32_t from, uint32_t to) const;
  /// The last block in [from, to] under `node` (covering blocks [lo, hi]) whose max exceeds
  /// `threshold` (relative to the node: the lazy above it taken off), or kNone.
  [[nodiscard]] uint32_t last_block_above(size_t node, uint32_t lo, uint32_t hi, uint32_t from,
                                          uint32_t to, int64_t threshold) const;
  /// The last position in [from, to] of block b whose value exceeds `threshold`, or kNone.
  [[nodiscard]] uint32_t last_inside(uint32_t b, uint32_t from, uint32_t to,
                                     int64_t threshold) const;

  uint32_t size_ = 0;
  uint32_t cap_ = 1;             ///< leaves of the block tree (a power of two)
  std::vector<int64_t> v_;       ///< per position (padded to whole blocks): less its block's adds
  std::vector<Node> n_;          ///< the block tree, root at 1, leaves from cap_
  std::vector<size_t> touched_;  ///< add_all's scratch
};

/// Replacing one tensor's runs.
struct Candidate {
  uint32_t tensor = 0;
  std::vector<Run> runs;
  /// delta_of() the tensor's runs when the candidate was made (make_candidate): valid while
  /// they stay as they were, which holds until a candidate of the same tensor is applied.
  std::vector<std::pair<Span, int64_t>> delta;
  bool home_off_device = false;
  double score = 0;        ///< higher first
  int64_t transfer_ps = 0;  ///< estimated copy time the new runs add
  int64_t freed_ps = 0;     ///< estimated time the tensor is newly off the device
};

/// A candidate with its score filled: bytes x time newly off the device over the copy
/// time the new runs add (HyperOffload's benefit over cost).
Candidate make_candidate(const PlanState& s, uint32_t t, std::vector<Run> runs,
                         bool home_off_device);

/// The profile change of moving tensor `t` from its current runs to `runs`, as
/// (span, delta) pieces; positions freed have negative deltas.
std::vector<std::pair<Span, int64_t>> delta_of(const PlanState& s, uint32_t t,
                                               const std::vector<Run>& runs);

enum class Applied { kYes, kNoGain, kNoRoom };

/// Applies one candidate if it lowers some position above `target` and, when it puts a
/// new copy on the tensor's offload tier, that tier has room (charged then). Counted in
/// `report` under `pass`.
Applied try_apply(PlanState& s, PassReport& report, ProfileTree& tree, Candidate& c,
                  uint64_t target, std::string_view pass);

/// Applies candidates in the given order, each only if it lowers some position above
/// `target`, until the whole profile is at most `target`. Returns the number applied.
/// Updates `tree` and the tensors' residency, and adds route load per tier.
size_t apply_until_fits(PlanState& s, PassReport& report, ProfileTree& tree,
                        std::vector<Candidate>& candidates, uint64_t target, std::string_view pass);

/// Why the profile does not fit: the position at its peak, the bytes there and the
/// largest tensors live there.
std::string infeasible_reason(const PlanState& s, const ProfileTree& tree, uint64_t budget);
/// The offload tiers' room per program ("room per program: ddr 977KiB, ssd 977KiB"), for a
/// message that blames them; or that the device reaches no other tier.
std::string offload_rooms(const PlanState& s);

/// What a pass that fits the runs under the budget starts from: the analyses computed,
/// and the estimated device profile of the runs as they now stand.
struct Fitting {
  const Costs& costs;
  const Liveness& liveness;
  ProfileTree tree;
  uint64_t budget;  ///< the target's
  [[nodiscard]] bool fits() const { return tree.max() <= budget; }
};
Fitting begin_fitting(PlanState& s);

/// How such a pass ends: when `tree` is over the budget, kFailed with the target
/// infeasible and "WHAT: <infeasible_reason>" as the failure; else `done`.
PassResult end_fitting(PlanState& s, PassContext& ctx, const ProfileTree& tree, PassResult done,
                       std::string_view what = "does not fit");

/// Per position (positions + 1 entries, the last 0), the device bytes of the runs of the
/// tensors `paged` says no to: what a paging pass leaves as it is.
std::vector<uint64_t> fixed_profile(const PlanState& s, const std::vector<bool>& paged);

}  // namespace tierflow::planner
