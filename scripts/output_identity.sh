#!/usr/bin/env bash
# Runs the same set of commands with two tierflow binaries and compares every output byte
# for byte: the check that a refactor changed nothing users see.
#   scripts/output_identity.sh NEW_BIN OLD_BIN [OUT_DIR]      (default OUT_DIR build/identity)
# The set: four workloads (Llama-3-8B decode, batch 16; a seeded Mixtral-8x7B decode; a
# Llama-3-8B training step; an 8k-token prefill) at three budgets on one H100, each through
# `compare --json`, every policy with `--stats`, five custom pipelines of the paging and
# refining passes, and max-overhead; `--print-after-all`; partial pins on GH200; `hw show
# --json` of every shipped topology; `trace info --json`; two what-if questions. Plans are
# compared as written (-o), reports as printed, with exit codes. Exits 1 naming the files
# that differ.
set -uo pipefail
cd "$(dirname "$0")/.."
new=$1
old=$2
out=${3:-build/identity}
hw=$PWD/configs/hw

run_set() {
  local tf=$1 dir=$2
  rm -rf "$dir"
  mkdir -p "$dir"
  run() {
    local name=$1
    shift
    "$tf" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
    echo "rc=$?" >>"$dir/$name.out"
  }
  run gen-dec trace gen --model llama-3-8b --phase decode --context 4096 --tokens 8 --batch 16 \
    -o "$dir/dec.json"
  run gen-moe trace gen --model mixtral-8x7b --phase decode --context 2048 --tokens 8 \
    --routing seeded --seed 1 -o "$dir/moe.json"
  run gen-train trace gen --model llama-3-8b --phase train --seq 2048 --batch 1 --checkpoint \
    -o "$dir/train.json"
  run gen-pre trace gen --model llama-3-8b --phase prefill --seq 8192 -o "$dir/pre.json"
  local pipelines=(
    "place,liveness,belady{warm=false},insert,verify"
    "place{multi=true},liveness,belady,insert,schedule,verify"
    "place,liveness,reactive{evict=furthest,warm=true,ahead=16},insert,schedule,verify"
    "place,liveness,reactive{evict=furthest,keep=0.5,headroom=0.1},insert,verify"
    "place,liveness,select{headroom=0.05},insert,schedule,refine,verify"
  )
  local w b p k
  for w in dec moe train pre; do
    for b in 6GiB 12GiB 30GiB; do
      local a=(--hw "$hw/h100-sxm-8gpu.yaml" --workload "$dir/$w.json" --devices 1 --budget "$b"
        --threads 2)
      run "compare-$w-$b" compare "${a[@]}" --json
      for p in tierflow reactive layerwise distance hyperoffload resident; do
        run "$p-$w-$b" plan "${a[@]}" --policy "$p" --stats -o "$dir/$p-$w-$b.plan.json"
      done
      for k in "${!pipelines[@]}"; do
        run "pipeline$k-$w-$b" plan "${a[@]}" --pipeline "${pipelines[$k]}" --stats \
          -o "$dir/pipeline$k-$w-$b.plan.json"
      done
    done
    run "max-overhead-$w" plan --hw "$hw/h100-sxm-8gpu.yaml" --workload "$dir/$w.json" --devices 1 \
      --max-overhead 5% --threads 2 -o "$dir/max-overhead-$w.plan.json"
    run "info-$w" trace info "$dir/$w.json" --json
  done
  run print-after plan --hw "$hw/h100-sxm-8gpu.yaml" --workload "$dir/dec.json" --devices 1 \
    --budget 12GiB --policy hyperoffload --print-after-all
  run pins plan --hw "$hw/gh200.yaml" --workload "$dir/dec.json" --budget 8GiB \
    --pin weight=lpddr:0.4 --threads 2 -o "$dir/pins.plan.json"
  local f
  for f in "$hw"/*.yaml; do run "hw-$(basename "$f" .yaml)" hw show "$f" --json; done
  run whatif-min-memory whatif --model llama-3-8b --batch 8 --context 4096 \
    --hw "$hw/h100-sxm-8gpu.yaml" --json --threads 2
  run whatif-max-batch whatif --model llama-3-8b --batch 8 --context 4096 \
    --hw "$hw/h100-sxm-8gpu.yaml" --question max-batch --json --threads 2
}

run_set "$old" "$out/old"
run_set "$new" "$out/new"
status=0
n=0
for f in "$out"/old/*; do
  b=$(basename "$f")
  n=$((n + 1))
  # Outputs name the workload files they read: the two sets' folders differ.
  if ! cmp -s <(sed "s#$out/old#DIR#g" "$f") <(sed "s#$out/new#DIR#g" "$out/new/$b"); then
    echo "differs: $b"
    status=1
  fi
done
echo "$n files compared: $([ $status = 0 ] && echo identical || echo 'some differ')"
exit $status
