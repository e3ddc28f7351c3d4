#!/usr/bin/env bash
# Checks one bad sweep spec against the error it declares (tests/errors/check.sh's
# markers: a trailing `# expect-error@COL: MESSAGE`, or `# expect-error-at: POS: MESSAGE`
# for an error that names another file), and that nothing ran: no results database.
#
#   bash tests/errors/sweep/check_sweep.sh TIERFLOW_BINARY FIXTURE
set -u
if [[ $# -ne 2 ]]; then
  echo "usage: bash $0 TIERFLOW_BINARY FIXTURE" >&2
  exit 3
fi
bin=$1
fixture=$2
# shellcheck source=tests/errors/expect_error.sh
source "$(dirname "${BASH_SOURCE[0]}")/../expect_error.sh"
expected=$(marker_expectation "$fixture") || exit 3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
expect_error "$fixture" "$expected" "$bin" sweep "$fixture" -o "$out/results.db" --quiet || exit 1
if [[ -e $out/results.db ]]; then
  echo "FAIL $fixture: a results database was made: a bad spec must fail before any point runs"
  exit 1
fi
