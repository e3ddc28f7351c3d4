// The pager's clock in estimated time: offline paging of the external tensors with the
// whole trace known. With the furthest-next-use order and `prefetch=link` this is Belady's
// eviction with aggressive prefetching (Cao, Felten, Karlin and Li, "A study of integrated
// prefetching and caching strategies", SIGMETRICS 1995): as the link frees, the next tensor
// the trace reads that is not on the device is fetched, evicting the tensors used furthest
// ahead, but only those used later than it (no eviction is regretted before that fetch
// would be needed anyway). `prefetch=ahead` fetches that way only reads within K ops;
// `prefetch=miss` only what the op about to run reads.
//
// The clock is a model of the step: ops take their estimated time and wait for their
// fetches; fetches take one ingress link one after another, stores one egress link. A
// fetch is decided one fetch ahead of its turn on the link: its victims leave right after
// their last use, and those that hold the only current copy (homed on the device, or
// modified) are stored first, one store at a time, in the first slot since their last use
// where the egress link is free. The fetch is then anchored in the first slot where those
// stores have landed and the ingress link frees during the op, or in the slot of the op
// that reads it; the compute and the fetch of that slot wait for the stores.
//
//   link out: [store v1][store v2]
//   link in:       [fetch a ][fetch b ]     a replaces v1, decided while the fetch before ran
//   compute:  [op][op][op][op][use a][op][use b]
//
// Produced tensors, kept tensors and external tensors without an offload tier keep their
// runs; the room left for the paged tensors is the budget less the most those take at any
// position. External tensors nothing reads are homed off the device. A warm tensor is
// stored once, when first evicted after a read; one evicted unread is homed off the device
// instead.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "core/units.h"
#include "planner/offload.h"
#include "planner/paging.h"

namespace tierflow::planner {
namespace {

class TimeClock final : public Clock {
 public:
  explicit TimeClock(const PageOptions& o)
      : horizon_(o.prefetch == PrefetchKind::kMiss    ? 0
                 : o.prefetch == PrefetchKind::kAhead ? o.ahead
                                                      : kNone),
        o_(o) {}

  bool begin(Pager& p) override {
    c_ = &*p.s.costs;
    slot_time_.assign(p.n + 1, 0);
    if (o_.keep > 0) p.keep_most_used();
    managed_.assign(p.nt, false);
    for (uint32_t t = 0; t < p.nt; ++t) {
      const Residency& r = p.s.tensors[t];
      managed_[t] = p.l.born[t] == kNone && !r.pinned && !p.kept[t] && r.tier != kNone;
    }
    // Room for the paged tensors: the budget less the most the others take at a position.
    const std::vector<uint64_t> others = fixed_profile(p.s, managed_);
    uint64_t fixed = 0;
    for (uint32_t i = 0; i < p.n; ++i) {
      fixed = std::max(fixed, others[i] + p.s.w.ops[p.s.order[i]].workspace);
    }
    if (fixed >= p.budget) {
      p.infeasible("does not fit: tensors that cannot be paged take {} of the budget {}",
                   to_string_approx(Bytes{fixed}), to_string_approx(Bytes{p.budget}));
      return false;
    }
    cap_ = p.budget - fixed;
    collect_reads(p);
    p.home_off_device(managed_);
    if (o_.warm) p.warm_start(managed_, cap_);
    return true;
  }

  bool step(Pager& p, uint32_t i) override {
    slot_time_[i] = now_;
    if (!plan_fetches(p, i)) return false;
    now_ = compute(p, i);
    return true;
  }

  /// Fetched tensors still on the device leave at the end, modified ones stored home.
  void end(Pager& p) override {
    slot_time_[p.n] = now_;
    for (uint32_t t = 0; t < p.nt; ++t) {
      if (!managed_[t] || !p.st[t].resident || p.st[t].warm) continue;
      Run& run = p.s.tensors[t].runs.back();
      run.release = p.n;
      run.store = p.st[t].dirty;
    }
    p.stat("room for paged tensors", static_cast<double>(cap_));
    p.stat("fetches", static_cast<double>(p.fetches));
    p.stat("evictions", static_cast<double>(p.evictions));
    p.stat("stores", static_cast<double>(p.stores));
    p.stat("modelled makespan ms", static_cast<double>(now_) / 1e9);
    p.stat("modelled stall ms", static_cast<double>(stall_) / 1e9);
    p.stat("modelled fetch wait on stores ms", static_cast<double>(wait_store_) / 1e9);
    p.stat("modelled link end ms", static_cast<double>(link_) / 1e9);
  }

 private:
  /// A fetch decided but not yet anchored. Its victims leave right after their last use;
  /// those that hold the only current copy are stored first, one store at a time on the
  /// egress link (a store issued while another is in flight would slow it down): in the
  /// first slot since their last use where the link is free, or later, in the slot where it
  /// frees. The fetch is anchored in the first slot where the stores have landed and the
  /// ingress link frees, or where it is needed.
  struct Pending {
    uint32_t tensor = kNone;
    uint32_t use = 0;
    int64_t ready = 0;                                ///< when the victims' stores have landed
    std::vector<std::pair<uint32_t, size_t>> stored;  ///< (victim, run) stored
    std::vector<std::pair<uint32_t, size_t>> queued;  ///< (victim, run) waiting to store
  };

  /// What each op reads of the paged tensors, each once.
  void collect_reads(const Pager& p) {
    reads_.resize(p.n);
    for (uint32_t i = 0; i < p.n; ++i) {
      const Op& op = p.s.w.ops[p.s.order[i]];
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) {
          if (managed_[t] && std::find(reads_[i].begin(), reads_[i].end(), t) == reads_[i].end()) {
            reads_[i].push_back(t);
          }
        }
      }
    }
  }

  /// The next read (position, tensor) not on the device, from position `from`.
  std::pair<uint32_t, uint32_t> next_missing(const Pager& p, uint32_t from) {
    if (scan_at_ < from) {
      scan_at_ = from;
      scan_k_ = 0;
    }
    for (; scan_at_ < p.n; ++scan_at_, scan_k_ = 0) {
      for (; scan_k_ < reads_[scan_at_].size(); ++scan_k_) {
        const uint32_t t = reads_[scan_at_][scan_k_];
        if (!p.st[t].resident) return {scan_at_, t};
      }
    }
    return {kNone, kNone};
  }

  /// Issues a store of victim v's run k in slot r (no earlier than its last use allows).
  void store(Pager& p, Pending& pend, uint32_t v, size_t k, uint32_t r) {
    Run& run = p.s.tensors[v].runs[k];
    run.release = r;
    run.store = true;
    egress_ = std::max(egress_, slot_time_[r]) + c_->store_ps(p.s.tensors[v].tier, p.bytes(v));
    pend.ready = std::max(pend.ready, egress_);
    pend.stored.emplace_back(v, k);
    ++p.stores;
  }

  /// Evicts victim v for the fetch `pend`, decided in slot i.
  void evict(Pager& p, Pending& pend, uint32_t v, uint32_t i) {
    p.evict(v);
    Residency& r = p.s.tensors[v];
    Paged& x = p.st[v];
    if (x.warm && x.next == 0) {
      // Never read on the device: it need not have been there; homed off it instead.
      r.home_off_device = true;
      r.runs.clear();
      x = Paged{};
      return;
    }
    Run& run = r.runs.back();
    const size_t k = r.runs.size() - 1;
    if (!x.dirty) {
      run.release = run.last + 1;
    } else {
      // The first slot since its last use in which the egress link is free.
      const auto from = slot_time_.begin() + run.last + 1;
      const auto it = std::lower_bound(from, slot_time_.begin() + i + 1, egress_);
      if (it != slot_time_.begin() + i + 1) {
        store(p, pend, v, k, static_cast<uint32_t>(it - slot_time_.begin()));
      } else {
        pend.queued.emplace_back(v, k);
      }
    }
    x.dirty = false;
    x.warm = false;
  }

  /// Decides to fetch `m` (read at position j) in slot i or later, evicting what is used
  /// furthest ahead and later than j; false when that does not make room.
  bool decide(Pager& p, uint32_t m, uint32_t j, uint32_t i) {
    const uint64_t need = p.bytes(m);
    uint64_t room = p.used;
    std::vector<uint32_t> victims;
    if (room + need > cap_) {
      p.queue.visit([&](uint32_t v) {
        if (p.next_use(v) <= j) return false;
        victims.push_back(v);
        room -= p.bytes(v);
        return room + need > cap_;
      });
    }
    if (room + need > cap_) return false;
    Pending pend{m, j, 0, {}, {}};
    for (uint32_t v : victims) evict(p, pend, v, i);
    p.fetch(m);
    p.st[m].landed = std::numeric_limits<int64_t>::max();
    p.queue.insert(p.key(m, i), m);
    pending_ = std::move(pend);
    return true;
  }

  /// Anchors the pending fetch in slot i: it waits for its victims' stores (the compute of
  /// slot i too) and takes the link after the fetches before it.
  void anchor(Pager& p, uint32_t i) {
    Pending& pend = *pending_;
    for (const auto& [v, k] : pend.queued) store(p, pend, v, k, i);
    for (const auto& [v, k] : pend.stored) {
      Run& run = p.s.tensors[v].runs[k];
      run.hold = i - run.release;
    }
    Residency& r = p.s.tensors[pend.tensor];
    r.runs.push_back(Run{i, pend.use, pend.use, kNone, /*fetched=*/true});
    const int64_t start = std::max({link_, pend.ready, now_});
    wait_store_ += start - std::max(link_, now_);
    link_ = start + c_->fetch_ps(r.tier, p.bytes(pend.tensor));
    p.st[pend.tensor].landed = link_;
    p.fetched += p.bytes(pend.tensor);
    pending_.reset();
  }

  /// The fetches of slot i: what op i reads, then, within the horizon, what comes next
  /// while the link frees during op i, on the link in the order of their reads. A fetch is
  /// decided one fetch ahead of its turn so that its victims' stores overlap the fetch
  /// before it. False when what op i reads cannot fit (the failure says why).
  bool plan_fetches(Pager& p, uint32_t i) {
    const int64_t op_ps = c_->op_ps[p.s.order[i]];
    for (;;) {
      if (pending_) {
        // Its queued stores go out once the egress link is free.
        while (!pending_->queued.empty() && egress_ <= now_) {
          const auto [v, k] = pending_->queued.front();
          pending_->queued.erase(pending_->queued.begin());
          store(p, *pending_, v, k, i);
        }
        if (pending_->use != i &&
            (!pending_->queued.empty() || pending_->ready > now_ || link_ >= now_ + op_ps)) {
          return true;
        }
        anchor(p, i);
      }
      const auto [j, m] = next_missing(p, i);
      if (m == kNone) return true;
      if (j != i && (j - i > horizon_ ||
                     link_ >= now_ + op_ps + c_->fetch_ps(p.s.tensors[m].tier, p.bytes(m)))) {
        return true;
      }
      if (decide(p, m, j, i)) continue;
      if (j != i) return true;
      p.infeasible(
          "does not fit: op {} '{}' reads {}, and the {} left to paged tensors cannot hold "
          "it with what the op reads",
          p.s.order[i], p.s.w.ops[p.s.order[i]].name, p.s.w.tensors[m].name,
          to_string_approx(Bytes{cap_}));
      return false;
    }
  }

  /// Op i runs once its fetches have landed; returns when it ends.
  int64_t compute(Pager& p, uint32_t i) {
    int64_t start = now_;
    for (uint32_t t : reads_[i]) start = std::max(start, p.st[t].landed);
    stall_ += start - now_;
    const Op& op = p.s.w.ops[p.s.order[i]];
    for (uint32_t t : reads_[i]) {
      p.read(t, i, std::find(op.updates.begin(), op.updates.end(), t) != op.updates.end());
      p.queue.insert(p.key(t, i), t);
    }
    return start + c_->op_ps[p.s.order[i]];
  }

  const uint32_t horizon_;  ///< how many ops ahead a fetch may be decided (kNone: any)
  const PageOptions& o_;
  const Costs* c_ = nullptr;
  std::vector<bool> managed_;  ///< paged: external, not pinned or kept, with an offload tier
  uint64_t cap_ = 0;           ///< the room for the paged tensors
  std::vector<std::vector<uint32_t>> reads_;
  // The model: time at each slot (when the compute before it ends), the links' free times.
  std::vector<int64_t> slot_time_;
  int64_t now_ = 0, link_ = 0, egress_ = 0;
  std::optional<Pending> pending_;
  uint32_t scan_at_ = 0;  ///< position of the next read that may be missing
  size_t scan_k_ = 0;     ///< index into reads_[scan_at_]
  int64_t wait_store_ = 0, stall_ = 0;
};

}  // namespace

std::unique_ptr<Clock> time_clock(const PageOptions& o) {
  return std::make_unique<TimeClock>(o);
}

}  // namespace tierflow::planner
