#include "planner/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/diagnostics.h"
#include "core/units.h"
#include "planner/offload.h"
#include "planner/outcome.h"
#include "planner/realize.h"

namespace tierflow::planner {
namespace {

/// Same decisions, same plan: exactly what fingerprint(const PlanState&) hashes (the order,
/// the tiers' room and use, every tensor's tier, flags and runs), compared field by field.
bool same_state(const PlanState& a, const PlanState& b) {
  if (a.order != b.order || a.tier_used != b.tier_used || a.tier_room != b.tier_room ||
      a.offload_tiers != b.offload_tiers) {
    return false;
  }
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    const Residency& x = a.tensors[t];
    const Residency& y = b.tensors[t];
    if (x.tier != y.tier || x.home_off_device != y.home_off_device || x.pinned != y.pinned ||
        x.pin_kept != y.pin_kept || x.runs.size() != y.runs.size()) {
      return false;
    }
    for (size_t k = 0; k < x.runs.size(); ++k) {
      const Run& p = x.runs[k];
      const Run& q = y.runs[k];
      if (p.alloc != q.alloc || p.first != q.first || p.last != q.last || p.release != q.release ||
          p.fetched != q.fetched || p.store != q.store || p.hold != q.hold) {
        return false;
      }
    }
  }
  return true;
}

/// Passes that only materialize, schedule and check the runs: they never change which
/// runs are fetched, so the copies a plan will make are known before them.
bool is_materializing_pass(std::string_view name) {
  return name == "insert" || name == "schedule" || name == "verify";
}

/// Whether copies of `fetched` bytes alone (at the ingress bound), or the compute, take at
/// least `best` (`strict`: longer than `best`).
bool rules_out(uint64_t fetched, double ingress, int64_t compute_ps, int64_t best,
               bool strict = false) {
  const double copies =
      std::max(static_cast<double>(fetched) / ingress * 1e12, static_cast<double>(compute_ps));
  return strict ? copies > static_cast<double>(best) : copies >= static_cast<double>(best);
}

/// Runs the portfolio; see search.h.
class Search {
 public:
  Search(const Workload& w, const hw::Topology& t, const PlanRequest& req,
         std::span<const PortfolioEntry> portfolio, uint64_t budget)
      : w_(w), t_(t), req_(req), budget_(budget) {
    // --print-after: every pass of every pipeline, in order, as the pipelines are written:
    // nothing shared, skipped or stopped early, on one thread.
    share_ = !req.after_pass;
    // The start states: shared with other plans of the workload when the request allows,
    // else this search's own.
    memo_ = shared_memo(req);
    if (memo_ == nullptr) memo_ = &own_memo_;
    resident_peak_ = start_state(w_, t_, req_, budget_, nullptr, memo_)->resident_peak;
    cut_ = share_ && w.ops.size() >= req.search_cut_ops;
    const bool moe = !share_ || has_routed_experts(w);
    for (const PortfolioEntry& pe : portfolio) {
      Entry e{pe.pipeline, pe.tries,         Pipeline::parse(pe.pipeline), 0, 0, 0, {},
              {},          cut_ && !pe.large};
      // An entry for routed experts has nothing to look ahead for on a dense workload.
      if (!e.cut && pe.experts && !moe) {
        e.cut = true;
        e.why_not = "not run: no routed experts";
      }
      TF_ASSERT(pe.variant_of < 0 || static_cast<size_t>(pe.variant_of) < entries_.size(),
                "portfolio entry {} varies entry {}, which does not come before it",
                entries_.size(), pe.variant_of);
      // Printing every pass runs every pipeline in order.
      if (share_ && pe.variant_of >= 0) e.variant_of = static_cast<size_t>(pe.variant_of);
      const auto& passes = e.pipeline.passes();
      if (share_) e.split = leading_prefix(e.pipeline);
      e.emit = passes.size();
      while (e.emit > e.split && is_materializing_pass(passes[e.emit - 1]->name())) --e.emit;
      const std::string prefix = e.pipeline.str(0, e.split);
      e.suffix = e.pipeline.str(e.split, passes.size());
      e.rest = e.pipeline.str(e.emit, passes.size());
      size_t p = 0;
      while (p < prefixes_.size() && prefixes_[p]->text != prefix) ++p;
      if (p == prefixes_.size()) {
        auto fresh = std::make_unique<Prefix>();
        fresh->text = prefix;
        if (!prefix.empty()) fresh->pipeline.emplace(Pipeline::parse(prefix));
        prefixes_.push_back(std::move(fresh));
      }
      e.prefix = static_cast<uint32_t>(p);
      entries_.push_back(std::move(e));
    }
    if (share_ && !req.hint.empty()) {
      std::string hint = req.hint;
      try {
        hint = Pipeline::parse(req.hint).str();
      } catch (const std::exception&) {
      }
      // Not a variant: whether it runs depends on the best of the others.
      for (size_t i = 0; i < entries_.size(); ++i) {
        if (!entries_[i].cut && !entries_[i].variant_of && entries_[i].pipeline.str() == hint) {
          probe_ = i;
          break;
        }
      }
    }
    policy_.assign(entries_.size(), false);
    if (share_) {
      std::vector<std::string> baselines;
      for (const Policy& p : policies()) baselines.push_back(Pipeline::parse(p.pipeline).str());
      for (size_t i = 0; i < entries_.size(); ++i) {
        policy_[i] = std::ranges::find(baselines, entries_[i].pipeline.str()) != baselines.end();
      }
    }
    selections_.resize(entries_.size());
    selection_users_.assign(entries_.size(), 0);
    for (size_t i = 0; share_ && i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      if (e.cut || e.emit == e.split) continue;
      const std::string selection = e.pipeline.str(e.split, e.emit);
      for (size_t j = 0; j < i; ++j) {
        const Entry& o = entries_[j];
        if (!o.cut && o.prefix == e.prefix && o.suffix != e.suffix && !o.selects_as &&
            o.pipeline.str(o.split, o.emit) == selection) {
          e.selects_as = j;
          ++selection_users_[j];
          break;
        }
      }
    }
    runs_before_.assign(1, 0);
    for (const Entry& e : entries_) {
      runs_before_.push_back(runs_before_.back() + (e.cut || e.variant_of ? 0 : 1));
    }
    const unsigned hardware = std::max(1U, std::thread::hardware_concurrency());
    const unsigned wanted = req.threads == 0 ? hardware : req.threads;
    workers_ = share_ ? std::min<size_t>(wanted, entries_.size()) : 1;
    ahead_ = 2 * workers_ + 2;
  }

  PlanOutcome run();

 private:
  struct Prefix {
    std::string text;
    std::optional<Pipeline> pipeline;  ///< none: the prefix is empty
    std::once_flag once;
    /// Where its passes end, what they reported (each entry goes on from a copy), and the
    /// bounds there.
    std::shared_ptr<const StartState> start;
    uint32_t same_as = 0;  ///< the first prefix that ends in an equal state (itself if none)
  };
  struct Entry {
    std::string_view text;
    std::string_view tries;
    Pipeline pipeline;
    size_t split = 0;  ///< passes [0, split) are the prefix
    size_t emit = 0;   ///< passes [emit, end) only materialize: the gate can rule before them
    uint32_t prefix = 0;
    std::string suffix;
    std::string rest;  ///< the passes from `emit` on
    bool cut = false;  ///< not run: the search is cut (kSearchCutOps), or `why_not`
    std::string_view why_not = "not run: search cut";
    /// A variant (PortfolioEntry::variant_of) of this earlier entry: run after the others,
    /// unless that entry's copies rule it out against their best.
    std::optional<size_t> variant_of;
    /// An earlier entry that runs the same passes up to `emit` from the same prefix (the
    /// passes after differ): its state there is this entry's too.
    std::optional<size_t> selects_as;
  };
  /// An entry's state after its passes up to `emit`, for the entries that select as it.
  struct Selection {
    PlanState state;
    PassReport report;
    PassResult result = PassResult::kUnchanged;
    std::string failure;
    bool gave_up = false;
  };
  /// What the gate needs of an entry; a repeat has its original's.
  struct Facts {
    /// The passes before `emit` ran: `fetched` is what they planned when they ended,
    /// failed or gave up (prefetches are only added, so giving up never hides a count
    /// below the limit).
    bool counted = false;
    uint64_t fetched = 0;
    double ingress = 0;  ///< the bounds the copies are measured against
    int64_t compute_ps = 0;
    bool ok = false;  ///< the whole pipeline succeeded (false when not run to the end)
    uint64_t fingerprint = 0;
  };
  struct Trial {
    size_t entry = 0;
    std::optional<PlanState> state;
    PassContext ctx;
    PlanOutcome out;
    Facts facts;
    std::optional<size_t> same_as;  ///< repeats this earlier entry: not run
    bool stopped = false;  ///< given up, or the gate surely rules it out: not run past `emit`
    /// Not run past `emit` yet: the gate likely rules it out (by a plan not merged yet);
    /// the rest runs at its turn if not.
    bool deferred = false;
    PassResult result = PassResult::kUnchanged;  ///< of the passes run so far
    bool moves = false;
    std::exception_ptr error;
  };

  Prefix& prefix(uint32_t p);
  /// The lower bounds for prefix p's state (the order only matters): those of the first of
  /// equal prefixes.
  const Bounds& bounds(uint32_t p);
  /// A copy of prefix p's state, named for this search's policy.
  PlanState state_of(uint32_t p);
  /// Runs entry i up to `emit` and, unless the gate rules it out or likely will, on to the
  /// end, scoring its plan when the evaluator is thread-safe and the plan is new. A variant
  /// (Entry::variant_of) runs only at its turn after the others (`variant_turn`).
  std::unique_ptr<Trial> run_entry(size_t i, bool variant_turn = false);
  /// run_entry(), with what it throws kept in the trial (Trial::error) for the merge to
  /// rethrow in portfolio order.
  std::unique_ptr<Trial> run_caught(size_t i, bool variant_turn = false);
  /// Runs the passes from `emit` on and concludes the trial.
  void complete(Trial& trial);
  /// Why the gate rules out entry i's plan by its copies alone, or empty. Call with m_ held.
  std::string copies_gate(const Facts& f, size_t i) const;
  /// Whether the gate rules out `fetched` bytes at entry i now. Call with m_ held.
  bool ruled_out(uint64_t fetched, const Facts& f, size_t i) const;
  /// The fewest fetched bytes the gate rules out now at entry i, for the bounds `f` holds.
  uint64_t fetch_limit(const Facts& f, size_t i);
  /// Runs and scores the probe (PlanRequest::hint), before the others.
  void run_probe();
  /// Takes entries in order until stopped.
  void worker(size_t k);
  /// Runs the variants after the other entries are merged, each unless the entry it
  /// varies is ruled out by its copies alone against the best, and merges them as if they
  /// had been merged in portfolio order (the earlier of equal plans kept).
  void merge_variants(std::unique_ptr<Trial>& best, std::vector<PortfolioTrial>& tried,
                      std::vector<Facts>& facts);
  /// Merges the trial of one entry into the search, as one thread would in portfolio
  /// order: the gate (copies alone, then a repeated plan), then its score, kept as `best`
  /// when it wins; its result goes to tried[entry].
  void merge(std::unique_ptr<Trial> a, std::vector<Facts>& facts, std::unique_ptr<Trial>& best,
             std::vector<PortfolioTrial>& tried);
  /// The best trial's outcome, refined.
  PlanOutcome finish(std::unique_ptr<Trial> best);
  /// Scores the plan of a trial with facts `f` at its turn in merge(). With a probe (one
  /// thread, PlanRequest::hint), a plan that surely ends after the probe's cannot win:
  /// its simulation stops once that is sure (the same point whenever it runs, as the
  /// probe's score is known before any other entry runs).
  Evaluation score(PlanState& s, const Facts& f);
  /// What a stopped score says in the portfolio, for a stop at `at_ps`.
  [[nodiscard]] std::string stop_reason(int64_t at_ps);
  /// Puts the score of entry i's plan in the shared StartMemo for each later entry that
  /// is a baseline policy's pipeline and will repeat that plan (the same passes after an
  /// equal prefix state): that policy's own plan of the workload takes it.
  void publish(size_t i, uint64_t fingerprint, const Evaluation& e);

  const Workload& w_;
  const hw::Topology& t_;
  const PlanRequest& req_;
  uint64_t budget_;
  StartMemo own_memo_;
  StartMemo* memo_ = nullptr;  ///< the request's shared one, or own_memo_
  bool share_ = true;  ///< false when printing after passes
  bool cut_ = false;   ///< a large workload: only the `large` entries run
  uint64_t resident_peak_ = 0;
  std::vector<std::unique_ptr<Prefix>> prefixes_;
  std::vector<Entry> entries_;
  size_t workers_ = 1;
  size_t ahead_ = 1;  ///< workers run at most this many entries beyond the merged ones
  std::vector<size_t> runs_before_;     ///< per entry index: the entries before it that are not cut
  std::optional<size_t> probe_;         ///< the entry the hint names
  std::unique_ptr<Trial> probe_trial_;  ///< its trial until its turn

  // Shared with the workers, under m_. The gate only gets stricter as entries are merged
  // (the best only gets better, `seen_` only grows), so what it rules out for a worker it
  // rules out at the entry's turn.
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Trial>> done_;
  size_t next_ = 0;    ///< the next entry a worker takes
  size_t merged_ = 0;  ///< entries merged so far
  bool stop_ = false;
  /// Fingerprints of the plans scored or ruled out as repeats, each with the entry that made it.
  std::map<uint64_t, size_t> seen_;
  /// Per state fingerprint after a selection that ran to its end, and the passes after it:
  /// the first entry that selected it (a later one makes the same plan).
  std::map<std::pair<uint64_t, std::string_view>, size_t> selected_;
  std::optional<int64_t> best_makespan_;
  std::optional<int64_t> probe_makespan_;  ///< the probe's score, when it has one
  /// The shortest makespan scored so far, merged or not: what the gate will likely use.
  std::optional<int64_t> likely_best_;
  /// Per entry: its state after the passes up to `emit`, while entries that select as it
  /// have yet to start; and how many of those have yet to start.
  std::vector<std::shared_ptr<const Selection>> selections_;
  std::vector<size_t> selection_users_;
  /// Per entry: its pipeline is a baseline policy's (planner::policies()).
  std::vector<bool> policy_;
};

Search::Prefix& Search::prefix(uint32_t p) {
  Prefix& x = *prefixes_[p];
  std::call_once(x.once, [&] {
    x.start = start_state(w_, t_, req_, budget_, x.pipeline ? &*x.pipeline : nullptr, memo_);
    x.same_as = p;
    const StartState& mine = *x.start;
    for (uint32_t q = 0; q < p && mine.result != PassResult::kFailed; ++q) {
      const Prefix& y = prefix(q);
      const StartState& other = *y.start;
      if (y.same_as == q && other.result != PassResult::kFailed &&
          other.report.infeasible == mine.report.infeasible &&
          same_state(other.state, mine.state)) {
        x.same_as = q;
        break;
      }
    }
  });
  return x;
}

const Bounds& Search::bounds(uint32_t p) {
  return prefixes_[prefix(p).same_as]->start->bounds;
}

PlanState Search::state_of(uint32_t p) {
  PlanState s = prefix(p).start->state;
  s.policy = plan_policy(req_);
  return s;
}

std::unique_ptr<Search::Trial> Search::run_entry(size_t i, bool variant_turn) {
  auto trial = std::make_unique<Trial>();
  trial->entry = i;
  const Entry& e = entries_[i];
  if (e.cut || (e.variant_of && !variant_turn)) return trial;
  // The state another entry's selection ended in, when that one ran first.
  std::shared_ptr<const Selection> kept;
  if (e.selects_as) {
    const std::lock_guard lock(m_);
    kept = selections_[*e.selects_as];
    if (--selection_users_[*e.selects_as] == 0) selections_[*e.selects_as].reset();
  }
  const Prefix& p = prefix(e.prefix);
  PlanOutcome& out = trial->out;
  out.pipeline = e.pipeline.str();
  out.budget = budget_;
  out.resident_peak = resident_peak_;
  if (p.start->result == PassResult::kFailed) {
    out.bounds = bounds(e.prefix);
    PlanState s = state_of(e.prefix);
    PassContext ctx;
    ctx.failure = p.start->failure;
    ctx.report = p.start->report;
    conclude(out, s, ctx, PassResult::kFailed);
    return trial;
  }
  for (size_t j = 0; j < i; ++j) {
    const Entry& o = entries_[j];
    if (!o.cut && o.suffix == e.suffix && prefix(o.prefix).same_as == p.same_as) {
      trial->same_as = j;
      return trial;
    }
  }
  if (kept) {
    trial->state.emplace(kept->state);
  } else {
    trial->state.emplace(state_of(e.prefix));
  }
  PlanState& s = *trial->state;
  PassContext& ctx = trial->ctx;
  ctx = context_for(req_);
  ctx.report = kept ? kept->report : p.start->report;
  Facts& f = trial->facts;
  // A pass that reorders changes the bounds: no limit for it. When passes are printed,
  // every pipeline runs to its end.
  bool reorders = !share_;
  for (size_t k = e.split; k < e.emit; ++k) {
    reorders |= e.pipeline.passes()[k]->name() == "reorder";
  }
  bool scored = false;
  {
    const std::lock_guard lock(m_);
    scored = best_makespan_.has_value() || probe_makespan_.has_value();
  }
  if (!reorders && scored) {
    f.ingress = bounds(e.prefix).ingress;
    f.compute_ps = bounds(e.prefix).compute_ps;
    ctx.limits.fetch_bytes = fetch_limit(f, i);
  }
  if (kept) {
    // It ran with a fetch limit no lower than this entry's (the best only gets better):
    // had it given up, this entry would have too.
    trial->result = kept->result;
    ctx.failure = kept->failure;
    ctx.limits.gave_up = kept->gave_up;
  } else {
    trial->result = e.pipeline.run(s, ctx, e.split, e.emit);
    // Kept (a copy) only while an entry that selects as this one has yet to start (a probe
    // may have started before it).
    std::unique_lock lock(m_);
    if (selection_users_[i] > 0) {
      lock.unlock();
      auto mine = std::make_shared<const Selection>(
          Selection{s, ctx.report, trial->result, ctx.failure, ctx.limits.gave_up});
      lock.lock();
      if (selection_users_[i] > 0) selections_[i] = std::move(mine);
    }
  }
  ctx.limits.fetch_bytes = UINT64_MAX;
  out.bounds = s.order == p.start->state.order ? bounds(e.prefix) : lower_bounds(s);
  f.counted = true;
  f.fetched = fetched_bytes(s);
  f.ingress = out.bounds.ingress;
  f.compute_ps = out.bounds.compute_ps;
  // The state an earlier entry's selection ended in, and the same passes to come: its plan.
  if (share_ && e.emit > e.split && trial->result != PassResult::kFailed && !ctx.limits.gave_up) {
    const std::lock_guard lock(m_);
    const auto [it, added] = selected_.try_emplace({fingerprint(s), e.rest}, i);
    if (!added && it->second < i) {
      trial->same_as = it->second;
      trial->state.reset();
      return trial;
    }
    it->second = std::min(it->second, i);
  }
  bool surely = ctx.limits.gave_up;
  bool likely = false;
  if (!surely && trial->result != PassResult::kFailed) {
    const std::lock_guard lock(m_);
    surely = !copies_gate(f, i).empty();
    likely = likely_best_ && f.ingress > 0 &&
             rules_out(f.fetched, f.ingress, f.compute_ps, *likely_best_);
  }
  if (surely && share_) {
    trial->stopped = true;
    trial->state.reset();
    return trial;
  }
  if (likely && share_) {
    trial->deferred = true;
    return trial;
  }
  complete(*trial);
  if (f.ok && req_.evaluator->thread_safe() && workers_ > 1) {
    bool repeat = false;
    {
      const std::lock_guard lock(m_);
      repeat = seen_.contains(f.fingerprint);
    }
    if (!repeat) {
      s.emitted.set_evaluation(evaluate(*req_.evaluator, s));
      // Until its turn, the trial needs the score, not the plan: emitted again if it wins.
      if (cut_) s.emitted.shed();
      const Evaluation& ev = *s.emitted.evaluation();
      if (ev.ok) {
        const std::lock_guard lock(m_);
        if (!likely_best_ || ev.makespan_ps < *likely_best_) likely_best_ = ev.makespan_ps;
      }
    }
  }
  return trial;
}

void Search::complete(Trial& trial) {
  const Entry& e = entries_[trial.entry];
  PlanState& s = *trial.state;
  PassContext& ctx = trial.ctx;
  trial.deferred = false;
  if (trial.result != PassResult::kFailed) {
    const PassResult rest = e.pipeline.run(s, ctx, e.emit, e.pipeline.passes().size());
    if (rest == PassResult::kFailed || rest == PassResult::kChanged) trial.result = rest;
    if (s.order != prefix(e.prefix).start->state.order) trial.out.bounds = lower_bounds(s);
  }
  if (!conclude(trial.out, s, ctx, trial.result)) return;
  trial.facts.ok = true;
  trial.facts.fingerprint = fingerprint(s.plan());
  trial.moves = moves_anything(s);
}

bool Search::ruled_out(uint64_t fetched, const Facts& f, size_t i) const {
  if (f.ingress <= 0) return false;
  if (best_makespan_ && rules_out(fetched, f.ingress, f.compute_ps, *best_makespan_)) return true;
  return probe_makespan_ &&
         rules_out(fetched, f.ingress, f.compute_ps, *probe_makespan_, /*strict=*/i <= *probe_);
}

std::string Search::copies_gate(const Facts& f, size_t i) const {
  if (!f.counted || !ruled_out(f.fetched, f, i)) return "";
  if (best_makespan_ && rules_out(f.fetched, f.ingress, f.compute_ps, *best_makespan_)) {
    return fmt::format("copies alone take >= {}", to_string_approx(Duration{*best_makespan_}));
  }
  return fmt::format("copies alone take {} {} (#{}, scored first)",
                     i <= *probe_ ? ">" : ">=", to_string_approx(Duration{*probe_makespan_}),
                     *probe_ + 1);
}

uint64_t Search::fetch_limit(const Facts& f, size_t i) {
  const std::lock_guard lock(m_);
  if (!ruled_out(UINT64_MAX, f, i)) return UINT64_MAX;
  uint64_t lo = 0, hi = UINT64_MAX;  // ruled out at hi: find the least such
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (ruled_out(mid, f, i)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

void Search::worker(size_t k) {
  // Worker k starts with the k-th prefix an entry runs from: the first entries all wait
  // for the first, and the others are needed soon after. A failure shows again where an
  // entry needs it.
  std::vector<uint32_t> used;
  for (const Entry& e : entries_) {
    if (!e.cut && std::find(used.begin(), used.end(), e.prefix) == used.end())
      used.push_back(e.prefix);
  }
  if (k < used.size()) {
    try {
      (void)prefix(used[k]);
    } catch (...) {
    }
  }
  while (true) {
    size_t i = 0;
    {
      std::unique_lock lock(m_);
      // At most ahead_ entries that run (cut ones take no time or memory) past the merged.
      cv_.wait(lock, [&] {
        return stop_ ||
               (next_ < entries_.size() && runs_before_[next_] - runs_before_[merged_] < ahead_);
      });
      if (stop_) return;
      i = next_++;
    }
    std::unique_ptr<Trial> trial = run_caught(i);
    const std::lock_guard lock(m_);
    done_[i] = std::move(trial);
    cv_.notify_all();
  }
}

std::unique_ptr<Search::Trial> Search::run_caught(size_t i, bool variant_turn) {
  try {
    return run_entry(i, variant_turn);
  } catch (...) {
    auto t = std::make_unique<Trial>();
    t->entry = i;
    t->error = std::current_exception();
    return t;
  }
}

void Search::run_probe() {
  std::unique_ptr<Trial> t = run_caught(*probe_);
  // Not run (it repeats an earlier entry), or no plan: no bound; its turn merges it as is.
  if (!t->error && !t->same_as && t->facts.ok && t->state) {
    EmittedPlan& emitted = t->state->emitted;
    if (!emitted.evaluation()) emitted.set_evaluation(evaluate(*req_.evaluator, *t->state));
    if (cut_) emitted.shed();
    const Evaluation& ev = *emitted.evaluation();
    if (ev.ok) {
      const std::lock_guard lock(m_);
      probe_makespan_ = ev.makespan_ps;
      likely_best_ = ev.makespan_ps;
    }
  }
  probe_trial_ = std::move(t);
}

PlanOutcome Search::run() {
  done_.resize(entries_.size());
  // On one thread the probe runs first; with more, the workers already score several
  // entries at once (likely_best_), and a probe run alone would keep the others idle.
  if (probe_ && workers_ > 1) probe_.reset();
  if (probe_) run_probe();
  std::vector<std::thread> pool;
  if (workers_ > 1) {
    for (size_t k = 0; k < workers_; ++k) pool.emplace_back([this, k] { worker(k); });
  }
  // Stops and joins the workers however the merge ends.
  struct Joiner {
    Search* s;
    std::vector<std::thread>& pool;
    ~Joiner() {
      {
        const std::lock_guard lock(s->m_);
        s->stop_ = true;
      }
      s->cv_.notify_all();
      for (std::thread& th : pool) th.join();
    }
  } joiner{this, pool};

  // The entries in portfolio order, as one thread would take them: the gate (copies
  // alone, then a repeated plan), then the score; the best so far is kept.
  std::unique_ptr<Trial> best;
  std::vector<PortfolioTrial> tried;
  std::vector<Facts> facts(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    std::unique_ptr<Trial> a;
    if (pool.empty()) {
      a = i == probe_ && probe_trial_ ? std::move(probe_trial_) : run_entry(i);
    } else {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return done_[i] != nullptr; });
      a = std::move(done_[i]);
    }
    if (a->error) std::rethrow_exception(a->error);
    const std::string_view text = entries_[i].text;
    if (entries_[i].cut) {
      tried.push_back(PortfolioTrial{std::string(text), std::string(entries_[i].tries),
                                     std::string(entries_[i].why_not), false});
      const std::lock_guard lock(m_);
      merged_ = i + 1;
      cv_.notify_all();
      continue;
    }
    tried.push_back(PortfolioTrial{std::string(text), std::string(entries_[i].tries), "", false});
    // A variant's turn comes after the others (merge_variants).
    if (!entries_[i].variant_of) {
      merge(std::move(a), facts, best, tried);
      // Nothing to choose between when everything fits.
      if (best && best->out.ok && !best->moves) break;
    }
    const std::lock_guard lock(m_);
    merged_ = i + 1;
    cv_.notify_all();
  }
  merge_variants(best, tried, facts);
  if (best) tried[best->entry].best = true;
  PlanOutcome out = finish(std::move(best));
  if (cut_) {
    const auto ran =
        std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.cut; });
    out.notes.push_back(fmt::format(
        "search cut: the workload has {} ops (at least {}), so {} of the {} portfolio "
        "pipelines ran (those that win on large workloads, and the baselines as they are); "
        "--pipeline runs any other",
        w_.ops.size(), req_.search_cut_ops, ran, entries_.size()));
  }
  out.portfolio = std::move(tried);
  return out;
}

void Search::merge_variants(std::unique_ptr<Trial>& best, std::vector<PortfolioTrial>& tried,
                            std::vector<Facts>& facts) {
  // Which variants run: decided against the best of the other entries, so that the choice
  // does not depend on the order they run in.
  std::vector<size_t> run;
  for (size_t i = 0; i < entries_.size() && i < tried.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.cut || !e.variant_of) continue;
    // Nothing to choose between when the best plan fits without moving anything.
    if (best && best->out.ok && !best->moves) {
      tried[i].result = "not run: the best plan moves nothing";
      continue;
    }
    const size_t v = *e.variant_of;
    const Facts& pf = facts[v];
    // Strict where the entry varied comes before the best: it would win a tie.
    const bool strict = best && v < best->entry;
    const std::lock_guard lock(m_);
    if (best_makespan_ && pf.counted && pf.ingress > 0 &&
        rules_out(pf.fetched, pf.ingress, pf.compute_ps, *best_makespan_, strict)) {
      tried[i].result =
          fmt::format("skipped: a variant of #{}, whose copies alone take {} {}", v + 1,
                      strict ? ">" : ">=", to_string_approx(Duration{*best_makespan_}));
    } else {
      run.push_back(i);
    }
  }
  // Run on the search's threads (its workers have no entries left), then merged in order.
  std::vector<std::unique_ptr<Trial>> trials(run.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < run.size(); k = next++) {
      trials[k] = run_caught(run[k], /*variant_turn=*/true);
    }
  };
  {
    std::vector<std::thread> helpers;
    for (size_t k = 1; k < std::min(workers_, run.size()); ++k) helpers.emplace_back(work);
    work();
    for (std::thread& th : helpers) th.join();
  }
  for (std::unique_ptr<Trial>& a : trials) merge(std::move(a), facts, best, tried);
}

void Search::merge(std::unique_ptr<Trial> a, std::vector<Facts>& facts,
                   std::unique_ptr<Trial>& best, std::vector<PortfolioTrial>& tried) {
  if (a->error) std::rethrow_exception(a->error);
  const size_t i = a->entry;
  std::string skipped;
  {
    const std::lock_guard lock(m_);
    skipped = copies_gate(a->same_as ? facts[*a->same_as] : a->facts, i);
  }
  if (skipped.empty() && a->deferred) complete(*a);
  facts[i] = a->same_as ? facts[*a->same_as] : a->facts;
  const Facts& f = facts[i];
  // A variant merged after a later entry with the same plan: in portfolio order that one
  // repeats this.
  std::optional<size_t> later_twin;
  if (skipped.empty() && f.ok) {
    const std::lock_guard lock(m_);
    const auto [it, added] = seen_.emplace(f.fingerprint, i);
    if (!added && it->second < i) {
      skipped = fmt::format("same plan as #{}", it->second + 1);
    } else if (!added) {
      later_twin = it->second;
      it->second = i;
    }
  }
  TF_ASSERT(!a->stopped || !skipped.empty(), "entry {} stopped early yet passes the gate", i);
  if (!skipped.empty()) {
    tried[i].result = "skipped: " + skipped;
    return;
  }
  // A repeat that passes the gate repeats a failure (a successful original's plan is in
  // seen_ by now).
  TF_ASSERT(!a->same_as || !f.ok, "entry {} repeats a plan not yet seen", i);
  if (f.ok) {
    EmittedPlan& emitted = a->state->emitted;
    // The same plan as the best, merged before it: its score, not a second simulation.
    if (!emitted.evaluation() && later_twin && best && best->entry == *later_twin &&
        best->out.evaluation) {
      emitted.set_evaluation(*best->out.evaluation);
    }
    if (!emitted.evaluation()) emitted.set_evaluation(score(*a->state, f));
    a->out.evaluation = emitted.evaluation();
  }
  const bool scored = f.ok && a->out.evaluation && a->out.evaluation->ok;
  if (scored && !a->same_as) publish(i, f.fingerprint, *a->out.evaluation);
  const bool stopped = f.ok && a->out.evaluation && a->out.evaluation->stopped;
  tried[i].result = scored    ? to_string_approx(Duration{a->out.evaluation->makespan_ps})
                    : stopped ? stop_reason(a->out.evaluation->makespan_ps)
                              : "does not fit";
  if (later_twin) tried[*later_twin].result = fmt::format("skipped: same plan as #{}", i + 1);
  // It ends after a plan that is or will be merged: it cannot win.
  if (a->same_as || stopped) return;
  // An entry before the best in portfolio order (a variant) stays the best unless the
  // other is better; one after it must be better.
  const bool wins =
      !best || (i < best->entry ? !better_than(best->out, a->out) : better_than(a->out, best->out));
  if (!wins) return;
  best = std::move(a);
  if (best->out.ok && best->out.evaluation && best->out.evaluation->ok) {
    const std::lock_guard lock(m_);
    best_makespan_ = best->out.evaluation->makespan_ps;
    if (!likely_best_ || *best_makespan_ < *likely_best_) likely_best_ = best_makespan_;
  }
}

Evaluation Search::score(PlanState& s, const Facts& f) {
  std::optional<int64_t> limit;
  if (f.ingress > 0) {
    const std::lock_guard lock(m_);
    limit = probe_makespan_;  // (only ever set on one thread)
  }
  if (!limit) return evaluate(*req_.evaluator, s);
  const Plan& plan = s.plan();  // emitted first: verified() speaks of this plan
  return req_.evaluator->evaluate_until(plan, s.emitted.verified(), *limit, f.ingress);
}

std::string Search::stop_reason(int64_t at_ps) {
  const std::lock_guard lock(m_);
  TF_ASSERT(probe_makespan_.has_value(), "a score stopped without the probe's");
  return fmt::format("skipped: ends after {} (#{}, scored first), as its simulation showed at {}",
                     to_string_approx(Duration{*probe_makespan_}), *probe_ + 1,
                     to_string_approx(Duration{at_ps}));
}

void Search::publish(size_t i, uint64_t fingerprint, const Evaluation& e) {
  StartMemo* shared = shared_memo(req_);
  if (shared == nullptr) return;
  const Entry& mine = entries_[i];
  for (size_t j = i + 1; j < entries_.size(); ++j) {
    const Entry& o = entries_[j];
    if (!policy_[j] || o.cut || o.suffix != mine.suffix ||
        prefix(o.prefix).same_as != prefix(mine.prefix).same_as) {
      continue;
    }
    shared->put_score(memo_key(req_, budget_, o.pipeline.str()), fingerprint, e);
  }
}

PlanOutcome Search::finish(std::unique_ptr<Trial> best) {
  auto final_outcome = [&](Trial& t) {
    PlanOutcome out = std::move(t.out);
    if (out.ok) report(out, *t.state, nullptr);
    return out;
  };
  const size_t at = best->out.pipeline.rfind(",verify");
  if (!best->out.ok || !best->moves || at == std::string::npos) return final_outcome(*best);
  std::string text = best->out.pipeline;
  text.replace(at, 7, ",refine,verify");
  if (share_ && at + 7 == best->out.pipeline.size()) {
    // The refined pipeline repeats the best one up to its last pass, verify, which changes
    // nothing: go on from the best's state with refine and verify. Refine keeps a change
    // only when it scores better, and leaves the state as it was otherwise.
    PlanState& s = *best->state;
    PassContext& ctx = best->ctx;
    const PassResult r = Pipeline::parse("refine,verify").run(s, ctx);
    if (r == PassResult::kUnchanged) return final_outcome(*best);
    if (r == PassResult::kChanged) {
      PlanOutcome refined;
      refined.pipeline = Pipeline::parse(text).str();
      refined.budget = best->out.budget;
      refined.bounds = best->out.bounds;
      refined.resident_peak = best->out.resident_peak;
      conclude(refined, s, ctx, r);
      report(refined, s, req_.evaluator);
      TF_ASSERT(better_than(refined, best->out), "refine kept a plan that scores no better");
      return refined;
    }
    // The refined plan breaks a rule: both pipelines again from the start.
    PlanOutcome again = run_pipeline(w_, t_, req_, text, budget_);
    PlanOutcome original = run_pipeline(w_, t_, req_, best->out.pipeline, budget_);
    return better_than(again, original) ? std::move(again) : std::move(original);
  }
  PlanOutcome refined = run_pipeline(w_, t_, req_, text, budget_);
  if (better_than(refined, best->out)) return refined;
  return final_outcome(*best);
}

}  // namespace
PlanOutcome search_portfolio(const Workload& w, const hw::Topology& t, const PlanRequest& req,
                             std::span<const PortfolioEntry> portfolio, uint64_t budget) {
  Search search(w, t, req, portfolio, budget);
  return search.run();
}

}  // namespace tierflow::planner