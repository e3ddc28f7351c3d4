#include "planner/emit.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/diagnostics.h"

namespace tierflow::planner {

Emitted emit_plan(const PlanState& s, std::string_view policy) {
  const uint32_t n = s.positions();
  Emitted out;
  Plan& p = out.plan;
  p.name = fmt::format("{}.{}", s.w.name, policy);
  p.meta["policy"] = fmt::format("\"{}\"", policy);
  p.tiers.push_back(s.topo.tiers[s.target.device_tier].id);
  p.device_tier = 0;
  p.home.assign(s.w.tensors.size(), 0);

  std::vector<uint32_t> plan_tier(s.topo.tiers.size(), kNone);
  auto tier_of = [&](uint32_t topo_tier) {
    if (plan_tier[topo_tier] == kNone) {
      plan_tier[topo_tier] = static_cast<uint32_t>(p.tiers.size());
      p.tiers.push_back(s.topo.tiers[topo_tier].id);
    }
    return plan_tier[topo_tier];
  };

  struct Ref {
    uint32_t tensor;
    uint32_t run;
  };
  std::vector<std::vector<Ref>> releases(n + 1), fetches(n + 1);
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    const Residency& r = s.tensors[t];
    if (r.home_off_device) p.home[t] = tier_of(r.tier);
    for (uint32_t k = 0; k < r.runs.size(); ++k) {
      const Run& run = r.runs[k];
      if (run.fetched || run.store) tier_of(r.tier);
      if (run.fetched) {
        TF_ASSERT(run.alloc <= run.first && run.first < n, "prefetch of {} after its use", t);
        fetches[run.alloc].push_back({t, k});
      }
      if (run.release != kNone) {
        TF_ASSERT(run.release <= n, "release of {} past the end", t);
        releases[run.release].push_back({t, k});
      }
    }
  }

  // Prefetches of one slot queue on the copy engines in the order they are issued: the one
  // needed soonest first (ties by tensor).
  for (auto& list : fetches) {
    std::stable_sort(list.begin(), list.end(), [&](const Ref& a, const Ref& b) {
      return s.tensors[a.tensor].runs[a.run].first < s.tensors[b.tensor].runs[b.run].first;
    });
  }

  Program program;
  std::vector<std::vector<uint32_t>> compute_waits(n + 1), fetch_waits(n + 1);
  uint32_t event = 0;
  for (uint32_t j = 0; j <= n; ++j) {
    for (const Ref& ref : releases[j]) {
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
          compute_waits[landed].push_back(event);
          fetch_waits[landed].push_back(event);
        }
        ++event;
      }
      program.steps.push_back(Step{StepKind::kDetach, ref.tensor, 0, kNoEvent, std::move(wait)});
    }
    for (const Ref& ref : fetches[j]) {
      const Residency& r = s.tensors[ref.tensor];
      const Run& run = r.runs[ref.run];
      std::vector<uint32_t> wait = fetch_waits[j];
      program.steps.push_back(
          Step{StepKind::kPrefetch, ref.tensor, plan_tier[r.tier], event, std::move(wait)});
      out.event_run.emplace_back(ref.tensor, ref.run);
      compute_waits[run.first].push_back(event++);
    }
    if (j < n) {
      auto& wait = compute_waits[j];
      std::sort(wait.begin(), wait.end());
      wait.erase(std::unique(wait.begin(), wait.end()), wait.end());
      program.steps.push_back(Step{StepKind::kCompute, s.order[j], 0, kNoEvent, std::move(wait)});
    }
  }
  out.events_per_program = event;

  for (uint32_t d = 0; d < s.target.devices; ++d) {
    Program copy = program;
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

}  // namespace tierflow::planner
