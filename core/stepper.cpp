#include "core/stepper.h"

#include <fmt/format.h>

namespace tierflow::run_errors {

std::string tensor_name(const Workload& w, uint32_t t) {
  return fmt::format("tensor {} '{}'", t, w.tensors[t].name);
}

std::string over_capacity(std::string_view place, StepKind kind, size_t step, uint64_t need,
                          uint64_t level, uint64_t capacity, std::string_view largest) {
  return fmt::format(
      "'{}' is over capacity: {} step {} needs {}, {} of {} is free; largest live: {}", place,
      kStepKindNames[size_t(kind)], step, to_string_approx(Bytes{need}),
      to_string_approx(Bytes{capacity - std::min(capacity, level)}),
      to_string_approx(Bytes{capacity}), largest);
}

std::string home_does_not_fit(std::string_view place, const Workload& w, uint32_t t, uint64_t level,
                              uint64_t capacity, std::string_view largest) {
  return fmt::format(
      "'{}' is full before the step starts: the device-resident {} ({}) does not "
      "fit in the {} left of {}; live: {}",
      place, tensor_name(w, t), to_string_approx(Bytes{w.tensors[t].bytes}),
      to_string_approx(Bytes{capacity - std::min(capacity, level)}),
      to_string_approx(Bytes{capacity}), largest);
}

std::string home_over_capacity(std::string_view place, uint64_t level, uint64_t capacity,
                               std::string_view largest) {
  return fmt::format(
      "'{}' is over capacity before the step starts: the home copies take {} of {}; "
      "largest: {}",
      place, to_string_approx(Bytes{level}), to_string_approx(Bytes{capacity}), largest);
}

std::string no_route(std::string_view topology, std::string_view from, std::string_view to,
                     StepKind kind, const Workload& w, uint32_t t) {
  return fmt::format("'{}' has no route from '{}' to '{}' for the {} of {}", topology, from, to,
                     kStepKindNames[size_t(kind)], tensor_name(w, t));
}

std::string no_peak(const Workload& w, uint32_t op, std::string_view device,
                    std::string_view peak_dtypes) {
  const Op& o = w.ops[op];
  return fmt::format(
      "op {} '{}' computes in {}, which device '{}' has no peak rate for (it has: {})", op, o.name,
      name_of(o.dtype), device, peak_dtypes);
}

std::string no_host_peak(const Workload& w, uint32_t op, std::string_view topology,
                         std::string_view peak_dtypes) {
  const Op& o = w.ops[op];
  return fmt::format(
      "op {} '{}' runs on the host and computes in {}, which the host CPU of '{}' has no peak "
      "rate for (it has: {})",
      op, o.name, name_of(o.dtype), topology, peak_dtypes);
}

std::string stuck(uint32_t program, const Step& s, size_t step, uint32_t undone,
                  std::string_view why_not_event) {
  const std::string why =
      undone == kNoEvent
          ? std::string(why_not_event)
          : fmt::format(
                "waits on event {}, which never completes: the step completing it is "
                "itself blocked",
                undone);
  return fmt::format("program {} is stuck at its {} step {}: it {}", program,
                     kStepKindNames[size_t(s.kind)], step, why);
}

std::string largest_live(std::vector<LiveItem> live, const Workload& w, bool several_programs) {
  std::stable_sort(live.begin(), live.end(),
                   [](const LiveItem& a, const LiveItem& b) { return a.bytes > b.bytes; });
  std::string out;
  for (size_t i = 0; i < live.size() && i < 5; ++i) {
    const LiveItem& a = live[i];
    if (!out.empty()) out += ", ";
    if ((a.what & kWorkspaceBit) != 0) {
      out += fmt::format("workspace of op {}", a.what & ~kWorkspaceBit);
    } else {
      out += fmt::format("'{}'", w.tensors[a.what].name);
    }
    if (several_programs) out += fmt::format(" of program {}", a.program);
    out += fmt::format(" ({})", to_string_approx(Bytes{a.bytes}));
  }
  if (live.size() > 5) out += fmt::format(" and {} more", live.size() - 5);
  return out.empty() ? "nothing" : out;
}

}  // namespace tierflow::run_errors
