#include "planner/emit.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/diagnostics.h"
#include "core/json_writer.h"
#include "core/small_sort.h"
#include "planner/state.h"

namespace tierflow::planner {

Emitted emit_plan(const PlanState& s, std::string_view policy) {
  const uint32_t n = s.positions();
  Emitted out;
  Plan& p = out.plan;
  p.name = fmt::format("{}.{}", s.w.name, policy);
  p.meta["policy"] = json_string(policy);
  p.tiers.push_back(s.topo.tiers[s.target.device_tier].id);
  p.device_tier = 0;
  // Scored as it will run: held to the budget it was made for.
  p.budget = s.target.budget;
  p.home.assign(s.w.tensors.size(), 0);

  std::vector<uint32_t> plan_tier(s.topo.tiers.size(), kNone);
  auto tier_of = [&](uint32_t topo_tier) {
    if (plan_tier[topo_tier] == kNone) {
      plan_tier[topo_tier] = static_cast<uint32_t>(p.tiers.size());
      p.tiers.push_back(s.topo.tiers[topo_tier].id);
    }
    return plan_tier[topo_tier];
  };

  // Runs by the slot of their release and of their prefetch, each in tensor order (two
  // counting sorts).
  struct Ref {
    uint32_t tensor;
    uint32_t run;
  };
  std::vector<uint32_t> release_at(n + 2, 0), fetch_at(n + 2, 0);
  // The events each slot's compute step (and its prefetches) wait on, slot by slot in one
  // array: counted first, filled as the events are numbered.
  std::vector<uint32_t> compute_at(n + 2, 0), landed_at(n + 2, 0);
  size_t stores = 0;
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    const Residency& r = s.tensors[t];
    if (r.home_off_device) p.home[t] = tier_of(r.tier);
    for (const Run& run : r.runs) {
      if (run.fetched || run.store) tier_of(r.tier);
      if (run.fetched) {
        TF_ASSERT(run.alloc <= run.first && run.first < n, "prefetch of {} after its use", t);
        ++fetch_at[run.alloc + 1];
        ++compute_at[run.first + 1];
      }
      if (run.release != kNone) {
        TF_ASSERT(run.release <= n, "release of {} past the end", t);
        ++release_at[run.release + 1];
        stores += run.store ? 1 : 0;
        if (run.store && run.release + run.hold <= n) {
          ++compute_at[run.release + run.hold + 1];
          ++landed_at[run.release + run.hold + 1];
        }
      }
    }
  }
  for (uint32_t j = 0; j <= n; ++j) {
    release_at[j + 1] += release_at[j];
    fetch_at[j + 1] += fetch_at[j];
    compute_at[j + 1] += compute_at[j];
    landed_at[j + 1] += landed_at[j];
  }
  std::vector<Ref> releases(release_at[n + 1]), fetches(fetch_at[n + 1]);
  {
    std::vector<uint32_t> rel_fill(release_at.begin(), release_at.end() - 1);
    std::vector<uint32_t> fetch_fill(fetch_at.begin(), fetch_at.end() - 1);
    for (uint32_t t = 0; t < s.tensors.size(); ++t) {
      const auto& runs = s.tensors[t].runs;
      for (uint32_t k = 0; k < runs.size(); ++k) {
        if (runs[k].fetched) fetches[fetch_fill[runs[k].alloc]++] = {t, k};
        if (runs[k].release != kNone) releases[rel_fill[runs[k].release]++] = {t, k};
      }
    }
  }

  // Prefetches of one slot queue on the copy engines in the order they are issued: the one
  // needed soonest first (ties by tensor).
  // (A slot holds a few: stable_sort_small, no buffer per slot.)
  for (uint32_t j = 0; j <= n; ++j) {
    stable_sort_small(fetches.begin() + fetch_at[j], fetches.begin() + fetch_at[j + 1],
                      [&](const Ref& a, const Ref& b) {
                        return s.tensors[a.tensor].runs[a.run].first <
                               s.tensors[b.tensor].runs[b.run].first;
                      });
  }

  Program program;
  program.steps.reserve(n + fetches.size() + releases.size() + stores);
  out.event_run.reserve(fetches.size() + stores);
  std::vector<uint32_t> compute_waits(compute_at[n + 1]), fetch_waits(landed_at[n + 1]);
  std::vector<uint32_t> compute_fill(compute_at.begin(), compute_at.end() - 1);
  std::vector<uint32_t> landed_fill(landed_at.begin(), landed_at.end() - 1);
  uint32_t event = 0;
  for (uint32_t j = 0; j <= n; ++j) {
    for (uint32_t x = release_at[j]; x < release_at[j + 1]; ++x) {
      const Ref& ref = releases[x];
      const Residency& r = s.tensors[ref.tensor];
      const Run& run = r.runs[ref.run];
      std::vector<uint32_t> wait;
      if (run.store) {
        program.steps.push_back(
            Step{StepKind::kStore, ref.tensor, plan_tier[r.tier], event, {}});
        out.event_run.emplace_back(ref.tensor, ref.run);
        wait.push_back(event);
        const uint32_t landed = j + run.hold;
        if (landed <= n) {
          compute_waits[compute_fill[landed]++] = event;
          fetch_waits[landed_fill[landed]++] = event;
        }
        ++event;
      }
      program.steps.push_back(Step{StepKind::kDetach, ref.tensor, 0, kNoEvent, std::move(wait)});
    }
    for (uint32_t x = fetch_at[j]; x < fetch_at[j + 1]; ++x) {
      const Ref& ref = fetches[x];
      const Residency& r = s.tensors[ref.tensor];
      const Run& run = r.runs[ref.run];
      program.steps.push_back(Step{StepKind::kPrefetch, ref.tensor, plan_tier[r.tier], event,
                                   std::vector<uint32_t>(fetch_waits.begin() + landed_at[j],
                                                         fetch_waits.begin() + landed_fill[j])});
      out.event_run.emplace_back(ref.tensor, ref.run);
      compute_waits[compute_fill[run.first]++] = event++;
    }
    if (j < n) {
      const auto first = compute_waits.begin() + compute_at[j];
      const auto last = compute_waits.begin() + compute_fill[j];
      std::sort(first, last);
      program.steps.push_back(Step{StepKind::kCompute, s.order[j], 0, kNoEvent,
                                   std::vector<uint32_t>(first, std::unique(first, last))});
    }
  }
  out.events_per_program = event;

  p.programs.reserve(s.target.devices);
  for (uint32_t d = 0; d < s.target.devices; ++d) {
    // The last device takes the program itself, the others a copy.
    Program copy = d + 1 == s.target.devices ? std::move(program) : program;
    copy.device = d;
    const uint32_t offset = d * event;
    if (offset > 0) {
      for (Step& st : copy.steps) {
        if (st.event != kNoEvent) st.event += offset;
        for (uint32_t& e : st.wait) e += offset;
      }
    }
    p.programs.push_back(std::move(copy));
  }
  return out;
}

void EmittedPlan::start() {
  started_ = true;
  runs_changed();
}

void EmittedPlan::runs_changed() {
  if (!started_) return;
  plan_.reset();
  evaluation_.reset();
  shed_ = false;
  verified_ = false;
}

void EmittedPlan::shed() {
  if (!plan_) return;
  plan_.reset();
  shed_ = true;
}

const Plan& EmittedPlan::plan(const PlanState& s) {
  if (!plan_) {
    // A shed plan comes back the same: its score and its check stand.
    std::optional<Evaluation> kept = shed_ ? std::move(evaluation_) : std::nullopt;
    const bool verified = shed_ && verified_;
    emit(s);
    evaluation_ = std::move(kept);
    verified_ = verified;
  }
  return *plan_;
}

const Plan& EmittedPlan::emit(const PlanState& s) {
  Emitted e = emit_plan(s, s.policy);
  plan_ = std::move(e.plan);
  event_run_ = std::move(e.event_run);
  events_per_program_ = e.events_per_program;
  evaluation_.reset();
  shed_ = false;
  verified_ = false;
  return *plan_;
}

}  // namespace tierflow::planner
