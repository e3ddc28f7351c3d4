#!/usr/bin/env bash
# Regression: weights streamed from a slow home tier (NVMe, or DDR behind a slow port) plan
# and simulate with every policy, as they do from a fast one. The ZeRO-Inference shape:
# Llama-3-70B decode at batch 96 from a 12 GB/s tier into a 96 GB device.
# Usage: slow_tier_test.sh TIERFLOW_BINARY   (run from the repository root)
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
# The same at 1 GB/s (slower still, and it still fits).
check ssd-1gbs 0 "$tf" plan --workload "$tmp/w.json" --hw $hw --set tiers.hbm.capacity=96GB \
  --set tiers.ssd.read_bandwidth=1GB/s --pin weight=ssd --policy tierflow --devices 1 --threads 1

finish
