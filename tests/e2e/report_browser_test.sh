#!/usr/bin/env bash
# `tierflow report` opened in headless Chromium: the rendered DOM holds the plots with data
# and the screenshot shows them (tests/e2e/check_report_render.py). The same checks must
# fail on a blank page, so a page that does not render cannot pass.
# Usage: report_browser_test.sh TIERFLOW_BINARY   (run from the repository root)
# Exit 77 (skipped, with the reason) when Chromium is missing or cannot start here.
set -u
tf=$1
tmp=$(mktemp -d)
chromium_pid=""
cleanup() {
  # Only the process group this test started (see run_chromium).
  if [ -n "$chromium_pid" ]; then kill -KILL -- "-$chromium_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

browser=$(command -v chromium || true)
if [ -z "$browser" ]; then
  echo "skipped: chromium is not installed (scripts/setup-test.sh installs it)"
  exit 77
fi
py=/usr/bin/python3  # Debian's, with python3-pil
[ -x "$py" ] || py=python3

# run_chromium OUT ARGS...: headless Chromium on the page, stdout to OUT. It runs in a
# session of its own (a background job of this non-interactive shell is no group leader, so
# setsid does not fork: its pid is the group id), and whatever of that group is left when it
# returns (renderer, GPU and zygote children) is killed: nothing else is touched.
run_chromium() {
  local out=$1
  shift
  setsid timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --no-first-run --user-data-dir="$tmp/profile" "$@" >"$out" 2>"$tmp/chromium.err" &
  chromium_pid=$!
  wait "$chromium_pid"
  local rc=$?
  kill -KILL -- "-$chromium_pid" 2>/dev/null
  chromium_pid=""
  return $rc
}

# A small plan with transfers and waits: Llama-3-8B decoding one token on two H100s with
# 3 GiB of HBM each.
"$tf" trace gen --model llama-3-8b --phase decode --context 512 --tokens 1 -o "$tmp/w.json" \
  >/dev/null 2>&1 || { echo "FAIL trace gen"; exit 1; }
"$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w.json" --budget 3GiB \
  --devices 2 --policy tierflow -o "$tmp/p.json" >/dev/null 2>&1 || { echo "FAIL plan"; exit 1; }
"$tf" report "$tmp/p.json" -o "$tmp/report.html" 2>"$tmp/report.err" ||
  { echo "FAIL report"; cat "$tmp/report.err"; exit 1; }

if ! run_chromium "$tmp/dom.html" --dump-dom "file://$tmp/report.html" || [ ! -s "$tmp/dom.html" ]; then
  echo "skipped: chromium cannot start here: $(grep -v '^$' "$tmp/chromium.err" | tail -1)"
  exit 77
fi
run_chromium "$tmp/out" --window-size=1400,3000 --screenshot="$tmp/shot.png" \
  "file://$tmp/report.html" || { echo "FAIL chromium --screenshot"; tail -5 "$tmp/chromium.err"; exit 1; }

"$py" tests/e2e/check_report_render.py "$tmp/dom.html" "$tmp/shot.png"
rc=$?
if [ "$rc" = 77 ]; then exit 77; fi
if [ "$rc" != 0 ]; then
  # Keep what failed for a person to look at.
  keep=${TMPDIR:-/tmp}/tierflow-report-browser-failed
  rm -rf "$keep" && mkdir -p "$keep" && cp "$tmp/report.html" "$tmp/dom.html" "$tmp/shot.png" "$keep/"
  echo "FAIL the report did not render as expected; page, DOM and screenshot in $keep"
  exit 1
fi

# The checks fail on a blank page: they look at what was drawn, not at the exit codes.
printf '<!DOCTYPE html><html><head><title>blank</title></head><body></body></html>\n' >"$tmp/blank.html"
run_chromium "$tmp/blank-dom.html" --dump-dom "file://$tmp/blank.html" &&
  run_chromium "$tmp/out" --window-size=1400,3000 --screenshot="$tmp/blank.png" "file://$tmp/blank.html" ||
  { echo "FAIL chromium on the blank page"; exit 1; }
if "$py" tests/e2e/check_report_render.py "$tmp/blank-dom.html" "$tmp/blank.png" >/dev/null; then
  echo "FAIL the render checks pass on a blank page"
  exit 1
fi
echo "ok: the report rendered in $("$browser" --version 2>/dev/null | head -1)"
