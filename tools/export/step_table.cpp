#include "tools/export/step_table.h"

#include "core/diagnostics.h"

namespace tierflow::exporter {

std::map<uint32_t, std::pair<uint32_t, uint32_t>> event_producers(const Plan& plan) {
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> out;
  for (uint32_t p = 0; p < plan.programs.size(); ++p) {
    const std::vector<Step>& steps = plan.programs[p].steps;
    for (uint32_t i = 0; i < steps.size(); ++i) {
      if (steps[i].event != kNoEvent) out.emplace(steps[i].event, std::pair{p, i});
    }
  }
  return out;
}

uint64_t step_bytes(const Workload& w, const Step& s) {
  return s.kind == StepKind::kCompute ? w.ops[s.target].bytes : w.tensors[s.target].bytes;
}

std::vector<StepRow> step_rows(const ExportInput& in, size_t program) {
  TF_ASSERT(in.sim != nullptr && in.step_times != nullptr && in.bound != nullptr,
            "step_rows needs a simulation");
  const hw::BoundPlan& b = *in.bound;
  const Program& prog = in.plan.programs[program];
  const std::vector<sim::StepTime>& times = (*in.step_times)[program];
  const std::string& device_tier = in.plan.tiers[in.plan.device_tier];

  // The transfer record of each prefetch and store of this program.
  std::vector<const sim::TransferRecord*> transfer(prog.steps.size(), nullptr);
  for (const sim::TransferRecord& x : in.sim->transfers) {
    if (x.program == program) transfer[x.step] = &x;
  }

  std::vector<StepRow> rows;
  rows.reserve(prog.steps.size());
  int anchor = -1;
  int64_t compute_free = 0;  // when the compute engine finished its previous step
  for (uint32_t i = 0; i < prog.steps.size(); ++i) {
    const Step& s = prog.steps[i];
    StepRow r;
    r.program = static_cast<uint32_t>(program);
    r.index = i;
    r.step = &s;
    r.start_ps = times[i].start;
    r.end_ps = times[i].end;
    switch (s.kind) {
      case StepKind::kCompute:
        if (s.host) {
          // Reached once its anchor ends; it computes next to the host tier.
          r.anchor = anchor;
          r.from_tier = in.plan.tiers[in.plan.host_tier];
          break;
        }
        if (r.start_ps >= 0) r.stall_ps = r.start_ps - compute_free;
        if (r.end_ps >= 0) compute_free = r.end_ps;
        anchor = static_cast<int>(i);
        break;
      case StepKind::kPrefetch:
      case StepKind::kStore: {
        r.anchor = anchor;
        const bool prefetch = s.kind == StepKind::kPrefetch;
        // A host prefetch lands on the host tier.
        const uint32_t landing = s.host ? in.plan.host_tier : in.plan.device_tier;
        r.from_tier = prefetch ? in.plan.tiers[s.tier] : device_tier;
        r.to_tier = prefetch ? in.plan.tiers[landing] : in.plan.tiers[s.tier];
        const size_t from = prefetch ? b.tier(s.tier) : b.device_tier;
        const size_t to = prefetch ? b.tier(landing) : b.tier(s.tier);
        if (const hw::Route* route = in.topology.route(from, to)) {
          for (const hw::Hop& h : route->hops) r.route.push_back(in.topology.links[h.link].id);
        }
        if (const sim::TransferRecord* x = transfer[i]) {
          r.issue_ps = x->issue;
          r.start_ps = x->start;
          r.end_ps = x->end;
          r.queue_ps = x->start - x->issue;
          r.exposed_ps = x->exposed;
        }
        break;
      }
      case StepKind::kDetach:
        r.anchor = anchor;
        r.from_tier = s.host ? in.plan.tiers[in.plan.host_tier] : device_tier;
        r.issue_ps = r.start_ps;
        break;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace tierflow::exporter
