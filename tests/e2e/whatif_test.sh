#!/usr/bin/env bash
# End-to-end tests of `tierflow whatif`, request metrics, `--set` recorded in plans and the
# study rows behind `compare --csv`.
# Usage: whatif_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$1
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

hw=configs/hw/h100-sxm-8gpu.yaml
small=(--hw $hw --model llama-3-8b --layers 4 --batch 2 --context 1024 --tokens 2 --policy hyperoffload --threads 1)

# min-memory: an answer, its plan, the binding constraint and the probes.
check min-memory 0 "$tf" whatif "${small[@]}" --question min-memory --max-overhead 5%
contains min-memory-answer "$tmp/out" "answer     "
contains min-memory-binding "$tmp/out" "binding    below"
# The binding is checked by relaxing it: doubling the link it names shortens the latency.
grep -qE "^binding    below .*; link 'gpu-pcie' bandwidth \([0-9]+% used\): doubled, the latency is -[0-9.]+%" "$tmp/out" &&
  passes=$((passes + 1)) || { echo "FAIL min-memory binding not checked by relaxing:"; grep binding "$tmp/out"; fails=$((fails + 1)); }
contains min-memory-probes "$tmp/out" "probes:"
check min-memory-json 0 "$tf" whatif "${small[@]}" --question min-memory --max-overhead 5% --json -o "$tmp/m1.json"
ok min-memory-json-parses python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "tierflow.whatif/1"
a = d["answers"][0]
assert a["found"] and a["answer_number"] > 0
assert a["plan"]["status"] == "ok" and a["plan"]["latency_s"] * 1e12 <= a["limit_ps"]
assert a["plan"]["device_peak_gib"] * 2**30 <= a["answer_number"]
assert any(not p["pass"] for p in a["probes"])' "$tmp/m1.json"
# Same inputs, byte-identical answers.
check min-memory-again 0 "$tf" whatif "${small[@]}" --question min-memory --max-overhead 5% --json -o "$tmp/m2.json"
cmp -s "$tmp/m1.json" "$tmp/m2.json" && passes=$((passes + 1)) || { echo "FAIL whatif is not deterministic"; fails=$((fails + 1)); }
# The plan that achieves it, written and simulated again.
check min-memory-plan 0 "$tf" whatif "${small[@]}" --question min-memory --max-overhead 5% --plan-out "$tmp/answer.json"
check min-memory-plan-sim 0 "$tf" sim --plan "$tmp/answer.json"

# --vary: a table of answers per value (a grid of two axes: four rows).
check vary 0 "$tf" whatif "${small[@]}" --question min-memory --vary batch=1,4 --vary context=512,2048
ok vary-rows test "$(grep -cE '^ +[14] +(512|2048) ' "$tmp/out")" = 4
# Each point's note, as a single answer prints it (here the same for all: said once).
check vary-notes 0 "$tf" whatif --model llama-3-8b --layers 2 --vary links.gpu-pcie.bandwidth=64GB/s,128GB/s
contains vary-notes-cut "$tmp/out" "the default 32768 cut to the 8192 positions that llama-3-8b declares"
check vary-bad-field 2 "$tf" whatif "${small[@]}" --vary bacth=1,2
contains vary-bad-field-hint "$tmp/err" "did you mean 'batch'"

# max-batch without a target: the largest that fits without offload.
check max-batch 0 "$tf" whatif "${small[@]}" --set tiers.hbm.capacity=5GiB --question max-batch --json -o "$tmp/b.json"
ok max-batch-next-fails python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["answers"][0]
n = a["answer_number"]
assert a["found"] and n >= 1
assert ("batch %d" % (n + 1)) in a["binding"], a["binding"]' "$tmp/b.json"
# max-context with a TPOT target on a request.
check max-context-request 0 "$tf" whatif --hw $hw --model llama-3-8b --layers 4 --batch 2 --prompt 512 --generate 4 \
  --policy hyperoffload --question max-context --max-tpot 5ms
contains max-context-decode-note "$tmp/out" "decode     decode of 3 tokens simulated whole"
# The header names the searched field as the search's start; the probes show the TPOT.
contains max-context-searched "$tmp/out" "prefill of a prompt searched from 512 tokens"
# An answer past the model's declared maximum says so, with the source (issue 32, item 8).
contains max-context-past-declared "$tmp/out" "positions, more than the 8192 that llama-3-8b declares (max_context, source CTX-L3)"
check max-context-declared-override 0 "$tf" whatif --hw $hw --model llama-3-8b --layers 4 --batch 2 --prompt 512 --generate 4 \
  --policy hyperoffload --question max-context --max-tpot 5ms --model-set max_context=1000000
ok max-context-within-declared bash -c "! grep -q 'declares (max_context' '$tmp/out'"
grep -qE '^ +probe +value +result +latency +TPOT +device peak' "$tmp/out" && passes=$((passes + 1)) ||
  { echo "FAIL the probe table lacks the TPOT its question is about"; fails=$((fails + 1)); }

# upgrade: a ranked table with the --set of each upgrade.
check upgrade 0 "$tf" whatif "${small[@]}" --budget 1GiB --question upgrade
contains upgrade-pcie "$tmp/out" "links.gpu-pcie.bandwidth="
contains upgrade-answer "$tmp/out" "answer     worth most: link 'gpu-pcie' bandwidth"
contains upgrade-binding "$tmp/out" "binding    link 'gpu-pcie' bandwidth: doubled, the latency is -"
# Under a budget, more memory is a larger budget: the row says so and its set applies it
# (doubling the tier's capacity under the same budget changes nothing).
contains upgrade-budget-row "$tmp/out" "budget on tier 'hbm'"
contains upgrade-budget-set "$tmp/out" "budget=2GiB"
# A throughput target the starting batch misses: throughput grows with the batch, so the
# search goes up (it halved down to batch 1 and answered none).
check max-batch-throughput-up 0 "$tf" whatif --hw $hw --model llama-3-8b --layers 2 --context 1024 --tokens 2 \
  --batch 1 --question max-batch --min-throughput 10000 --threads 1 --json -o "$tmp/up.json"
ok max-batch-throughput-up-json python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["answers"][0]
assert a["found"] and a["answer_number"] >= 16, a["answer"]
probes = {p["value"]: p["pass"] for p in a["probes"]}
assert probes["batch 1"] is False and probes["batch 16"] is True, probes
assert probes["batch %d" % (a["answer_number"] + 1)] is False, probes' "$tmp/up.json"
# An override's error is where the user gave it: a --vary value at --vary (it was
# --set:1:20, a --set never given), a --model-set at --model-set (it was --set:1:8).
check vary-bad-capacity 2 "$tf" whatif "${small[@]}" --vary tiers.hbm.capacity=80GB,abc
contains vary-bad-capacity-msg "$tmp/err" "error: --vary: tiers.hbm.capacity: bad value for 'capacity': malformed number in 'abc'"
check model-set-bad 2 "$tf" whatif "${small[@]}" --model-set layers=-1
contains model-set-bad-msg "$tmp/err" "error: --model-set:1:8: bad value for 'layers': must be at least 1, got -1"
check vary-value-twice 2 "$tf" whatif "${small[@]}" --vary batch=1,2,2
contains vary-value-twice-msg "$tmp/err" "--vary: 'batch=1,2,2': 2 appears twice"
# A throughput no batch reaches: the answer says how close the best came.
check max-batch-throughput-none 1 "$tf" whatif --hw $hw --model llama-3-8b --layers 2 --context 1024 --tokens 2 \
  --batch 1 --question max-batch --min-throughput 1e9 --threads 1
contains max-batch-throughput-none-note "$tmp/out" "note       the most any probe reached: "
# Settings the question overrides are refused, not ignored.
check min-memory-budget 2 "$tf" whatif "${small[@]}" --budget 1GiB
contains min-memory-budget-msg "$tmp/err" "--budget: min-memory searches the budget"
check max-batch-vary-batch 2 "$tf" whatif "${small[@]}" --question max-batch --vary batch=1,2
contains max-batch-vary-batch-msg "$tmp/err" "--vary: max-batch searches batch"
# Everything resident: nothing to relax, compute binds.
check max-batch-compute 0 "$tf" whatif "${small[@]}" --question max-batch --max-tpot 3ms
contains max-batch-compute-binding "$tmp/out" "TPOT 3.003 ms above 3.000 ms; compute (nothing moved)"

check bad-question 2 "$tf" whatif --question fastest

# Units: durations with their unit, counts with k/Ki prefixes, overheads with % or <= 1; a
# limit the question does not use is refused, not ignored.
check tpot-unit-bad 2 "$tf" whatif "${small[@]}" --question max-batch --max-tpot 5xs
contains tpot-unit-bad-msg "$tmp/err" "error: --max-tpot: unknown unit 'xs' in '5xs'"
check tpot-wrong-question 2 "$tf" whatif "${small[@]}" --question min-memory --max-tpot 50ms
contains tpot-wrong-question-msg "$tmp/err" "--max-tpot: applies to --question max-batch and max-context only (not min-memory)"
check overhead-wrong-question 2 "$tf" whatif "${small[@]}" --question max-batch --max-overhead 5%
contains overhead-wrong-question-msg "$tmp/err" "--max-overhead: applies to --question min-memory only (not max-batch)"
check overhead-ambiguous 2 "$tf" whatif "${small[@]}" --question min-memory --max-overhead 10
contains overhead-ambiguous-msg "$tmp/err" "error: --max-overhead: '10' is ambiguous: write a percentage (10%) or a fraction at most 1"
check context-K 2 "$tf" whatif "${small[@]}" --context 8K
contains context-K-msg "$tmp/err" "error: --context: unknown unit 'K' in '8K'"
contains context-K-hint "$tmp/err" "did you mean 'k'? (1000; Ki is 1024)"
check gen-8Ki 0 "$tf" trace gen --model llama-3-8b --layers 1 --phase decode --context 8Ki --tokens 1k -o "$tmp/ki.json"
check gen-8192 0 "$tf" trace gen --model llama-3-8b --layers 1 --phase decode --context 8192 --tokens 1000 -o "$tmp/8192.json"
cmp -s "$tmp/ki.json" "$tmp/8192.json" && passes=$((passes + 1)) ||
  { echo "FAIL --context 8Ki --tokens 1k is not --context 8192 --tokens 1000"; fails=$((fails + 1)); }
# Other systems' names point at the policy that stands for them.
check policy-flexgen 2 "$tf" whatif --policy flexgen
contains policy-flexgen-hint "$tmp/err" "closest to policy 'layerwise'"

# Request metrics in compare: TTFT/TPOT behind a latency column.
check compare-request 0 "$tf" compare --hw $hw --model llama-3-8b --layers 2 --batch 4 --prompt 128 --generate 3 \
  --policies resident,hyperoffload --csv
ok compare-request-row python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2
for r in rows:
    assert r["phase"] == "request" and r["prompt"] == "128" and r["generate"] == "3"
    ttft, tpot, thr = float(r["ttft_ms"]), float(r["tpot_ms"]), float(r["throughput_tokens_per_s"])
    lat = float(r["latency_s"])
    assert abs(thr - 4 * 3 / lat) < 1e-6 * thr
    assert abs(lat - (ttft / 1e3 + 2 * tpot / 1e3)) < 1e-9 * lat' "$tmp/out"
# The unlimited-memory reference on a supernode (384 HBM instances still sum in 64 bits).
check compare-cm384 0 "$tf" compare --hw configs/hw/cloudmatrix384.yaml --model llama-3-8b --layers 2 --tokens 2 --policies resident
contains compare-cm384-reference "$tmp/out" "resident with unlimited memory:"
# compare takes the generator flags.
check compare-gen-flags 0 "$tf" compare --hw $hw --model llama-3-8b --layers 2 --batch 4 --context 512 --tokens 2 --policies resident
contains compare-gen-flags-batch "$tmp/out" "llama-3-8b decode, batch 4, 2 tokens from a 512-token context"
# compare --csv: the study's stable columns, whatever the topology.
check compare-csv-h100 0 "$tf" compare --hw $hw --model llama-3-8b --layers 2 --tokens 2 --policies resident --csv
head -1 "$tmp/out" >"$tmp/h1"
check compare-csv-gh200 0 "$tf" compare --hw configs/hw/gh200.yaml --model llama-3-8b --layers 2 --tokens 2 --policies resident --csv
head -1 "$tmp/out" >"$tmp/h2"
cmp -s "$tmp/h1" "$tmp/h2" && passes=$((passes + 1)) || { echo "FAIL compare --csv header depends on the topology"; fails=$((fails + 1)); }
contains compare-csv-inputs "$tmp/h1" "topology,hw,sets,workload,model"

# A plan made with --set simulates the same without repeating the --set.
"$tf" trace gen --model llama-3-8b --layers 4 --phase decode --context 1024 --tokens 2 -o "$tmp/w.json" 2>/dev/null
slow=(--set links.gpu-pcie.bandwidth=8GB/s --set tiers.hbm.capacity=3GiB)
check plan-set 0 "$tf" plan --hw $hw "${slow[@]}" --workload "$tmp/w.json" --devices 1 --policy hyperoffload -o "$tmp/p.json"
contains plan-set-shown "$tmp/out" "overrides links.gpu-pcie.bandwidth=8GB/s tiers.hbm.capacity=3GiB"
contains plan-set-recorded "$tmp/p.json" '"set": ["links.gpu-pcie.bandwidth=8GB/s", "tiers.hbm.capacity=3GiB"]'
check sim-recorded 0 "$tf" sim --plan "$tmp/p.json" --json -o "$tmp/s1.json"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["topology"]["set"]; json.dump(p, open(sys.argv[2], "w"))' "$tmp/p.json" "$tmp/p-noset.json"
check sim-explicit 0 "$tf" sim --plan "$tmp/p-noset.json" "${slow[@]}" --json -o "$tmp/s2.json"
check sim-without 0 "$tf" sim --plan "$tmp/p-noset.json" --on-full wait --json -o "$tmp/s3.json"
ok sim-recorded-equals-explicit python3 -c '
import json, sys
m = [json.load(open(f))["makespan_ps"] for f in sys.argv[1:]]
assert m[0] == m[1], m
assert m[2] != m[0], m' "$tmp/s1.json" "$tmp/s2.json" "$tmp/s3.json"

# Questions about a service (--trace or --arrivals): the same answers as serve --find, the
# settings as --serve FIELD=VALUE; a step's flags are refused, and a service's question
# without requests says what it needs.
trace=tests/data/serve/mooncake_conversation_200.jsonl
for q in max-rate upgrade; do
  check "service-$q" 0 "$tf" whatif --question "$q" --hw h100-sxm-8gpu --model llama-3-8b \
    --trace "$trace" --serve replicas=2 --target p90-ttft=10s --json --quiet -o "$tmp/w-$q.json"
  check "service-$q-serve" 0 "$tf" serve --find "$q" --hw h100-sxm-8gpu --model llama-3-8b \
    --trace "$trace" --replicas 2 --target p90-ttft=10s --json --quiet --summary "$tmp/s-$q.json"
  ok "service-$q-same" cmp -s "$tmp/w-$q.json" "$tmp/s-$q.json"
done
check service-step-flag 2 "$tf" whatif --question max-rate --model llama-3-8b --trace "$trace" \
  --target p90-ttft=10s --context 4096
contains service-step-flag-msg "$tmp/err" "--context: describes a step, not a service"
check service-no-requests 2 "$tf" whatif --question min-replicas --target p90-ttft=10s
contains service-no-requests-msg "$tmp/err" "'min-replicas' is a question about a service"
check service-bad-field 2 "$tf" whatif --question max-rate --model llama-3-8b --trace "$trace" \
  --target p90-ttft=10s --serve replica=2
contains service-bad-field-msg "$tmp/err" "did you mean 'replicas'?"
check service-no-target 2 "$tf" whatif --question max-rate --model llama-3-8b --trace "$trace"
contains service-no-target-msg "$tmp/err" "needs --target"
# No --question: the step's default (min-memory) is not named as if the user had given it.
check service-no-question 2 "$tf" whatif --model llama-3-8b --trace "$trace" --target p90-ttft=10s
contains service-no-question-msg "$tmp/err" "error: --question: a service (--trace) takes a question of its own: max-rate, min-replicas, min-devices, min-capacity:TIER, split or upgrade, with --target METRIC=BOUND (e.g. --question max-rate --target p99-ttft=2s)"
# Errors name whatif's own flags, or --serve FIELD: never a flag whatif does not have.
check service-bad-tier 2 "$tf" whatif --question max-rate --model llama-3-8b --trace "$trace" \
  --target hit=10% --serve kv_tiers=dram
contains service-bad-tier-msg "$tmp/err" "error: --serve kv_tiers: no tier 'dram'"
check service-tier-not-given 2 "$tf" whatif --question min-capacity:ddr --model llama-3-8b \
  --trace "$trace" --target hit=10%
contains service-tier-not-given-msg "$tmp/err" "error: --question: tier 'ddr' is not among --serve kv_tiers"
# The default model is Llama-3.1-70B (32k within its 131,072 positions: no warning); a
# default context past a model's declared maximum is cut to it, and said; a given one is not.
check default-model 0 "$tf" whatif --layers 2 --question max-batch
contains default-model-name "$tmp/out" "workload   llama-3.1-70b decode, batch searched from 16, 8 tokens from a 32768-token context"
ok default-model-no-warning bash -c '! grep -qF "$2" "$1"' _ "$tmp/out" "more than the"
check default-context-cut 0 "$tf" whatif --model llama-2-7b --layers 2 --question max-batch
contains default-context-cut-workload "$tmp/out" "8 tokens from a 4088-token context"
contains default-context-cut-note "$tmp/out" "context 4088 tokens: the default 32768 cut to the 4096 positions that llama-2-7b declares (max_context) with 8 generated; give --context to go past it"
check given-context-kept 0 "$tf" whatif --model llama-2-7b --layers 2 --question max-batch --context 32768
contains given-context-kept-warning "$tmp/out" "32776 positions, more than the 4096 that llama-2-7b declares"
ok given-context-kept-no-cut bash -c '! grep -qF "$2" "$1"' _ "$tmp/out" "cut to the"
check compare-context-cut 0 "$tf" compare --model opt-30b --layers 2 --policies tierflow
contains compare-context-cut-note "$tmp/err" "note: context 2040 tokens: the default 4096 cut to the 2048 positions that opt-30b declares"
contains compare-context-cut-scenario "$tmp/out" "opt-30b decode, batch 1, 8 tokens from a 2040-token context"
contains compare-legend "$tmp/out" "x bound: makespan over its lower bound"
# trace gen likewise: its default 4,096 on Llama-2-7B (4,096 positions) is cut to 4,095.
check gen-context-cut 0 "$tf" trace gen --model llama-2-7b --layers 1 -o "$tmp/l2.json"
contains gen-context-cut-note "$tmp/err" "note: context 4095 tokens: the default 4096 cut to the 4096 positions that llama-2-7b declares"
ok gen-context-cut-file python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["meta"]["context"] == 4095' "$tmp/l2.json"
# Weights wider than the checkpoint holds them are a warning naming the dtype it ships in.
check gen-weights-wider 0 "$tf" trace gen --model deepseek-v3 --layers 4 -o "$tmp/ds.json"
contains gen-weights-wider-msg "$tmp/err" "warning: deepseek-v3's checkpoint holds fp8 weights (checkpoint_dtype, source MD4); these are bf16, 2x its bytes: --weight-dtype fp8 plans them as shipped"
check gen-weights-shipped 0 "$tf" trace gen --model deepseek-v3 --layers 4 --weight-dtype fp8 -o "$tmp/ds.json"
ok gen-weights-shipped-quiet bash -c '! grep -q "checkpoint holds" "$1"' _ "$tmp/err"
check service-no-fit 2 "$tf" whatif --question max-rate --model llama-3-70b --tp 1 --trace "$trace" --target hit=10%
contains service-no-fit-msg "$tmp/err" "error: --tp: the weights"

finish
