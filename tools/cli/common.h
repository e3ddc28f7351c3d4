// Shared plumbing of the tierflow CLI: how subcommands return exit codes and how
// errors are printed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/diagnostics.h"
#include "core/plan.h"

namespace tierflow::cli {

/// Thrown by a subcommand callback to end the run with an exit code.
struct CommandResult {
  int code = 0;
  explicit CommandResult(int c) : code(c) {}
};

/// Prints "error: FILE:LINE:COL: message" to standard error.
void print_error(const InputError& e);

/// Prints each of `notes` as "note: ..." to standard error.
void print_notes(const std::vector<std::string>& notes);

/// Notes about runs, printed once, when the first run has been set up: a search calls it
/// at each probe, so that a setup its first probe refuses comes alone, without them.
class NotesOnce {
 public:
  explicit NotesOnce(std::vector<std::string> notes) : notes_(std::move(notes)) {}
  void operator()() {
    if (printed_) return;
    printed_ = true;
    print_notes(notes_);
  }

 private:
  std::vector<std::string> notes_;
  bool printed_ = false;
};

/// Prints why simulating (or, `measured`, replaying) the plan in `plan_file` stopped: a
/// broken plan rule as the verifier's message at the step's JSON position, anything else
/// as "error: PLAN: program P step S: message", each with the time it was reached.
/// Returns the exit code: 1 for a tier over capacity, else 2.
int print_run_error(const std::string& plan_file, const RunError& e, bool measured = false);

}  // namespace tierflow::cli
