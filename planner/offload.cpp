#include "planner/offload.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/diagnostics.h"
#include "core/units.h"

namespace tierflow::planner {

ProfileTree::ProfileTree(const std::vector<uint64_t>& levels)
    : size_(static_cast<uint32_t>(levels.size())) {
  const uint32_t blocks = (size_ + kBlock - 1) / kBlock;
  while (cap_ < blocks) cap_ <<= 1;
  v_.assign(size_t{blocks} * kBlock, kNothing);
  for (size_t i = 0; i < levels.size(); ++i) v_[i] = static_cast<int64_t>(levels[i]);
  n_.assign(2 * size_t{cap_}, Node{kNothing, 0});
  for (uint32_t b = 0; b < blocks; ++b) {
    const int64_t* x = v_.data() + block_start(b);
    n_[cap_ + b].max = *std::max_element(x, x + kBlock);
  }
  for (size_t i = cap_ - 1; i >= 1; --i) n_[i].max = std::max(n_[2 * i].max, n_[2 * i + 1].max);
}

int64_t ProfileTree::offset(uint32_t b) const {
  int64_t sum = 0;
  for (size_t p = cap_ + b; p >= 1; p >>= 1) sum += n_[p].lazy;
  return sum;
}

void ProfileTree::add_inside(uint32_t b, uint32_t from, uint32_t to, int64_t delta) {
  // The block's largest stored value: raised by a positive add to what it reaches; a
  // negative one rescans the block only if the largest was in the range.
  Node& leaf = n_[cap_ + b];
  const int64_t stored = leaf.max - leaf.lazy;
  int64_t* const x = v_.data();
  int64_t top = stored;
  if (delta >= 0) {
    for (uint32_t i = from; i <= to; ++i) top = std::max(top, x[i] += delta);
  } else {
    int64_t before = kNothing;
    for (uint32_t i = from; i <= to; ++i) {
      before = std::max(before, x[i]);
      x[i] += delta;
    }
    if (before == stored) {
      const int64_t* const first = x + block_start(b);
      top = *std::max_element(first, first + kBlock);
    }
  }
  leaf.max = top + leaf.lazy;
}

// Bottom-up: a node's max is the max of its children's plus its own lazy (the adds that
// cover it whole), so a block's max is its leaf's plus the lazy of its ancestors.
std::pair<size_t, size_t> ProfileTree::cover(uint32_t from, uint32_t to, int64_t delta) {
  size_t l = cap_ + from;
  size_t r = cap_ + to + 1;
  const std::pair<size_t, size_t> ends{l, r - 1};
  for (; l < r; l >>= 1, r >>= 1) {
    if ((l & 1) != 0) {
      n_[l].max += delta;
      n_[l++].lazy += delta;
    }
    if ((r & 1) != 0) {
      n_[--r].max += delta;
      n_[r].lazy += delta;
    }
  }
  return ends;
}

void ProfileTree::recompute_above(size_t p) {
  while (p > 1) {
    p >>= 1;
    n_[p].max = std::max(n_[2 * p].max, n_[2 * p + 1].max) + n_[p].lazy;
  }
}

void ProfileTree::leaf_changed(size_t p) {
  // Only this leaf changed below: once an ancestor keeps its max, those above it do too.
  while (p > 1) {
    p >>= 1;
    const int64_t m = std::max(n_[2 * p].max, n_[2 * p + 1].max) + n_[p].lazy;
    if (m == n_[p].max) return;
    n_[p].max = m;
  }
}

template <class Changed>
void ProfileTree::add_range(uint32_t from, uint32_t to, int64_t delta, Changed&& changed) {
  if (from > to || size_ == 0 || from >= size_) return;
  to = std::min(to, size_ - 1);
  const uint32_t bl = block_of(from);
  const uint32_t br = block_of(to);
  // Blocks [first, last] are covered whole; the partial ones at either end by position.
  uint32_t first = bl;
  uint32_t last = br;
  if (from != block_start(bl) || (bl == br && to != block_end(br))) {
    add_inside(bl, from, bl == br ? to : block_end(bl), delta);
    changed(cap_ + bl, true);
    if (bl == br) return;
    ++first;
  }
  const bool right = to != block_end(br);
  if (right) --last;
  if (first <= last) {
    const auto [l0, r0] = cover(first, last, delta);
    changed(l0, false);
    changed(r0, false);
  }
  if (right) {
    add_inside(br, block_start(br), to, delta);
    changed(cap_ + br, true);
  }
}

void ProfileTree::add(uint32_t from, uint32_t to, int64_t delta) {
  add_range(from, to, delta, [&](size_t leaf, bool alone) {
    if (alone) {
      leaf_changed(leaf);
    } else {
      recompute_above(leaf);
    }
  });
}

void ProfileTree::add_all(const std::vector<std::pair<Span, int64_t>>& pieces) {
  // Every node a piece changes is a leaf it changes or hangs below the paths from its
  // cover's two end leaves to the root, so recomputing those paths once, bottom up, after
  // all pieces gives what add() would. The pieces ascend, so the leaves do.
  touched_.clear();
  for (const auto& [span, delta] : pieces) {
    add_range(span.from, span.to, delta, [&](size_t leaf, bool) {
      if (touched_.empty() || touched_.back() != leaf >> 1) touched_.push_back(leaf >> 1);
    });
  }
  TF_ASSERT(std::is_sorted(touched_.begin(), touched_.end()), "add_all: spans not ascending");
  while (!touched_.empty() && touched_.front() >= 1) {
    size_t n = 0;
    for (const size_t p : touched_) {
      n_[p].max = std::max(n_[2 * p].max, n_[2 * p + 1].max) + n_[p].lazy;
      if (p > 1 && (n == 0 || touched_[n - 1] != p >> 1)) touched_[n++] = p >> 1;
    }
    touched_.resize(n);
  }
}

int64_t ProfileTree::blocks_max(uint32_t from, uint32_t to) const {
  // The nodes covering [from, to], climbing from the leaves: those taken on the left all
  // lie under node l - 1 after each climb, those on the right under node r, so each side
  // adds the lazy of that one ancestor per level; then the lazy above, to the root.
  size_t l = cap_ + from;
  size_t r = cap_ + to + 1;
  int64_t left = kNothing;
  int64_t right = kNothing;
  while (l < r) {
    if ((l & 1) != 0) left = std::max(left, n_[l++].max);
    if ((r & 1) != 0) right = std::max(right, n_[--r].max);
    l >>= 1;
    r >>= 1;
    left += n_[l - 1].lazy;
    right += n_[r].lazy;
  }
  for (size_t p = l - 1; p > 1;) {
    p >>= 1;
    left += n_[p].lazy;
  }
  for (size_t p = r; p > 1;) {
    p >>= 1;
    right += n_[p].lazy;
  }
  return std::max(left, right);
}

uint64_t ProfileTree::max(uint32_t from, uint32_t to) const {
  if (from > to || size_ == 0) return 0;
  to = std::min(to, size_ - 1);
  if (from > to) return 0;
  const int64_t* const x = v_.data();
  auto inside = [&](uint32_t b, uint32_t a, uint32_t c) {
    return *std::max_element(x + a, x + c + 1) + offset(b);
  };
  const uint32_t bl = block_of(from);
  const uint32_t br = block_of(to);
  int64_t best = kNothing;
  if (bl == br) {
    best =
        from == block_start(bl) && to == block_end(br) ? blocks_max(bl, bl) : inside(bl, from, to);
  } else {
    uint32_t first = bl;
    uint32_t last = br;
    if (from != block_start(bl)) best = inside(bl, from, block_end(bl)), ++first;
    if (to != block_end(br)) best = std::max(best, inside(br, block_start(br), to)), --last;
    if (first <= last) best = std::max(best, blocks_max(first, last));
  }
  return static_cast<uint64_t>(std::max<int64_t>(0, best));
}

uint64_t ProfileTree::max() const {
  return size_ == 0 ? 0 : static_cast<uint64_t>(std::max<int64_t>(0, n_[1].max));
}

uint32_t ProfileTree::earliest_room(uint32_t want, uint32_t was, uint64_t bytes,
                                   uint64_t budget) const {
  if (want >= was) return want;
  if (bytes > budget) return was;
  // Just after the last position in [want, was - 1] that has no room for the tensor.
  const uint32_t full = last_above(want, was - 1, budget - bytes);
  return full == kNone ? want : full + 1;
}

uint32_t ProfileTree::last_inside(uint32_t b, uint32_t from, uint32_t to, int64_t threshold) const {
  const int64_t below = threshold - offset(b);
  for (uint32_t i = to + 1; i-- > from;) {
    if (v_[i] > below) return i;
  }
  return kNone;
}

uint32_t ProfileTree::last_above(uint32_t from, uint32_t to, uint64_t threshold) const {
  if (from > to || size_ == 0) return kNone;
  to = std::min(to, size_ - 1);
  if (from > to) return kNone;
  const auto limit = static_cast<int64_t>(threshold);
  const uint32_t bl = block_of(from);
  const uint32_t br = block_of(to);
  if (bl == br) return last_inside(bl, from, to, limit);
  // From the right: the partial last block, the whole blocks, the partial first block.
  uint32_t first = bl;
  uint32_t last = br;
  if (to != block_end(br)) {
    const uint32_t i = last_inside(br, block_start(br), to, limit);
    if (i != kNone) return i;
    --last;
  }
  if (from != block_start(bl)) ++first;
  if (first <= last) {
    const uint32_t b = last_block_above(1, 0, cap_ - 1, first, last, limit);
    if (b != kNone) return last_inside(b, block_start(b), block_end(b), limit);
  }
  if (from != block_start(bl)) return last_inside(bl, from, block_end(bl), limit);
  return kNone;
}

uint32_t ProfileTree::last_block_above(size_t node, uint32_t lo, uint32_t hi, uint32_t from,
                                       uint32_t to, int64_t threshold) const {
  // `threshold` is relative to this node: the lazy adds above it are already taken off.
  if (to < lo || hi < from || n_[node].max <= threshold) return kNone;
  if (lo == hi) return lo;
  const uint32_t mid = lo + (hi - lo) / 2;
  const int64_t below = threshold - n_[node].lazy;
  const uint32_t right = last_block_above(2 * node + 1, mid + 1, hi, from, to, below);
  return right != kNone ? right : last_block_above(2 * node, lo, mid, from, to, below);
}

uint32_t ProfileTree::argmax() const {
  if (size_ == 0) return 0;
  // The first block holding the maximum (ties to the left), then its first position.
  size_t node = 1;
  int64_t want = n_[1].max;
  while (node < cap_) {
    want -= n_[node].lazy;
    node = n_[2 * node].max == want ? 2 * node : 2 * node + 1;
  }
  const auto b = static_cast<uint32_t>(node - cap_);
  const int64_t stored = want - n_[node].lazy;
  const int64_t* const x = v_.data() + block_start(b);
  const auto at = static_cast<uint32_t>(std::find(x, x + kBlock, stored) - x);
  return std::min(block_start(b) + at, size_ - 1);
}

std::vector<Span> occupancy(const std::vector<Run>& runs, uint32_t positions) {
  std::vector<Span> out;
  out.reserve(runs.size());
  const uint32_t last = positions == 0 ? 0 : positions - 1;
  for (const Run& r : runs) {
    const uint32_t to = r.release == kNone ? last : std::min(last, r.release - 1 + r.hold);
    out.push_back({r.alloc, std::max(r.alloc, to)});
  }
  return out;
}

std::vector<std::pair<Span, int64_t>> delta_of(const PlanState& s, uint32_t t,
                                               const std::vector<Run>& runs) {
  // Sweep the boundaries of both span sets: +bytes for new, -bytes for old. Each set's
  // edges are usually ascending already (runs in order): merged then, else sorted. Only
  // the sum at each position matters, so the order among equal positions does not.
  const auto bytes = static_cast<int64_t>(s.w.tensors[t].bytes);
  if (bytes == 0) return {};
  const std::vector<Span> was = occupancy(s.tensors[t].runs, s.positions());
  const std::vector<Span> now = occupancy(runs, s.positions());
  // The common case (a resident tensor split into runs): one span before, the new spans
  // ascending and apart inside it. The change is then -bytes between them, nothing else.
  bool inside = was.size() == 1;
  for (size_t i = 0; inside && i < now.size(); ++i) {
    inside = now[i].from >= (i == 0 ? was[0].from : now[i - 1].to + 1) && now[i].to <= was[0].to;
  }
  if (inside) {
    std::vector<std::pair<Span, int64_t>> out;
    out.reserve(now.size() + 1);
    uint32_t from = was[0].from;  // the first position not yet covered
    for (const Span& sp : now) {
      if (sp.from > from) out.push_back({{from, sp.from - 1}, -bytes});
      from = sp.to + 1;
    }
    if (from <= was[0].to) out.push_back({{from, was[0].to}, -bytes});
    return out;
  }
  std::vector<std::pair<uint32_t, int64_t>> edges;
  edges.reserve(2 * (was.size() + now.size()));
  for (const Span& sp : was) {
    edges.emplace_back(sp.from, -bytes);
    edges.emplace_back(sp.to + 1, bytes);
  }
  const auto mid = static_cast<std::ptrdiff_t>(edges.size());
  for (const Span& sp : now) {
    edges.emplace_back(sp.from, bytes);
    edges.emplace_back(sp.to + 1, -bytes);
  }
  auto by_position = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (std::is_sorted(edges.begin(), edges.begin() + mid, by_position) &&
      std::is_sorted(edges.begin() + mid, edges.end(), by_position)) {
    std::inplace_merge(edges.begin(), edges.begin() + mid, edges.end(), by_position);
  } else {
    std::sort(edges.begin(), edges.end(), by_position);
  }
  std::vector<std::pair<Span, int64_t>> out;
  int64_t level = 0;
  for (size_t i = 0; i < edges.size();) {
    const uint32_t at = edges[i].first;
    while (i < edges.size() && edges[i].first == at) level += edges[i++].second;
    if (level != 0 && i < edges.size()) out.push_back({{at, edges[i].first - 1}, level});
  }
  return out;
}

Candidate make_candidate(const PlanState& s, uint32_t t, std::vector<Run> runs,
                         bool home_off_device) {
  const Costs& c = *s.costs;
  Candidate out;
  out.tensor = t;
  out.home_off_device = home_off_device;
  const uint64_t bytes = s.w.tensors[t].bytes;
  const uint32_t tier = s.tensors[t].tier;
  // Copies added less copies gone, each kind timed once (the tensor's size on its route).
  int64_t fetches = 0, stores = 0;
  for (const Run& r : runs) {
    fetches += r.fetched ? 1 : 0;
    stores += r.store ? 1 : 0;
  }
  for (const Run& r : s.tensors[t].runs) {
    fetches -= r.fetched ? 1 : 0;
    stores -= r.store ? 1 : 0;
  }
  if (fetches != 0) out.transfer_ps += fetches * c.fetch_ps(tier, bytes);
  if (stores != 0) out.transfer_ps += stores * c.store_ps(tier, bytes);
  out.runs = std::move(runs);
  out.delta = delta_of(s, t, out.runs);
  for (const auto& [span, d] : out.delta) {
    if (d < 0) out.freed_ps += c.span_ps(span.from, std::min(span.to + 1, s.positions()));
  }
  out.score = static_cast<double>(bytes) * static_cast<double>(out.freed_ps) /
              static_cast<double>(std::max<int64_t>(1, out.transfer_ps));
  return out;
}

Applied try_apply(PlanState& s, PassReport& report, ProfileTree& tree, Candidate& c,
                  uint64_t target, std::string_view pass) {
  const auto& delta = c.delta;
  bool helps = false;
  for (const auto& [span, d] : delta) {
    if (d < 0 && tree.max(span.from, span.to) > target) {
      helps = true;
      break;
    }
  }
  if (!helps) return Applied::kNoGain;
  Residency& r = s.tensors[c.tensor];
  const uint64_t bytes = s.w.tensors[c.tensor].bytes;
  Residency next{r.tier, c.home_off_device, r.pinned, c.runs};
  const bool charge = !holds_copy(r) && holds_copy(next);
  if (charge && s.tier_used[r.tier] + bytes > s.tier_room[r.tier]) {
    report.stat(pass, "candidates without room on their tier", 1);
    return Applied::kNoRoom;
  }
  if (charge) s.tier_used[r.tier] += bytes;
  tree.add_all(delta);
  r.runs = std::move(c.runs);
  r.home_off_device = c.home_off_device;
  report.stat(pass, "offloaded tensors", 1);
  report.stat(pass, "offloaded bytes", static_cast<double>(bytes));
  return Applied::kYes;
}

size_t apply_until_fits(PlanState& s, PassReport& report, ProfileTree& tree,
                        std::vector<Candidate>& candidates, uint64_t target,
                        std::string_view pass) {
  size_t applied = 0;
  for (Candidate& c : candidates) {
    if (tree.max() <= target) break;
    if (try_apply(s, report, tree, c, target, pass) == Applied::kYes) ++applied;
  }
  return applied;
}

std::string infeasible_reason(const PlanState& s, const ProfileTree& tree, uint64_t budget) {
  const uint32_t at = tree.argmax();
  const uint64_t peak = tree.max(at, at);
  std::vector<std::pair<uint64_t, uint32_t>> live;
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    for (const Span& sp : occupancy(s.tensors[t].runs, s.positions())) {
      if (sp.from <= at && at <= sp.to) live.emplace_back(s.w.tensors[t].bytes, t);
    }
  }
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::string names;
  for (size_t i = 0; i < std::min<size_t>(5, live.size()); ++i) {
    names += fmt::format("{}{} ({})", i == 0 ? "" : ", ", s.w.tensors[live[i].second].name,
                         to_string_approx(Bytes{live[i].first}));
  }
  // What the bytes are: a KV-bound step reads differently from a weight-bound one.
  std::array<std::pair<uint64_t, size_t>, kTensorKindNames.size()> kinds{};
  for (const auto& [bytes, t] : live) {
    auto& k = kinds[static_cast<size_t>(s.w.tensors[t].kind)];
    k.first += bytes;
    ++k.second;
  }
  std::vector<size_t> order;
  for (size_t k = 0; k < kinds.size(); ++k) {
    if (kinds[k].second > 0) order.push_back(k);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return kinds[a].first > kinds[b].first; });
  std::string by_kind;
  for (size_t k : order) {
    by_kind += fmt::format("{}{} {} ({} tensor{})", by_kind.empty() ? "" : ", ",
                           kTensorKindNames[k], to_string_approx(Bytes{kinds[k].first}),
                           kinds[k].second, kinds[k].second == 1 ? "" : "s");
  }
  const uint32_t op = s.positions() == 0 ? 0 : s.order[at];
  std::string out = fmt::format(
      "{} needed on the device at op {} '{}' (position {}), budget {}; live there: {}; "
      "largest: {}",
      to_string_approx(Bytes{peak}), op, s.positions() == 0 ? "" : s.w.ops[op].name, at,
      to_string_approx(Bytes{budget}), by_kind.empty() ? "none" : by_kind,
      names.empty() ? "none" : names);
  // Tensors that have nowhere to go: the offload tiers, not the device, are the limit.
  uint64_t stuck = 0;
  size_t stuck_count = 0;
  for (const auto& [bytes, t] : live) {
    if (s.tensors[t].tier == kNone && !s.tensors[t].pinned) {
      stuck += bytes;
      ++stuck_count;
    }
  }
  if (stuck > 0 && peak > budget) {
    out +=
        fmt::format("; {} of those tensors ({}) have no offload tier with room for them ({}): {}",
                    stuck_count, to_string_approx(Bytes{stuck}), offload_rooms(s),
                    stuck >= peak - budget ? "the offload tiers, not the device, are the limit"
                                           : "the offload tiers limit what can leave");
  }
  return out;
}

std::string offload_rooms(const PlanState& s) {
  std::string rooms;
  for (uint32_t tier : s.offload_tiers) {
    rooms += fmt::format("{}{} {}", rooms.empty() ? "" : ", ", s.topo.tiers[tier].id,
                         to_string_approx(Bytes{s.tier_room[tier]}));
  }
  return rooms.empty() ? "the device reaches no other tier" : "room per program: " + rooms;
}

Fitting begin_fitting(PlanState& s) {
  const Costs& c = s.ensure_costs();
  const Liveness& l = s.ensure_liveness();
  const std::shared_ptr<const std::vector<uint64_t>> kept = std::move(s.start_profile);
  return Fitting{c, l, ProfileTree(kept ? *kept : memory_profile(s)), s.target.budget};
}

PassResult end_fitting(PlanState& s, PassContext& ctx, const ProfileTree& tree, PassResult done,
                       std::string_view what) {
  if (tree.max() <= s.target.budget) return done;
  ctx.report.infeasible = true;
  ctx.failure = fmt::format("{}: {}", what, infeasible_reason(s, tree, s.target.budget));
  return PassResult::kFailed;
}

std::vector<uint64_t> fixed_profile(const PlanState& s, const std::vector<bool>& paged) {
  const uint32_t n = s.positions();
  std::vector<int64_t> diff(n + 2, 0);
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    if (paged[t]) continue;
    for (const Span& sp : occupancy(s.tensors[t].runs, n)) {
      diff[sp.from] += static_cast<int64_t>(s.w.tensors[t].bytes);
      diff[sp.to + 1] -= static_cast<int64_t>(s.w.tensors[t].bytes);
    }
  }
  std::vector<uint64_t> out(n + 1, 0);
  int64_t level = 0;
  for (uint32_t i = 0; i <= n; ++i) out[i] = static_cast<uint64_t>(level += diff[i]);
  return out;
}

}  // namespace tierflow::planner
