# Shared by the end-to-end CLI tests: a temp folder, pass/fail counters and checks.
# Source it after setting `tf`; end the test with `finish`.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

check() {  # check NAME EXPECTED_RC COMMAND...: the exit code; output in $tmp/out, $tmp/err
  local name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL $name: exit $rc, expected $want"; sed 's/^/  stderr: /' "$tmp/err" | head -5
    fails=$((fails + 1)); return 1
  fi
  passes=$((passes + 1))
}

contains() {  # contains NAME FILE TEXT: FILE holds TEXT literally
  if grep -qF -- "$3" "$2"; then passes=$((passes + 1)); else
    echo "FAIL $1: '$3' not found in output"; sed 's/^/  /' "$2" | head -20; fails=$((fails + 1)); fi
}

ok() {  # ok NAME COMMAND...: the command succeeds
  if "${@:2}"; then passes=$((passes + 1)); else echo "FAIL $1"; fails=$((fails + 1)); fi
}

finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" = 0 ]
}
