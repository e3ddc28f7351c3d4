#!/usr/bin/env bash
# Pins from the command line. Regression: weights streamed from a slow home tier (NVMe, or
# DDR behind a slow port) plan and simulate with every policy, as they do from a fast one
# (the ZeRO-Inference shape: Llama-3-70B decode at batch 96 from a 12 GB/s tier into a
# 96 GB device). Partial pins: what each share got, and the errors.
# Usage: pins_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$1
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

hw=configs/hw/h100-sxm-8gpu.yaml
check gen 0 "$tf" trace gen --model llama-3-70b --phase decode --batch 96 --context 512 --tokens 4 -o "$tmp/w.json"
for tier in ssd ddr; do
  for policy in resident reactive layerwise distance hyperoffload tierflow; do
    check "$tier-$policy" 0 "$tf" plan --workload "$tmp/w.json" --hw $hw --set tiers.hbm.capacity=96GB \
      --set "tiers.$tier.read_bandwidth=12GB/s" --pin "weight=$tier" --policy $policy --devices 1 --threads 1
    contains "$tier-$policy-simulated" "$tmp/out" "simulated makespan"
  done
done
# Usable memory: the budget is the capacity less the device's 1 GiB reserve (96GB = 89.4GiB),
# and the simulator holds a plan to it: a bigger reserve makes the same plan overflow.
check usable 0 "$tf" plan --workload "$tmp/w.json" --hw $hw --set tiers.hbm.capacity=96GB \
  --policy hyperoffload --devices 1 --threads 1 -o "$tmp/p96.json"
contains usable-budget "$tmp/out" "budget    88.4GiB per device"
check usable-sim 0 "$tf" sim --plan "$tmp/p96.json"
check usable-sim-reserve 1 "$tf" sim --plan "$tmp/p96.json" --set devices.h100.reserved=3GiB
contains usable-sim-reserve-msg "$tmp/err" "of 86.4GiB is free"

# The same at 1 GB/s (slower still, and it still fits).
check ssd-1gbs 0 "$tf" plan --workload "$tmp/w.json" --hw $hw --set tiers.hbm.capacity=96GB \
  --set tiers.ssd.read_bandwidth=1GB/s --pin weight=ssd --policy tierflow --devices 1 --threads 1

# Partial pins (FlexGen-style): --explain says what each share got.
check partial 0 "$tf" plan --workload "$tmp/w.json" --hw $hw --set tiers.hbm.capacity=96GB \
  --pin weight=hbm:0.2,ddr:0.8 --policy layerwise --devices 1 --threads 1 --explain
contains partial-hbm "$tmp/out" "note: pin weight:"
contains partial-asked "$tmp/out" "on 'ddr' (asked 80%)"
check partial-half 0 "$tf" plan --workload "$tmp/w.json" --hw $hw --set tiers.hbm.capacity=96GB \
  --pin weight=ddr:40% --policy hyperoffload --devices 1 --threads 1 --explain
contains partial-half-note "$tmp/out" "on 'ddr' (asked 40%)"
check partial-over-one 2 "$tf" plan --workload "$tmp/w.json" --hw $hw --pin weight=hbm:0.6,ddr:0.6
contains partial-over-one-msg "$tmp/err" "the fractions add up to 1.2, more than 1"
check partial-no-fraction 2 "$tf" plan --workload "$tmp/w.json" --hw $hw --pin weight=hbm,ddr
contains partial-no-fraction-msg "$tmp/err" "give every tier of a split pin its fraction"

finish
