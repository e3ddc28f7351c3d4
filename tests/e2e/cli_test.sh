#!/usr/bin/env bash
# End-to-end tests of the tierflow CLI: exit codes, outputs, determinism, docs in sync.
# Usage: cli_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$1
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

# Every shipped topology validates, with every number cited.
# No command: the commands, each with what it does, and where to start.
check no-command 2 "$tf"
contains no-command-list "$tmp/err" "error: 'tierflow' needs a command:"
contains no-command-whatif "$tmp/err" "  whatif     capacity questions answered by search"
contains no-command-start "$tmp/err" "Start with 'tierflow whatif'"
check no-trace-command 2 "$tf" trace
contains no-trace-command-list "$tmp/err" "  gen        generate the operator graph of one step of a model"
check validate-shipped 0 "$tf" hw validate --require-sources configs/hw/*.yaml
contains validate-ok "$tmp/out" "ok: configs/hw/cloudmatrix384.yaml"

# CloudMatrix384: per-NPU and whole-supernode HBM, and the pool route bandwidth.
check show-cm384 0 "$tf" hw show configs/hw/cloudmatrix384.yaml
cp "$tmp/out" "$tmp/cm384.txt"
contains cm384-hbm-per-npu "$tmp/cm384.txt" "hbm capacity"
grep -E '^  hbm capacity +128GB +49\.152TB$' "$tmp/cm384.txt" >/dev/null &&
  passes=$((passes + 1)) || { echo "FAIL cm384 totals line"; fails=$((fails + 1)); }
grep -E '^  hbm +pool +128GB/s ' "$tmp/cm384.txt" >/dev/null &&
  passes=$((passes + 1)) || { echo "FAIL cm384 pool route"; fails=$((fails + 1)); }

# Two supernodes: the system line says them, the totals are of both, each its own pool.
check show-cm384-two 0 "$tf" hw show configs/hw/cloudmatrix384.yaml --set system.supernodes=2 --set system.hosts=96 --set devices.ascend910c.count=768
contains cm384-two-system "$tmp/out" "2 supernodes of 48 hosts, 96 hosts x 4 sockets = 384 sockets; 768 devices"
contains cm384-two-totals "$tmp/out" "all 2 supernodes"
grep -E '^  pool +pool +supernode +2 ' "$tmp/out" >/dev/null &&
  passes=$((passes + 1)) || { echo "FAIL cm384-two pool instances"; fails=$((fails + 1)); }

# --all-routes lists every ordered pair, e.g. host memory to SSD.
check show-all-routes 0 "$tf" hw show --all-routes configs/hw/h100-sxm-8gpu.yaml
contains all-routes-ddr-ssd "$tmp/out" "ddr -> rc -[nvme-link]-> ssd"

# A staged route (NVMe through a pinned host buffer, no GDS): the chained rate of its legs,
# 1 / (1/10 + 1/25.1) GB/s, in the routes table and in the plan's bound on pinned weights.
check show-staged 0 "$tf" hw show configs/hw/a100-nvme-bounce.yaml
contains staged-route "$tmp/out" "ssd   hbm   7.154GB/s"
contains staged-mark "$tmp/out" "[staged: 1 x 64MiB]"
check staged-trace 0 "$tf" trace gen --model llama-3-8b --phase decode --layers 2 --tokens 2 \
  -o "$tmp/staged-w.json"
check staged-plan 0 "$tf" plan --hw configs/hw/a100-nvme-bounce.yaml --workload "$tmp/staged-w.json" \
  --devices 1 --pin weight=ssd --policy layerwise
contains staged-bound "$tmp/out" "from 'ssd' at 7.2 GB/s"

# Same inputs, byte-identical outputs.
"$tf" hw show configs/hw/cloudmatrix384.yaml >"$tmp/cm384b.txt" 2>&1
cmp -s "$tmp/cm384.txt" "$tmp/cm384b.txt" && passes=$((passes + 1)) ||
  { echo "FAIL show is not deterministic"; fails=$((fails + 1)); }

# JSON output parses and carries base units; -o writes the same bytes atomically.
check show-json 0 "$tf" hw show --json configs/hw/gh200.yaml
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["tierflow"]=="hw/1"; assert d["tiers"][0]["capacity_bytes"]>0' "$tmp/out" &&
  passes=$((passes + 1)) || { echo "FAIL show --json does not parse"; fails=$((fails + 1)); }
cp "$tmp/out" "$tmp/gh200.json"
check show-json-o 0 "$tf" hw show --json configs/hw/gh200.yaml -o "$tmp/gh200-o.json"
cmp -s "$tmp/gh200.json" "$tmp/gh200-o.json" && passes=$((passes + 1)) ||
  { echo "FAIL -o output differs from stdout"; fails=$((fails + 1)); }
ls "$tmp" | grep -q '\.tmp\.' && { echo "FAIL temporary file left behind"; fails=$((fails + 1)); }

# --set changes the answer; a bad path is exit 2 with a position.
check set-ok 0 "$tf" hw show configs/hw/h100-sxm-8gpu.yaml --set tiers.hbm.capacity=96GB
contains set-applied "$tmp/out" "96GB"
check set-bad-path 2 "$tf" hw show configs/hw/h100-sxm-8gpu.yaml --set tiers.hbm.capacty=96GB
contains set-bad-path-msg "$tmp/err" "error: --set:1:11: unknown key 'capacty' in tier 'hbm'; did you mean 'capacity'?"

# docs/hardware.md is generated from the parameter declarations.
check describe-md 0 "$tf" hw describe --markdown
cmp -s "$tmp/out" docs/hardware.md && passes=$((passes + 1)) ||
  { echo "FAIL docs/hardware.md is stale: run 'tierflow hw describe --markdown -o docs/hardware.md'"; fails=$((fails + 1)); }
check describe-text 0 "$tf" hw describe
contains describe-has-capacity "$tmp/out" "capacity"

# Documented exit codes.
check version 0 "$tf" --version
check help 0 "$tf" --help
check no-subcommand 2 "$tf"
check unknown-flag 2 "$tf" hw show --bogus configs/hw/gh200.yaml
check missing-file 2 "$tf" hw validate does-not-exist.yaml
contains missing-file-msg "$tmp/err" "error: does-not-exist.yaml: cannot open file: no such file"
# One bad file among good ones: every file is reported, exit 2.
printf 'tierflow: hw/1\nname: x\n' >"$tmp/bad.yaml"
check mixed 2 "$tf" hw validate configs/hw/gh200.yaml "$tmp/bad.yaml"
contains mixed-ok "$tmp/out" "ok: configs/hw/gh200.yaml"
contains mixed-err "$tmp/err" "missing required key 'devices'"

# Workloads: generate, inspect, import; deterministic; bad input is exit 2.
check gen-decode 0 "$tf" trace gen --model llama-3-8b --phase decode --context 512 --tokens 2 -o "$tmp/w.json"
check info 0 "$tf" trace info "$tmp/w.json"
contains info-kv "$tmp/out" "KV cache per token (all layers): 131072 B"
contains info-params "$tmp/out" "8.030 G"
# 514 tokens of 128 KiB hold 64.25 MiB; blocks of 256 tokens round them up to 768 (96 MiB).
contains info-kv-tokens "$tmp/out" "KV cache of the tokens: 64.2MiB (514 tokens); the kv tensors (96MiB) round each sequence up to whole blocks of 256 tokens"
check info-json 0 "$tf" trace info --json "$tmp/w.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["kv_bytes_per_token"]==131072' "$tmp/out" &&
  passes=$((passes + 1)) || { echo "FAIL trace info --json"; fails=$((fails + 1)); }
"$tf" trace gen --model llama-3-8b --phase decode --context 512 --tokens 2 -o "$tmp/w2.json" 2>/dev/null
cmp -s "$tmp/w.json" "$tmp/w2.json" && passes=$((passes + 1)) ||
  { echo "FAIL trace gen is not deterministic"; fails=$((fails + 1)); }
check import 0 "$tf" trace import "$tmp/w.json" -o "$tmp/w3.json"
cmp -s "$tmp/w.json" "$tmp/w3.json" && passes=$((passes + 1)) ||
  { echo "FAIL import does not round-trip"; fails=$((fails + 1)); }
check gen-train 0 "$tf" trace gen --model mixtral-8x7b --phase train --seq 64 --layers 2 --checkpoint -o "$tmp/t.json"
check gen-hf 0 "$tf" trace gen --hf-config tests/fixtures/hf/qwen2_moe.json --phase prefill --seq 32 -o "$tmp/q.json"
check gen-bad-model 2 "$tf" trace gen --model llama-3-7b --phase decode -o "$tmp/x.json"
contains gen-bad-model-msg "$tmp/err" "did you mean"
# An unknown model names the flag, in every command that takes one (it named nothing).
check gen-unknown-model 2 "$tf" trace gen --model llama-3-9b -o "$tmp/x.json"
contains gen-unknown-model-flag "$tmp/err" "error: --model: unknown model 'llama-3-9b'"
check serve-unknown-model 2 "$tf" serve --model llama-3-9b --arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2
contains serve-unknown-model-flag "$tmp/err" "error: --model: unknown model 'llama-3-9b'"
check compare-unknown-model 2 "$tf" compare --model llama-3-9b
contains compare-unknown-model-flag "$tmp/err" "error: --model: unknown model 'llama-3-9b'"
check gen-negative-seed 2 "$tf" trace gen --model mixtral-8x7b --layers 1 --routing seeded --seed -1 -o "$tmp/x.json"
contains gen-negative-seed-msg "$tmp/err" "--seed: negative value '-1'"
# A flag the phase does not read would be ignored: refused, naming it (and in a request).
check gen-seq-in-decode 2 "$tf" trace gen --model llama-3-8b --phase decode --seq 8192 -o "$tmp/x.json"
contains gen-seq-in-decode-msg "$tmp/err" "error: --seq: a decode step does not read it, so it would be ignored: decode takes --context (the tokens cached) and --tokens (those generated)"
check gen-context-in-prefill 2 "$tf" trace gen --model llama-3-8b --phase prefill --context 8192 -o "$tmp/x.json"
contains gen-context-in-prefill-msg "$tmp/err" "error: --context: a prefill step does not read it, so it would be ignored: prefill and training take --seq (tokens per sequence)"
check gen-checkpoint-in-decode 2 "$tf" trace gen --model llama-3-8b --checkpoint -o "$tmp/x.json"
contains gen-checkpoint-in-decode-msg "$tmp/err" "error: --checkpoint: a decode step does not read it, so it would be ignored: activation checkpointing is training's"
check gen-train-checkpoint 0 "$tf" trace gen --model llama-3-8b --phase train --seq 64 --layers 1 --checkpoint -o "$tmp/train-ck.json"
check compare-request-context 2 "$tf" compare --model llama-3-8b --prompt 512 --generate 16 --context 4096
contains compare-request-context-msg "$tmp/err" "error: --context: a request (--prompt, --generate) makes its own prefill and decode steps, so it would be ignored"
check gen-negative-quant-group 2 "$tf" trace gen --model llama-3-8b --weight-dtype int4 --quant-group -1 -o "$tmp/x.json"
check gen-bad-tp 2 "$tf" trace gen --model llama-3-70b --tp 3 -o "$tmp/x.json"
contains gen-bad-tp-msg "$tmp/err" "tp 3 does not divide the 64 attention heads"
[ ! -e "$tmp/x.json" ] && passes=$((passes + 1)) || { echo "FAIL output written on error"; fails=$((fails + 1)); }

# Simulation: the hand-checkable plan of tests/fixtures/plans/tiny.json on unit_hw.yaml.
plan=tests/fixtures/plans/tiny.json
big=(--set tiers.hbm.capacity=4KiB)
check sim-ok 0 "$tf" sim --plan "$plan" "${big[@]}" --timeline "$tmp/tl.json"
contains sim-makespan "$tmp/out" "makespan 4.778us"
contains sim-overrides "$tmp/out" "overrides tiers.hbm.capacity=4KiB"
check sim-json 0 "$tf" sim --plan "$plan" "${big[@]}" --json -o "$tmp/r1.json" --timeline "$tmp/tl2.json"
contains sim-json-makespan "$tmp/r1.json" '"makespan_ps": 4778000'
check sim-json-again 0 "$tf" sim --plan "$plan" "${big[@]}" --json -o "$tmp/r2.json" --timeline "$tmp/tl3.json"
cmp -s "$tmp/r1.json" "$tmp/r2.json" && cmp -s "$tmp/tl2.json" "$tmp/tl3.json" && passes=$((passes + 1)) ||
  { echo "FAIL sim report or timeline is not deterministic"; fails=$((fails + 1)); }
contains sim-timeline-flow "$tmp/tl.json" '"ph":"f","bp":"e"'
check sim-csv 0 "$tf" sim --plan "$plan" "${big[@]}" --csv --transfers "$tmp/x.csv"
contains sim-csv-row "$tmp/out" "run,tiny.hand-written,makespan_ps,4778000"
contains sim-transfers-csv "$tmp/x.csv" "0,4,store,4,z,3,64,hbm,ddr,4559000,4559000,4714000,4778000,0"
# The fixture's 128-byte HBM cannot hold the device-resident kv: infeasible, exit 1.
check sim-full 1 "$tf" sim --plan "$plan"
contains sim-full-msg "$tmp/err" "'hbm[0]' is full before the step starts"
# A broken §6 rule: the verifier's message at the step's JSON position, and when it is reached.
check sim-rule 2 "$tf" sim --plan tests/errors/plan/01-compute-without-wait.json --hw tests/fixtures/unit_hw.yaml \
  --set tiers.hbm.capacity=4KiB --set tiers.ddr.capacity=1MiB
contains sim-rule-msg "$tmp/err" "01-compute-without-wait.json:29:7: program 0 step 2: op 'norm' may start before the prefetch"
contains sim-rule-time "$tmp/err" "(reached at 0ps)"
check sim-bad-tier 2 "$tf" sim --plan "$plan" --hw configs/hw/cloudmatrix384.yaml
contains sim-bad-tier-msg "$tmp/err" "the plan's tier 'ddr' is not in topology"
check sim-bad-on-full 2 "$tf" sim --plan "$plan" --on-full maybe

# Replay: the same plan run for real on the CPU backend and compared with the simulator.
check replay-ok 0 "$tf" replay --backend cpu --plan "$plan" "${big[@]}" --time-scale 1000 --timeline "$tmp/rtl.json"
contains replay-makespan "$tmp/out" "simulated 4.778us"
contains replay-steps "$tmp/out" "steps executed       9"
contains replay-limit "$tmp/out" "memory limit         1GiB (default)"
contains replay-peak "$tmp/out" "hbm[0]: measured 800 B  predicted 800 B  equal"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(e.get("cat")=="transfer" for e in d["traceEvents"])' "$tmp/rtl.json" &&
  passes=$((passes + 1)) || { echo "FAIL replay timeline does not parse"; fails=$((fails + 1)); }
check replay-json 0 "$tf" replay --plan "$plan" "${big[@]}" --time-scale 1000 --json -o "$tmp/rp.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["format"]=="tierflow.replay/1"; assert d["makespan_ps"]["simulated"]==4778000; assert d["peak_device_memory"][0]["equal"]; assert len(d["measured_steps"])==9; assert d["transfers"]["duration_error_p90_abs_by_time"] >= 0; assert d["memory_limit"]=={"bytes":1<<30,"origin":"default"}' "$tmp/rp.json" &&
  passes=$((passes + 1)) || { echo "FAIL replay --json"; fails=$((fails + 1)); }
# The 128-byte HBM again: exit 1, as sim; a broken rule: exit 2 with the verifier's words.
check replay-full 1 "$tf" replay --plan "$plan"
contains replay-full-msg "$tmp/err" "'hbm[0]' is full before the step starts"
check replay-rule 2 "$tf" replay --plan tests/errors/plan/01-compute-without-wait.json --hw tests/fixtures/unit_hw.yaml \
  --set tiers.hbm.capacity=4KiB --set tiers.ddr.capacity=1MiB
contains replay-rule-msg "$tmp/err" "01-compute-without-wait.json:29:7: program 0 step 2: op 'norm' may start before the prefetch"
check replay-bad-backend 2 "$tf" replay --backend tpu --plan "$plan"
# --backend cuda is refused (exit 2, saying why) by a binary built without the CUDA backend
# and on a machine without a GPU; with a GPU it runs, and the 128-byte HBM is full (exit 1).
"$tf" replay --backend cuda --plan "$plan" >"$tmp/out" 2>"$tmp/err"
rc=$?
if grep -qE "built without the CUDA backend|cuda: no CUDA device" "$tmp/err"; then
  [ "$rc" = 2 ] && passes=$((passes + 1)) || { echo "FAIL replay-cuda-refused: exit $rc"; fails=$((fails + 1)); }
else
  [ "$rc" = 1 ] && passes=$((passes + 1)) || { echo "FAIL replay-cuda: exit $rc"; sed 's/^/  stderr: /' "$tmp/err" | head -5; fails=$((fails + 1)); }
fi
check replay-cuda-scale 2 "$tf" replay --backend cuda --plan "$plan" --time-scale 1000
check replay-cpu-gemm 2 "$tf" replay --backend cpu --plan "$plan" --compute gemm
check replay-bad-scale 2 "$tf" replay --plan "$plan" --time-scale fast
# A replay refused before its first step writes no report (issue 31): arenas over the
# memory limit at real sizes, a plan whose tiers the topology lacks.
check replay-refused-limit 2 "$tf" replay --plan "$plan" "${big[@]}" --copy native --memory-limit 64B \
  --json -o "$tmp/refused.json"
contains replay-refused-limit-msg "$tmp/err" "at their real sizes, more than the backend's"
ok replay-refused-limit-no-file test ! -e "$tmp/refused.json"
check replay-refused-tier 2 "$tf" replay --plan "$plan" --hw configs/hw/cloudmatrix384.yaml -o "$tmp/refused.txt"
contains replay-refused-tier-msg "$tmp/err" "the plan's tier 'ddr' is not in topology"
ok replay-refused-tier-no-file test ! -e "$tmp/refused.txt"

# Planning: a 2-layer Llama-2-7B decode whose weights do not fit a 300 MiB budget.
check plan-gen 0 "$tf" trace gen --model llama-2-7b --phase decode --context 512 --tokens 2 --layers 2 -o "$tmp/w7.json"
check plan-ok 0 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --devices 1 \
  --budget 300MiB --policy hyperoffload --explain --stats -o "$tmp/p7.json"
contains plan-pipeline "$tmp/out" "pipeline  place,liveness,select,insert,schedule,verify"
contains plan-explain "$tmp/out" "largest offloaded tensors:"
contains plan-stats "$tmp/out" "select     offloaded tensors"
# The tierflow policy's --explain prints its portfolio: every pipeline tried, the best marked.
check plan-portfolio 0 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" \
  --devices 1 --budget 300MiB --explain --threads 1 -o "$tmp/p7t.json"
contains plan-portfolio-table "$tmp/out" "tierflow portfolio: "
contains plan-portfolio-first "$tmp/out" "reorder,place{multi=true},liveness,select,insert,schedule,verify"
ok plan-portfolio-one-best test "$(grep -cE '^ +\*[0-9]+  ' "$tmp/out")" = 1
# The H200 full-size case (docs/validation.md), a step bound by its copies: on the 11-30
# calibration the pick is no slower than the plans made on the 11-27 and 11-28 ones (it
# was 0.9% slower before the portfolio ranked every gap by its score).
check h200-full-trace 0 "$tf" trace gen --model llama-3-70b --phase decode --weight-dtype int8 \
  --context 4096 --tokens 2 -o "$tmp/full.json"
for day in 27 28 30; do
  check "h200-full-plan-$day" 0 "$tf" plan --hw "docs/validation/h200-2026-11-$day/cuda.yaml" \
    --workload "$tmp/full.json" --devices 1 --budget 16GiB -o "$tmp/full-$day.json"
  check "h200-full-sim-$day" 0 "$tf" sim --plan "$tmp/full-$day.json" \
    --hw docs/validation/h200-2026-11-30/cuda.yaml --json -o "$tmp/full-$day.sim.json"
done
ok h200-full-pick-no-slower python3 -c '
import json, sys
ms = [json.load(open(f))["makespan_ps"] for f in sys.argv[1:]]
assert ms[2] <= min(ms[:2]), ms' "$tmp"/full-{27,28,30}.sim.json

# replay --measured scores a recorded GPU replay again, no GPU needed: on the topology it
# ran on it gives the recorded comparison back exactly; with the device->host copies'
# contended setup (8.8 us, fitted on the 11-30 run) the 11-28 training step's transfers
# meet the 25% p90 that they missed by 200%.
mkdir -p "$tmp/h200"
tar xzf docs/validation/h200-2026-11-28/replays.tar.gz -C "$tmp/h200" train.plan.json train.json \
  train.timed.replay1.json
h200=(--plan "$tmp/h200/train.plan.json" --hw docs/validation/h200-2026-11-28/cuda.yaml)
check measured-same 0 "$tf" replay --measured "$tmp/h200/train.timed.replay1.json" "${h200[@]}" \
  --json -o "$tmp/rescored.json"
ok measured-same-numbers python3 -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["makespan_ps"] == b["makespan_ps"] and a["transfers"]["duration_error_p90_abs"] == \
    b["transfers"]["duration_error_p90_abs"] and a["measured_steps"] == b["measured_steps"], (a, b)
assert b["transfers"]["duration_error_p90_abs"] > 1.5' "$tmp/h200/train.timed.replay1.json" \
  "$tmp/rescored.json"
check measured-contended 0 "$tf" replay --measured "$tmp/h200/train.timed.replay1.json" \
  "${h200[@]}" --set links.copy.contended_setup=8.8us --json -o "$tmp/contended.json"
ok measured-contended-p90 python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["transfers"]
assert t["duration_error_p90_abs"] <= 0.25, t' "$tmp/contended.json"
check measured-text 0 "$tf" replay --measured "$tmp/h200/train.timed.replay1.json" "${h200[@]}"
contains measured-text-line "$tmp/out" "replay llama-2-7b-train.tierflow on calibrated-cuda: backend cuda"
check plan-too-many-devices 2 "$tf" plan --hw configs/hw/gh200.yaml --workload "$tmp/w7.json" --devices 2 \
  --policy resident -o "$tmp/p-dev.json"
contains plan-too-many-devices-msg "$tmp/err" "--devices: 2 programs, but the topology has 1 'hopper' device"
check plan-more-devices 0 "$tf" plan --hw configs/hw/gh200.yaml --set devices.hopper.count=2 \
  --workload "$tmp/w7.json" --devices 2 --policy resident -o "$tmp/p-dev.json"
check plan-verify 0 "$tf" plan verify "$tmp/p7.json"
# The process's own descriptors are written through: `-o /dev/stdout >> log` appends to the
# log (it was opened again, truncated, and the earlier lines lost).
echo "an earlier line" >"$tmp/log.txt"
ok own-descriptor-appends bash -c '"$1" sim --plan "$2" -o /dev/stdout >>"$3" &&
  "$1" sim --plan "$2" --transfers /dev/stderr -o /dev/null 2>>"$3"' _ "$tf" "$tmp/p7.json" "$tmp/log.txt"
ok own-descriptor-appends-kept python3 -c '
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "an earlier line", lines[:2]
assert lines[1].startswith("plan "), lines[1]
assert any(l.startswith("program,step,kind,tensor") for l in lines[2:]), lines[-3:]' "$tmp/log.txt"
# Calibrate: this machine's memcpy threads as a topology; a plan made on it replays with
# native copies (real sizes, real speed).
check calibrate-cpu 0 "$tf" calibrate --backend cpu -o "$tmp/cal.yaml" --max-size 1MiB --repeats 1 \
  --concurrent 2 --device-memory 64MiB
contains calibrate-report "$tmp/out" "wrote $tmp/cal.yaml"
contains calibrate-fit "$tmp/out" "ddr -> hbm: latency"
check calibrate-valid 0 "$tf" hw validate --require-sources "$tmp/cal.yaml"
# int4 keeps the layer small; the embedding and LM head stay bf16, so a 8000-token
# vocabulary keeps them at 62.5 MiB each, within the 64 MiB device.
check calibrate-gen 0 "$tf" trace gen --model llama-2-7b --phase decode --context 256 --tokens 2 --layers 1 \
  --weight-dtype int4 --set vocab=8000 -o "$tmp/w1.json"
check calibrate-plan 0 "$tf" plan --hw "$tmp/cal.yaml" --workload "$tmp/w1.json" --policy hyperoffload -o "$tmp/pc.json"
check replay-native 0 "$tf" replay --copy native --plan "$tmp/pc.json" --memory-limit 1GiB
contains replay-native-peak "$tmp/out" "equal"
check replay-native-small 2 "$tf" replay --copy native --plan "$tmp/pc.json" --memory-limit 64MiB
contains replay-native-small-msg "$tmp/err" "this backend copies real sizes only"
check replay-native-scale 2 "$tf" replay --copy native --time-scale 2 --plan "$tmp/pc.json"
check calibrate-bad-size 2 "$tf" calibrate -o "$tmp/x.yaml" --max-size 1KiB
check calibrate-no-output 2 "$tf" calibrate
# cuda: measured where a GPU is usable (exit 0); otherwise exit 2 saying why.
rc=0; "$tf" calibrate --backend cuda -o "$tmp/cuda.yaml" --max-size 1MiB --repeats 1 >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" = 0 ] || { [ "$rc" = 2 ] && grep -qi "cuda" "$tmp/err"; }; then passes=$((passes + 1)); else
  echo "FAIL calibrate-cuda: exit $rc"; fails=$((fails + 1)); fi
check plan-sim 0 "$tf" sim --plan "$tmp/p7.json"
check plan-policy-and-pipeline 2 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" \
  --policy layerwise --pipeline place,liveness,insert,verify -o "$tmp/pp.json"
contains plan-policy-and-pipeline-msg "$tmp/err" "--pipeline: --pipeline replaces the policy's passes: give --policy or --pipeline, not both"
# The simulator holds the device to the plan's own budget, as replay does: edited to 100 MB
# (below its peak), the plan runs out of room there.
python3 -c 'import json, sys
p = json.load(open(sys.argv[1])); p["budget"] = 100000000
json.dump(p, open(sys.argv[2], "w"))' "$tmp/p7.json" "$tmp/p7small.json"
check sim-held-to-budget 1 "$tf" sim --plan "$tmp/p7small.json"
contains sim-held-to-budget-msg "$tmp/err" "'hbm[0] within the plan's budget' is over capacity"
contains sim-held-to-budget-free "$tmp/err" "of 95.4MiB is free"
check plan-again 0 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --devices 1 \
  --budget 300MiB --policy hyperoffload -o "$tmp/p7b.json"
cmp -s "$tmp/p7.json" "$tmp/p7b.json" && passes=$((passes + 1)) ||
  { echo "FAIL plan is not deterministic"; fails=$((fails + 1)); }
check plan-print-after 0 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --devices 1 \
  --budget 300MiB --pipeline place,liveness,select,insert,verify --print-after select --verify-each
contains plan-print-after-runs "$tmp/out" "// after select"
check plan-pin 0 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --devices 1 \
  --policy resident --pin weight=ddr --explain
contains plan-pin-home "$tmp/out" "L0.wqkv"
check plan-overhead 0 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --devices 1 \
  --max-overhead 5% --policy hyperoffload --explain
contains plan-overhead-note "$tmp/out" "note: max-overhead 0.05: budget"
check plan-infeasible 1 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --devices 1 \
  --budget 10MiB
contains plan-infeasible-msg "$tmp/err" "does not fit"
check plan-bad-policy 2 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --policy hyperofload
contains plan-bad-policy-msg "$tmp/err" "did you mean 'hyperoffload'?"
check plan-bad-pipeline 2 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --pipeline place,selct
contains plan-bad-pipeline-msg "$tmp/err" "error: --pipeline:1:7: unknown pass 'selct'; did you mean 'select'?"
check plan-bad-pin 2 "$tf" plan --hw configs/hw/h100-sxm-8gpu.yaml --workload "$tmp/w7.json" --pin weigth=ddr
contains plan-bad-pin-msg "$tmp/err" "did you mean 'weight'?"
# A missing required argument is named with what it is, and a positional with the usage.
check required-positional 2 "$tf" report
contains required-positional-msg "$tmp/err" "error: 'tierflow report' needs PLANS...: plan JSON files (tierflow.plan/2), e.g. DIR/*.json (usage: tierflow report [OPTIONS] PLANS...)"
check required-option 2 "$tf" sim
contains required-option-msg "$tmp/err" "error: 'tierflow sim' needs --plan: plan JSON (tierflow.plan/2)"
check required-nested 2 "$tf" trace info
contains required-nested-msg "$tmp/err" "error: 'tierflow trace info' needs FILE: workload JSON (usage: tierflow trace info [OPTIONS] FILE)"
# --hw defaults to the shipped H100 server, as --help says and as compare and whatif do.
check plan-default-hw 0 "$tf" plan --workload "$tmp/w7.json" -o "$tmp/default-hw.json"
# One program by default, as every other command; --devices 0 plans every device of the class.
ok plan-default-one-program python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1]))["programs"]) == 1' "$tmp/default-hw.json"
check plan-every-device 0 "$tf" plan --workload "$tmp/w7.json" --devices 0 -o "$tmp/every.json"
ok plan-every-device-8 python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1]))["programs"]) == 8' "$tmp/every.json"
contains plan-default-hw-ref "$tmp/default-hw.json" '"file": "'
grep -q 'h100-sxm-8gpu.yaml' "$tmp/default-hw.json" && passes=$((passes + 1)) ||
  { echo "FAIL plan without --hw does not record the default topology"; fails=$((fails + 1)); }
check plan-no-workload 2 "$tf" plan --hw configs/hw/gh200.yaml

# Shipped topologies by name, on every command that takes one; a typo gets the nearest.
check name-hw-show 0 "$tf" hw show rtx4090-workstation
contains name-hw-show-out "$tmp/out" "rtx4090"
check name-hw-validate 0 "$tf" hw validate gh200 configs/hw/l40s-server.yaml
check name-plan 0 "$tf" plan --hw rtx4090-workstation --workload "$tmp/w7.json" --devices 1 -o "$tmp/named.json"
check name-sim 0 "$tf" sim --plan "$tmp/named.json" --hw rtx4090-workstation
check name-compare 0 "$tf" compare --hw gh200 --workload "$tmp/w7.json" --policies resident
check name-typo 2 "$tf" plan --hw rtx4090-workstaton --workload "$tmp/w7.json"
contains name-typo-msg "$tmp/err" "error: --hw: unknown topology 'rtx4090-workstaton'"
contains name-typo-hint "$tmp/err" "did you mean 'rtx4090-workstation'?"
check name-typo-show 2 "$tf" hw show gh20
contains name-typo-show-hint "$tmp/err" "did you mean 'gh200'?"

# Compare: every policy side by side, JSON deterministic, the best plan's timeline.
check compare-ok 0 "$tf" compare --workload "$tmp/w7.json" --budget 300MiB --timeline "$tmp/best.json"
contains compare-table "$tmp/out" "hyperoffload"
contains compare-best "$tmp/out" "best: "
# Progress is for a terminal: redirected, stderr says only where the timeline went.
! grep -q planning "$tmp/err" "$tmp/out" && passes=$((passes + 1)) ||
  { echo "FAIL compare wrote progress into redirected output:"; head -3 "$tmp/err"; fails=$((fails + 1)); }
check compare-json 0 "$tf" compare --workload "$tmp/w7.json" --budget 300MiB --json -o "$tmp/c1.json"
check compare-json-again 0 "$tf" compare --workload "$tmp/w7.json" --budget 300MiB --json --threads 1 \
  -o "$tmp/c2.json"
cmp -s "$tmp/c1.json" "$tmp/c2.json" && passes=$((passes + 1)) ||
  { echo "FAIL compare is not deterministic"; fails=$((fails + 1)); }
contains compare-json-format "$tmp/c1.json" '"format": "tierflow.compare/1"'
# A workload file holds its own shape: a generator option with it is refused (was ignored).
check compare-file-with-batch 2 "$tf" compare --workload "$tmp/w7.json" --batch 3
contains compare-file-with-batch-msg "$tmp/err" "--workload excludes --batch"
# A workload file's row names what the file holds (its meta), not the generator's defaults.
check compare-file-row 0 "$tf" compare --workload "$tmp/w7.json" --budget 300MiB --csv --policies tierflow \
  -o "$tmp/c7.csv"
ok compare-file-row-inputs python3 -c '
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert (r["phase"], r["batch"], r["seq"], r["context"], r["tokens"]) == ("decode", "1", "", "512", "2"), r
assert abs(float(r["decode_tokens_per_s"]) * float(r["makespan_s"]) - 2) < 1e-6, r' "$tmp/c7.csv"
# A request: TTFT and TPOT per policy; peak, exposed and moved of the prefill and the decode
# (the prefill needs more than the decode here: "resident needs" is the prefill's).
req=(--model llama-3-8b --layers 2 --batch 8 --prompt 2048 --generate 40 --policies resident,layerwise
  --budget 2800MiB --quiet)
check compare-request 0 "$tf" compare "${req[@]}"
contains compare-request-cols "$tmp/out" "latency    TTFT     TPOT"
contains compare-request-resident "$tmp/out" "resident needs 4.33GiB"
contains compare-request-decode "$tmp/out" "decode     decode of 39 tokens"
check compare-request-json 0 "$tf" compare "${req[@]}" --json -o "$tmp/creq.json"
check compare-request-csv 0 "$tf" compare "${req[@]}" --csv -o "$tmp/creq.csv"
ok compare-request-agree python3 -c '
import csv, json, sys
j = json.load(open(sys.argv[1]))["policies"][1]
row = list(csv.DictReader(open(sys.argv[2])))[1]
assert j["makespan_ps"] == j["ttft_ps"] + j["decode_ps"], j
assert abs(j["device_peak"] / 2**30 - float(row["device_peak_gib"])) < 1e-9, (j, row)
assert abs(j["exposed_ps"] * 1e-12 - float(row["exposed_s"])) < 1e-9, (j, row)
assert abs(j["bytes_moved"] / 2**30 - float(row["moved_gib"])) < 1e-9, (j, row)
assert sum(l["bytes"] for l in j["links"]) == j["bytes_moved"], j' "$tmp/creq.json" "$tmp/creq.csv"
check compare-csv 0 "$tf" compare --workload "$tmp/w7.json" --budget 300MiB --csv --policies resident,tierflow
contains compare-csv-head "$tmp/out" "topology,hw,sets,workload"
check compare-bad-policy 2 "$tf" compare --workload "$tmp/w7.json" --policies tierflw
check compare-too-many-devices 2 "$tf" compare --hw configs/hw/gh200.yaml --workload "$tmp/w7.json" --devices 3
contains compare-too-many-devices-msg "$tmp/err" "--devices: 3 programs, but the topology has 1 'hopper' device"

# No host memory to offload to (capacity 0B): "does not fit" names the offload tiers as the
# limit, not the device; a device's own tier cannot be 0B.
check no-host-memory 1 "$tf" compare --hw rtx4090-workstation --model llama-3.1-405b --layers 4 --batch 1 \
  --set tiers.ddr.capacity=0B --set tiers.ssd.capacity=0B --policies resident,reactive,tierflow
contains no-host-memory-rooms "$tmp/out" "room per program: ddr 0B, ssd 0B"
contains no-host-memory-limit "$tmp/out" "tierflow: select: does not fit"
contains no-host-memory-blame "$tmp/out" "the offload tiers, not the device, are the limit"
contains no-host-memory-reactive "$tmp/out" "reactive: reactive: tensor 'embed.w' (3.91GiB) has no offload tier with room"
check no-device-memory 2 "$tf" hw show gh200 --set tiers.hbm.capacity=0B
contains no-device-memory-msg "$tmp/err" "local_tier 'hbm' has capacity 0B: a device needs memory of its own"

# The seeded router, skewed: recorded in the workload's meta; refused without it.
check gen-skewed 0 "$tf" trace gen --model mixtral-8x7b --phase decode --tokens 4 --layers 2 \
  --routing seeded --routing-skew 1.2 --routing-repeat 0.5 -o "$tmp/skew.json"
ok gen-skewed-meta python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["meta"]
assert m["routing"] == "seeded" and m["routing_skew"] == 1.2 and m["routing_repeat"] == 0.5, m' "$tmp/skew.json"
check gen-skew-without-seeded 2 "$tf" trace gen --model mixtral-8x7b --routing-skew 1 -o "$tmp/never.json"
contains gen-skew-without-seeded-msg "$tmp/err" "error: --routing-skew: skew and repeats shape the seeded router"
check vary-skew 0 "$tf" compare --model mixtral-8x7b --phase decode --tokens 2 --layers 2 --routing oracle \
  --routing-skew 2 --devices 1
contains vary-skew-tierflow "$tmp/out" "  tierflow "

# The expert cache: with a cache that holds the skewed router's usual experts, compare's
# realistic rows hit more, fetch less and run faster than without; the oracle rows are the
# same plans (no cache); rows and JSON carry the counts.
mx=(compare --hw rtx4090-workstation --devices 1 --model mixtral-8x7b --phase decode --context 4096
  --tokens 6 --layers 16 --routing realistic --seed 1 --routing-skew 1.2 --routing-repeat 0.5
  --policies layerwise,tierflow --json --quiet)
check expert-cache-none 0 "$tf" "${mx[@]}" -o "$tmp/mx-none.json"
check expert-cache-lru 0 "$tf" "${mx[@]}" --expert-cache lru:16GiB -o "$tmp/mx-lru.json"
check expert-cache-lfu-predict 0 "$tf" "${mx[@]}" --expert-cache lfu:16GiB,predict -o "$tmp/mx-lfu.json"
ok expert-cache-json python3 -c '
import json, sys
none, lru, lfu = (json.load(open(p)) for p in sys.argv[1:4])
assert lru["expert_cache"] == "lru:16GiB" and "expert_cache" not in none, lru
def rows(d): return {r["policy"] + " " + r["routing"]: r for r in d["policies"]}
n, l, f = rows(none), rows(lru), rows(lfu)
for p in ("layerwise", "tierflow"):
    a, b = n[p + " realistic"], l[p + " realistic"]
    ops = a["routing_hits"] + a["routing_misses"]
    assert b["routing_hits"] + b["routing_misses"] == ops, (a, b)
    assert b["routing_hits"] > a["routing_hits"] and b["miss_bytes"] < a["miss_bytes"], (p, a, b)
    assert b["makespan_ps"] < a["makespan_ps"], (p, a["makespan_ps"], b["makespan_ps"])
    assert b["cache_evictions"] >= 0 and b["predicted_bytes"] == 0, b
    assert f[p + " realistic"]["predicted_bytes"] > 0, f[p + " realistic"]
    assert n[p + " oracle"] == l[p + " oracle"], p
' "$tmp/mx-none.json" "$tmp/mx-lru.json" "$tmp/mx-lfu.json"
check expert-cache-csv 0 "$tf" compare --hw rtx4090-workstation --devices 1 --model mixtral-8x7b \
  --phase decode --tokens 2 --layers 4 --routing-skew 1.2 --routing realistic \
  --policies tierflow --expert-cache lfu:4GiB --csv --quiet
ok expert-cache-csv-columns python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
r = [x for x in rows if x["routing"] == "realistic"][0]
assert r["expert_cache"] == "lfu:4GiB" and int(r["routing_hits"]) + int(r["routing_misses"]) == 2 * 4 * 2, r
o = [x for x in rows if x["routing"] == "oracle"][0]
assert o["expert_cache"] == "none" and o["routing_hits"] == "", o' "$tmp/out"

# A routing trace: the workload takes its picks (the seed plays no part); compare runs them
# (realistic: planned on the expected routing) with an expert cache.
python3 -c '
import json, random, sys
random.seed(4)
with open(sys.argv[1], "w") as f:
    for p in range(4):
        for l in range(2):
            for t in range(2):
                f.write(json.dumps({"pass": p, "layer": l, "token": t, "experts": sorted(random.sample(range(8), 2))}) + "\n")' "$tmp/routing.jsonl"
check gen-routing-trace 0 "$tf" trace gen --model mixtral-8x7b --phase decode --tokens 4 --batch 2 \
  --layers 2 --routing-trace "$tmp/routing.jsonl" -o "$tmp/rt.json"
ok gen-routing-trace-picks python3 -c '
import json, re, sys
w = json.load(open(sys.argv[1]))
want = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    want.setdefault((r["pass"], r["layer"]), set()).update(r["experts"])
got = {}
for o in w["ops"]:
    m = re.fullmatch(r"t(\d+)\.L(\d+)\.expert(\d+)", o["name"])
    if m:
        got.setdefault((int(m[1]), int(m[2])), set()).add(int(m[3]))
assert got == want, (got, want)
assert w["meta"]["routing_trace"] == sys.argv[2] and "seed" not in w["meta"], w["meta"]' "$tmp/rt.json" "$tmp/routing.jsonl"
# The trace's picks are given: a seed would be ignored, and is refused.
check gen-routing-trace-seed 2 "$tf" trace gen --model mixtral-8x7b --phase decode --tokens 4 --batch 2 \
  --layers 2 --routing-trace "$tmp/routing.jsonl" --seed 77 -o "$tmp/rt77.json"
contains gen-routing-trace-seed-msg "$tmp/err" "error: --seed: a routing trace's picks are given, not drawn: it would be ignored"
check compare-routing-trace 0 "$tf" compare --hw rtx4090-workstation --devices 1 --model mixtral-8x7b \
  --phase decode --tokens 4 --batch 2 --layers 2 --routing-trace "$tmp/routing.jsonl" \
  --expert-cache lfu:2GiB --policies tierflow --json --quiet
ok compare-routing-trace-rows python3 -c '
import json, sys
d = json.load(sys.stdin)
r = [x for x in d["policies"] if x["routing"] == "realistic"][0]
want = sum(len(set(a) | set(b)) for a, b in zip(*[iter([json.loads(l)["experts"] for l in open(sys.argv[1])])] * 2))
assert r["routing_hits"] + r["routing_misses"] == want, (r, want)' "$tmp/routing.jsonl" <"$tmp/out"

# Micro-batches (FlexGen's zig-zag decode): planned and simulated like any workload; the
# compare rows record the field; 1 is the workload without it.
check gen-micro-batches 0 "$tf" trace gen --model llama-3-8b --phase decode --batch 8 --tokens 2 \
  --layers 2 --context 512 --micro-batches 4 -o "$tmp/mb.json"
check plan-micro-batches 0 "$tf" plan --hw rtx4090-workstation --workload "$tmp/mb.json" \
  --budget 2GiB --policy tierflow -o "$tmp/mb-plan.json"
check sim-micro-batches 0 "$tf" sim --plan "$tmp/mb-plan.json"
check compare-micro-batches 0 "$tf" compare --hw rtx4090-workstation --devices 1 --model llama-3-8b \
  --phase decode --batch 8 --tokens 2 --layers 2 --context 512 --micro-batches 4 --budget 2GiB \
  --policies tierflow --csv --quiet
ok compare-micro-batches-row python3 -c '
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert r["status"] == "ok", r' "$tmp/out"

# With an expert cache the routed experts live on the fastest tier with room for them all
# beside the plan's homes: here DDR is cut to 32 GB, so the 42 GiB of DeepSeek-V3's experts
# go to the SSD (they overflowed DDR before).
check expert-cache-home 0 "$tf" compare --hw h100-sxm-8gpu --devices 1 --model deepseek-v3 \
  --phase decode --context 512 --tokens 2 --batch 4 --layers 5 --set tiers.ddr.capacity=32GB \
  --policies tierflow --expert-cache lfu:8GiB --json --quiet
ok expert-cache-home-ssd python3 -c '
import json, sys
d = json.load(sys.stdin)
r = [x for x in d["policies"] if x["routing"] == "realistic"][0]
assert r["ok"], r
peaks = {t["tier"].split("[")[0]: t["peak"] for t in r["tiers"]}
assert peaks.get("ssd", 0) >= 42 * 2**30 and peaks.get("ddr", 0) <= 32e9, peaks' <"$tmp/out"

# A mistyped option or subcommand is named, with what it may stand for; an empty value is
# refused, naming its flag, not taken as the default.
check typo-option 2 "$tf" plan --workload w.json --budgte 1GiB
contains typo-option-why "$tmp/err" "unknown option '--budgte' for 'tierflow plan'; did you mean '--budget'?"
check typo-option-value 2 "$tf" serve --replica=2
contains typo-option-value-why "$tmp/err" "unknown option '--replica' for 'tierflow serve'; did you mean '--replicas'?"
check typo-subcommand 2 "$tf" reprot
contains typo-subcommand-why "$tmp/err" "unexpected argument 'reprot' for 'tierflow'; did you mean 'report'?"
check typo-nested-subcommand 2 "$tf" hw shwo
contains typo-nested-subcommand-why "$tmp/err" "unexpected argument 'shwo' for 'tierflow hw'; did you mean 'show'?"
check empty-value 2 "$tf" plan --workload w.json --budget ''
contains empty-value-why "$tmp/err" "--budget: an empty value: give one, or leave the option out"
check top-negative 2 "$tf" trace info w.json --top -1
contains top-negative-why "$tmp/err" "--top: Value -1 not in range"
check typo-sweep-subcommand 2 "$tf" sweep merg -o "$tmp/z.db"
contains typo-sweep-subcommand-why "$tmp/err" "or a subcommand: merge, export; did you mean 'merge'?"

finish
