#!/usr/bin/env bash
# MoE routing without foresight: Mixtral-8x7B decode (2 layers) on an H100 whose HBM is cut
# so that experts are offloaded. Realistic routing (planned on expected, run on seeded) is
# never faster than the oracle (the plan sees the routing that runs) and has misses; the
# output is the same bytes for the same seed; the flags and the plan format round-trip.
# Usage: routing_test.sh TIERFLOW_BINARY   (run from the repository root)
set -u
tf=$1
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

args=(--model mixtral-8x7b --phase decode --tokens 4 --context 512 --layers 2
      --set tiers.hbm.capacity=4GB --policies reactive,tierflow)

check "compare realistic" 0 "$tf" compare "${args[@]}" --routing realistic --seed 3 --json --plans "$tmp/plans"
cp "$tmp/out" "$tmp/a.json"
for p in reactive tierflow; do
  real=$(jq ".policies[] | select(.policy == \"$p\" and .routing == \"realistic\") | .makespan_ps" "$tmp/a.json")
  orac=$(jq ".policies[] | select(.policy == \"$p\" and .routing == \"oracle\") | .makespan_ps" "$tmp/a.json")
  misses=$(jq ".policies[] | select(.policy == \"$p\" and .routing == \"realistic\") | .routing_misses" "$tmp/a.json")
  ok "$p: realistic $real >= oracle $orac" test "$real" -ge "$orac"
  ok "$p: misses $misses > 0" test "$misses" -gt 0
  ok "$p: oracle rows have no misses" \
    test "$(jq ".policies[] | select(.policy == \"$p\" and .routing == \"oracle\") | has(\"routing_misses\")" "$tmp/a.json")" = false
done

check "same seed, same bytes" 0 "$tf" compare "${args[@]}" --routing realistic --seed 3 --json
ok "deterministic" cmp -s "$tmp/out" "$tmp/a.json"
check "another seed" 0 "$tf" compare "${args[@]}" --routing realistic --seed 4 --json
ok "the seed changes the realized routing" bash -c "! cmp -s '$tmp/out' '$tmp/a.json'"

# The realized plan: demand prefetches in the file, which sim reads back and runs.
contains "demand steps in the plan" "$tmp/plans/tierflow.json" '"demand": true'
check "sim of a realized plan" 0 "$tf" sim --plan "$tmp/plans/tierflow.json"
contains "sim reports routing misses" "$tmp/out" "routing misses"

# The table and CSV say which is which; oracle and expected give one row per policy.
check "compare table" 0 "$tf" compare "${args[@]}" --routing realistic
contains "realistic row" "$tmp/out" "tierflow realistic"
contains "oracle row" "$tmp/out" "tierflow oracle"
check "compare csv" 0 "$tf" compare "${args[@]}" --routing realistic --csv
contains "csv routing column" "$tmp/out" "routing_misses"
check "compare oracle" 0 "$tf" compare "${args[@]}" --routing oracle --json
ok "oracle: one row per policy" test "$(jq '.policies | length' "$tmp/out")" = 2
check "seeded reads as oracle" 0 "$tf" compare "${args[@]}" --routing seeded --json
ok "seeded = oracle" test "$(jq '.policies | length' "$tmp/out")" = 2

# The default is a routing a runtime can achieve: realistic, with the oracle as a labelled
# bound beside it; the same rows as asking for it.
check "default is realistic" 0 "$tf" compare "${args[@]}" --seed 3 --json --plans "$tmp/plans-default"
ok "default = realistic" cmp -s "$tmp/out" "$tmp/a.json"
check "whatif default says realistic" 0 "$tf" whatif --model mixtral-8x7b --phase decode --tokens 4 \
  --context 512 --layers 2 --set tiers.hbm.capacity=4GB --question upgrade
contains "whatif routing line" "$tmp/out" "routing    realistic: planned on the expected routing"
# A workload file runs the routing it holds (the plan sees it) unless realistic is asked for.
"$tf" trace gen --model mixtral-8x7b --layers 1 --context 512 --tokens 2 --routing seeded -o "$tmp/wf.json" 2>/dev/null
check "file default" 0 "$tf" compare --workload "$tmp/wf.json" --set tiers.hbm.capacity=4GB --policies tierflow --csv
contains "file default is oracle" "$tmp/out" ",oracle,"
check "file realistic asked" 2 "$tf" compare --workload "$tmp/wf.json" --routing realistic --policies tierflow
contains "file realistic refused" "$tmp/err" "realistic routing generates the planned and the realized workload"

# A realized plan stays within the device: the realized expert group's outputs accumulate in
# another order than the planned one's (DeepSeek-V3, 256 experts, a skewed router: once 7 KiB
# over HBM, "stuck ... waits for memory").
check "deepseek realistic fits" 0 "$tf" compare --hw h100-sxm-8gpu --devices 1 --model deepseek-v3 \
  --phase decode --context 2048 --tokens 4 --batch 8 --routing-skew 1.2 --routing-repeat 0.3 \
  --policies tierflow --csv
contains "deepseek realistic row" "$tmp/out" ",realistic,"

# Bad input: an unknown routing names the choices; trace gen keeps expected|seeded.
check "unknown routing" 2 "$tf" compare "${args[@]}" --routing realstic
contains "names the choices" "$tmp/err" "realistic"
check "trace gen seeded" 0 "$tf" trace gen --model mixtral-8x7b --layers 1 --routing seeded -o "$tmp/w.json"
check "trace gen realistic is not a generator routing" 2 "$tf" trace gen --model mixtral-8x7b --routing realistic -o "$tmp/w.json"
finish
