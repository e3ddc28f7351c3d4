# Sourced by the fixture checkers (check.sh, check_json.sh, sweep/check_sweep.sh): runs a
# command that must fail on bad input and compares what it printed with the one expected
# error line; reads that line from a YAML fixture's marker.
#
# expect_error FIXTURE EXPECTED COMMAND...
#   passes (returns 0, prints nothing) when COMMAND exits 2, prints nothing on stdout and
#   exactly the line EXPECTED on stderr; otherwise prints what differs and returns 1.
expect_error() {
  local fixture=$1 expected=$2
  shift 2
  local tmp rc actual fail=0 summary
  local problems=()
  tmp=$(mktemp -d) || return 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  # Read stderr byte-exactly (command substitution would drop trailing newlines).
  actual=$(cat "$tmp/err"; printf x)
  actual=${actual%x}
  if [[ $rc -ne 2 ]]; then
    problems+=("exit code $rc, expected 2")
    fail=1
  fi
  if [[ -s $tmp/out ]]; then
    problems+=("stdout is not empty")
    fail=1
  fi
  if [[ $actual != "$expected"$'\n' ]]; then
    problems+=("stderr differs")
    fail=1
  fi
  if (( fail )); then
    printf -v summary "%s; " "${problems[@]}"
    echo "FAIL $fixture: ${summary%; }"
    echo "  command:  $*"
    echo "  expected: $expected"
    if [[ -s $tmp/err ]]; then
      sed 's/^/  actual:   /' "$tmp/err"
      [[ $actual == *$'\n' ]] || printf '\n  (stderr does not end in a newline)\n'
    else
      echo "  actual:   (stderr is empty)"
    fi
    if [[ -s $tmp/out ]]; then
      sed 's/^/  stdout:   /' "$tmp/out"
    fi
  fi
  rm -rf "$tmp"
  return $fail
}

# marker_expectation FIXTURE: prints the one error line a YAML fixture declares, from either
#   - a trailing marker `# expect-error@COL: MESSAGE` (LINE = the marker's line), or
#   - a comment `# expect-error-at: POS: MESSAGE` (an error positioned elsewhere, e.g. at
#     a --set), giving the whole text after `error: `.
# `{FIXTURE}` in either stands for the fixture's path.
# Exactly one of them must appear, exactly once; otherwise it says why and returns 3.
marker_expectation() {
  local fixture=$1 marker='# expect-error@' explicit='# expect-error-at: '
  local n_marker n_explicit hit line rest col msg expected
  # Only the first occurrence on a line counts; -F keeps the pattern literal.
  n_marker=$(grep -cF -- "$marker" "$fixture")
  n_explicit=$(grep -cF -- "$explicit" "$fixture")
  if (( n_marker + n_explicit != 1 )); then
    echo "$fixture: expected exactly one '$marker' or '$explicit' line, found $((n_marker + n_explicit))" >&2
    return 3
  fi
  if (( n_marker == 1 )); then
    hit=$(grep -nF -- "$marker" "$fixture")
    line=${hit%%:*}
    rest=${hit#*"$marker"}          # "COL: MESSAGE"
    col=${rest%%:*}
    msg=${rest#*: }
    if [[ ! $col =~ ^[1-9][0-9]*$ || $rest != "$col: "* ]]; then
      echo "$fixture:$line: malformed marker; write '$marker""COL: MESSAGE'" >&2
      return 3
    fi
    expected="error: $fixture:$line:$col: $msg"
  else
    hit=$(grep -F -- "$explicit" "$fixture")
    expected="error: ${hit#*"$explicit"}"
  fi
  # `{FIXTURE}` in the message stands for the fixture's path as given (an error that names a
  # second position in the same file).
  expected=${expected//\{FIXTURE\}/$fixture}
  printf '%s\n' "${expected%$'\r'}"
}
