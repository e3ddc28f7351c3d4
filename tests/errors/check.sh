#!/usr/bin/env bash
# Checks one bad-topology fixture against the error it declares.
#
#   bash tests/errors/check.sh TIERFLOW_BINARY FIXTURE
#
# Runs `TIERFLOW_BINARY hw validate --require-sources [ARGS] FIXTURE`, where ARGS come
# from a `# args: ...` comment line (split on whitespace), and requires: exit code 2,
# empty stdout, and stderr equal to exactly one line `error: FIXTURE:LINE:COL: MESSAGE`.
# The expectation comes from either
#   - a trailing marker `# expect-error@COL: MESSAGE` (LINE = the marker's line), or
#   - a comment `# expect-error-at: POS: MESSAGE` (for --set errors), giving the
#     whole text after `error: `.
# Exactly one of them must appear, exactly once. Everything is compared as plain
# strings (no regexes are built from the message). Silent on success (exit 0); on a
# mismatch prints expected vs actual and exits 1. Exit 3 means a bad invocation or a
# malformed fixture.
set -u

if [[ $# -ne 2 ]]; then
  echo "usage: bash $0 TIERFLOW_BINARY FIXTURE" >&2
  exit 3
fi
bin=$1
fixture=$2

if [[ ! -f $fixture ]]; then
  echo "$fixture: no such fixture" >&2
  exit 3
fi
if ! command -v -- "$bin" >/dev/null; then
  echo "$bin: not an executable" >&2
  exit 3
fi

# shellcheck source=tests/errors/expect_error.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
expected=$(marker_expectation "$fixture") || exit 3

# ARGS: the words after `# args:` on a comment line of its own (at most one such line).
args=()
args_line=$(grep -E '^#[[:space:]]*args:' "$fixture")
if [[ -n $args_line ]]; then
  if [[ $(grep -cE '^#[[:space:]]*args:' "$fixture") -ne 1 ]]; then
    echo "$fixture: more than one '# args:' line" >&2
    exit 3
  fi
  args_line=${args_line#*args:}
  args_line=${args_line%$'\r'}
  read -r -a args <<<"$args_line"
fi

expect_error "$fixture" "$expected" "$bin" hw validate --require-sources "${args[@]}" "$fixture"
