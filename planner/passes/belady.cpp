// belady: offline paging of the external tensors with the whole trace known, in estimated
// time: Belady's eviction (the tensor used furthest ahead leaves) with aggressive
// prefetching (Cao, Felten, Karlin and Li, "A study of integrated prefetching and caching
// strategies", SIGMETRICS 1995): as the link frees, the next tensor the trace reads that is
// not on the device is fetched, evicting the tensors used furthest ahead, but only those
// used later than it (no eviction is regretted before that fetch would be needed anyway).
//
// The pass walks the execution order with a model of the step: ops take their estimated
// time and wait for their fetches; fetches take one ingress link one after another, stores
// one egress link. A fetch is decided one fetch ahead of its turn on the link: its victims
// leave right after their last use, and those that hold the only current copy (homed on
// the device, or modified) are stored first, one store at a time, in the first slot since
// their last use where the egress link is free. The fetch is then anchored in the first
// slot where those stores have landed and the ingress link frees during the op, or in the
// slot of the op that reads it; the compute and the fetch of that slot wait for the stores.
//
//   link out: [store v1][store v2]
//   link in:       [fetch a ][fetch b ]     a replaces v1, decided while the fetch before ran
//   compute:  [op][op][op][op][use a][op][use b]
//
// Produced tensors and external tensors without an offload tier keep their runs; the room
// left for the paged tensors is the budget less the most those take at any position.
// External tensors nothing reads are homed off the device.
// `warm=true` (default) starts with the tensors read first homed on the device, as many as
// fit (each stored once, when first evicted after a use; one evicted unread is homed off
// the device instead); `warm=false` starts cold. Gives up before an op once the context's
// fetch limit is reached (anchored fetches are never dropped, so the plan copies at least
// that much).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "core/units.h"
#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct BeladyOptions {
  bool warm = true;
};

class Belady : public Pass {
 public:
  explicit Belady(BeladyOptions o) : o_(o) {}
  [[nodiscard]] std::string_view name() const override { return "belady"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    const Costs& c = s.ensure_costs();
    const Liveness& l = s.ensure_liveness();
    if (s.target.budget == 0) return PassResult::kUnchanged;
    if (ProfileTree(memory_profile(s)).max() <= s.target.budget) return PassResult::kUnchanged;
    const uint32_t n = s.positions();
    const size_t nt = s.w.tensors.size();

    std::vector<bool> managed(nt, false);
    for (uint32_t t = 0; t < nt; ++t) {
      const Residency& r = s.tensors[t];
      managed[t] = l.born[t] == kNone && !r.pinned && r.tier != kNone;
    }
    // Room for the paged tensors: the budget less the most the others take at a position.
    uint64_t fixed = 0;
    {
      std::vector<int64_t> diff(n + 1, 0);
      for (uint32_t t = 0; t < nt; ++t) {
        if (managed[t]) continue;
        for (const Span& sp : occupancy(s.tensors[t].runs, n)) {
          diff[sp.from] += static_cast<int64_t>(s.w.tensors[t].bytes);
          diff[sp.to + 1] -= static_cast<int64_t>(s.w.tensors[t].bytes);
        }
      }
      int64_t level = 0;
      for (uint32_t i = 0; i < n; ++i) {
        level += diff[i];
        fixed = std::max(fixed, static_cast<uint64_t>(level) + s.w.ops[s.order[i]].workspace);
      }
    }
    if (fixed >= s.target.budget) {
      s.infeasible = true;
      ctx.failure = fmt::format(
          "does not fit: tensors that cannot be paged take {} of the "
          "budget {}",
          to_string_approx(Bytes{fixed}), to_string_approx(Bytes{s.target.budget}));
      return PassResult::kFailed;
    }
    const uint64_t cap = s.target.budget - fixed;

    // What each op reads of the paged tensors, each once.
    std::vector<std::vector<uint32_t>> reads(n);
    for (uint32_t i = 0; i < n; ++i) {
      const Op& op = s.w.ops[s.order[i]];
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) {
          if (managed[t] && std::find(reads[i].begin(), reads[i].end(), t) == reads[i].end()) {
            reads[i].push_back(t);
          }
        }
      }
    }

    struct Paged {
      bool resident = false;
      bool dirty = false;  ///< the device holds the only current copy
      bool warm = false;   ///< homed on the device, its first run not fetched
      size_t next = 0;     ///< index into l.uses of the next use
      int64_t landed = 0;  ///< model time its fetch lands
    };
    std::vector<Paged> st(nt);
    auto next_use = [&](uint32_t t) -> uint32_t {
      return st[t].next < l.uses[t].size() ? l.uses[t][st[t].next] : kNone;
    };
    // Resident paged tensors by next use, furthest first; among equal next uses (no further
    // use at all, mostly) those with a current copy elsewhere first, which leave without a
    // store.
    using Key = std::tuple<uint32_t, bool, uint32_t>;
    std::set<Key, std::greater<>> by_next;
    auto key = [&](uint32_t t) { return Key{next_use(t), !st[t].dirty, t}; };
    uint64_t used = 0;
    for (uint32_t t = 0; t < nt; ++t) {
      if (!managed[t]) continue;
      Residency& r = s.tensors[t];
      r.home_off_device = true;
      r.runs.clear();
    }
    if (o_.warm) {
      std::vector<uint32_t> first;
      for (uint32_t t = 0; t < nt; ++t) {
        if (managed[t] && !l.uses[t].empty()) first.push_back(t);
      }
      std::stable_sort(first.begin(), first.end(), [&](uint32_t a, uint32_t b) {
        return l.uses[a].front() < l.uses[b].front();
      });
      for (uint32_t t : first) {
        const uint64_t bytes = s.w.tensors[t].bytes;
        if (used + bytes > cap) break;
        used += bytes;
        Residency& r = s.tensors[t];
        r.home_off_device = false;
        r.runs = {Run{0, l.uses[t].front(), l.uses[t].front(), kNone}};
        st[t] = Paged{true, true, true, 0, 0};
        by_next.insert(key(t));
      }
    }

    // The model: time at each slot (when the compute before it ends), the links' free times.
    std::vector<int64_t> slot_time(n + 1, 0);
    int64_t link = 0, egress = 0;
    uint64_t fetches = 0, evictions = 0, stores = 0;
    uint64_t fetched = 0;  // bytes of the anchored fetches (never dropped later)
    int64_t wait_store = 0, stall = 0;
    uint32_t t_scan = 0;  // position of the next read that may be missing
    size_t k_scan = 0;    // index into reads[t_scan]
    // The next read (position, tensor) not on the device, from position `from`.
    auto next_missing = [&](uint32_t from) -> std::pair<uint32_t, uint32_t> {
      if (t_scan < from) {
        t_scan = from;
        k_scan = 0;
      }
      for (; t_scan < n; ++t_scan, k_scan = 0) {
        for (; k_scan < reads[t_scan].size(); ++k_scan) {
          const uint32_t t = reads[t_scan][k_scan];
          if (!st[t].resident) return {t_scan, t};
        }
      }
      return {kNone, kNone};
    };
    // A fetch decided but not yet anchored. Its victims leave right after their last use;
    // those that hold the only current copy are stored first, one store at a time on the
    // egress link (a store issued while another is in flight would slow it down): in the
    // first slot since their last use where the link is free, or later, in the slot where it
    // frees. The fetch is anchored in the first slot where the stores have landed and the
    // ingress link frees, or where it is needed.
    struct Pending {
      uint32_t tensor = kNone;
      uint32_t use = 0;
      int64_t ready = 0;                                ///< when the victims' stores have landed
      std::vector<std::pair<uint32_t, size_t>> stored;  ///< (victim, run) stored
      std::vector<std::pair<uint32_t, size_t>> queued;  ///< (victim, run) waiting to store
    };
    std::optional<Pending> pending;
    // Issues a store of victim v's run k in slot r (no earlier than its last use allows).
    auto store = [&](Pending& p, uint32_t v, size_t k, uint32_t r) {
      Run& run = s.tensors[v].runs[k];
      run.release = r;
      run.store = true;
      egress = std::max(egress, slot_time[r]) + c.store_ps(s.tensors[v].tier, s.w.tensors[v].bytes);
      p.ready = std::max(p.ready, egress);
      p.stored.emplace_back(v, k);
      ++stores;
    };
    // Decides to fetch `m` (read at position j) in slot i or later, evicting what is used
    // furthest ahead and later than j; false when that does not make room.
    auto decide = [&](uint32_t m, uint32_t j, uint32_t i) -> bool {
      const uint64_t need = s.w.tensors[m].bytes;
      uint64_t room = used;
      std::vector<uint32_t> victims;
      for (auto it = by_next.begin(); room + need > cap && it != by_next.end(); ++it) {
        const auto [when, clean, v] = *it;
        if (when <= j) break;
        victims.push_back(v);
        room -= s.w.tensors[v].bytes;
      }
      if (room + need > cap) return false;
      Pending p{m, j, 0, {}, {}};
      for (uint32_t v : victims) {
        by_next.erase(key(v));
        Residency& r = s.tensors[v];
        Paged& x = st[v];
        used -= s.w.tensors[v].bytes;
        x.resident = false;
        ++evictions;
        if (x.warm && x.next == 0) {
          // Never read on the device: it need not have been there; homed off it instead.
          r.home_off_device = true;
          r.runs.clear();
          x = Paged{};
          continue;
        }
        Run& run = r.runs.back();
        const size_t k = r.runs.size() - 1;
        if (!x.dirty) {
          run.release = run.last + 1;
        } else {
          // The first slot since its last use in which the egress link is free.
          const auto from = slot_time.begin() + run.last + 1;
          const auto it = std::lower_bound(from, slot_time.begin() + i + 1, egress);
          if (it != slot_time.begin() + i + 1) {
            store(p, v, k, static_cast<uint32_t>(it - slot_time.begin()));
          } else {
            p.queued.emplace_back(v, k);
          }
        }
        x.dirty = false;
        x.warm = false;
      }
      st[m].resident = true;
      st[m].landed = std::numeric_limits<int64_t>::max();
      used += need;
      by_next.insert(key(m));
      pending = std::move(p);
      ++fetches;
      return true;
    };
    // Anchors the pending fetch in slot i: it waits for its victims' stores (the compute of
    // slot i too) and takes the link after the fetches before it.
    auto anchor = [&](uint32_t i, int64_t now) {
      Pending& p = *pending;
      for (const auto& [v, k] : p.queued) store(p, v, k, i);
      for (const auto& [v, k] : p.stored) {
        Run& run = s.tensors[v].runs[k];
        run.hold = i - run.release;
      }
      Residency& r = s.tensors[p.tensor];
      r.runs.push_back(Run{i, p.use, p.use, kNone, /*fetched=*/true});
      const int64_t start = std::max({link, p.ready, now});
      wait_store += start - std::max(link, now);
      link = start + c.fetch_ps(r.tier, s.w.tensors[p.tensor].bytes);
      st[p.tensor].landed = link;
      fetched += s.w.tensors[p.tensor].bytes;
      pending.reset();
    };

    int64_t now = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (fetched >= ctx.fetch_limit) {
        ctx.gave_up = true;
        ctx.failure = fmt::format("gave up at op {}: {} fetched, enough to lose", s.order[i],
                                  to_string_approx(Bytes{fetched}));
        return PassResult::kFailed;
      }
      slot_time[i] = now;
      const int64_t op_ps = c.op_ps[s.order[i]];
      // Fetches go on the link in the order of their reads: what op i reads, then what comes
      // next while the link frees during op i. A fetch is decided one fetch ahead of its turn
      // so that its victims' stores overlap the fetch before it.
      for (;;) {
        if (pending) {
          // Its queued stores go out once the egress link is free.
          while (!pending->queued.empty() && egress <= now) {
            const auto [v, k] = pending->queued.front();
            pending->queued.erase(pending->queued.begin());
            store(*pending, v, k, i);
          }
          if (pending->use != i &&
              (!pending->queued.empty() || pending->ready > now || link >= now + op_ps)) {
            break;
          }
          anchor(i, now);
        }
        const auto [j, m] = next_missing(i);
        if (m == kNone) break;
        if (j != i && link >= now + op_ps + c.fetch_ps(s.tensors[m].tier, s.w.tensors[m].bytes)) {
          break;
        }
        if (!decide(m, j, i)) {
          if (j != i) break;
          s.infeasible = true;
          ctx.failure = fmt::format(
              "does not fit: op {} '{}' reads {}, and the {} left to paged tensors cannot hold "
              "it with what the op reads",
              s.order[i], s.w.ops[s.order[i]].name, s.w.tensors[m].name,
              to_string_approx(Bytes{cap}));
          return PassResult::kFailed;
        }
      }
      int64_t start = now;
      for (uint32_t t : reads[i]) start = std::max(start, st[t].landed);
      stall += start - now;
      now = start + op_ps;
      const Op& op = s.w.ops[s.order[i]];
      for (uint32_t t : reads[i]) {
        by_next.erase(key(t));
        s.tensors[t].runs.back().last = i;
        ++st[t].next;
        st[t].dirty |= std::find(op.updates.begin(), op.updates.end(), t) != op.updates.end();
        by_next.insert(key(t));
      }
    }
    slot_time[n] = now;
    // Fetched tensors still on the device leave at the end, modified ones stored home.
    for (uint32_t t = 0; t < nt; ++t) {
      if (!managed[t] || !st[t].resident || st[t].warm) continue;
      Run& run = s.tensors[t].runs.back();
      run.release = n;
      run.store = st[t].dirty;
    }
    s.stat(name(), "room for paged tensors", static_cast<double>(cap));
    s.stat(name(), "fetches", static_cast<double>(fetches));
    s.stat(name(), "evictions", static_cast<double>(evictions));
    s.stat(name(), "stores", static_cast<double>(stores));
    s.stat(name(), "modelled makespan ms", static_cast<double>(now) / 1e9);
    s.stat(name(), "modelled stall ms", static_cast<double>(stall) / 1e9);
    s.stat(name(), "modelled fetch wait on stores ms", static_cast<double>(wait_store) / 1e9);
    s.stat(name(), "modelled link end ms", static_cast<double>(link) / 1e9);
    return PassResult::kChanged;
  }

 private:
  BeladyOptions o_;
};

}  // namespace

std::unique_ptr<Pass> make_belady(PassOptions& o) {
  BeladyOptions b;
  b.warm = o.flag("warm", true);
  return std::make_unique<Belady>(b);
}

}  // namespace tierflow::planner
