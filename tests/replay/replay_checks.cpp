#include "tests/replay/replay_checks.h"

#include <doctest/doctest.h>

#include <map>

namespace tierflow::testing {

using replay::StepRecord;
using replay::Time;

void check_order(const Plan& plan, const replay::ReplayResult& r) {
  REQUIRE(r.programs.size() == plan.programs.size());
  std::map<uint32_t, Time> event_end;
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    const auto& steps = plan.programs[p].steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].event != kNoEvent) event_end[steps[i].event] = r.programs[p].steps[i].end;
    }
  }
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    CAPTURE(p);
    const auto& steps = plan.programs[p].steps;
    const auto& recs = r.programs[p].steps;
    Time anchor_end = 0;
    Time host_end = 0;
    uint64_t compute_seq = 0;
    std::map<uint32_t, uint64_t> tensor_seq;
    for (size_t i = 0; i < steps.size(); ++i) {
      CAPTURE(i);
      const Step& s = steps[i];
      const StepRecord& rec = recs[i];
      REQUIRE(rec.ran);
      CHECK(rec.issue >= 0);
      CHECK(rec.start >= rec.issue);
      CHECK(rec.end >= rec.start);
      const Time ready = s.kind == StepKind::kCompute ? rec.start : rec.issue;
      for (uint32_t e : s.wait) CHECK(ready >= event_end.at(e));
      CHECK(ready >= anchor_end);
      if (s.kind == StepKind::kCompute) {
        CHECK(rec.waited >= 0);
        CHECK(rec.waited <= rec.start - rec.issue);
      }
      if (s.host) {
        CHECK(rec.start >= host_end);
        host_end = rec.end;
      } else if (s.kind == StepKind::kCompute) {
        CHECK(rec.seq > compute_seq);
        compute_seq = rec.seq;
        anchor_end = rec.end;
      } else {
        auto& last = tensor_seq[s.target];
        CHECK(rec.seq > last);
        last = rec.seq;
      }
    }
  }
}

uint64_t simulated_peak(const sim::SimResult& s, const std::string& arena) {
  for (const sim::TierResult& t : s.tiers) {
    if (t.name == arena) return t.peak;
  }
  return 0;
}

size_t steps_of(const Plan& p) {
  size_t n = 0;
  for (const Program& prog : p.programs) n += prog.steps.size();
  return n;
}

bool allocation_order_fixed(const Plan& p) {
  if (p.programs.size() != 1) return false;
  for (const Step& s : p.programs[0].steps) {
    if (s.kind != StepKind::kCompute && !s.wait.empty()) return false;
  }
  return true;
}

void check_peaks_equal(const replay::ReplayResult& r, const sim::SimResult& s, bool unshifted) {
  REQUIRE_FALSE(s.error);
  size_t device_arenas = 0;
  for (const replay::ArenaRecord& a : r.arenas) {
    if (!a.spec.device) continue;
    ++device_arenas;
    CAPTURE(a.spec.name);
    CHECK(a.stats.logical_peak == simulated_peak(s, a.spec.name));
    CHECK(a.stats.in_use == a.stats.logical_in_use);
    if (unshifted) CHECK(a.stats.peak == a.stats.logical_peak);
  }
  CHECK(device_arenas > 0);
}

}  // namespace tierflow::testing
