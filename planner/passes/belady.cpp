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
#include <utility>
#include <vector>

#include "core/units.h"
#include "planner/offload.h"
#include "planner/pass.h"

namespace tierflow::planner {
namespace {

struct BeladyOptions {
  bool warm = true;
};

/// One run of the pass over a state: the step model and the paging decisions.
class BeladyPager {
 public:
  BeladyPager(PlanState& s, PassContext& ctx, BeladyOptions o)
      : s_(s),
        ctx_(ctx),
        o_(o),
        c_(*s.costs),
        l_(*s.liveness),
        n_(s.positions()),
        nt_(s.w.tensors.size()),
        managed_(nt_, false),
        st_(nt_),
        slot_time_(n_ + 1, 0) {
    for (uint32_t t = 0; t < nt_; ++t) {
      const Residency& r = s.tensors[t];
      managed_[t] = l_.born[t] == kNone && !r.pinned && r.tier != kNone;
    }
  }

  PassResult run() {
    // Room for the paged tensors: the budget less the most the others take at a position.
    const std::vector<uint64_t> others = fixed_profile(s_, managed_);
    uint64_t fixed = 0;
    for (uint32_t i = 0; i < n_; ++i) {
      fixed = std::max(fixed, others[i] + s_.w.ops[s_.order[i]].workspace);
    }
    if (fixed >= s_.target.budget) {
      s_.infeasible = true;
      ctx_.failure =
          fmt::format("does not fit: tensors that cannot be paged take {} of the budget {}",
                      to_string_approx(Bytes{fixed}), to_string_approx(Bytes{s_.target.budget}));
      return PassResult::kFailed;
    }
    cap_ = s_.target.budget - fixed;
    collect_reads();
    home_off_device();
    if (o_.warm) warm_start();
    int64_t now = 0;
    for (uint32_t i = 0; i < n_; ++i) {
      if (gives_up(ctx_, s_, i, fetched_)) return PassResult::kFailed;
      slot_time_[i] = now;
      if (!plan_fetches(i, now)) return PassResult::kFailed;
      now = compute(i, now);
    }
    slot_time_[n_] = now;
    finish();
    report(now);
    return PassResult::kChanged;
  }

 private:
  struct Paged {
    bool resident = false;
    bool dirty = false;  ///< the device holds the only current copy
    bool warm = false;   ///< homed on the device, its first run not fetched
    size_t next = 0;     ///< index into l.uses of the next use
    int64_t landed = 0;  ///< model time its fetch lands
  };
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
  /// Resident paged tensors by next use, furthest first; among equal next uses (no further
  /// use at all, mostly) those with a current copy elsewhere first, which leave without a
  /// store.
  using Key = std::tuple<uint32_t, bool, uint32_t>;

  [[nodiscard]] uint32_t next_use(uint32_t t) const {
    return st_[t].next < l_.uses[t].size() ? l_.uses[t][st_[t].next] : kNone;
  }
  [[nodiscard]] Key key(uint32_t t) const { return Key{next_use(t), !st_[t].dirty, t}; }
  [[nodiscard]] uint64_t bytes(uint32_t t) const { return s_.w.tensors[t].bytes; }

  /// What each op reads of the paged tensors, each once.
  void collect_reads() {
    reads_.resize(n_);
    for (uint32_t i = 0; i < n_; ++i) {
      const Op& op = s_.w.ops[s_.order[i]];
      for (const auto* list : {&op.inputs, &op.updates}) {
        for (uint32_t t : *list) {
          if (managed_[t] && std::find(reads_[i].begin(), reads_[i].end(), t) == reads_[i].end()) {
            reads_[i].push_back(t);
          }
        }
      }
    }
  }

  void home_off_device() {
    for (uint32_t t = 0; t < nt_; ++t) {
      if (!managed_[t]) continue;
      Residency& r = s_.tensors[t];
      r.home_off_device = true;
      r.runs.clear();
    }
  }

  /// The tensors read first homed on the device, as many as fit.
  void warm_start() {
    std::vector<uint32_t> first;
    for (uint32_t t = 0; t < nt_; ++t) {
      if (managed_[t] && !l_.uses[t].empty()) first.push_back(t);
    }
    std::stable_sort(first.begin(), first.end(), [&](uint32_t a, uint32_t b) {
      return l_.uses[a].front() < l_.uses[b].front();
    });
    for (uint32_t t : first) {
      if (used_ + bytes(t) > cap_) break;
      used_ += bytes(t);
      Residency& r = s_.tensors[t];
      r.home_off_device = false;
      r.runs = {Run{0, l_.uses[t].front(), l_.uses[t].front(), kNone}};
      st_[t] = Paged{true, true, true, 0, 0};
      by_next_.insert(key(t));
    }
  }

  /// The next read (position, tensor) not on the device, from position `from`.
  std::pair<uint32_t, uint32_t> next_missing(uint32_t from) {
    if (scan_at_ < from) {
      scan_at_ = from;
      scan_k_ = 0;
    }
    for (; scan_at_ < n_; ++scan_at_, scan_k_ = 0) {
      for (; scan_k_ < reads_[scan_at_].size(); ++scan_k_) {
        const uint32_t t = reads_[scan_at_][scan_k_];
        if (!st_[t].resident) return {scan_at_, t};
      }
    }
    return {kNone, kNone};
  }

  /// Issues a store of victim v's run k in slot r (no earlier than its last use allows).
  void store(Pending& p, uint32_t v, size_t k, uint32_t r) {
    Run& run = s_.tensors[v].runs[k];
    run.release = r;
    run.store = true;
    egress_ = std::max(egress_, slot_time_[r]) + c_.store_ps(s_.tensors[v].tier, bytes(v));
    p.ready = std::max(p.ready, egress_);
    p.stored.emplace_back(v, k);
    ++stores_;
  }

  /// Evicts victim v for the fetch `p`, decided in slot i.
  void evict(Pending& p, uint32_t v, uint32_t i) {
    by_next_.erase(key(v));
    Residency& r = s_.tensors[v];
    Paged& x = st_[v];
    used_ -= bytes(v);
    x.resident = false;
    ++evictions_;
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
        store(p, v, k, static_cast<uint32_t>(it - slot_time_.begin()));
      } else {
        p.queued.emplace_back(v, k);
      }
    }
    x.dirty = false;
    x.warm = false;
  }

  /// Decides to fetch `m` (read at position j) in slot i or later, evicting what is used
  /// furthest ahead and later than j; false when that does not make room.
  bool decide(uint32_t m, uint32_t j, uint32_t i) {
    const uint64_t need = bytes(m);
    uint64_t room = used_;
    std::vector<uint32_t> victims;
    for (auto it = by_next_.begin(); room + need > cap_ && it != by_next_.end(); ++it) {
      const auto [when, clean, v] = *it;
      if (when <= j) break;
      victims.push_back(v);
      room -= bytes(v);
    }
    if (room + need > cap_) return false;
    Pending p{m, j, 0, {}, {}};
    for (uint32_t v : victims) evict(p, v, i);
    st_[m].resident = true;
    st_[m].landed = std::numeric_limits<int64_t>::max();
    used_ += need;
    by_next_.insert(key(m));
    pending_ = std::move(p);
    ++fetches_;
    return true;
  }

  /// Anchors the pending fetch in slot i: it waits for its victims' stores (the compute of
  /// slot i too) and takes the link after the fetches before it.
  void anchor(uint32_t i, int64_t now) {
    Pending& p = *pending_;
    for (const auto& [v, k] : p.queued) store(p, v, k, i);
    for (const auto& [v, k] : p.stored) {
      Run& run = s_.tensors[v].runs[k];
      run.hold = i - run.release;
    }
    Residency& r = s_.tensors[p.tensor];
    r.runs.push_back(Run{i, p.use, p.use, kNone, /*fetched=*/true});
    const int64_t start = std::max({link_, p.ready, now});
    wait_store_ += start - std::max(link_, now);
    link_ = start + c_.fetch_ps(r.tier, bytes(p.tensor));
    st_[p.tensor].landed = link_;
    fetched_ += bytes(p.tensor);
    pending_.reset();
  }

  /// The fetches of slot i: what op i reads, then what comes next while the link frees
  /// during op i, on the link in the order of their reads. A fetch is decided one fetch
  /// ahead of its turn so that its victims' stores overlap the fetch before it. False when
  /// what op i reads cannot fit (the failure says why).
  bool plan_fetches(uint32_t i, int64_t now) {
    const int64_t op_ps = c_.op_ps[s_.order[i]];
    for (;;) {
      if (pending_) {
        // Its queued stores go out once the egress link is free.
        while (!pending_->queued.empty() && egress_ <= now) {
          const auto [v, k] = pending_->queued.front();
          pending_->queued.erase(pending_->queued.begin());
          store(*pending_, v, k, i);
        }
        if (pending_->use != i &&
            (!pending_->queued.empty() || pending_->ready > now || link_ >= now + op_ps)) {
          return true;
        }
        anchor(i, now);
      }
      const auto [j, m] = next_missing(i);
      if (m == kNone) return true;
      if (j != i && link_ >= now + op_ps + c_.fetch_ps(s_.tensors[m].tier, bytes(m))) return true;
      if (decide(m, j, i)) continue;
      if (j != i) return true;
      s_.infeasible = true;
      ctx_.failure = fmt::format(
          "does not fit: op {} '{}' reads {}, and the {} left to paged tensors cannot hold "
          "it with what the op reads",
          s_.order[i], s_.w.ops[s_.order[i]].name, s_.w.tensors[m].name,
          to_string_approx(Bytes{cap_}));
      return false;
    }
  }

  /// Op i runs once its fetches have landed; returns when it ends.
  int64_t compute(uint32_t i, int64_t now) {
    int64_t start = now;
    for (uint32_t t : reads_[i]) start = std::max(start, st_[t].landed);
    stall_ += start - now;
    const Op& op = s_.w.ops[s_.order[i]];
    for (uint32_t t : reads_[i]) {
      by_next_.erase(key(t));
      s_.tensors[t].runs.back().last = i;
      ++st_[t].next;
      st_[t].dirty |= std::find(op.updates.begin(), op.updates.end(), t) != op.updates.end();
      by_next_.insert(key(t));
    }
    return start + c_.op_ps[s_.order[i]];
  }

  /// Fetched tensors still on the device leave at the end, modified ones stored home.
  void finish() {
    for (uint32_t t = 0; t < nt_; ++t) {
      if (!managed_[t] || !st_[t].resident || st_[t].warm) continue;
      Run& run = s_.tensors[t].runs.back();
      run.release = n_;
      run.store = st_[t].dirty;
    }
  }

  void report(int64_t end) {
    const std::string_view pass = "belady";
    s_.stat(pass, "room for paged tensors", static_cast<double>(cap_));
    s_.stat(pass, "fetches", static_cast<double>(fetches_));
    s_.stat(pass, "evictions", static_cast<double>(evictions_));
    s_.stat(pass, "stores", static_cast<double>(stores_));
    s_.stat(pass, "modelled makespan ms", static_cast<double>(end) / 1e9);
    s_.stat(pass, "modelled stall ms", static_cast<double>(stall_) / 1e9);
    s_.stat(pass, "modelled fetch wait on stores ms", static_cast<double>(wait_store_) / 1e9);
    s_.stat(pass, "modelled link end ms", static_cast<double>(link_) / 1e9);
  }

  PlanState& s_;
  PassContext& ctx_;
  BeladyOptions o_;
  const Costs& c_;
  const Liveness& l_;
  uint32_t n_;
  size_t nt_;
  std::vector<bool> managed_;  ///< paged: external, not pinned, with an offload tier
  uint64_t cap_ = 0;           ///< the room for the paged tensors
  std::vector<std::vector<uint32_t>> reads_;
  std::vector<Paged> st_;
  std::set<Key, std::greater<>> by_next_;
  uint64_t used_ = 0;
  // The model: time at each slot (when the compute before it ends), the links' free times.
  std::vector<int64_t> slot_time_;
  int64_t link_ = 0, egress_ = 0;
  std::optional<Pending> pending_;
  uint32_t scan_at_ = 0;  ///< position of the next read that may be missing
  size_t scan_k_ = 0;     ///< index into reads_[scan_at_]
  uint64_t fetches_ = 0, evictions_ = 0, stores_ = 0;
  uint64_t fetched_ = 0;  ///< bytes of the anchored fetches (never dropped later)
  int64_t wait_store_ = 0, stall_ = 0;
};

class Belady : public Pass {
 public:
  explicit Belady(BeladyOptions o) : o_(o) {}
  [[nodiscard]] std::string_view name() const override { return "belady"; }

  PassResult run(PlanState& s, PassContext& ctx) override {
    if (begin_fitting(s).fits()) return PassResult::kUnchanged;
    return BeladyPager(s, ctx, o_).run();
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
