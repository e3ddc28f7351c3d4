#!/usr/bin/env bash
# Checks one bad-JSON fixture (workload, plan) against the error its sidecar declares.
#
#   bash tests/errors/check_json.sh TIERFLOW_BINARY FIXTURE.json [SUBCOMMAND...]
#
# Runs `TIERFLOW_BINARY SUBCOMMAND... FIXTURE.json`, where SUBCOMMAND defaults to
# `trace import` (workloads; `plan verify` for plans), and requires: exit code 2, empty
# stdout, and stderr equal to exactly one line `error: FIXTURE.json:LINE:COL: MESSAGE`.
# JSON has no comments, so the expectation lives beside the fixture in
# `FIXTURE.json.expect`: exactly one line `LINE:COL: MESSAGE` (1-based line and column
# of the fault, then the message after `error: FILE:LINE:COL: `). Everything is
# compared as plain strings (no regexes are built from the message). Silent on success
# (exit 0); on a mismatch prints expected vs actual and exits 1. Exit 3 means a bad
# invocation or a malformed fixture or sidecar.
set -u

if [[ $# -lt 2 ]]; then
  echo "usage: bash $0 TIERFLOW_BINARY FIXTURE.json [SUBCOMMAND...]" >&2
  exit 3
fi
bin=$1
fixture=$2
shift 2
if [[ $# -gt 0 ]]; then
  subcommand=("$@")
else
  subcommand=(trace import)
fi
sidecar=$fixture.expect

if [[ ! -f $fixture ]]; then
  echo "$fixture: no such fixture" >&2
  exit 3
fi
if [[ ! -f $sidecar ]]; then
  echo "$sidecar: no such file; write the expected 'LINE:COL: MESSAGE' there" >&2
  exit 3
fi
if ! command -v -- "$bin" >/dev/null; then
  echo "$bin: not an executable" >&2
  exit 3
fi

# The sidecar: one line, `LINE:COL: MESSAGE` (a final newline and a CR are allowed).
n_lines=$(awk 'END { print NR }' "$sidecar")
if [[ $n_lines -ne 1 ]]; then
  echo "$sidecar: expected exactly one line 'LINE:COL: MESSAGE', found $n_lines lines" >&2
  exit 3
fi
IFS= read -r want <"$sidecar" || [[ -n $want ]]
want=${want%$'\r'}
line=${want%%:*}
rest=${want#*:}                  # "COL: MESSAGE"
col=${rest%%:*}
msg=${rest#*: }
if [[ ! $line =~ ^[1-9][0-9]*$ || ! $col =~ ^[1-9][0-9]*$ || $rest != "$col: "* || -z $msg ]]; then
  echo "$sidecar: malformed expectation; write 'LINE:COL: MESSAGE'" >&2
  exit 3
fi
expected="error: $fixture:$want"

# shellcheck source=tests/errors/expect_error.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
expect_error "$fixture" "$expected" "$bin" "${subcommand[@]}" "$fixture"
