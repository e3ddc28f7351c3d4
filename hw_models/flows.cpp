#include "hw_models/flows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/diagnostics.h"
#include "core/small_sort.h"

namespace tierflow::hw {
namespace {

/// Routes of up to this many hops are stored padded to this many and walked in this many
/// steps, without a loop that would end at a random point.
constexpr uint32_t kShortRoute = 4;
/// Short routes are padded with kPadHop - f % kSpares for flow f: entry() wraps that to one
/// of the spare entries at the start of the per-resource solve arrays. Flows that freeze
/// together take from different spares, so updates of one spare do not form a long chain,
/// each waiting for the one before.
constexpr uint32_t kPadHop = UINT32_MAX;

// Calls visit(q) for every hop q stored for a route of `hops` hops from `hop` on: a short
// route in kShortRoute steps, its padding included (entry() takes that to a spare).
template <class Visit>
void for_stored_hops(const uint32_t* hop, uint32_t hops, Visit&& visit) {
  if (hops <= kShortRoute) {
    for (uint32_t j = 0; j < kShortRoute; ++j) visit(hop[j]);
  } else {
    for (uint32_t j = 0; j < hops; ++j) visit(hop[j]);
  }
}

// Bits of a double that compare as unsigned integers the way the doubles compare (for
// the non-NaN values a share takes), with -0 below +0.
uint64_t ordered_bits(double x) {
  const auto u = std::bit_cast<uint64_t>(x);
  return (u >> 63) != 0 ? ~u : u | (uint64_t{1} << 63);
}

// All ones if `c`, else zero. The compiler does not see through the result, so a select
// built on it stays a select instead of becoming a branch that would go either way at
// random.
uint64_t mask_if(bool c) {
  uint64_t m = uint64_t{0} - uint64_t{c};
#if defined(__GNUC__)
  asm("" : "+r"(m));
#endif
  return m;
}

// Gives node `i` of a winner tree (node j holds the lesser of 2j and 2j + 1; leaves from
// some power of two on) the entry `key`, updates its ancestors and returns the least
// entry. The least of the siblings on the way up does not depend on the key: only the
// last compare waits for it (the key comes from a division).
uint64_t set_leaf(uint64_t* tree, size_t i, uint64_t key) {
  tree[i] = key;
  uint64_t others = ~uint64_t{0};
  while (i > 1) {
    const uint64_t sibling = tree[i ^ 1];
    others = sibling < others ? sibling : others;
    i >>= 1;
    tree[i] = others < key ? others : key;
  }
  return others < key ? others : key;
}

}  // namespace

uint32_t FlowNetwork::add_resource(double capacity) {
  TF_ASSERT(capacity > 0 && std::isfinite(capacity), "resource capacity {} is not positive",
            capacity);
  capacity_.push_back(capacity);
  res_flows_.emplace_back();
  last_change_.push_back(0);
  stats_.emplace_back();
  group_.push_back(kNone);
  group_pos_.push_back(0);
  seen_.push_back(0);
  seen_by_.push_back(0);
  emptied_at_.push_back(0);
  filling_.emplace_back();
  near_mark_.push_back(0);
  near_tag_.push_back(0);
  leaf_.push_back(0);
  res_scratch_.resize(capacity_.size());
  settled_.resize(capacity_.size());
  return static_cast<uint32_t>(capacity_.size() - 1);
}

void FlowNetwork::touch(uint32_t r, Time now) {
  const Time dt = now - last_change_[r];
  const size_t n = res_flows_[r].size();
  if (n > 0 && dt > 0) {
    stats_[r].busy_ps += dt;
    stats_[r].flow_ps += static_cast<double>(n) * static_cast<double>(dt);
  }
  last_change_[r] = now;
}

uint32_t FlowNetwork::new_group() {
  uint32_t g;
  if (free_groups_.empty()) {
    g = static_cast<uint32_t>(groups_.size());
    groups_.emplace_back();
  } else {
    g = free_groups_.back();
    free_groups_.pop_back();
  }
  // A group freed since the last solve may still be listed as dirty; it stays listed.
  groups_[g].res.clear();
  groups_[g].flows = 0;
  return g;
}

void FlowNetwork::mark_dirty(uint32_t g) {
  if (!groups_[g].dirty) {
    groups_[g].dirty = true;
    dirty_groups_.push_back(g);
  }
}

void FlowNetwork::join(uint32_t r, uint32_t g) {
  group_[r] = g;
  group_pos_[r] = static_cast<uint32_t>(groups_[g].res.size());
  groups_[g].res.push_back(r);
}

void FlowNetwork::leave(uint32_t r) {
  std::vector<uint32_t>& list = groups_[group_[r]].res;
  const uint32_t last = list.back();
  list[group_pos_[r]] = last;
  group_pos_[last] = group_pos_[r];
  list.pop_back();
  group_[r] = kNone;
}

void FlowNetwork::merge(uint32_t from, uint32_t to) {
  for (uint32_t r : groups_[from].res) join(r, to);
  groups_[to].flows += groups_[from].flows;
  groups_[from].res.clear();
  groups_[from].flows = 0;
  free_groups_.push_back(from);
}

uint32_t FlowNetwork::start(std::span<const uint32_t> resources, double bytes, Time now) {
  TF_ASSERT(bytes > 0 && !resources.empty(), "a flow needs bytes and resources");
  uint32_t id;
  if (free_flows_.empty()) {
    id = static_cast<uint32_t>(routes_.size());
    routes_.emplace_back();
    remaining_.push_back(0);
    rate_.push_back(0);
    updated_.push_back(0);
    frozen_at_.push_back(0);
    flow_seen_.push_back(0);
    flow_seen_by_.push_back(0);
    live_.push_back(0);
    frozen_.resize(routes_.size() + 1);
  } else {
    id = free_flows_.back();
    free_flows_.pop_back();
  }
  Route& rt = routes_[id];
  const auto hops = static_cast<uint32_t>(resources.size());
  const uint32_t room = std::max(hops, kShortRoute);
  if (room > rt.room) {
    rt.begin = static_cast<uint32_t>(route_.size());
    rt.room = room;
    route_.resize(route_.size() + room);
  }
  rt.hops = hops;
  std::copy(resources.begin(), resources.end(), route_.begin() + rt.begin);
  std::fill(route_.begin() + rt.begin + hops, route_.begin() + rt.begin + room,
            kPadHop - id % kSpares);
  remaining_[id] = bytes;
  rate_[id] = 0;
  updated_[id] = now;
  live_[id] = 1;
  // The flow joins the largest group its resources are in; the others merge into it.
  uint32_t g = kNone;
  for (uint32_t r : resources) {
    const uint32_t h = group_[r];
    if (h != kNone && (g == kNone || groups_[h].res.size() > groups_[g].res.size())) g = h;
  }
  if (g == kNone) g = new_group();
  for (uint32_t r : resources) {
    const uint32_t h = group_[r];
    if (h != kNone && h != g) merge(h, g);
  }
  for (uint32_t r : resources) {
    touch(r, now);
    if (group_[r] == kNone) join(r, g);
    res_flows_[r].push_back(id);
    stats_[r].bytes += bytes;
    while (reciprocal_.size() <= res_flows_[r].size()) {
      reciprocal_.push_back(1.0 / static_cast<double>(reciprocal_.size()));
    }
  }
  groups_[g].flows += 1;
  mark_dirty(g);
  return id;
}

void FlowNetwork::finish(uint32_t flow, Time now) {
  TF_ASSERT(live_[flow] != 0, "finish of flow {} that is not running", flow);
  const std::span<const uint32_t> hops = route(flow);
  const uint32_t g = group_[hops[0]];
  for (uint32_t r : hops) {
    touch(r, now);
    auto& list = res_flows_[r];
    list.erase(std::find(list.begin(), list.end(), flow));
    if (list.empty()) {
      if (group_[r] != kNone) leave(r);
      if (emptied_at_[r] != epoch_ + 1) {
        emptied_at_[r] = epoch_ + 1;  // listed once before the next solve
        emptied_.push_back(r);
      }
    }
  }
  live_[flow] = 0;
  rate_[flow] = 0;
  remaining_[flow] = 0;
  free_flows_.push_back(flow);
  Group& gr = groups_[g];
  gr.flows -= 1;
  mark_dirty(g);
  if (gr.res.empty()) {
    free_groups_.push_back(g);
  } else {
    // The resources it joined that still carry flows may now be apart: split() searches
    // from them (it skips a group with one such resource).
    for (uint32_t r : hops) {
      if (!res_flows_[r].empty()) cut_.push_back(r);
    }
  }
}

void FlowNetwork::drain(uint32_t f, double rate, Time now) {
  if (now > updated_[f] && rate > 0) {
    remaining_[f] =
        std::max(0.0, remaining_[f] - rate * static_cast<double>(now - updated_[f]) * 1e-12);
  }
  updated_[f] = now;
}

void FlowNetwork::split() {
  if (cut_.empty()) return;
  // The resources to search from, once each, those of one group together.
  ++search_;
  size_t n = 0;
  for (uint32_t r : cut_) {
    if (group_[r] == kNone || seen_[r] == search_) continue;
    seen_[r] = search_;
    cut_[n++] = r;
  }
  cut_.resize(n);
  // Within a group, the resources with the fewest flows search first: a search from a
  // hub (a pool's port, say) would walk all its flows before the others had a turn.
  // (A finish lists a few resources: stable_sort_small, no buffer at every solve.)
  const auto before = [&](uint32_t a, uint32_t b) {
    if (group_[a] != group_[b]) return group_[a] < group_[b];
    return res_flows_[a].size() < res_flows_[b].size();
  };
  stable_sort_small(cut_.begin(), cut_.end(), before);
  for (size_t i = 0; i < cut_.size();) {
    size_t j = i + 1;
    while (j < cut_.size() && group_[cut_[j]] == group_[cut_[i]]) ++j;
    const std::span<const uint32_t> sources{cut_.data() + i, j - i};
    // A group left with one flow is that flow's route (its resources all carry flows):
    // connected.
    if (sources.size() >= 2 && groups_[group_[sources[0]]].flows > 1 &&
        !joined_nearby(sources)) {
      search_apart(sources);
    }
    i = j;
  }
  cut_.clear();
}

bool FlowNetwork::joined_nearby(std::span<const uint32_t> sources) {
  // Source i reaches itself and the resources of the flows on it (all connected to it);
  // two sources whose reaches share a resource are connected. Bits mark the sources that
  // reach a resource (the padding of short routes marks a spare, which is left out). A
  // hub's reach is its whole list of flows, which the search would not walk: sources
  // with many flows go to the search.
  constexpr size_t kMaxFlows = 64;
  const size_t k = sources.size();
  if (k > 64) return false;
  size_t flows = 0;
  for (uint32_t s : sources) flows += res_flows_[s].size();
  if (flows > kMaxFlows) return false;
  ++search_;
  const uint64_t pass = search_;
  uint64_t* const mark = near_mark_.data();
  uint64_t* const tag = near_tag_.data();
  const uint32_t* const route_base = route_.data();
  const auto reach = [&](uint32_t source, auto&& visit) {
    visit(entry(source));
    for (uint32_t f : res_flows_[source]) {
      for_stored_hops(route_base + routes_[f].begin, routes_[f].hops,
                      [&](uint32_t q) { visit(entry(q)); });
    }
  };
  for (size_t i = 0; i < k; ++i) {
    const uint64_t bit = uint64_t{1} << i;
    reach(sources[i], [&](uint32_t e) {
      mark[e] = (mark[e] & mask_if(tag[e] == pass)) | bit;
      tag[e] = pass;
    });
  }
  // near[i]: the sources whose reach meets source i's (i among them).
  uint64_t near[64];
  near[0] = 0;  // (k >= 2: every entry below k is set; this tells the compiler)
  for (size_t i = 0; i < k; ++i) {
    uint64_t m = 0;
    reach(sources[i], [&](uint32_t e) { m |= mark[e] & mask_if(e >= kSpares); });
    near[i] = m;
  }
  uint64_t joined = near[0];
  for (uint64_t before = 0; joined != before;) {
    before = joined;
    for (uint64_t rest = joined; rest != 0; rest &= rest - 1) {
      joined |= near[std::countr_zero(rest)];
    }
  }
  return joined == (k == 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1);
}

void FlowNetwork::search_apart(std::span<const uint32_t> sources) {
  // One breadth-first search from each source, taking turns one resource at a time.
  // Searches that reach each other's resources or flows are connected (union-find). A
  // search set that runs out of resources to expand before meeting the others has found
  // a whole component; once at most one set can still grow, the rest is the old group.
  // Every part of a split holds a source (the group was connected with the finished
  // flows), so the cost is that of the parts that split off, plus as much again for
  // each search that grows alongside them.
  const uint32_t g = group_[sources[0]];
  const auto k = static_cast<uint32_t>(sources.size());
  ++search_;
  if (search_res_.size() < k) {
    search_res_.resize(k);
  }
  search_head_.assign(k, 0);
  search_parent_.resize(k);
  search_open_.assign(k, 1);
  search_flows_.assign(k, 0);
  for (uint32_t i = 0; i < k; ++i) {
    search_res_[i].assign(1, sources[i]);
    search_parent_[i] = i;
    seen_[sources[i]] = search_;
    seen_by_[sources[i]] = i;
  }
  const auto find = [&](uint32_t i) {
    while (search_parent_[i] != i) i = search_parent_[i] = search_parent_[search_parent_[i]];
    return i;
  };
  uint32_t open = k;  // sets that can still grow
  uint32_t sets = k;
  const auto unite = [&](uint32_t a, uint32_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    // (Both can still grow: a set that cannot has no edge left to another.)
    const uint32_t before = (search_open_[a] > 0 ? 1U : 0U) + (search_open_[b] > 0 ? 1U : 0U);
    search_parent_[b] = a;
    search_open_[a] += search_open_[b];
    open -= before - (search_open_[a] > 0 ? 1U : 0U);
    --sets;
  };
  while (open > 1) {
    for (uint32_t i = 0; i < k && open > 1; ++i) {
      std::vector<uint32_t>& reached = search_res_[i];
      if (search_head_[i] == reached.size()) continue;
      const uint32_t r = reached[search_head_[i]++];
      for (uint32_t f : res_flows_[r]) {
        if (flow_seen_[f] == search_) {
          unite(i, flow_seen_by_[f]);
          if (sets == 1) return;  // all connected: nothing split
          continue;
        }
        flow_seen_[f] = search_;
        flow_seen_by_[f] = i;
        ++search_flows_[i];
        for (uint32_t q : route(f)) {
          if (seen_[q] == search_) {
            unite(i, seen_by_[q]);
            continue;
          }
          seen_[q] = search_;
          seen_by_[q] = i;
          reached.push_back(q);
        }
        if (sets == 1) return;
      }
      if (search_head_[i] == reached.size() && --search_open_[find(i)] == 0) --open;
    }
  }
  if (sets == 1) return;
  // The sets that ran out are components of their own; the one that can still grow (or,
  // if none can, the first source's) stays in the old group.
  uint32_t stays = find(0);
  for (uint32_t i = 0; i < k; ++i) {
    if (search_parent_[i] == i && search_open_[i] > 0) stays = i;
  }
  for (uint32_t root = 0; root < k; ++root) {
    if (search_parent_[root] != root || root == stays) continue;
    const uint32_t h = new_group();
    for (uint32_t i = 0; i < k; ++i) {
      if (find(i) != root) continue;
      for (uint32_t r : search_res_[i]) {
        leave(r);
        join(r, h);
      }
      groups_[h].flows += search_flows_[i];
      groups_[g].flows -= search_flows_[i];
    }
    mark_dirty(h);
  }
}

FlowNetwork::Component FlowNetwork::gather() {
  ++epoch_;
  uint32_t* const cres = res_scratch_.data();
  size_t n = 0;
  size_t flows = 0;
  for (uint32_t g : dirty_groups_) {
    Group& gr = groups_[g];
    gr.dirty = false;
    std::copy(gr.res.begin(), gr.res.end(), cres + n);
    n += gr.res.size();
    flows += gr.flows;
  }
  dirty_groups_.clear();
  const size_t busy = n;
  // Those that have flows again are listed with their group.
  for (uint32_t r : emptied_) {
    if (group_[r] == kNone) cres[n++] = r;
  }
  emptied_.clear();
  return {n, flows, busy};
}

void FlowNetwork::fill(const Component& c, Time now) {
  // Progressive filling: the resource with the smallest fair share saturates first.
  // Freezing a flow at the smallest share never lowers another resource's share, so an
  // entry whose share is out of date simply takes the current one when it surfaces.
  // (An entry whose key is current is the same as one set again: nothing else changed,
  // so it would surface next.) The entries sit in the leaves of a winner tree, which
  // gives the least in the same order as any priority queue would (keys are unique), at
  // a fixed cost per update.
  //
  // A key is the share's bits with the lowest ones replaced by the resource index (7
  // bits for 128 resources). Shares closer than 2^-45 of their value (2^-40 with 4,096
  // resources) so count as equal and saturate in index order, as exactly equal ones do:
  // a rate can differ from the exact max-min one by about that fraction (a picosecond in
  // 35 seconds of transfer). The first keys multiply the capacity by 1 / n from a table
  // instead of dividing; a key that lands a step off is re-keyed when it surfaces, like
  // any out-of-date entry.
  const uint32_t* const cres = res_scratch_.data();
  Filling* const st = filling_.data();
  const Key low = std::bit_ceil(std::max(resources(), size_t{2})) - 1;
  const double* const reciprocal = reciprocal_.data();
  uint32_t* const leaf_of = leaf_.data();
  const size_t base = std::bit_ceil(std::max(c.busy, size_t{1}));  // the first leaf
  tree_.resize(2 * base);
  Key* const tree = tree_.data();
  {
    // (Locals, so that the loop does not reload them after every store.)
    Key* const leaves = tree + base;
    const std::vector<uint32_t>* const flows_on = res_flows_.data();
    const double* const capacity = capacity_.data();
    const auto busy = static_cast<uint32_t>(c.busy);
    for (uint32_t leaf = 0; leaf < busy; ++leaf) {
      const uint32_t r = cres[leaf];
      Filling& x = st[entry(r)];
      const auto n = static_cast<uint32_t>(flows_on[r].size());
      x.left = capacity[r];
      x.unfrozen = n;
      leaves[leaf] = (ordered_bits(x.left * reciprocal[n]) & ~low) | r;
      leaf_of[r] = leaf;
    }
  }
  std::fill(tree + base + c.busy, tree + 2 * base, kDone);
  for (size_t i = base; i-- > 1;) tree[i] = std::min(tree[2 * i], tree[2 * i + 1]);
  uint32_t* const frozen = frozen_.data();
  uint32_t* const settled = settled_.data();
  double* const rate = rate_.data();
  uint64_t* const frozen_at = frozen_at_.data();
  old_rate_.resize(c.flows + 1);
  double* const old_rate = old_rate_.data();
  const uint64_t epoch = epoch_;
  const uint32_t* const route_base = route_.data();
  changed_flows_.resize(c.flows + 1);
  uint32_t* const changed = changed_flows_.data();
  size_t n_changed = 0;
  size_t n_settled = 0;
  // Once every flow is frozen the entries left could only be dropped.
  size_t unfrozen_flows = c.flows;
  Key top = tree[1];
  while (unfrozen_flows > 0) {
    // A resource with an unfrozen flow keeps its entry until it saturates.
    TF_ASSERT(top != kDone, "{} flows left unfrozen", unfrozen_flows);
    const auto r = static_cast<uint32_t>(top & low);
    const Filling& x = st[entry(r)];
    // The entry either leaves the tree (its flows all froze elsewhere: dry, its load is
    // summed after the loop; or its key is current: it saturates) or takes its current
    // share. One branch, after the tree is updated: the outcome is close to random.
    const double current = x.left / x.unfrozen;
    const Key key = (ordered_bits(current) & ~low) | r;
    const bool dry = x.unfrozen < 0.5;  // (a whole number)
    const bool saturates = !dry && key == top;
    const uint64_t gone = mask_if(dry || saturates);
    top = set_leaf(tree, base + leaf_of[r], (gone & kDone) | (~gone & key));
    settled[n_settled] = r;
    n_settled += dry ? 1 : 0;
    if (!saturates) continue;
    // Rounding can leave a hair below zero; a flow always gets some bandwidth.
    const double share = std::max(current, capacity_[r] * 1e-12);
    // Its unfrozen flows freeze at the share (listed once each, also when a route crosses
    // the resource twice; those whose rate changes are listed with the rate they had).
    // Then every flow on it has its rate, so its load is final: the sum load() takes,
    // term by term in the same order.
    size_t n_frozen = 0;
    double sum = 0;
    for (uint32_t f : res_flows_[r]) {
      const double before = rate[f];
      const uint64_t open = mask_if(frozen_at[f] != epoch);
      const double after = std::bit_cast<double>((std::bit_cast<uint64_t>(share) & open) |
                                                 (std::bit_cast<uint64_t>(before) & ~open));
      frozen_at[f] = epoch;
      rate[f] = after;
      sum += after;
      frozen[n_frozen] = f;
      n_frozen += open & 1;
      changed[n_changed] = f;
      old_rate[n_changed] = before;
      // (Bits compared: a rate is never -0 or NaN, and an integer compare has no
      // unordered case to test.)
      const bool moved = std::bit_cast<uint64_t>(before) != std::bit_cast<uint64_t>(share);
      n_changed += open & (moved ? 1 : 0);
    }
    stats_[r].peak_rate = std::max(stats_[r].peak_rate, sum);
    unfrozen_flows -= n_frozen;
    // They take the share from their resources; the padding of a short route takes it
    // from a spare.
    const auto take = [&](uint32_t q) {
      Filling& y = st[entry(q)];
      y.left -= share;
      y.unfrozen -= 1;
    };
    for (size_t i = 0; i < n_frozen; ++i) {
      // (The Route's fields read one by one: a copy of it went through the stack.)
      const Route& rt = routes_[frozen[i]];
      for_stored_hops(route_base + rt.begin, rt.hops, take);
    }
  }
  changed_flows_.resize(n_changed);
  // A flow whose rate changed has moved bytes at the old rate until now.
  for (size_t i = 0; i < n_changed; ++i) drain(changed[i], old_rate[i], now);
  // The entries never surfaced have every flow frozen too. Resources without flows keep
  // their peak (a load of 0 never raises it).
  for (size_t i = 0; i < c.busy; ++i) {
    const Key key = tree[base + i];
    settled[n_settled] = static_cast<uint32_t>(key & low);
    n_settled += key != kDone ? 1 : 0;
  }
  // Their load is capacity - left, give or take the rounding of either sum (far below
  // capacity * 1e-6): only a load that may raise the peak is summed.
  for (size_t i = 0; i < n_settled; ++i) {
    const uint32_t q = settled[i];
    const double cap = capacity_[q];
    if (cap - st[entry(q)].left + cap * 1e-6 >= stats_[q].peak_rate) {
      stats_[q].peak_rate = std::max(stats_[q].peak_rate, load(q));
    }
  }
}

bool FlowNetwork::fill_one_route(const Component& c, Time now) {
  // One route: the flows on the first busy resource are all the component's, each on the
  // same route, which crosses no resource twice (so its resources are the busy ones).
  const uint32_t* const cres = res_scratch_.data();
  const size_t n = c.flows;
  if (c.busy > kShortRoute) return false;
  const std::vector<uint32_t>& flows = res_flows_[cres[0]];
  if (flows.size() != n) return false;
  const std::span<const uint32_t> common = route(flows[0]);
  if (common.size() != c.busy) return false;
  for (size_t i = 1; i < common.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (common[i] == common[j]) return false;
    }
  }
  for (size_t i = 1; i < n; ++i) {
    const std::span<const uint32_t> other = route(flows[i]);
    if (!std::equal(other.begin(), other.end(), common.begin(), common.end())) return false;
  }
  // fill(), step by step: every leaf keyed by its first share; the least key surfaces and
  // either saturates (its key is current) or takes its current share and goes back. No
  // flow is frozen before one resource saturates, and then all are.
  const Key low = std::bit_ceil(std::max(resources(), size_t{2})) - 1;
  const double unfrozen = static_cast<double>(n);  // (Filling::unfrozen of every leaf)
  Key keys[kShortRoute];
  for (size_t i = 0; i < c.busy; ++i) {
    const uint32_t r = cres[i];
    keys[i] = (ordered_bits(capacity_[r] * reciprocal_[n]) & ~low) | r;
  }
  size_t k = 0;
  double current = 0;
  while (true) {
    k = 0;
    for (size_t i = 1; i < c.busy; ++i) k = keys[i] < keys[k] ? i : k;
    const uint32_t r = cres[k];
    current = capacity_[r] / unfrozen;
    const Key key = (ordered_bits(current) & ~low) | r;
    if (key == keys[k]) break;
    keys[k] = key;
  }
  const uint32_t saturated = cres[k];
  const double share = std::max(current, capacity_[saturated] * 1e-12);
  changed_flows_.resize(n);
  old_rate_.resize(n);
  size_t n_changed = 0;
  double sum = 0;
  for (uint32_t f : res_flows_[saturated]) {
    const double before = rate_[f];
    frozen_at_[f] = epoch_;
    rate_[f] = share;
    sum += share;
    changed_flows_[n_changed] = f;
    old_rate_[n_changed] = before;
    n_changed += std::bit_cast<uint64_t>(before) != std::bit_cast<uint64_t>(share) ? 1U : 0U;
  }
  stats_[saturated].peak_rate = std::max(stats_[saturated].peak_rate, sum);
  changed_flows_.resize(n_changed);
  for (size_t i = 0; i < n_changed; ++i) drain(changed_flows_[i], old_rate_[i], now);
  // The other resources never surface: each gave the share to every flow, in turn.
  for (size_t i = 0; i < c.busy; ++i) {
    if (i == k) continue;
    const uint32_t q = cres[i];
    const double cap = capacity_[q];
    double left = cap;
    for (size_t j = 0; j < n; ++j) left -= share;
    if (cap - left + cap * 1e-6 >= stats_[q].peak_rate) {
      stats_[q].peak_rate = std::max(stats_[q].peak_rate, load(q));
    }
  }
  return true;
}

void FlowNetwork::solve(Time now) {
  split();
  const Component c = gather();
  const uint32_t* const cres = res_scratch_.data();
  comp_res_.assign(cres, cres + c.resources);
  changed_flows_.clear();
  if (c.flows == 1) {
    // A flow alone (its resources are the busy ones): filling saturates first the
    // resource that offers it the least share (capacity over the times its route crosses
    // the resource), and the flow takes that share (far above the floor of
    // capacity * 1e-12).
    const uint32_t f = res_flows_[cres[0]][0];
    double least = std::numeric_limits<double>::infinity();
    for (uint32_t q : route(f)) {
      least = std::min(least, capacity_[q] / static_cast<double>(res_flows_[q].size()));
    }
    if (rate_[f] != least) {
      changed_flows_.push_back(f);
      drain(f, rate_[f], now);
    }
    rate_[f] = least;
  } else if (c.flows > 1) {
    if (!one_route_ || !fill_one_route(c, now)) fill(c, now);
  }
  if (c.flows <= 1) {
    // With two or more flows, filling has set the peak rates.
    for (size_t i = 0; i < c.resources; ++i) {
      const uint32_t r = cres[i];
      stats_[r].peak_rate = std::max(stats_[r].peak_rate, load(r));
    }
  }
}

Time FlowNetwork::completion(uint32_t flow) const {
  TF_ASSERT(live_[flow] != 0 && rate_[flow] > 0, "flow {} has no rate", flow);
  // remaining * 1e12 first: 64 B at 1e9 B/s is exactly 64000 ps this way, not 64000.00000000001.
  // Saturates at INT64_MAX: the simulator refuses a completion past kMaxSimTimePs.
  const double ps = std::ceil(remaining_[flow] * 1e12 / rate_[flow]);
  if (!(ps < 9.2e18) || static_cast<Time>(ps) > INT64_MAX - updated_[flow]) return INT64_MAX;
  return updated_[flow] + static_cast<Time>(ps);
}

double FlowNetwork::load(uint32_t r) const {
  double sum = 0;
  for (uint32_t f : res_flows_[r]) sum += std::max(0.0, rate_[f]);
  return sum;
}

ResourceStats FlowNetwork::stats(uint32_t r, Time now) const {
  ResourceStats s = stats_[r];
  const Time dt = now - last_change_[r];
  if (!res_flows_[r].empty() && dt > 0) {
    s.busy_ps += dt;
    s.flow_ps += static_cast<double>(res_flows_[r].size()) * static_cast<double>(dt);
  }
  return s;
}

}  // namespace tierflow::hw
