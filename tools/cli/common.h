// Shared plumbing of the tierflow CLI: how subcommands return exit codes and how
// errors are printed.
#pragma once

#include "core/diagnostics.h"

namespace tierflow::cli {

/// Thrown by a subcommand callback to end the run with an exit code.
struct CommandResult {
  int code = 0;
  explicit CommandResult(int c) : code(c) {}
};

/// Prints "error: FILE:LINE:COL: message" to standard error.
void print_error(const InputError& e);

}  // namespace tierflow::cli
