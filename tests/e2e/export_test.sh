#!/usr/bin/env bash
# End-to-end tests of `tierflow export`: every format on a generated model plan, the same
# bytes twice, the report formats equal to what `tierflow sim` writes, and bad inputs with
# their documented exit codes (docs/cli.md).
# Usage: export_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute: one check runs elsewhere
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

same() {  # same NAME FILE_A FILE_B: byte-identical
  if cmp -s "$2" "$3"; then passes=$((passes + 1)); else
    echo "FAIL $1: $2 and $3 differ"; fails=$((fails + 1)); fi
}

# A two-layer Llama-2-7B decode planned under a budget that forces prefetches and stores.
check gen 0 "$tf" trace gen --model llama-2-7b --phase decode --context 512 --tokens 2 --layers 2 \
  -o "$tmp/w.json"
check plan 0 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w.json" --devices 1 \
  --budget 300MiB --policy hyperoffload -o "$tmp/p.json"
plan=$tmp/p.json

check list 0 "$tf" export --list-formats
for f in chakra csv chrome plan-json report-json report-csv; do contains "list-$f" "$tmp/out" "$f"; done

# Every file format, twice: the same bytes; no temporary file left behind.
for f in csv chrome plan-json report-json report-csv; do
  check "export-$f" 0 "$tf" export --plan "$plan" --format "$f" -o "$tmp/a.$f"
  check "export-$f-again" 0 "$tf" export --plan "$plan" --format "$f" -o "$tmp/b.$f"
  same "deterministic-$f" "$tmp/a.$f" "$tmp/b.$f"
done
ls "$tmp" | grep -q '\.tmp\.' && { echo "FAIL temporary file left behind"; fails=$((fails + 1)); }

# The report formats join sim's: the same bytes as sim --json, --csv and --timeline.
check sim-json 0 "$tf" sim --plan "$plan" --json -o "$tmp/sim.json" --timeline "$tmp/sim-tl.json"
check sim-csv 0 "$tf" sim --plan "$plan" --csv -o "$tmp/sim.csv"
same chrome-is-sim-timeline "$tmp/a.chrome" "$tmp/sim-tl.json"
same report-json-is-sim-json "$tmp/a.report-json" "$tmp/sim.json"
same report-csv-is-sim-csv "$tmp/a.report-csv" "$tmp/sim.csv"

# csv: the pinned header; one row per step; `-o -` is standard output.
head -1 "$tmp/a.csv" >"$tmp/header.csv"
paste -sd, tests/export/golden/steps_columns.txt >"$tmp/header-golden.csv"
same csv-header "$tmp/header.csv" "$tmp/header-golden.csv"
steps=$(python3 -c 'import json,sys; print(sum(len(p["steps"]) for p in json.load(open(sys.argv[1]))["programs"]))' "$plan")
[ "$(($(wc -l <"$tmp/a.csv") - 1))" = "$steps" ] && passes=$((passes + 1)) ||
  { echo "FAIL csv rows: $(wc -l <"$tmp/a.csv") lines for $steps steps"; fails=$((fails + 1)); }
check csv-stdout 0 "$tf" export --plan "$plan" --format csv -o -
same csv-stdout-same "$tmp/out" "$tmp/a.csv"
# The tiny plan's rows, as the unit test's golden holds them.
check csv-tiny 0 "$tf" export --plan tests/fixtures/plans/tiny.json --set tiers.hbm.capacity=4KiB \
  --format csv -o -
same csv-tiny-golden "$tmp/out" tests/export/golden/tiny_steps.csv

# plan-json: canonical, verifies, simulates like the input; written elsewhere, its
# references still resolve; --inline-workload embeds the workload.
mkdir -p "$tmp/elsewhere/deeper"
check plan-json-elsewhere 0 "$tf" export --plan "$plan" --format plan-json -o "$tmp/elsewhere/deeper/p.json"
check plan-json-verify 0 "$tf" plan verify "$tmp/elsewhere/deeper/p.json"
check plan-json-sim 0 "$tf" sim --plan "$tmp/elsewhere/deeper/p.json" --csv
grep -v '^run,[^,]*,plan' "$tmp/out" >"$tmp/sim-moved.csv"
grep -v '^run,[^,]*,plan' "$tmp/sim.csv" >"$tmp/sim-orig.csv"
same plan-json-simulates-the-same "$tmp/sim-moved.csv" "$tmp/sim-orig.csv"
check plan-json-inline 0 "$tf" export --plan "$plan" --format plan-json --inline-workload -o "$tmp/inline.json"
contains plan-json-inline-has-workload "$tmp/inline.json" '"workload": {"inline": {'
check plan-json-inline-verify 0 "$tf" plan verify "$tmp/inline.json"
# The canonical form is a fixed point.
check plan-json-fixed-point 0 "$tf" export --plan "$tmp/a.plan-json" --format plan-json -o "$tmp/c.plan-json"
same plan-json-fixed-point-same "$tmp/a.plan-json" "$tmp/c.plan-json"
# A plan in the working folder, written to standard output.
(cd "$tmp" && "$tf" export --plan p.json --format plan-json -o - >"$tmp/cwd.json" 2>"$tmp/err") &&
  passes=$((passes + 1)) || { echo "FAIL plan-json from the working folder"; cat "$tmp/err"; fails=$((fails + 1)); }
same plan-json-cwd "$tmp/cwd.json" "$tmp/a.plan-json"
# --set is recorded, so that the exported plan simulates as the export did.
check plan-json-set 0 "$tf" export --plan tests/fixtures/plans/tiny.json --set tiers.hbm.capacity=4KiB \
  --format plan-json -o "$tmp/tiny.json"
contains plan-json-set-recorded "$tmp/tiny.json" '"set": ["tiers.hbm.capacity=4KiB"]'
check plan-json-set-sim 0 "$tf" sim --plan "$tmp/tiny.json"

# chakra: a folder of STEM.PROGRAM.et, the same bytes twice.
check chakra 0 "$tf" export --plan "$plan" --format chakra -o "$tmp/et1"
check chakra-again 0 "$tf" export --plan "$plan" --format chakra -o "$tmp/et2"
[ "$(ls "$tmp/et1")" = "p.0.et" ] && passes=$((passes + 1)) ||
  { echo "FAIL chakra files: $(ls "$tmp/et1")"; fails=$((fails + 1)); }
same chakra-deterministic "$tmp/et1/p.0.et" "$tmp/et2/p.0.et"
check chakra-stem 0 "$tf" export --plan "$plan" --format chakra -o "$tmp/et1" --stem llama
[ -f "$tmp/et1/llama.0.et" ] && passes=$((passes + 1)) || { echo "FAIL --stem"; fails=$((fails + 1)); }
# Traces of another export beyond this plan's programs stay, and a note names them.
echo "an earlier trace" >"$tmp/et1/llama.1.et"
check chakra-stale 0 "$tf" export --plan "$plan" --format chakra -o "$tmp/et1" --stem llama
contains chakra-stale-note "$tmp/err" "note: $tmp/et1 also holds llama.1.et from another export: this plan has 1 program"
contains chakra-stale-kept "$tmp/et1/llama.1.et" "an earlier trace"
check chakra-no-stale 0 "$tf" export --plan "$plan" --format chakra -o "$tmp/et1"
if grep -q "note:" "$tmp/err"; then echo "FAIL chakra-no-stale: $(cat "$tmp/err")"; fails=$((fails + 1)); else passes=$((passes + 1)); fi

# Bad input: exit 2 with the reason; nothing written.
check unknown-format 2 "$tf" export --plan "$plan" --format chakr -o "$tmp/x"
contains unknown-format-msg "$tmp/err" "error: --format: unknown format 'chakr'; did you mean 'chakra'?"
check unknown-format-far 2 "$tf" export --plan "$plan" --format json -o "$tmp/x"
contains unknown-format-far-msg "$tmp/err" "did you mean"
check missing-o 2 "$tf" export --plan "$plan" --format csv
contains missing-o-msg "$tmp/err" "'tierflow export' needs -o: a file"
check missing-plan 2 "$tf" export --format csv -o "$tmp/x.csv"
check missing-format 2 "$tf" export --plan "$plan" -o "$tmp/x.csv"
check chakra-stdout 2 "$tf" export --plan "$plan" --format chakra -o -
contains chakra-stdout-msg "$tmp/err" "writes a folder"
check chakra-onto-file 2 "$tf" export --plan "$plan" --format chakra -o "$tmp/a.csv"
contains chakra-onto-file-msg "$tmp/err" "is a file, but format 'chakra' writes a folder"
check csv-onto-folder 2 "$tf" export --plan "$plan" --format csv -o "$tmp/et1"
contains csv-onto-folder-msg "$tmp/err" "is a folder, but format 'csv' writes one file"
check unwritable 2 "$tf" export --plan "$plan" --format csv -o "$tmp/no-such-folder/x.csv"
contains unwritable-msg "$tmp/err" "error: $tmp/no-such-folder/x.csv"
check bad-stem 2 "$tf" export --plan "$plan" --format chakra -o "$tmp/et3" --stem a/b
contains bad-stem-msg "$tmp/err" "error: --stem:"
check missing-plan-file 2 "$tf" export --plan "$tmp/none.json" --format csv -o "$tmp/x.csv"
check bad-set 2 "$tf" export --plan "$plan" --set tiers.hbm.capacty=1GB --format csv -o "$tmp/x.csv"
contains bad-set-msg "$tmp/err" "did you mean 'capacity'?"
# A broken plan rule: the verifier's message at the step's JSON position (plan-json verifies
# when reading; the simulated formats report when the step is reached, as sim does).
bad=tests/errors/plan/01-compute-without-wait.json
fix=(--hw tests/fixtures/unit_hw.yaml --set tiers.hbm.capacity=4KiB --set tiers.ddr.capacity=1MiB)
check rule-csv 2 "$tf" export --plan "$bad" "${fix[@]}" --format csv -o "$tmp/x.csv"
contains rule-csv-msg "$tmp/err" "01-compute-without-wait.json:29:7: program 0 step 2"
check rule-plan-json 2 "$tf" export --plan "$bad" "${fix[@]}" --format plan-json -o "$tmp/x.json"
contains rule-plan-json-msg "$tmp/err" "01-compute-without-wait.json:29:7: program 0 step 2"
# Infeasible: the fixture's 128-byte HBM cannot hold the plan: exit 1, as sim; no output.
check infeasible 1 "$tf" export --plan tests/fixtures/plans/tiny.json --format chrome -o "$tmp/x.json"
contains infeasible-msg "$tmp/err" "'hbm[0]' is full before the step starts"
# A plan that computes on the host (tierflow.plan/3): simulated with the host CPU its
# topology reference sets, exported, written back the same, replayed with its host step
# on the host engine beside the device.
host=tests/fixtures/plans/host_attention.json
check host-sim 0 "$tf" sim --plan "$host"
contains host-sim-makespan "$tmp/out" "makespan 982ns"
contains host-sim-cpu "$tmp/out" "host CPU  host ops"
check host-csv 0 "$tf" export --plan "$host" --format csv -o "$tmp/host.csv"
contains host-csv-row "$tmp/host.csv" "0,0,2,compute,1,attn,attention,-1,300,100,ddr,,,0,2,1,,341000,641000,300000,,,"
check host-plan-json 0 "$tf" export --plan "$host" --format plan-json -o "$tmp/host.json"
contains host-plan-json-format "$tmp/host.json" '"format": "tierflow.plan/3"'
check host-plan-json-sim 0 "$tf" sim --plan "$tmp/host.json"
contains host-plan-json-makespan "$tmp/out" "makespan 982ns"
check host-replay 0 "$tf" replay --plan "$host"
contains host-replay-cpu "$tmp/out" "host CPU             1 host step: measured "
contains host-replay-sim "$tmp/out" "simulated 300ns"
contains host-replay-peak "$tmp/out" "measured 80 B  predicted 80 B  equal"
sed 's|, "set": \[.*\]}|}|; s|"\.\./unit_hw.yaml"|"'"$PWD"'/tests/fixtures/unit_hw.yaml"|' "$host" >"$tmp/host-no-cpu.json"
check host-no-cpu 2 "$tf" sim --plan "$tmp/host-no-cpu.json"
contains host-no-cpu-msg "$tmp/err" "describes no host CPU (system.cpu)"
# --on-host: a plan made, its attention moved to the host CPU; written as plan/3, simulated
# the same by sim; compare says what moved; refusals name the flag.
check opt-gen 0 "$tf" trace gen --model opt-175b --layers 2 --phase decode --context 512 \
  --tokens 2 --batch 8 --kv-block 8 --weight-dtype fp16 --act-dtype fp16 -o "$tmp/opt.json"
onhost=(--hw t4-flexgen --workload "$tmp/opt.json" --pin weight=ddr --pin kv=ddr --policy layerwise)
check on-host-plan 0 "$tf" plan "${onhost[@]}" --on-host attention -o "$tmp/opt-host.json"
contains on-host-plan-line "$tmp/out" "on host   4 attention ops per device run by the host CPU next to 'ddr'"
grep '^simulated makespan' "$tmp/out" | cut -d' ' -f3 >"$tmp/opt-host.makespan"
contains on-host-plan-format "$tmp/opt-host.json" '"format": "tierflow.plan/3"'
contains on-host-plan-meta "$tmp/opt-host.json" '"on_host": "attention"'
check on-host-sim 0 "$tf" sim --plan "$tmp/opt-host.json"
contains on-host-sim-makespan "$tmp/out" "makespan $(cat "$tmp/opt-host.makespan")"
check on-host-compare 0 "$tf" compare "${onhost[@]:0:8}" --on-host attention
contains on-host-compare-line "$tmp/out" "on host    4 attention ops per device"
check on-host-kept 0 "$tf" plan "${onhost[@]:0:6}" --policy layerwise --on-host attention
contains on-host-kept-why "$tmp/out" "4 stay on the device (op 't0.L0.attention' reads 'L0.kv0', which is not homed on 'ddr' nor on a tier the host fetches from)"
check on-host-typo 2 "$tf" plan "${onhost[@]}" --on-host atention
contains on-host-typo-msg "$tmp/err" "error: --on-host: 'atention' is not an op kind"
check on-host-no-cpu 2 "$tf" plan --workload "$tmp/opt.json" --on-host attention
contains on-host-no-cpu-msg "$tmp/err" "error: --on-host: 'h100-sxm-8gpu' describes no host CPU (system.cpu)"

sed 's|tierflow.plan/3|tierflow.plan/2|' "$host" >"$tmp/host2.json"
check host-as-plan2 2 "$tf" sim --plan "$tmp/host2.json"
contains host-as-plan2-msg "$tmp/err" "is a field of 'tierflow.plan/3' plans"

for x in x x.csv x.json et3; do
  [ ! -e "$tmp/$x" ] && passes=$((passes + 1)) || { echo "FAIL $x written on error"; fails=$((fails + 1)); }
done
ls "$tmp" | grep -q '\.tmp\.' && { echo "FAIL temporary file left behind"; fails=$((fails + 1)); }

finish
