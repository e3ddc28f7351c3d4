#!/usr/bin/env bash
# End-to-end tests of `tierflow report` and of the timeline's units and counters: a page for
# a generated plan, byte-identical on a second run, the plans `compare --plans` writes, a
# run that stops on a full tier, and bad input.
# Usage: report_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$1
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

hw=configs/hw/h100-sxm-8gpu.yaml
check gen 0 "$tf" trace gen --model llama-3-8b --phase decode --context 512 --tokens 1 -o "$tmp/w.json"
# Layerwise on two H100s with 1600 MiB of HBM each: it peaks at 1.48 GiB.
check plan 0 "$tf" plan --hw "$hw" --workload "$tmp/w.json" --budget 1600MiB --devices 2 \
  --policy layerwise -o "$tmp/p.json"

# One plan: a page with the plots; the same bytes again; nothing left behind.
check report 0 "$tf" report "$tmp/p.json" -o "$tmp/r1.html"
contains report-wrote "$tmp/err" "wrote $tmp/r1.html: 1 plan"
contains report-doctype "$tmp/r1.html" "<!DOCTYPE html>"
contains report-memory "$tmp/r1.html" "hbm[0] bytes by tensor kind"
contains report-link "$tmp/r1.html" "gpu-pcie[0] rc-&gt;hbm rate"
contains report-waits "$tmp/r1.html" "Exposed waits, longest first"
contains report-budget "$tmp/r1.html" ">budget 1.56GiB</text>"
# The bounds plan computed travel in the plan: the report shows them (and the gap).
contains report-bounds "$tmp/r1.html" "<th>bounds</th><td>makespan &ge; "
contains report-bounds-gap "$tmp/r1.html" "&times;), compute "
# Two programs: each device's waits against the makespan, not only their sum.
contains report-per-device "$tmp/r1.html" '<th>per device</th><td><table class="per-device">'
contains report-per-device-1 "$tmp/r1.html" "<tr><td>1</td><td>"
check report-again 0 "$tf" report "$tmp/p.json" -o "$tmp/r2.html"
cmp -s "$tmp/r1.html" "$tmp/r2.html" && passes=$((passes + 1)) ||
  { echo "FAIL report is not deterministic"; fails=$((fails + 1)); }
ls "$tmp" | grep -q '\.tmp\.' && { echo "FAIL temporary file left behind"; fails=$((fails + 1)); }
# Standard output by default.
check report-stdout 0 "$tf" report "$tmp/p.json"
cmp -s "$tmp/out" "$tmp/r1.html" && passes=$((passes + 1)) ||
  { echo "FAIL report to stdout differs from -o"; fails=$((fails + 1)); }
# Self-contained: no script, nothing fetched.
if grep -qE '<script|src=|@import|url\(' "$tmp/r1.html"; then
  echo "FAIL the page loads or runs something"; fails=$((fails + 1))
else passes=$((passes + 1)); fi
# --set overrides show in the header.
check report-set 0 "$tf" report "$tmp/p.json" --set links.gpu-pcie.copy_engines=1 -o "$tmp/r3.html"
contains report-set-shown "$tmp/r3.html" "--set links.gpu-pcie.copy_engines=1"

# The plans compare writes, all on one page with a comparison.
check compare-plans 0 "$tf" compare --workload "$tmp/w.json" --budget 1600MiB --policies layerwise,tierflow \
  --plans "$tmp/plans" -o "$tmp/compare.txt"
check report-compare 0 "$tf" report "$tmp"/plans/*.json -o "$tmp/c.html"
contains report-compare-section "$tmp/c.html" "<h2>Policy comparison</h2>"
contains report-compare-bars "$tmp/c.html" '<svg class="bars"'
contains report-compare-wrote "$tmp/err" "2 plans"
! grep -q "not recorded in the plan" "$tmp/c.html" && passes=$((passes + 1)) ||
  { echo "FAIL compare's plans lack their bounds"; fails=$((fails + 1)); }

# A tier over capacity: the page is still written, with the error on top; exit 1.
check report-full 1 "$tf" report "$tmp/p.json" --set tiers.hbm.capacity=1400MiB --set devices.h100.reserved=0B -o "$tmp/full.html"
contains report-full-alert "$tmp/full.html" 'role="alert"'
contains report-full-stderr "$tmp/err" "is over capacity"
# Waiting for memory instead: the prefetches wait for room and the run finishes.
check report-wait 0 "$tf" report "$tmp/p.json" --set tiers.hbm.capacity=1400MiB --set devices.h100.reserved=0B --on-full wait -o "$tmp/wait.html"

# Bad input: exit 2 with the file named.
check report-missing 2 "$tf" report "$tmp/none.json" -o "$tmp/x.html"
contains report-missing-msg "$tmp/err" "error: $tmp/none.json: cannot open file"
check report-not-a-plan 2 "$tf" report "$tmp/w.json" -o "$tmp/x.html"
check report-no-plans 2 "$tf" report -o "$tmp/x.html"
check report-bad-set 2 "$tf" report "$tmp/p.json" --set tiers.hbm.capacty=1GiB -o "$tmp/x.html"
check report-bad-on-full 2 "$tf" report "$tmp/p.json" --on-full maybe -o "$tmp/x.html"
[ -e "$tmp/x.html" ] && { echo "FAIL a page was written for bad input"; fails=$((fails + 1)); }

# The timeline: ts in microseconds, said in its metadata; tier counters by kind, only for the
# tier instances the plan touches (2 programs: hbm[0], hbm[1] and the socket's ddr[0]).
check timeline 0 "$tf" sim --plan "$tmp/p.json" --timeline "$tmp/tl.json"
python3 - "$tmp/tl.json" <<'EOF' && passes=$((passes + 1)) || { echo "FAIL timeline units or counters"; fails=$((fails + 1)); }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["displayTimeUnit"] == "ns", d["displayTimeUnit"]
assert d["otherData"]["ts_unit"] == "us", d["otherData"]
tiers = {e["name"].split(" ")[0] for e in d["traceEvents"] if e["ph"] == "C" and " bytes" in e["name"]}
assert tiers == {"hbm[0]", "hbm[1]", "ddr[0]"}, tiers
kinds = [e for e in d["traceEvents"] if e["ph"] == "C" and e["name"] == "hbm[0] bytes by kind"]
totals = {e["ts"]: e["args"]["value"] for e in d["traceEvents"] if e["ph"] == "C" and e["name"] == "hbm[0] bytes"}
assert kinds and set(kinds[0]["args"]) >= {"weight", "kv"}, kinds[0]["args"]
for e in kinds:
    assert sum(e["args"].values()) == totals[e["ts"]], e
EOF

# A plan that breaks a rule is drawn up to the stop, its error at the step's position as sim
# gives it.
python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))
s = next(s for s in p["programs"][0]["steps"] if "compute" in s and s.get("wait"))
del s["wait"]
json.dump(p, open(sys.argv[2], "w"), indent=1)' "$tmp/p.json" "$tmp/broken.json"
check broken-rule 2 "$tf" report "$tmp/broken.json" -o "$tmp/broken.html"
grep -qE "^error: $tmp/broken.json:[0-9]+:[0-9]+: program 0 step [0-9]+: op " "$tmp/err" && passes=$((passes + 1)) ||
  { echo "FAIL broken-rule-position: no file:line:col"; cat "$tmp/err"; fails=$((fails + 1)); }

finish
