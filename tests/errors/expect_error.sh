# Sourced by check.sh and check_json.sh: runs a command that must fail on bad input and
# compares what it printed with the one expected error line.
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
