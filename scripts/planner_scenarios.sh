#!/usr/bin/env bash
# The planner's scenario set: `tierflow compare` (every policy, each plan simulated) on
# the scenarios docs/performance.md reports, plus the max-overhead mode on the
# compute-bound ones. Each scenario writes its workload, the compare table and the
# timings (wall seconds and peak memory of every command) under OUT_DIR/NAME/.
#
#   scripts/planner_scenarios.sh [SCENARIO...]     (default: all, in the order below)
#
#   TIERFLOW_BIN  the tierflow binary (default: build/rel/tools/tierflow, a Release build:
#                 cmake -S . -B build/rel -G Ninja -DCMAKE_BUILD_TYPE=Release)
#   OUT_DIR       where results go (default: build/planner-scenarios)
#
# Expert routing is seeded (each token picks its own experts): with the default expected
# routing every token reads the same top-k experts and the rest are never read, so they
# leave the device for free.
#
# Scenarios (shrunk so that each runs in a few minutes on a 2-core machine):
#   llama70b-decode     Llama-3-70B decode, 32 tokens from a 4,096-token context, one H100:
#                       ~141 GB of bf16 weights beyond 80 GB of HBM
#   llama8b-prefill     Llama-3-8B prefill of 131,072 tokens (batch 1, all 32 layers) on one
#                       Ascend 910B at half the resident peak; then --max-overhead 1% against
#                       resident; both again with 4 TB of host DDR
#   mixtral-decode      Mixtral-8x7B decode, 32 tokens, seeded routing, one H100 (tp 1): its
#                       ~87 GiB of weights are beyond 80 GB of HBM
#   deepseek-decode     DeepSeek-V3 decode, 32 tokens, seeded routing, tp 4 on one H200: a
#                       ~314 GiB bf16 shard beyond 141 GB of HBM (at tp 8 the experts the
#                       32 tokens read, ~110 GB, still fit)
#   cm384-pool          DeepSeek-V3 decode, 32 tokens, seeded routing, tp 4 on 32 NPUs of
#                       CloudMatrix384, all streaming from the one shared memory pool
#   llama8b-train       Llama-3-8B training step with AdamW (seq 8,192, batch 8, activation
#                       checkpointing, all 32 layers: compute-bound) on one H100 at its
#                       capacity; then
#                       --max-overhead 1% against resident on an H100 with room for all
#   llama70b-nvme       Llama-3-70B decode at batch 96 (context 512, 4 tokens), one H100, every
#                       weight homed on the socket's NVMe (--pin weight=ssd): the
#                       ZeRO-Inference shape
#   llama70b-bounce     the same on one A100 80GB without GPUDirect Storage: NVMe reads
#                       staged through a pinned host buffer (a100-nvme-bounce.yaml)
#   gh200-lpddr         Llama-3-70B decode, 8 tokens from a 4,096-token context, on GH200 with
#                       40% of the weight bytes homed on Grace's LPDDR5X
#                       (--pin weight=lpddr:0.4); ~141 GB of weights beyond 96 GB of HBM
#   mixtral-24gb        Mixtral-8x7B decode, 8 tokens, on one 24 GB RTX 4090 (PCIe Gen4 x16)
#                       with 128 GB of DDR5; realistic routing against the oracle
#   mixtral-24gb-skewed the same with a skewed router (--routing-skew 1.2: Zipf popularity;
#                       --routing-repeat 0.5: half the tokens repeat their predecessor's
#                       experts), what expert caches across tokens live on
#   mixtral-24gb-cache  the skewed router with the runtime's expert cache (MoE-Infinity's
#                       kind): 20 GiB of LFU cache owns the routed experts, the plan the rest
#   llama70b-int4-48gb  Llama-3-70B decode with int4 weights (~37 GB with their scales; the
#                       embeddings stay bf16), batch 16, 8 tokens from a 4,096-token context,
#                       on one 48 GB L40S (PCIe Gen4 x16)
#   opt175b-t4-flexgen  OPT-175B decode (fp16), 32 tokens from a 512-token prompt, batch 256
#                       run as 8 micro-batches of 32 in FlexGen's zig-zag block schedule, on
#                       FlexGen's machine (one 16 GB T4, 208 GB of memory, 1.5 TB of local
#                       NVMe): half the weights homed in host memory and half on the disks,
#                       the KV cache on the disks (FlexGen's --percent 0 50 0 0 0 100
#                       --gpu-batch-size 32 --num-gpu-batches 8); attention on the GPU,
#                       then on the CPU with each layer's cache read from disk into host
#                       memory (FlexGen's --cpu, --on-host attention); then the prompts'
#                       prefill in the same micro-batches
#   opt30b-t4-cpu       OPT-30B decode (fp16), 32 tokens from a 512-token prompt, batch 64 as 4
#                       micro-batches of 16, on the same machine with the weights and the KV
#                       cache in host memory: attention on the GPU (the cache crosses PCIe every
#                       step), then on the CPU next to the cache (FlexGen's --cpu, --on-host
#                       attention)
set -euo pipefail
cd "$(dirname "$0")/.."

tf=${TIERFLOW_BIN:-build/rel/tools/tierflow}
out=${OUT_DIR:-build/planner-scenarios}
hw=configs/hw
if [ ! -x "$tf" ]; then
  echo "error: $tf not found; build it: cmake --build build/rel --target tierflow" >&2
  exit 2
fi

# `plan NAME.txt` runs `tierflow plan` (the tierflow policy unless told otherwise): its wall
# time in timings.txt is the planning time, the simulator in the loop included.
#
# Runs a command, keeping its stdout in FILE and one timing line in DIR/timings.txt.
timed() {
  local dir=$1 file=$2
  shift 2
  local t
  t=$(mktemp)
  local rc=0
  /usr/bin/time -f '%e %M' -o "$t" "$@" >"$dir/$file" 2>"$dir/$file.err" || rc=$?
  read -r wall kib < <(tail -n 1 "$t")
  rm -f "$t"
  printf '%-28s rc=%d wall=%6.1fs peak=%5d MiB  %s\n' "$file" "$rc" "$wall" $((kib / 1024)) "$*" \
    | tee -a "$dir/timings.txt" >&2
  cat "$dir/$file"
}

# Runs scenario NAME's function ($2) with its results in a fresh OUT_DIR/NAME.
scenario() {
  local name=$1
  shift
  local dir=$out/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "== $name" >&2
  "$@"
}

gen() { timed "$dir" gen.txt "$tf" trace gen "$@" -o "$dir/w.json"; }
compare() { timed "$dir" compare.txt "$tf" compare "$@"; }
plan() {
  local file=$1
  shift
  timed "$dir" "$file" "$tf" plan "$@"
}

llama70b_decode() {
  gen --model llama-3-70b --phase decode --context 4096 --tokens 32
  compare --hw $hw/h100-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1
  plan tierflow.txt --hw $hw/h100-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1
}

llama8b_prefill() {
  local a=(--hw "$hw"/ascend-910b-8npu.yaml --workload "$dir/w.json" --devices 1)
  gen --model llama-3-8b --phase prefill --seq 131072 --batch 1
  plan resident.txt "${a[@]}" --policy resident
  # Half the resident peak (26.5 GiB).
  compare "${a[@]}" --budget 13.25GiB
  plan max-overhead.txt "${a[@]}" --policy tierflow --max-overhead 1%
  # The same with 4 TB of host DDR, so that `place` finds an offload tier for every
  # tensor (see docs/performance.md, Planner: findings).
  timed "$dir" compare-ddr4tb.txt "$tf" compare "${a[@]}" --budget 13.25GiB \
    --set tiers.ddr.capacity=4TB
  plan max-overhead-ddr4tb.txt "${a[@]}" --policy tierflow --max-overhead 1% \
    --set tiers.ddr.capacity=4TB
  plan tierflow.txt "${a[@]}" --budget 13.25GiB --set tiers.ddr.capacity=4TB
}

mixtral_decode() {
  gen --model mixtral-8x7b --phase decode --context 4096 --tokens 32 --routing seeded --seed 1
  compare --hw $hw/h100-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1
  plan tierflow.txt --hw $hw/h100-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1
}

deepseek_decode() {
  gen --model deepseek-v3 --phase decode --context 4096 --tokens 32 --tp 4 --routing seeded --seed 1
  compare --hw $hw/h200-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1
  plan tierflow.txt --hw $hw/h200-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1
}

cm384_pool() {
  gen --model deepseek-v3 --phase decode --context 4096 --tokens 32 --tp 4 --routing seeded --seed 1
  compare --hw $hw/cloudmatrix384.yaml --workload "$dir/w.json" --devices 32
  plan tierflow.txt --hw $hw/cloudmatrix384.yaml --workload "$dir/w.json" --devices 32
}

llama8b_train() {
  local a=(--hw "$hw"/h100-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1)
  gen --model llama-3-8b --phase train --seq 8192 --batch 8 --checkpoint
  # Resident needs ~153 GiB: measured on an H100 with 2 TB of HBM.
  plan resident.txt "${a[@]}" --policy resident --set tiers.hbm.capacity=2TB
  compare "${a[@]}"
  plan tierflow.txt "${a[@]}"
  plan max-overhead.txt "${a[@]}" --policy tierflow --max-overhead 1% \
    --set tiers.hbm.capacity=2TB
}

llama70b_nvme() {
  local a=(--hw "$hw"/h100-sxm-8gpu.yaml --workload "$dir/w.json" --devices 1 --pin weight=ssd)
  gen --model llama-3-70b --phase decode --batch 96 --context 512 --tokens 4
  compare "${a[@]}"
  plan tierflow.txt "${a[@]}"
}

# The same without GPUDirect Storage: one A100 80GB whose NVMe reads bounce through a pinned
# host buffer (a staged route: 7.15 GB/s where the drives give 10), ZeRO-Inference's path.
llama70b_bounce() {
  local a=(--hw "$hw"/a100-nvme-bounce.yaml --workload "$dir/w.json" --devices 1 --pin weight=ssd)
  gen --model llama-3-70b --phase decode --batch 96 --context 512 --tokens 4
  compare "${a[@]}"
  plan tierflow.txt "${a[@]}"
}

gh200_lpddr() {
  local a=(--hw "$hw"/gh200.yaml --workload "$dir/w.json" --devices 1 --pin weight=lpddr:0.4)
  gen --model llama-3-70b --phase decode --context 4096 --tokens 8
  compare "${a[@]}"
  plan tierflow.txt "${a[@]}"
}

# Realistic routing: each policy plans on the expected routing and its plan runs on the
# seeded one, missed experts fetched on demand; compare prints the oracle row (the plan knows
# the seeded routing) under each realistic one.
mixtral_24gb() {
  compare --hw "$hw"/rtx4090-workstation.yaml --devices 1 --model mixtral-8x7b --phase decode \
    --context 4096 --tokens 8 --routing realistic --seed 1
}

mixtral_24gb_skewed() {
  compare --hw "$hw"/rtx4090-workstation.yaml --devices 1 --model mixtral-8x7b --phase decode \
    --context 4096 --tokens 8 --routing realistic --seed 1 --routing-skew 1.2 --routing-repeat 0.5
}

mixtral_24gb_cache() {
  compare --hw "$hw"/rtx4090-workstation.yaml --devices 1 --model mixtral-8x7b --phase decode \
    --context 4096 --tokens 8 --routing realistic --seed 1 --routing-skew 1.2 --routing-repeat 0.5 \
    --expert-cache lfu:20GiB
}

llama70b_int4_48gb() {
  local a=(--hw "$hw"/l40s-server.yaml --workload "$dir/w.json" --devices 1)
  gen --model llama-3-70b --phase decode --batch 16 --context 4096 --tokens 8 --weight-dtype int4
  compare "${a[@]}"
  plan tierflow.txt "${a[@]}"
}

# FlexGen's own configuration for OPT-175B on its T4 machine (its README's benchmark): a
# batch of 256 in 8 GPU batches, weights 0% on the GPU, 50% in host memory (the rest on
# disk), the KV cache on disk. The micro-batches are the generator's (--micro-batches), the
# percentages pins. The KV cache in blocks of 8 tokens: a decode step appends to its block
# in place, so each step stores the block whole (FlexGen writes the new token's keys and
# values alone); with the default blocks of 512 every step would store 384 MiB per layer
# and micro-batch. Blocks of 8 tokens keep that within 8x of FlexGen's writes.
opt175b_t4_flexgen() {
  local a=(--hw "$hw"/t4-flexgen.yaml --workload "$dir/w.json" --devices 1
    --pin weight=ddr:0.5,ssd:0.5 --pin kv=ssd)
  gen --model opt-175b --phase decode --context 512 --tokens 32 --batch 256 --micro-batches 8 \
    --kv-block 8 --weight-dtype fp16 --act-dtype fp16
  compare "${a[@]}"
  plan tierflow.txt "${a[@]}"
  # --cpu: attention on the CPU, each layer's cache read from disk into host memory.
  timed "$dir" compare-cpu.txt "$tf" compare "${a[@]}" --on-host attention
  # The prompts' prefill, in the same 8 micro-batches: FlexGen's throughput counts it.
  timed "$dir" gen-prefill.txt "$tf" trace gen --model opt-175b --phase prefill --seq 512 \
    --batch 256 --micro-batches 8 --kv-block 8 --weight-dtype fp16 --act-dtype fp16 \
    -o "$dir/prefill.json"
  timed "$dir" compare-prefill.txt "$tf" compare --hw "$hw"/t4-flexgen.yaml \
    --workload "$dir/prefill.json" --devices 1 --pin weight=ddr:0.5,ssd:0.5 --pin kv=ssd
}

opt30b_t4_cpu() {
  local a=(--hw "$hw"/t4-flexgen.yaml --workload "$dir/w.json" --devices 1 --pin weight=ddr
    --pin kv=ddr)
  gen --model opt-30b --phase decode --context 512 --tokens 32 --batch 64 --micro-batches 4 \
    --kv-block 8 --weight-dtype fp16 --act-dtype fp16
  compare "${a[@]}"
  timed "$dir" compare-cpu.txt "$tf" compare "${a[@]}" --on-host attention
  plan tierflow-cpu.txt "${a[@]}" --on-host attention
}

all=(llama70b-decode llama8b-prefill mixtral-decode deepseek-decode cm384-pool llama8b-train
  llama70b-nvme llama70b-bounce gh200-lpddr mixtral-24gb mixtral-24gb-skewed mixtral-24gb-cache
  llama70b-int4-48gb opt175b-t4-flexgen opt30b-t4-cpu)
names=("$@")
[ ${#names[@]} -eq 0 ] && names=("${all[@]}")
for n in "${names[@]}"; do
  case $n in
    llama70b-decode | llama8b-prefill | mixtral-decode | deepseek-decode | cm384-pool | llama8b-train | \
      llama70b-nvme | llama70b-bounce | gh200-lpddr | mixtral-24gb | mixtral-24gb-skewed | mixtral-24gb-cache | \
      llama70b-int4-48gb | opt175b-t4-flexgen | opt30b-t4-cpu)
      scenario "$n" "${n//-/_}" ;;
    *)
      echo "error: unknown scenario '$n' (known: ${all[*]})" >&2
      exit 2
      ;;
  esac
done
