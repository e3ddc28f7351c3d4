#!/usr/bin/env bash
# The simulator against this machine (docs/validation.md, "CPU"): calibrate the CPU replay
# backend, plan transfer-heavy workloads on the calibrated topology, replay each plan
# RUNS times with native copies (memcpy at this machine's speed), and report the median
# measured makespan against the simulated one (OUT_DIR/summary.md, scripts/replay_table.py).
# Timings: run it on a quiet machine; it does not belong in CI.
#
#   scripts/replay_validation.sh
#
#   TIERFLOW_BIN  the tierflow binary (default: build/rel/tools/tierflow, a Release build:
#                 cmake -S . -B build/rel -G Ninja -DCMAKE_BUILD_TYPE=Release)
#   OUT_DIR       where results go (default: build/replay-validation)
#   RUNS          replays per plan (default 5)
#
# Workloads (both stream from the host arena into a device arena too small for them):
#   weights   Llama-2-7B, first 6 layers, int8 weights, decode 4 tokens from a 2,048-token
#             context: 1.47 GB of weights through a 384 MiB device tier, layer by layer
#   kv        the same model with bf16 weights and a 16,384-token context, 2 layers,
#             decode 4 tokens in 256-token KV blocks: the KV cache and the weights both
#             exceed the device tier
# Each is planned with `tierflow` and `hyperoffload`.
set -euo pipefail
cd "$(dirname "$0")/.."

tf=${TIERFLOW_BIN:-build/rel/tools/tierflow}
out=${OUT_DIR:-build/replay-validation}
runs=${RUNS:-5}
if [ ! -x "$tf" ]; then
  echo "error: $tf not found; build it: cmake --build build/rel --target tierflow" >&2
  exit 2
fi
mkdir -p "$out"

echo "== calibrate" >&2
"$tf" calibrate --backend cpu --device-memory 384MiB -o "$out/cpu.yaml" | tee "$out/calibration.txt"

"$tf" trace gen --model llama-2-7b --phase decode --layers 6 --weight-dtype int8 \
  --context 2048 --tokens 4 -o "$out/weights.json"
"$tf" trace gen --model llama-2-7b --phase decode --layers 2 --context 16384 --tokens 4 \
  -o "$out/kv.json"

rows=()
for w in weights kv; do
  for policy in tierflow hyperoffload; do
    plan="$out/$w-$policy.plan.json"
    rows+=("$w $policy|$plan|$out/$w-$policy.replay")
    echo "== plan $w $policy" >&2
    rm -f "$plan" "$out/$w-$policy".replay*.json  # no table row from an earlier run
    if ! "$tf" plan --hw "$out/cpu.yaml" --workload "$out/$w.json" --policy "$policy" -o "$plan" \
      >"$out/$w-$policy.plan.txt"; then
      continue  # the table says: no plan
    fi
    for i in $(seq 1 "$runs"); do
      echo "== replay $w $policy $i/$runs" >&2
      "$tf" replay --backend cpu --copy native --memory-limit 4GiB --plan "$plan" \
        --hw "$out/cpu.yaml" --json -o "$out/$w-$policy.replay$i.json"
    done
  done
done
python3 scripts/replay_table.py "$runs" "${rows[@]}" >"$out/summary.md"
cat "$out/summary.md"
