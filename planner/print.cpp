#include "planner/print.h"

#include <fmt/format.h>

namespace tierflow::planner {
namespace {

std::string waits(const std::vector<uint32_t>& wait) {
  if (wait.empty()) return "";
  std::string out = " wait";
  for (size_t i = 0; i < wait.size(); ++i) out += fmt::format("{}e{}", i == 0 ? " " : ",", wait[i]);
  return out;
}

}  // namespace

std::string plan_text(const Plan& p, const Workload& w, size_t program) {
  std::string out;
  for (size_t t = 0; t < p.home.size(); ++t) {
    if (p.home[t] != p.device_tier) {
      out += fmt::format("home {} {}\n", w.tensors[t].name, p.tiers[p.home[t]]);
    }
  }
  if (program >= p.programs.size()) return out;
  for (const Step& s : p.programs[program].steps) {
    switch (s.kind) {
      case StepKind::kCompute:
        out += s.host ? fmt::format("compute {} on host -> e{}{}\n", w.ops[s.target].name, s.event,
                                    waits(s.wait))
                      : fmt::format("compute {}{}\n", w.ops[s.target].name, waits(s.wait));
        break;
      case StepKind::kPrefetch:
        out += fmt::format("prefetch {} from {}{} -> e{}{}\n", w.tensors[s.target].name,
                           p.tiers[s.tier], s.host ? " on host" : "", s.event, waits(s.wait));
        break;
      case StepKind::kStore:
        out += fmt::format("store {} to {} -> e{}{}\n", w.tensors[s.target].name, p.tiers[s.tier],
                           s.event, waits(s.wait));
        break;
      case StepKind::kDetach:
        out += fmt::format("detach {}{}{}\n", w.tensors[s.target].name, s.host ? " on host" : "",
                           waits(s.wait));
        break;
    }
  }
  return out;
}

std::string runs_text(const PlanState& s) {
  std::string out;
  for (uint32_t t = 0; t < s.tensors.size(); ++t) {
    const Residency& r = s.tensors[t];
    bool moved = r.home_off_device;
    for (const Run& run : r.runs) moved |= run.fetched || run.store;
    if (!moved) continue;
    out += fmt::format("{}{} via {}:", s.w.tensors[t].name, r.home_off_device ? " (home off)" : "",
                       r.tier == kNone ? "-" : s.topo.tiers[r.tier].id);
    for (const Run& run : r.runs) {
      out += fmt::format(" [{}{}..{}", run.fetched ? "fetch@" : "", run.alloc, run.last);
      if (run.release != kNone) out += fmt::format(" {}release@{}", run.store ? "store+" : "", run.release);
      out += "]";
    }
    out += '\n';
  }
  return out;
}

}  // namespace tierflow::planner
