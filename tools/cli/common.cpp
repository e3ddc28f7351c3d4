#include "tools/cli/common.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/plan_json.h"
#include "core/units.h"

namespace tierflow::cli {

void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& note : notes) fmt::print(stderr, "note: {}\n", note);
}

int print_run_error(const std::string& plan_file, const RunError& e, bool measured) {
  const std::string at = to_string_approx(Duration{e.time});
  const std::string when = e.time < 0  ? ""
                           : measured ? fmt::format(" (at {} measured)", at)
                                      : fmt::format(" (reached at {})", at);
  if (e.kind == RunError::Kind::kPlanRule || e.kind == RunError::Kind::kDeadlock) {
    // The verifier's message at the step's JSON position (programs waiting on each other
    // are found by it too).
    try {
      (void)read_plan(plan_file, /*verify=*/true);
    } catch (const InputError& positioned) {
      print_error(InputError(positioned.pos(), positioned.message() + when));
      return static_cast<int>(ExitCode::kBadInput);
    }
  }
  std::string where;
  if (e.program >= 0) where += fmt::format("program {}", e.program);
  if (e.step >= 0) where += fmt::format(" step {}", e.step);
  std::fflush(stdout);
  fmt::print(stderr, "error: {}: {}{}{}{}\n", plan_file, where, where.empty() ? "" : ": ",
             e.message, when);
  return static_cast<int>(e.kind == RunError::Kind::kCapacity ? ExitCode::kInfeasible
                                                              : ExitCode::kBadInput);
}

}  // namespace tierflow::cli
