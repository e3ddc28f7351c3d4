#!/usr/bin/env bash
# End-to-end "hostile input" tests of the tierflow CLI: crashes, endless or huge inputs
# (/dev/zero, absurd counts, a 1e9-point sweep), values that must be refused rather than
# answered, and outputs that would destroy an input. Every case must exit with its documented
# code (2: bad input) naming the flag or file at fault, under a memory and time cap, without
# writing any output, leaving a temporary file or a reproducer, or changing any input.
# Each case gets its own copies of the fixtures, so a case that destroys a file cannot make
# a later case pass or fail.
# Usage: hostile_test.sh TIERFLOW_BINARY   (run from the repository root)
#   HOSTILE_VERBOSE=1    also print "ok NAME (MILLISECONDS)" for every case that passes
#   HOSTILE_VERBOSE=2    and the first line of its standard error
#   HOSTILE_ONLY=REGEX   run only the cases whose name matches REGEX (grep -E)
set -u
tf=$(realpath "$1")
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
root=$PWD
verbose=${HOSTILE_VERBOSE:-0}
only=${HOSTILE_ONLY:-}
selected() { [ -z "$only" ] || grep -qE -- "$only" <<<"$1"; }

# The memory cap (virtual, in KiB) every case runs under. AddressSanitizer reserves terabytes
# of address space for its shadow, so a sanitizer build runs uncapped.
vmem=4000000
# A case's time limit; a sanitizer build (unoptimized, instrumented) gets three times as long.
case_secs=20
rounds=6  # of the concurrent-sweep race
# (scripts/test.sh exports ASAN_OPTIONS for every build, so the binary itself is asked: g++
# links the runtime as libasan, clang links it in, __asan_init and all.)
if { command -v ldd >/dev/null && ldd "$tf" 2>/dev/null | grep -q libasan; } ||
  grep -qa __asan_init "$tf"; then
  vmem=unlimited
  case_secs=60
  rounds=1  # a round takes about 40 s there; one exercises the lock path under the sanitizers
fi

sha() { if [ -e "$1" ]; then sha256sum <"$1" | cut -d' ' -f1; else echo absent; fi; }

capped() {  # capped SECONDS COMMAND...: COMMAND under the memory cap and a time limit
  local secs=$1
  shift
  # shellcheck disable=SC2016  # expanded by the inner shell
  timeout "$secs" bash -c 'ulimit -v "$0"; exec "$@"' "$vmem" "$@"
}

started=0
pass_case() {
  passes=$((passes + 1))
  if [ "$verbose" -ge 1 ]; then echo "ok $1 ($(($(date +%s%N) / 1000000 - started))ms)"; fi
  if [ "$verbose" -ge 2 ] && [ -s "$tmp/err" ]; then sed 's/^/  stderr: /' "$tmp/err" | head -1; fi
  return 0
}
fail_case() {  # fail_case NAME REASON [STDERR_FILE]
  echo "FAIL $1: $2"
  if [ -n "${3:-}" ] && [ -s "$3" ]; then sed 's/^/  stderr: /' "$3" | head -3; fi
  fails=$((fails + 1))
}

leftovers() {  # leftovers: temporaries (*.tierflow-tmp.*) and reproducers in $tmp (recursively) and the repository root
  { find "$tmp" \( -name '*.tierflow-tmp.*' -o -name 'tierflow-reproducer.json' \)
    find "$root" -maxdepth 1 \( -name '*.tierflow-tmp.*' -o -name 'tierflow-reproducer.json' \); } 2>/dev/null | sort
}

# hostile NAME WANT_RC NEEDLE [--out PATH]... [--in PATH]... [--cd DIR] [--timeout S] -- COMMAND...
# Runs COMMAND (in DIR if given) under the caps and checks: the exit code is WANT_RC (never a
# signal, 3 or a timeout); stderr holds NEEDLE (alternatives separated by '|') and no
# std::bad_alloc; every --out PATH is absent afterwards or, if it existed, unchanged; every
# --in PATH is unchanged; no *.tierflow-tmp.* file or tierflow-reproducer.json appeared in $tmp (at
# any depth, so DIR included when it is below $tmp) or the repository root.
# Output in $tmp/out and $tmp/err.
hostile() {
  local name=$1 want=$2 needle=$3
  shift 3
  selected "$name" || return 0
  started=$(($(date +%s%N) / 1000000))
  local outs=() ins=() cd_dir="" secs=$case_secs
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
      --out) outs+=("$2"); shift 2 ;;
      --in) ins+=("$2"); shift 2 ;;
      --cd) cd_dir=$2; shift 2 ;;
      --timeout) secs=$2; shift 2 ;;
      *) fail_case "$name" "test bug: unknown hostile option '$1'"; return 1 ;;
    esac
  done
  if [ $# -eq 0 ]; then fail_case "$name" "test bug: no '--' before the command"; return 1; fi
  shift
  local -a out_before=() in_before=()
  local p i
  for p in "${outs[@]+"${outs[@]}"}"; do out_before+=("$(sha "$p")"); done
  for p in "${ins[@]+"${ins[@]}"}"; do in_before+=("$(sha "$p")"); done
  local before_left
  before_left=$(leftovers)

  local rc
  if [ -n "$cd_dir" ]; then
    (cd "$cd_dir" && capped "$secs" "$@") >"$tmp/out" 2>"$tmp/err"
  else
    capped "$secs" "$@" >"$tmp/out" 2>"$tmp/err"
  fi
  rc=$?

  local why=()
  if [ "$rc" = 124 ]; then why+=("timed out after ${secs}s")
  elif [ "$rc" -ge 128 ]; then why+=("killed by signal $((rc - 128)) (exit $rc)")
  elif [ "$rc" = 3 ]; then why+=("internal error (exit 3), expected $want")
  elif [ "$rc" != "$want" ]; then why+=("exit $rc, expected $want")
  fi
  if grep -q 'bad_alloc' "$tmp/err"; then why+=("std::bad_alloc on stderr"); fi
  local found=0 alt alts
  IFS='|' read -r -a alts <<<"$needle"
  for alt in "${alts[@]}"; do grep -qF -- "$alt" "$tmp/err" && found=1; done
  [ "$found" = 1 ] || why+=("stderr does not name '$needle'")
  i=0
  for p in "${outs[@]+"${outs[@]}"}"; do
    local now
    now=$(sha "$p")
    if [ "${out_before[$i]}" = absent ] && [ "$now" != absent ]; then why+=("wrote output $p")
    elif [ "${out_before[$i]}" != absent ] && [ "$now" != "${out_before[$i]}" ]; then
      why+=("changed existing output $p")
    fi
    i=$((i + 1))
  done
  i=0
  for p in "${ins[@]+"${ins[@]}"}"; do
    [ "$(sha "$p")" = "${in_before[$i]}" ] || why+=("changed input $p")
    i=$((i + 1))
  done
  local new_left
  new_left=$(comm -13 <(echo "$before_left") <(leftovers) | grep -v '^$')
  if [ -n "$new_left" ]; then
    why+=("left behind: $(echo "$new_left" | tr '\n' ' ')")
    # Remove them so that later cases are not blamed.
    echo "$new_left" | while read -r f; do rm -rf -- "$f"; done
  fi

  if [ ${#why[@]} -eq 0 ]; then pass_case "$name"; return 0; fi
  local joined
  joined=$(printf '%s; ' "${why[@]}")
  fail_case "$name" "${joined%; }" "$tmp/err"
  return 1
}

setup() {  # setup NAME COMMAND...: a fixture step that must succeed (counted as a case)
  local name=$1
  shift
  started=$(($(date +%s%N) / 1000000))
  if capped 60 "$@" >"$tmp/out" 2>"$tmp/err"; then pass_case "setup/$name"; return 0; fi
  fail_case "setup/$name" "exit $?" "$tmp/err"
  return 1
}

# --------------------------------------------------------------------------------------
# Fixtures, all generated here, in $tmp/fix; `fresh DIR` copies them into $tmp/DIR for one
# case: w.json (a 1-layer decode workload), topo.yaml (a copy of $hw), p.json (a layerwise
# plan of w.json on topo.yaml, both referenced by relative path), c.json (a small Hugging
# Face llama config), tiny.yaml (a 2-point sweep spec) and r.db (its results).
hw=configs/hw/h100-sxm-8gpu.yaml
gen_small=(--model llama-3-8b --layers 2 --phase decode --context 128 --tokens 1)
scen=(--model llama-3-8b --layers 2 --phase decode --context 128 --tokens 1)
fix=$tmp/fix
mkdir -p "$fix"
cp "$hw" "$fix/topo.yaml"
setup gen-workload "$tf" trace gen --model llama-3-8b --layers 1 --phase decode --context 128 --tokens 1 -o "$fix/w.json"
setup plan "$tf" plan --hw "$fix/topo.yaml" --workload "$fix/w.json" --policy layerwise -o "$fix/p.json"

# A plausible small llama-style config.json; variants override fields.
hf() {  # hf FILE [KEY=JSONVALUE]...
  python3 - "$@" <<'EOF'
import json, sys
cfg = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 256,
    "initializer_range": 0.02, "intermediate_size": 512, "max_position_embeddings": 2048,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.44.0", "use_cache": True, "vocab_size": 1000,
}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    cfg[k] = json.loads(v)
json.dump(cfg, open(sys.argv[1], "w"), indent=2)
EOF
}
hf "$fix/c.json"
setup gen-hf-config "$tf" trace gen --hf-config "$fix/c.json" --phase decode --context 128 --tokens 1 -o "$tmp/hf-ok.json"
rm -f "$tmp/hf-ok.json"

cat >"$fix/tiny.yaml" <<'EOF'
name: hostile-tiny
base:
  hw: h100-sxm-8gpu
  model: llama-3-8b
  layers: 1
  phase: decode
  context: 128
  tokens: 1
axes:
  - policy: [resident, layerwise]
EOF
setup sweep-db "$tf" sweep "$fix/tiny.yaml" -o "$fix/r.db" --jobs 1 --quiet

fresh() {  # fresh DIR: $tmp/DIR holding a copy of every fixture; prints the folder
  local d=$tmp/$1
  rm -rf "$d"
  mkdir -p "$d"
  cp -p "$fix"/* "$d"/
  echo "$d"
}

# --------------------------------------------------------------------------------------
# Crashes.
d=$(fresh crash)
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"a\":" + "[" * 100000 + "]" * 100000 + "}")' "$d/deep.json"
hostile crash/hf-config-nested-100000 2 deep.json --out "$d/deep-out.json" --in "$d/deep.json" -- \
  "$tf" trace gen --hf-config "$d/deep.json" --phase decode -o "$d/deep-out.json"

edit_op() {  # edit_op IN OUT KEY VALUE: set KEY of the workload's first matmul op to VALUE (JSON text)
  python3 - "$@" <<'EOF'
import json, sys
src, dst, key, val = sys.argv[1:]
w = json.load(open(src))
op = next(o for o in w["ops"] if o["kind"] == "matmul")
op[key] = "@@VALUE@@"
# json.dumps cannot write 1e300 or an int64 as typed here verbatim: splice the text in.
open(dst, "w").write(json.dumps(w, indent=1).replace('"@@VALUE@@"', val))
EOF
}
edit_op "$d/w.json" "$d/w-flops.json" flops 1e300
edit_op "$d/w.json" "$d/w-bytes.json" bytes 9223372036854775807
hostile crash/workload-op-flops-1e300 2 w-flops.json --out "$d/p-flops.json" --in "$d/w-flops.json" -- \
  "$tf" plan --hw "$hw" --workload "$d/w-flops.json" -o "$d/p-flops.json"
hostile crash/workload-op-bytes-int64max 2 w-bytes.json --out "$d/p-bytes.json" --in "$d/w-bytes.json" -- \
  "$tf" plan --hw "$hw" --workload "$d/w-bytes.json" -o "$d/p-bytes.json"

# --------------------------------------------------------------------------------------
# Endless input files: /dev/zero and /dev/urandom as every kind of input file.
for dev in /dev/zero /dev/urandom; do
  n=${dev#/dev/}
  d=$(fresh "dev-$n")
  o=$d/out
  hostile "dev/$n/plan-workload" 2 "$dev" --out "$o.json" -- \
    "$tf" plan --hw "$hw" --workload "$dev" -o "$o.json"
  hostile "dev/$n/plan-hw" 2 "$dev" --out "$o.json" --in "$d/w.json" -- \
    "$tf" plan --hw "$dev" --workload "$d/w.json" -o "$o.json"
  hostile "dev/$n/sim-plan" 2 "$dev" --out "$o.txt" -- "$tf" sim --plan "$dev" -o "$o.txt"
  hostile "dev/$n/sim-hw" 2 "$dev" --out "$o.txt" --in "$d/p.json" -- "$tf" sim --plan "$d/p.json" --hw "$dev" -o "$o.txt"
  hostile "dev/$n/trace-info" 2 "$dev" --out "$o.txt" -- "$tf" trace info "$dev" -o "$o.txt"
  hostile "dev/$n/trace-import" 2 "$dev" --out "$o.json" -- "$tf" trace import "$dev" -o "$o.json"
  hostile "dev/$n/hw-validate" 2 "$dev" -- "$tf" hw validate "$dev"
  hostile "dev/$n/hw-show" 2 "$dev" --out "$o.txt" -- "$tf" hw show "$dev" -o "$o.txt"
  hostile "dev/$n/report" 2 "$dev" --out "$o.html" -- "$tf" report "$dev" -o "$o.html"
  hostile "dev/$n/export-plan" 2 "$dev" --out "$o.csv" -- "$tf" export --plan "$dev" --format csv -o "$o.csv"
  hostile "dev/$n/trace-gen-hf-config" 2 "$dev" --out "$o.json" -- \
    "$tf" trace gen --hf-config "$dev" --phase decode -o "$o.json"
  hostile "dev/$n/sweep-spec" 2 "$dev" --out "$o.db" -- "$tf" sweep "$dev" -o "$o.db" --quiet
  hostile "dev/$n/compare-hw" 2 "$dev" --out "$o.txt" -- \
    "$tf" compare --hw "$dev" "${scen[@]}" --policies layerwise -o "$o.txt"
done

# --------------------------------------------------------------------------------------
# Absurd sizes: exit 2 naming the flag or file, quickly and without running out of memory.
d=$(fresh sizes)
g=$d/gen-out.json
hostile gen/tokens-1e12 2 --tokens --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --phase decode --context 128 --tokens 1000000000000 -o "$g"
hostile gen/context-1e15 2 --context --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --phase decode --context 1000000000000000 --tokens 1 -o "$g"
hostile gen/seq-1e12-prefill 2 --seq --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --phase prefill --seq 1000000000000 -o "$g"
hostile gen/tokens-20-digits 2 --tokens --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --phase decode --context 128 --tokens 99999999999999999999 -o "$g"
hf "$d/c-layers.json" num_hidden_layers=1000000000
hostile gen/hf-num-hidden-layers-1e9 2 c-layers.json --out "$g" --in "$d/c-layers.json" -- \
  "$tf" trace gen --hf-config "$d/c-layers.json" --phase decode --context 128 --tokens 1 -o "$g"

# A sweep of 10^9 points (9 crossed axes of 10 values): refused before anything runs.
python3 - "$d/huge.yaml" <<'EOF'
import sys
ten = lambda xs: "[" + ", ".join(str(x) for x in xs) + "]"
axes = {
    "batch": ten(range(1, 11)), "tokens": ten(range(1, 11)), "context": ten(range(128, 1408, 128)),
    "seed": ten(range(1, 11)), "layers": ten(range(1, 11)), "kv_block": ten(range(16, 176, 16)),
    "links.gpu-pcie.bandwidth": ten(f"{x}GB/s" for x in range(16, 26)),
    "tiers.hbm.capacity": ten(f"{x}GB" for x in range(40, 50)),
    "tiers.ddr.capacity": ten(f"{x}GB" for x in range(500, 510)),
}
with open(sys.argv[1], "w") as f:
    f.write("name: hostile-huge\nbase:\n  hw: h100-sxm-8gpu\n  model: llama-3-8b\n  phase: decode\naxes:\n")
    for k, v in axes.items():
        f.write(f"  - {k}: {v}\n")
EOF
hostile sweep/grid-1e9-points-dry-run 2 huge.yaml --out "$d/huge.db" --in "$d/huge.yaml" --timeout 10 -- \
  "$tf" sweep "$d/huge.yaml" -o "$d/huge.db" --dry-run --quiet

hostile calibrate/max-size-64GiB 2 --max-size --out "$d/me.yaml" -- \
  "$tf" calibrate --backend cpu --max-size 64GiB -o "$d/me.yaml"

for n in 0 65; do
  hostile "calibrate/concurrent-$n" 2 --concurrent --out "$d/me.yaml" -- \
    "$tf" calibrate --backend cpu --concurrent "$n" -o "$d/me.yaml"
done

# The input limit (TIERFLOW_MAX_INPUT_BYTES) holds for files and pipes alike; a pipe within
# it is read.
d=$(fresh input-limit)
hostile input-limit/file 2 "w.json|TIERFLOW_MAX_INPUT_BYTES" --out "$d/i.txt" --in "$d/w.json" -- \
  env TIERFLOW_MAX_INPUT_BYTES=100B "$tf" trace info "$d/w.json" -o "$d/i.txt"
hostile input-limit/pipe 2 "TIERFLOW_MAX_INPUT_BYTES" --out "$d/i.txt" --in "$d/w.json" -- \
  bash -c 'exec env TIERFLOW_MAX_INPUT_BYTES=100B "$0" trace info <(cat "$1") -o "$2"' "$tf" "$d/w.json" "$d/i.txt"
for v in abc 0 -1; do
  hostile "input-limit/env-$v" 2 TIERFLOW_MAX_INPUT_BYTES --out "$d/i.txt" --in "$d/w.json" -- \
    env TIERFLOW_MAX_INPUT_BYTES="$v" "$tf" trace info "$d/w.json" -o "$d/i.txt"
done
if selected input-limit/pipe-within; then
  check input-limit/pipe-within 0 bash -c 'exec "$0" trace info <(cat "$1")' "$tf" "$d/w.json"
fi

# Counts with prefixes, durations with units, overheads and capacities: a value that is
# ambiguous, not whole, too large or of the wrong unit is exit 2 naming the flag or field,
# and nothing is written.
d=$(fresh units)
g=$d/gen-out.json
hostile units/context-8K-ambiguous 2 "--context: unknown unit 'K'" --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --phase decode --context 8K --tokens 1 -o "$g"
hostile units/tokens-prefix-overflow 2 "--tokens: '10000000T' is too large" --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --phase decode --context 128 --tokens 10000000T -o "$g"
hostile units/batch-not-whole 2 "--batch: '1.5' is not a whole number" --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --batch 1.5 -o "$g"
# A count past its target's type (a 32-bit one) is named with its bound, as a count past
# 64 bits is; CLI11 said only "Could not convert".
hostile units/tp-past-int 2 "--tp: '99999999999' is too large: at most 2147483647" --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --tp 99999999999 -o "$g"
hostile units/layers-past-int 2 "--layers: '4Gi' is too large: at most 2147483647" --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 4Gi -o "$g"
hostile units/replicas-past-int 2 "--replicas: '99999999999' is too large" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b --arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2 --replicas 99999999999 -o "$d/s.txt"
# serve's --tp (0 or absent: the least that leaves room): a count, within its bound, named.
sg=(--arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2)
hostile stop60/serve-tp-past-int 2 "--tp: '99999999999' is too large: at most 2147483647" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --tp 99999999999 -o "$d/s.txt"
hostile stop60/serve-tp-huge 2 "--tp: expected a whole number from 1 to 4096, got 100000" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --tp 100000 -o "$d/s.txt"
hostile stop60/serve-tp-negative 2 "--tp: negative value '-2'" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --tp -2 -o "$d/s.txt"
hostile stop60/serve-tp-word 2 "--tp" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --tp auto -o "$d/s.txt"
hostile stop60/serve-tp0-none-fits 2 "--tp: the weights of llama-3.1-405b" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3.1-405b --hw l40s-server "${sg[@]}" --tp 0 -o "$d/s.txt"
cp tests/data/serve/mooncake_conversation_200.jsonl "$d/tp0-trace.jsonl"
hostile stop60/serve-tp0-output-is-trace 2 "-o: refusing to write this output: it is an input" --in "$d/tp0-trace.jsonl" -- \
  "$tf" serve --model llama-3-8b --trace "$d/tp0-trace.jsonl" --tp 0 -o "$d/tp0-trace.jsonl"
# serve's --nodes: a count within its bound; a topology of supernode-wide resources is not
# copied; a replica wider than a node, or where the devices have no peer route, is refused.
hostile stop61/serve-nodes-zero 2 "--nodes: expected a whole number from 1 to 1024, got 0" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --nodes 0 -o "$d/s.txt"
hostile stop61/serve-nodes-huge 2 "--nodes: expected a whole number from 1 to 1024, got 1025" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --nodes 1025 -o "$d/s.txt"
hostile stop61/serve-nodes-negative 2 "--nodes: negative value '-2'" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --nodes -2 -o "$d/s.txt"
hostile stop61/serve-nodes-word 2 "--nodes: malformed number in 'many'" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --nodes many -o "$d/s.txt"
# system.supernodes, the key this stop added: a count, at least 1, that fits.
hostile stop63/supernodes-zero 2 "--set:1:19: bad value for 'supernodes': must be at least 1, got 0" -- \
  "$tf" hw show gb200-nvl72 --set system.supernodes=0
hostile stop63/supernodes-huge 2 "--set:1:19: bad value for 'supernodes': 4294967296 is too large" -- \
  "$tf" hw show gb200-nvl72 --set system.supernodes=4294967296
hostile stop63/serve-nodes-supernodes-uneven 2 "--set:1:19: system: 18 hosts do not divide evenly over 4 supernodes" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b --hw gb200-nvl72 "${sg[@]}" --nodes 2 --set system.supernodes=4 -o "$d/s.txt"
# --pp, the flag this stop added: a count within the devices and the model's layers.
hostile stop64/pp-huge 2 "--pp: '99999999999' is too large" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --pp 99999999999 -o "$d/s.txt"
hostile stop64/pp-past-limit 2 "--pp: expected a whole number from 1 to 4096, got 4097" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --pp 4097 -o "$d/s.txt"
hostile stop64/pp-more-than-layers 2 "--pp: expected 1 to 32 pipeline stages (one layer each at least) for llama-3-8b, got 40" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --tp 1 --pp 40 --set devices.h100.count=40 -o "$d/s.txt"
hostile stop64/pp-speculative 2 "--pp: pipeline parallelism is modelled without speculative decoding" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --tp 2 --pp 2 --spec-tokens 3 --spec-accept 0.5 -o "$d/s.txt"
hostile stop64/pp-too-many-devices 2 "--pp: 1 replica of TP 8 x PP 3 needs 24 devices" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --tp 8 --pp 3 -o "$d/s.txt"
# (TP 16 over two nodes is served since stop 65, its all-reduces over their network; a
# group that would lie unevenly over hosts, 6 and 2 of its 8 GPUs, is refused.)
hostile stop61/serve-tp-spans-nodes 2 "--tp: a replica of TP 8: on devices 0 to 7, 6 of its ranks are among the devices one 'nvswitch' joins and 2 among another" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b "${sg[@]}" --hw h100-cxl --set devices.h100.count=24 --tp 8 -o "$d/s.txt"
hostile stop61/serve-tp-no-peer-route 2 "--tp: a replica of TP 2: its collectives cross the peer route of 'hbm', and 'a100-nvme-bounce' has none: TP 1" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b --hw a100-nvme-bounce "${sg[@]}" --tp 2 -o "$d/s.txt"
# A shard of tensor parallelism needs its group: as many devices of the class, joined by
# the device tier's peer route. Refused with exit 2 (compare and whatif planned it on one
# device, its collectives free, and answered with exit 0).
hostile stop61/compare-tp-past-devices 2 "--tp: TP 2: its group needs 2 devices of class 'hopper', and 'gh200' has 1" --out "$d/c.txt" -- \
  "$tf" compare --hw gh200 --model llama-3-8b --tp 2 --batch 1 --context 1024 -o "$d/c.txt"
hostile stop61/whatif-tp-no-peer-route 2 "--tp: TP 2: its collectives cross the peer route of 'hbm', and 'a100-nvme-bounce' has none: TP 1" --out "$d/c.txt" -- \
  "$tf" whatif --hw a100-nvme-bounce --model llama-3-8b --tp 2 -o "$d/c.txt"
hostile stop61/compare-tp-spans-hosts 2 "--tp: TP 16: on devices 0 to 15, its collectives would cross 'ib' from device 0 to device 8, and collectives are timed over the peer route of 'hbm' alone" --out "$d/c.txt" -- \
  "$tf" compare --hw h100-cxl --model llama-3-70b --tp 16 --batch 1 --context 1024 -o "$d/c.txt"
"$tf" trace gen --model llama-3-70b --phase decode --context 1024 --tokens 2 --tp 16 -o "$d/w16.json" >/dev/null 2>&1
hostile stop61/plan-tp-file-past-devices 2 "its group needs 16 devices of class 'h100', and 'h100-sxm-8gpu' has 8" --out "$d/p16.json" -- \
  "$tf" plan --hw h100-sxm-8gpu --workload "$d/w16.json" -o "$d/p16.json"
hostile stop61/compare-tp-file-past-devices 2 "w16.json: the workload is one shard of tensor parallelism 16: its group needs 16 devices" --out "$d/c.txt" -- \
  "$tf" compare --hw h100-sxm-8gpu --workload "$d/w16.json" -o "$d/c.txt"
# A workload with collective ops that names no tensor parallelism (an import may not): on a
# topology with no peer route its collectives were free and the answer exit 0; refused.
"$tf" trace gen --model llama-3-8b --phase decode --layers 2 --tp 2 -o "$d/w2.json" >/dev/null 2>&1
sed 's/, "tp": 2//' "$d/w2.json" >"$d/w2-no-tp.json"
hostile stop62/compare-collective-no-peer-route 2 "w2-no-tp.json: op 't0.L0.attn_allreduce' is a collective (8KiB over its tensor-parallel group), and 'a100-nvme-bounce' has no peer route of 'hbm' to time it over" --out "$d/c.txt" -- \
  "$tf" compare --hw a100-nvme-bounce --workload "$d/w2-no-tp.json" -o "$d/c.txt"
"$tf" plan --hw h100-sxm-8gpu --workload "$d/w2-no-tp.json" -o "$d/p2.json" >/dev/null 2>&1
hostile stop62/sim-collective-no-peer-route 2 "has no peer route of 'hbm' to time it over" --out "$d/s2.json" -- \
  "$tf" sim --hw a100-nvme-bounce --plan "$d/p2.json" -o "$d/s2.json"
# A mapping that holds aliases of itself under many keys: each walk of the YAML (merge keys,
# duplicate keys) went round it until its budget of a million nodes ran out, 0.35 s a key
# (this one took 18.9 s); each node is now walked once.
hostile stop62/yaml-self-alias-many-keys 2 "slow-self-alias-64-keys.yaml:2:3: expected a mapping for sources, got a list" --timeout 10 -- \
  "$tf" hw validate tests/fuzz/regressions/topology/slow-self-alias-64-keys.yaml
# A board's xGMI mesh (a direct link of each GPU to every peer) joined the GPUs of every
# node of --nodes: TP 16 over two MI300X servers ran with its collectives over xGMI between
# them (exit 0). The mesh joins one host's GPUs; between hosts only the NICs do: a plan's
# group across two is refused (serve times it over the NICs: tests/e2e/serve_test.sh
# nodes-tp-mi300x).
hostile stop63/mesh-tp-across-hosts 2 "TP 16: on devices 0 to 15, its collectives would cross 'backend' from device 0 to device 8" -- \
  "$tf" compare --hw mi300x-8gpu --set system.hosts=2 --set devices.mi300x.count=16 --model llama-3-8b --tp 16
# A number that is not one: named with what it must be (CLI11 said "Could not convert").
hostile units/rate-scale-word 2 "--rate-scale: expected a number, got 'abc'" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b --arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2 --rate-scale abc -o "$d/s.txt"
hostile units/spec-accept-word 2 "--spec-accept: expected a number, got 'abc'" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b --arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2 --spec-tokens 2 --spec-accept abc -o "$d/s.txt"
hostile units/spec-accept-huge 2 "--spec-accept: expected a number, got '1e400'" --out "$d/s.txt" -- \
  "$tf" serve --model llama-3-8b --arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2 --spec-tokens 2 --spec-accept 1e400 -o "$d/s.txt"
# A draft model file is an input: no output may be written over it.
cp configs/models/llama-3-8b.yaml "$d/draft.yaml"
hostile units/spec-draft-as-output 2 "refusing to write this output: it is an input of this command" --out "$d/draft.yaml" -- \
  "$tf" serve --model llama-3-8b --arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2 --spec-tokens 2 --spec-draft "$d/draft.yaml" -o "$d/draft.yaml"
ok units/spec-draft-intact cmp -s "$d/draft.yaml" configs/models/llama-3-8b.yaml
hostile units/replay-device-past-int 2 "--device: '99999999999' is too large" --out "$d/r.txt" -- \
  "$tf" replay --plan "$d/none.json" --device 99999999999 -o "$d/r.txt"
hostile units/prompt-negative 2 "--prompt: negative value" --out "$d/c.txt" -- \
  "$tf" compare "${scen[@]}" --prompt -5 --generate 2 --policies resident -o "$d/c.txt"
hostile units/max-tpot-unit 2 "--max-tpot: unknown unit 'xs'" --out "$d/a.txt" -- \
  "$tf" whatif "${scen[@]}" --question max-batch --max-tpot 5xs -o "$d/a.txt"
hostile units/max-tpot-wrong-question 2 "--max-tpot: applies to --question max-batch" --out "$d/a.txt" -- \
  "$tf" whatif "${scen[@]}" --question min-memory --max-tpot 5ms -o "$d/a.txt"
hostile units/max-overhead-ambiguous-whatif 2 "--max-overhead: '10' is ambiguous" --out "$d/a.txt" -- \
  "$tf" whatif "${scen[@]}" --question min-memory --max-overhead 10 -o "$d/a.txt"
hostile units/max-overhead-ambiguous-plan 2 "--max-overhead: '10' is ambiguous" --out "$d/p.json" --in "$d/w.json" -- \
  "$tf" plan --workload "$d/w.json" --max-overhead 10 -o "$d/p.json"
hostile units/device-tier-0B 2 "local_tier 'hbm' has capacity 0B" --out "$d/c.txt" -- \
  "$tf" compare "${scen[@]}" --set tiers.hbm.capacity=0B --policies resident -o "$d/c.txt"
hostile units/hw-name-typo 2 "did you mean 'gh200'" --out "$d/h.txt" -- \
  "$tf" hw show gh20 -o "$d/h.txt"
sed -e 's/name: hostile-tiny/name: hostile-units/' -e 's/  - policy: \[resident, layerwise\]/  - context: [128, 8K]/' \
  "$d/tiny.yaml" >"$d/units.yaml"
hostile units/sweep-axis-8K 2 "units.yaml:" --out "$d/units.db" --in "$d/units.yaml" -- \
  "$tf" sweep "$d/units.yaml" -o "$d/units.db" --quiet

# This stop's surfaces: a model's declared context overridden badly, the plan fields of
# tierflow.plan/2 given the wrong types or kept under plan/1, a replay refused before it
# starts (no report written).
d=$(fresh stop36)
g=$d/gen-out.json
hostile stop36/max-context-negative 2 "max_context" --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --set max_context=-1 -o "$g"
hostile stop36/max-context-text 2 "max_context" --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --layers 2 --set max_context=lots -o "$g"
sed 's/"budget": [0-9]*/"budget": "40GiB"/' "$d/p.json" >"$d/p-budget-text.json"
hostile stop36/plan-budget-text 2 "p-budget-text.json:" --out "$d/s.txt" --in "$d/p-budget-text.json" -- \
  "$tf" sim --plan "$d/p-budget-text.json" -o "$d/s.txt"
sed 's/"pipeline": "[^"]*"/"pipeline": 7/' "$d/p.json" >"$d/p-pipeline-number.json"
hostile stop36/plan-pipeline-number 2 "p-pipeline-number.json:" --out "$d/s.txt" --in "$d/p-pipeline-number.json" -- \
  "$tf" sim --plan "$d/p-pipeline-number.json" -o "$d/s.txt"
sed 's/"format": "tierflow.plan\/2"/"format": "tierflow.plan\/1"/' "$d/p.json" >"$d/p-v1-fields.json"
hostile stop36/plan-v1-with-v2-fields 2 "a 'tierflow.plan/1' plan keeps it in meta" --out "$d/s.txt" --in "$d/p-v1-fields.json" -- \
  "$tf" sim --plan "$d/p-v1-fields.json" -o "$d/s.txt"
hostile stop36/replay-refused-no-report 2 "at their real sizes" --out "$d/r.json" --in "$d/p.json" -- \
  "$tf" replay --plan "$d/p.json" --copy native --memory-limit 64B --json -o "$d/r.json"

# This stop's surfaces: tierflow serve's trace, generator and flags.
d=$(fresh stop37)
srv=(--hw h100-sxm-8gpu --model llama-3-8b --quiet)
moon=$root/tests/data/serve/mooncake_conversation_200.jsonl
hostile stop37/serve-trace-dev-zero 2 "/dev/zero" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace /dev/zero -o "$d/r.csv"
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"timestamp\": 0, \"input_length\": " + "[" * 100000 + "]" * 100000 + "}\n")' "$d/deep.jsonl"
hostile stop37/serve-trace-nested 2 "deep.jsonl:1:" --out "$d/r.csv" --in "$d/deep.jsonl" -- \
  "$tf" serve "${srv[@]}" --trace "$d/deep.jsonl" -o "$d/r.csv"
printf '{"timestamp": 0, "input_length": 99999999999999999999, "output_length": 1, "hash_ids": [0]}\n' >"$d/huge.jsonl"
hostile stop37/serve-trace-huge-length 2 "huge.jsonl:1:" --out "$d/r.csv" --in "$d/huge.jsonl" -- \
  "$tf" serve "${srv[@]}" --trace "$d/huge.jsonl" -o "$d/r.csv"
hostile stop37/serve-arrivals-1e12 2 "--arrivals" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --arrivals "poisson,rate=1/s,n=1000000000000,prompt=fixed:8,output=fixed:8" -o "$d/r.csv"
hostile stop37/serve-arrivals-rate-zero 2 "--arrivals" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --arrivals "poisson,rate=0/s,n=10,prompt=fixed:8,output=fixed:8" -o "$d/r.csv"
hostile stop37/serve-token-budget-zero 2 "--token-budget" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --token-budget 0 -o "$d/r.csv"
hostile stop37/serve-rate-scale-nan 2 "--rate-scale" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --rate-scale nan -o "$d/r.csv"
hostile stop37/serve-kv-tier-zero-percent 2 "--kv-tiers" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --kv-tiers ddr:0% -o "$d/r.csv"
hostile stop37/serve-kv-tier-twice 2 "named twice" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --kv-tiers ddr,ddr -o "$d/r.csv"
hostile stop37/serve-replicas-huge 2 "--replicas" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --replicas 1000000 -o "$d/r.csv"
cp "$moon" "$d/t.jsonl"
hostile stop37/serve-output-over-trace 2 "t.jsonl" --in "$d/t.jsonl" -- \
  "$tf" serve "${srv[@]}" --trace "$d/t.jsonl" -o "$d/t.jsonl"
hostile stop37/serve-timeline-over-trace 2 "t.jsonl" --in "$d/t.jsonl" -- \
  "$tf" serve "${srv[@]}" --trace "$d/t.jsonl" --timeline "$d/t.jsonl"
# The questions, the device level's policy and the outputs: a bad value is refused before
# any run, naming its flag (the question and the metric with the nearest ones); an output
# onto the trace is refused and the trace unchanged; nothing is written.
fnd=(serve "${srv[@]}" --trace "$moon" --summary "$d/s.txt")
hostile stop37/serve-find-unknown-question 2 \
  "--find: unknown question 'max-rates': max-rate, min-replicas, min-devices, min-capacity:TIER, split or upgrade; did you mean 'max-rate'?" \
  --out "$d/s.txt" -- "$tf" "${fnd[@]}" --find max-rates --target p99-ttft=2s
hostile stop37/serve-find-without-target 2 "--find: needs --target" --out "$d/s.txt" -- \
  "$tf" "${fnd[@]}" --find max-rate
hostile stop37/serve-target-without-find 2 "--target: needs --find" --out "$d/s.txt" -- \
  "$tf" "${fnd[@]}" --target p99-ttft=2s
hostile stop37/serve-target-malformed 2 "--target: 'p99-ttft': expected METRIC=BOUND" --out "$d/s.txt" -- \
  "$tf" "${fnd[@]}" --find max-rate --target p99-ttft
hostile stop37/serve-target-unknown-metric 2 "--target: 'p99-ttfb=2s': unknown metric 'p99-ttfb'; did you mean 'p99-ttft'?" \
  --out "$d/s.txt" -- "$tf" "${fnd[@]}" --find max-rate --target p99-ttfb=2s
hostile stop37/serve-target-latency-nan 2 "--target: 'p99-ttft=nan'" --out "$d/s.txt" -- \
  "$tf" "${fnd[@]}" --find max-rate --target p99-ttft=nan
hostile stop37/serve-target-latency-negative 2 "--target: 'p99-ttft=-1s'" --out "$d/s.txt" -- \
  "$tf" "${fnd[@]}" --find min-replicas --target p99-ttft=-1s
hostile stop37/serve-target-share-nan 2 "--target: 'nan'" --out "$d/s.txt" -- \
  "$tf" "${fnd[@]}" --find max-rate --target hit=nan
hostile stop37/serve-target-share-negative 2 "--target: '-5%'" --out "$d/s.txt" -- \
  "$tf" "${fnd[@]}" --find max-rate --slo ttft=2s --target goodput=-5%
hostile stop37/serve-device-policy-unknown 2 "--device-policy: expected one of lru, lfu, s3fifo, got 'arc'" \
  --out "$d/s.txt" -- "$tf" "${fnd[@]}" --device-policy arc
hostile stop37/serve-report-over-trace 2 "t.jsonl" --in "$d/t.jsonl" --out "$d/s.txt" -- \
  "$tf" serve "${srv[@]}" --trace "$d/t.jsonl" --summary "$d/s.txt" --report "$d/t.jsonl"
hostile stop37/serve-summary-over-trace 2 "t.jsonl" --in "$d/t.jsonl" -- \
  "$tf" serve "${srv[@]}" --trace "$d/t.jsonl" --summary "$d/t.jsonl"
hostile stop37/serve-find-summary-over-trace 2 "t.jsonl" --in "$d/t.jsonl" -- \
  "$tf" serve "${srv[@]}" --trace "$d/t.jsonl" --find min-replicas --target p90-ttft=10s --summary "$d/t.jsonl"
hostile stop37/serve-summary-directory 2 "$d: --summary: cannot write: it is a directory" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --summary "$d" -o "$d/r.csv"
hostile stop37/serve-summary-empty 2 "--summary: an empty path" --out "$d/r.csv" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --summary "" -o "$d/r.csv"
# An output in a folder that does not exist is refused before the run, and before any
# other output is written (the summary here would come first).
hostile stop38/serve-output-no-folder 2 "cannot write: no folder '$d/nowhere'" --out "$d/s.txt" -- \
  "$tf" serve "${srv[@]}" --trace "$moon" --summary "$d/s.txt" -o "$d/nowhere/r.csv"
hostile stop38/plan-output-no-folder 2 "cannot write: no folder '$d/nowhere'" -- \
  "$tf" plan --hw "$fix/topo.yaml" --workload "$fix/w.json" --policy layerwise -o "$d/nowhere/p.json"
hostile stop38/plan-timeline-directory 2 "$d: --timeline: cannot write: it is a directory" --out "$d/p.json" -- \
  "$tf" plan --hw "$fix/topo.yaml" --workload "$fix/w.json" --policy layerwise -o "$d/p.json" --timeline "$d"
# An output flag given an empty path is refused naming the flag, in every command (whatif
# wrote to standard output instead).
hostile stop39/whatif-output-empty 2 "--output: an empty path" -- \
  "$tf" whatif --hw "$fix/topo.yaml" --workload "$fix/w.json" -o ""
hostile stop39/trace-gen-output-empty 2 "--output: an empty path" -- \
  "$tf" trace gen --model llama-3-8b --layers 1 -o ""
hostile stop39/plan-timeline-empty 2 "--timeline: an empty path" --out "$d/p.json" -- \
  "$tf" plan --hw "$fix/topo.yaml" --workload "$fix/w.json" --policy layerwise -o "$d/p.json" --timeline ""
hostile stop39/sweep-csv-empty 2 "--csv: an empty path" -- \
  "$tf" sweep export "$d/none.db" --csv ""

# Staging buffers larger than the tier they stage through, and a serving swap space larger
# than the host's memory: refused at the value's position or naming the flag.
d=$(fresh stop40)
sed 's|buffer: {value: 64MiB, source: assume-bounce}, buffers: {value: 1|buffer: {value: 1EiB, source: assume-bounce}, buffers: {value: 1|' \
  configs/hw/a100-nvme-bounce.yaml >"$d/bounce.yaml"
hostile stop40/route-buffer-1EiB 2 "bounce.yaml:130:61: route ssd -> hbm: the staging buffers in 'ddr'" --in "$d/bounce.yaml" -- \
  "$tf" hw show "$d/bounce.yaml"
hostile stop40/serve-swap-space-1PiB 2 "--swap-space: the swap space (1PiB per device" -- \
  "$tf" serve --model llama-3-8b --arrivals "poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2" \
  --preemption swap --swap-space 1PiB --quiet
hostile stop40/serve-swap-space-huge-number 2 "--swap-space: expected a size above 0" -- \
  "$tf" serve --model llama-3-8b --arrivals "poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2" \
  --preemption swap --swap-space 99999999999999999999999B --quiet
hostile stop40/serve-swap-tier-unknown 2 "--swap-tier: no tier 'dram'" -- \
  "$tf" serve --model llama-3-8b --arrivals "poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2" \
  --preemption swap --swap-tier dram --quiet
hostile stop40/serve-preemption-word 2 "--preemption: expected one of recompute, swap" -- \
  "$tf" serve --model llama-3-8b --arrivals "poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2" \
  --preemption evict --quiet
# The skewed router's values: out of range, not finite, not numbers.
hostile stop40/gen-routing-skew-nan 2 "--routing-skew" --out "$d/skew.json" -- \
  "$tf" trace gen --model mixtral-8x7b --layers 1 --routing seeded --routing-skew nan -o "$d/skew.json"
hostile stop40/gen-routing-skew-huge 2 "--routing-skew" --out "$d/skew.json" -- \
  "$tf" trace gen --model mixtral-8x7b --layers 1 --routing seeded --routing-skew 1e400 -o "$d/skew.json"
hostile stop40/gen-routing-repeat-2 2 "--routing-repeat: --routing-repeat is a probability" --out "$d/skew.json" -- \
  "$tf" trace gen --model mixtral-8x7b --layers 1 --routing seeded --routing-repeat 2 -o "$d/skew.json"
hostile stop40/vary-routing-skew-word 2 "routing_skew: 'steep' is not a number" -- \
  "$tf" whatif --model mixtral-8x7b --layers 1 --tokens 2 --routing oracle --vary routing_skew=steep

# Serving sweeps: a trace that is no regular file, counts past their limits, a rate scale
# that is not finite, a huge capacity in a KV tier; refused at the spec's value before any
# database is made, the spec untouched.
d=$(fresh stop41)
serve_head='kind: serve
base:
  model: llama-3-8b'
printf '%s\n  trace: /dev/zero\naxes:\n  - tp: [1]\n' "$serve_head" >"$d/zero.yaml"
hostile stop41/serve-sweep-trace-dev-zero 2 "/dev/zero" --in "$d/zero.yaml" --out "$d/zero.db" -- \
  "$tf" sweep "$d/zero.yaml" -o "$d/zero.db" --quiet
arrivals='  arrivals: poisson,rate=2/s,n=4,prompt=fixed:512,output=fixed:2'
printf '%s\n%s\naxes:\n  - first: [1, 1e30]\n' "$serve_head" "$arrivals" >"$d/first.yaml"
hostile stop41/serve-sweep-first-1e30 2 "first.yaml:6:16: first:" --in "$d/first.yaml" --out "$d/first.db" -- \
  "$tf" sweep "$d/first.yaml" -o "$d/first.db" --quiet
printf '%s\n%s\naxes:\n  - rate_scale: [1, inf]\n' "$serve_head" "$arrivals" >"$d/rate.yaml"
hostile stop41/serve-sweep-rate-inf 2 "rate.yaml:6:21: rate_scale: expected a finite number above 0" --in "$d/rate.yaml" --out "$d/rate.db" -- \
  "$tf" sweep "$d/rate.yaml" -o "$d/rate.db" --quiet
printf '%s\n%s\naxes:\n  - replicas: [1, 99999999999999999999]\n' "$serve_head" "$arrivals" >"$d/rep.yaml"
hostile stop41/serve-sweep-replicas-huge 2 "rep.yaml:6:19: replicas:" --in "$d/rep.yaml" --out "$d/rep.db" -- \
  "$tf" sweep "$d/rep.yaml" -o "$d/rep.db" --quiet
printf '%s\n%s\naxes:\n  - kv_tiers: ["ddr:1EiB"]\n' "$serve_head" "$arrivals" >"$d/tier.yaml"
hostile stop41/serve-sweep-kv-tier-1EiB 2 "tier.yaml:6:16: kv_tiers: tier 'ddr' is given 1EiB for KV per instance, more than the" --in "$d/tier.yaml" --out "$d/tier.db" -- \
  "$tf" sweep "$d/tier.yaml" -o "$d/tier.db" --quiet
hostile stop41/serve-kv-tier-1EiB 2 "--kv-tiers: tier 'ddr' is given 1EiB for KV per instance" -- \
  "$tf" serve --model llama-3-8b --arrivals "poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2" \
  --kv-tiers ddr:1EiB --quiet
hostile stop41/serve-mooncake-block-tokens-100 2 "block tokens 100: the trace's 512-token prefix blocks split only into pages that divide them" -- \
  "$tf" serve --model llama-3-8b --trace tests/data/serve/mooncake_conversation_200.jsonl \
  --block-tokens 100 --quiet
hostile stop41/serve-find-upgrad 2 "--find: unknown question 'upgrad': max-rate, min-replicas, min-devices, min-capacity:TIER, split or upgrade; did you mean 'upgrade'?" -- \
  "$tf" serve --model llama-3-8b --arrivals "poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2" \
  --find upgrad --target p99-ttft=1s --quiet
# The decode router and the split question: a bad or empty router, a router without
# prefill replicas, a split of one replica; each exit 2 naming its flag.
pdarr=(--model llama-3-8b --arrivals "poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2" --quiet)
hostile stop58/decode-router-bad 2 "--decode-router: expected one of round-robin, least-loaded, prefix, got 'nearest'" -- \
  "$tf" serve "${pdarr[@]}" --prefill-replicas 1 --decode-router nearest
hostile stop58/decode-router-alone 2 "--decode-router: how a decode replica is chosen needs --prefill-replicas" -- \
  "$tf" serve "${pdarr[@]}" --decode-router prefix
hostile stop58/split-one-replica 2 "--find: split divides the replicas between prefill and decode" -- \
  "$tf" serve "${pdarr[@]}" --replicas 1 --find split --target p99-ttft=1s
hostile stop58/split-whatif-no-target 2 "--question: a service question needs --target" -- \
  "$tf" whatif "${pdarr[@]}" --question split --serve replicas=2
hostile stop41/serve-warmup-past-all 2 "--warmup: 1000s is after every arrival" -- \
  "$tf" serve --model llama-3-8b --arrivals "poisson,rate=2/s,n=50,prompt=fixed:512,output=fixed:8" \
  --warmup 1000s --quiet
printf 'kind: [serve]\nbase: {model: llama-3-8b}\naxes:\n  - tp: [1]\n' >"$d/kindlist.yaml"
hostile stop41/sweep-kind-list 2 "kindlist.yaml:1:7: kind must be a single value" --in "$d/kindlist.yaml" --out "$d/kl.db" -- \
  "$tf" sweep "$d/kindlist.yaml" -o "$d/kl.db" --quiet

# whatif's service questions (--trace, --arrivals, --target, --serve) and serve's per-request
# JSON Lines output: refused before any run, naming whatif's own flag or --serve FIELD;
# nothing written, no input changed.
d=$(fresh stop42)
cp "$root/tests/data/serve/mooncake_conversation_200.jsonl" "$d/t.jsonl"
wq=(whatif --model llama-3-8b --question max-rate --quiet)
gen2="poisson,rate=1/s,n=2,prompt=fixed:512,output=fixed:2"
hostile stop42/whatif-trace-dev-zero 2 "/dev/zero" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --trace /dev/zero --target p99-ttft=1s -o "$d/a.txt"
hostile stop42/whatif-arrivals-1e12 2 "--arrivals" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "poisson,rate=1/s,n=1000000000000,prompt=fixed:8,output=fixed:8" --target p99-ttft=1s -o "$d/a.txt"
hostile stop42/whatif-trace-and-arrivals 2 "--arrivals" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --trace "$d/t.jsonl" --arrivals "$gen2" --target p99-ttft=1s -o "$d/a.txt"
hostile stop42/whatif-target-nan 2 "--target: 'p99-ttft=nan'" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=nan -o "$d/a.txt"
hostile stop42/whatif-target-unknown-metric 2 "--target: 'p99-ttfb=2s': unknown metric 'p99-ttfb'; did you mean 'p99-ttft'?" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttfb=2s -o "$d/a.txt"
hostile stop42/whatif-target-missing 2 "--question: a service question needs --target METRIC=BOUND" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" -o "$d/a.txt"
hostile stop42/whatif-serve-not-field-value 2 "--serve: 'kv_tiers' is not FIELD=VALUE" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --serve kv_tiers -o "$d/a.txt"
hostile stop42/whatif-serve-unknown-field 2 "--serve kv_tier: unknown serving field 'kv_tier'" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --serve kv_tier=ddr -o "$d/a.txt"
hostile stop42/whatif-serve-kv-tier-1EiB 2 "--serve kv_tiers: tier 'ddr' is given 1EiB for KV per instance" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --serve kv_tiers=ddr:1EiB -o "$d/a.txt"
hostile stop42/whatif-serve-own-flag 2 "--serve tp: give it as whatif's --tp" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --serve tp=2 -o "$d/a.txt"
hostile stop42/whatif-serve-replicas-huge 2 "--serve replicas: '99999999999999999999' is too large" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --serve replicas=99999999999999999999 -o "$d/a.txt"
hostile stop42/whatif-serve-rate-scale-nan 2 "--serve rate_scale: expected a finite number above 0" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --serve rate_scale=nan -o "$d/a.txt"
hostile stop42/whatif-tp-huge 2 "--tp" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --tp 1000000 -o "$d/a.txt"
hostile stop42/whatif-step-flag 2 "--batch: describes a step, not a service" --out "$d/a.txt" -- \
  "$tf" "${wq[@]}" --arrivals "$gen2" --target p99-ttft=1s --batch 4 -o "$d/a.txt"
hostile stop42/whatif-output-over-trace 2 "t.jsonl" --in "$d/t.jsonl" -- \
  "$tf" "${wq[@]}" --trace "$d/t.jsonl" --target p99-ttft=1s -o "$d/t.jsonl"
hostile stop42/whatif-output-no-folder 2 "cannot write: no folder '$d/nowhere'" -- \
  "$tf" "${wq[@]}" --trace "$d/t.jsonl" --target p99-ttft=1s -o "$d/nowhere/a.txt"
hostile stop42/serve-jsonl-over-trace 2 "t.jsonl" --in "$d/t.jsonl" -- \
  "$tf" serve --model llama-3-8b --quiet --trace "$d/t.jsonl" -o "$d/t.jsonl"
hostile stop42/serve-jsonl-no-folder 2 "cannot write: no folder '$d/nowhere'" -- \
  "$tf" serve --model llama-3-8b --quiet --trace "$d/t.jsonl" -o "$d/nowhere/r.jsonl"
hostile stop42/serve-upgrade-timeline-over-trace 2 "t.jsonl" --in "$d/t.jsonl" -- \
  "$tf" serve --model llama-3-8b --quiet --trace "$d/t.jsonl" --find upgrade --target p90-ttft=10s --timeline "$d/t.jsonl"

# The expert cache: a malformed value, a cache that holds no expert or leaves the plan no
# room, and a cache under a routing where the plan decides what stays, each refused naming
# --expert-cache (or the field) before any plan; nothing written.
ec=(compare --hw rtx4090-workstation --devices 1 --model mixtral-8x7b --phase decode --tokens 2
  --layers 2 --policies layerwise --quiet)
hostile stop42/expert-cache-no-size 2 "--expert-cache: 'lru': the cache needs its size, e.g. lru:8GiB" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --expert-cache lru -o "$d/c.txt"
hostile stop42/expert-cache-policy 2 "--expert-cache: 'lfy:8GiB': unknown expert cache policy 'lfy': none, lru:SIZE or lfu:SIZE; did you mean 'lfu'?" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --expert-cache lfy:8GiB -o "$d/c.txt"
hostile stop42/expert-cache-option 2 "unknown cache option 'predic'" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --expert-cache lru:8GiB,predic -o "$d/c.txt"
hostile stop42/expert-cache-zero 2 "--expert-cache: 'lru:0B': expected a size above 0" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --expert-cache lru:0B -o "$d/c.txt"
hostile stop42/expert-cache-huge-size 2 "--expert-cache" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --expert-cache lru:99999999999999999999EiB -o "$d/c.txt"
hostile stop42/expert-cache-no-expert 2 "--expert-cache: an expert cache of 1MiB holds no expert: the largest routed expert weighs 336MiB" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --expert-cache lru:1MiB -o "$d/c.txt"
hostile stop42/expert-cache-no-room 2 "--expert-cache: a cache of 1TiB leaves the plan no room" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --expert-cache lru:1TiB -o "$d/c.txt"
hostile stop42/expert-cache-oracle 2 "--expert-cache: an expert cache is what a runtime keeps under realistic routing; the routing here is 'oracle'" --out "$d/c.txt" -- \
  "$tf" "${ec[@]}" --routing oracle --expert-cache lru:8GiB -o "$d/c.txt"
hostile stop42/expert-cache-vary 2 "expert_cache: 'lru:x'" --out "$d/c.txt" -- \
  "$tf" whatif --hw rtx4090-workstation --model mixtral-8x7b --phase decode --tokens 2 --layers 2 \
  --vary expert_cache=lru:8GiB,lru:x --quiet -o "$d/c.txt"

# Routing traces: a device, a deep nesting, a count too large, a pick missing, a trace with
# a workload file or with expected routing, each refused at the file or flag; nothing written.
rt=(trace gen --model mixtral-8x7b --phase decode --tokens 2 --layers 2)
printf '{"pass": 0, "layer": 0, "token": 0, "experts": [1, 2]}\n' >"$d/one.jsonl"
hostile stop42/routing-trace-dev-zero 2 "/dev/zero" --out "$d/w.json" -- \
  "$tf" "${rt[@]}" --routing-trace /dev/zero -o "$d/w.json"
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"pass\": 0, \"layer\": 0, \"token\": 0, \"experts\": " + "[" * 100000 + "]" * 100000 + "}\n")' "$d/deep.jsonl"
hostile stop42/routing-trace-nested 2 "deep.jsonl:1:" --out "$d/w.json" --in "$d/deep.jsonl" -- \
  "$tf" "${rt[@]}" --routing-trace "$d/deep.jsonl" -o "$d/w.json"
printf '{"pass": 99999999999999999999, "layer": 0, "token": 0, "experts": [1, 2]}\n' >"$d/huge.jsonl"
hostile stop42/routing-trace-huge-pass 2 "huge.jsonl:1:10:" --out "$d/w.json" --in "$d/huge.jsonl" -- \
  "$tf" "${rt[@]}" --routing-trace "$d/huge.jsonl" -o "$d/w.json"
hostile stop42/routing-trace-missing-pick 2 "one.jsonl: no pick for pass 0, layer 0, token 1" --out "$d/w.json" --in "$d/one.jsonl" -- \
  "$tf" "${rt[@]}" --batch 2 --routing-trace "$d/one.jsonl" -o "$d/w.json"
hostile stop42/routing-trace-expected 2 "--routing-trace: a routing trace is the routing that runs" --out "$d/w.json" -- \
  "$tf" "${rt[@]}" --routing expected --routing-trace "$d/one.jsonl" -o "$d/w.json"
hostile stop42/routing-trace-skew 2 "--routing-trace: a routing trace's picks are given" --out "$d/w.json" -- \
  "$tf" "${rt[@]}" --routing-trace "$d/one.jsonl" --routing-skew 1 -o "$d/w.json"
for p in 0 1; do for l in 0 1; do
  printf '{"pass": %d, "layer": %d, "token": 0, "experts": [1, 2]}\n' "$p" "$l"
done; done >"$d/full.jsonl"
hostile stop42/routing-trace-output-over 2 "full.jsonl: refusing to write this output" --in "$d/full.jsonl" -- \
  "$tf" "${rt[@]}" --routing-trace "$d/full.jsonl" -o "$d/full.jsonl"
hostile stop42/routing-trace-with-workload 2 "--workload excludes --routing-trace" --out "$d/c.txt" -- \
  "$tf" compare --hw "$fix/topo.yaml" --workload "$fix/w.json" --routing-trace "$d/one.jsonl" -o "$d/c.txt"

# Micro-batches: zero, a count that does not divide the batch, a huge count, a prefill.
mbg=(trace gen --model llama-3-8b --phase decode --batch 8 --tokens 2 --layers 2)
hostile stop42/micro-batches-zero 2 "--micro-batches" --out "$d/w.json" -- \
  "$tf" "${mbg[@]}" --micro-batches 0 -o "$d/w.json"
hostile stop42/micro-batches-not-dividing 2 "--micro-batches: 3 does not divide the batch of 8" --out "$d/w.json" -- \
  "$tf" "${mbg[@]}" --micro-batches 3 -o "$d/w.json"
hostile stop42/micro-batches-huge 2 "--micro-batches" --out "$d/w.json" -- \
  "$tf" "${mbg[@]}" --micro-batches 99999999999999999999 -o "$d/w.json"
hostile stop42/micro-batches-train 2 "--micro-batches: micro-batches are an inference schedule" --out "$d/w.json" -- \
  "$tf" trace gen --model llama-3-8b --phase train --batch 2 --seq 64 --layers 1 --micro-batches 2 -o "$d/w.json"
hostile stop43/micro-batches-too-many-ops 2 "--micro-batches: 1048576 micro-batches x 32 layers" --out "$d/w.json" -- \
  "$tf" trace gen --model llama-3-8b --phase prefill --batch 1048576 --seq 1 --micro-batches 1048576 -o "$d/w.json"
hostile stop42/micro-batches-vary 2 "micro_batches" --out "$d/c.txt" -- \
  "$tf" whatif --hw rtx4090-workstation --model llama-3-8b --batch 8 --tokens 2 --layers 2 \
  --vary micro_batches=2,x --quiet -o "$d/c.txt"

# A sweep point whose count is too large is recorded failed as bad input (class 2), the
# reason naming the field as the spec spells it (not the CLI's flag), and the sweep exits 2.
d=$(fresh sweep-count)
sed -e 's/name: hostile-tiny/name: hostile-count/' -e 's/  - policy: \[resident, layerwise\]/  - tokens: [1, 1000000000000]/' \
  "$d/tiny.yaml" >"$d/count.yaml"
hostile sweep/axis-tokens-1e12 2 "1 point failed" --in "$d/count.yaml" -- \
  "$tf" sweep "$d/count.yaml" -o "$d/count.db" --jobs 1 --quiet
if selected sweep/axis-tokens-1e12-reason; then
  "$tf" sweep export "$d/count.db" >"$d/count-rows.csv" 2>/dev/null
  contains sweep/axis-tokens-1e12-reason "$d/count-rows.csv" "tokens: tokens 1000000000000 is above the largest allowed"
fi

# A replay memory limit above what the machine can give: refused before the arenas are
# allocated, naming the flag.
d=$(fresh replay-limit)
hostile replay/memory-limit-1PiB 2 --memory-limit --out "$d/r.json" --in "$d/p.json" -- \
  "$tf" replay --backend cpu --copy native --memory-limit 1PiB --plan "$d/p.json" -o "$d/r.json"

# A pass option naming a tier the topology lacks: bad input, not a crash with a reproducer.
d=$(fresh unknown-tier)
hostile plan/pipeline-place-unknown-tier 2 nonexistent --cd "$d" --out "$d/p-tier.json" --in "$d/w.json" -- \
  "$tf" plan --hw "$root/$hw" --workload "$d/w.json" \
  --pipeline 'place{tier=nonexistent},liveness,select,insert,schedule,verify' -o "$d/p-tier.json"

# The reproducer (written only when a pass fails) may not name an input either: refused
# before planning, like -o and --timeline.
d=$(fresh reproducer-input)
hostile plan/reproducer-is-the-workload 2 w.json --in "$d/w.json" -- \
  "$tf" plan --hw "$root/$hw" --workload "$d/w.json" --reproducer "$d/w.json" -o "$d/p.json"
hostile plan/timeline-is-the-workload 2 w.json --in "$d/w.json" --out "$d/p.json" -- \
  "$tf" plan --hw "$root/$hw" --workload "$d/w.json" --timeline "$d/w.json" -o "$d/p.json"

# --plans must be a folder that can be made.
d=$(fresh plans-dir)
echo "not a folder" >"$d/plans-file"
hostile compare/plans-in-proc 2 --plans --out /proc/x -- \
  "$tf" compare "${scen[@]}" --policies resident,layerwise --plans /proc/x
hostile compare/plans-is-a-file 2 --plans --in "$d/plans-file" -- \
  "$tf" compare "${scen[@]}" --policies resident,layerwise --plans "$d/plans-file"

# --------------------------------------------------------------------------------------
# Values that today give a wrong answer with exit 0; they must be refused.
d=$(fresh wrong)
g=$d/gen-out.json
hostile gen/batch-1e18 2 --batch --out "$g" -- \
  "$tf" trace gen "${gen_small[@]}" --batch 1000000000000000000 -o "$g"
hostile gen/kv-block-int64max 2 --kv-block --out "$g" -- \
  "$tf" trace gen "${gen_small[@]}" --kv-block 9223372036854775807 -o "$g"
# One KV-cache tensor per block: a one-token block over a long context is counted first.
hostile gen/kv-block-1-context-1e9 2 --kv-block --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --phase decode --context 1000000000 --kv-block 1 -o "$g"
hostile gen/kv-block-1-prefill-seq-16m 2 --kv-block --out "$g" -- \
  "$tf" trace gen --model llama-3-8b --phase prefill --seq 16000000 --kv-block 1 -o "$g"
hf "$d/c-wide.json" hidden_size=2147483392 vocab_size=2147483647
hostile gen/hf-hidden-2147483392-vocab-2147483647 2 c-wide.json --out "$g" --in "$d/c-wide.json" -- \
  "$tf" trace gen --hf-config "$d/c-wide.json" --phase decode --context 128 --tokens 1 -o "$g"
hostile compare/batch-1e18 2 --batch --out "$d/cmp.txt" -- \
  "$tf" compare "${scen[@]}" --policies layerwise --batch 1000000000000000000 -o "$d/cmp.txt"

pl=$d/p-bad.json
hostile plan/budget-0B 2 --budget --out "$pl" --in "$d/w.json" -- \
  "$tf" plan --hw "$hw" --workload "$d/w.json" --policy layerwise --budget 0B -o "$pl"
hostile plan/budget-1PiB-above-capacity 2 --budget --out "$pl" --in "$d/w.json" -- \
  "$tf" plan --hw "$hw" --workload "$d/w.json" --policy layerwise --budget 1PiB -o "$pl"
for x in 1e10 inf 1e300; do
  hostile "plan/max-overhead-$x" 2 --max-overhead --out "$pl" --in "$d/w.json" -- \
    "$tf" plan --hw "$hw" --workload "$d/w.json" --policy layerwise --max-overhead "$x" -o "$pl"
done
hostile plan/pipeline-schedule-preferred-nan 2 preferred --out "$pl" --in "$d/w.json" -- \
  "$tf" plan --hw "$hw" --workload "$d/w.json" \
  --pipeline 'place,liveness,select,insert,schedule{preferred=nan},verify' -o "$pl"

for x in 0 -5 nan; do
  hostile "whatif/max-batch-max-tpot-$x" 2 --max-tpot --out "$d/wi.txt" -- \
    "$tf" whatif --question max-batch "${scen[@]}" --policy layerwise --quiet "--max-tpot=$x" -o "$d/wi.txt"
done
hostile whatif/max-batch-min-throughput--1 2 --min-throughput --out "$d/wi.txt" -- \
  "$tf" whatif --question max-batch "${scen[@]}" --policy layerwise --quiet --min-throughput=-1 -o "$d/wi.txt"

# A plan with no programs.
d=$(fresh empty-programs)
python3 -c '
import json, sys
p = json.load(open(sys.argv[1])); p["programs"] = []
json.dump(p, open(sys.argv[2], "w"), indent=1)' "$d/p.json" "$d/p-empty.json"
hostile empty-programs/sim 2 p-empty.json --out "$d/e.txt" --in "$d/p-empty.json" -- \
  "$tf" sim --plan "$d/p-empty.json" -o "$d/e.txt"
hostile empty-programs/plan-verify 2 p-empty.json --in "$d/p-empty.json" -- \
  "$tf" plan verify "$d/p-empty.json"
hostile empty-programs/export-csv 2 p-empty.json --out "$d/e.csv" --in "$d/p-empty.json" -- \
  "$tf" export --plan "$d/p-empty.json" --format csv -o "$d/e.csv"
hostile empty-programs/report 2 p-empty.json --out "$d/e.html" --in "$d/p-empty.json" -- \
  "$tf" report "$d/p-empty.json" -o "$d/e.html"

# A topology edited after planning: the plan records its SHA-256, so sim refuses it.
d=$(fresh topo-changed)
if python3 - "$d/topo.yaml" <<'EOF'
import sys
text = open(sys.argv[1]).read()
old = "bandwidth: {value: 64GB/s"
assert old in text, "no 64GB/s bandwidth in the topology"
open(sys.argv[1], "w").write(text.replace(old, "bandwidth: {value: 32GB/s", 1))
EOF
then
  hostile sim/topology-changed-after-plan 2 'topo.yaml|p.json' --out "$d/s.txt" --in "$d/p.json" --in "$d/topo.yaml" -- \
    "$tf" sim --plan "$d/p.json" -o "$d/s.txt"
else
  fail_case sim/topology-changed-after-plan "test bug: could not edit the topology copy"
fi

# A 0xFF byte (never valid UTF-8) inside a free-text string value of a topology: its
# top-level description, which `hw show` prints (and `--json` would write) as it is.
d=$(fresh ff)
python3 - "$hw" "$d/ff.yaml" <<'EOF'
import re, sys
data = open(sys.argv[1], "rb").read()
new, n = re.subn(rb'^(description: *"?[^"\n]{3})', lambda m: m.group(1) + b"\xff", data, count=1, flags=re.M)
assert n == 1, "no top-level description line"
open(sys.argv[2], "wb").write(new)
EOF
hostile hw/0xff-in-string-validate 2 ff.yaml --in "$d/ff.yaml" -- "$tf" hw validate "$d/ff.yaml"
hostile hw/0xff-in-string-show 2 ff.yaml --out "$d/ff.txt" --in "$d/ff.yaml" -- \
  "$tf" hw show "$d/ff.yaml" -o "$d/ff.txt"
hostile hw/0xff-in-string-show-json 2 ff.yaml --out "$d/ff.json" --in "$d/ff.yaml" -- \
  "$tf" hw show --json "$d/ff.yaml" -o "$d/ff.json"

# --------------------------------------------------------------------------------------
# Never destroy a file: an output that is one of the inputs is refused, the input unchanged.
# clobber NAME NEEDLE COMMAND...: in a fresh copy $d of the fixtures (COMMAND refers to
# them as $d/...; the word @D@ in COMMAND is replaced by $d), every fixture must be
# unchanged afterwards.
clobber() {
  local name=$1 needle=$2
  shift 2
  d=$(fresh "clobber-${name//\//-}")
  mkdir -p "$d/sub"
  ln "$d/w.json" "$d/hl.json"
  ln -s w.json "$d/sl.json"
  local args=() a
  for a in "$@"; do args+=("${a//@D@/$d}"); done
  hostile "clobber/$name" 2 "$needle" --in "$d/w.json" --in "$d/topo.yaml" --in "$d/p.json" \
    --in "$d/c.json" --in "$d/tiny.yaml" --in "$d/r.db" -- "${args[@]}"
}
P=(plan --hw @D@/topo.yaml --workload @D@/w.json --policy layerwise)
clobber plan-o-workload w.json "$tf" "${P[@]}" -o @D@/w.json
clobber plan-o-topology topo.yaml "$tf" "${P[@]}" -o @D@/topo.yaml
clobber plan-timeline-workload w.json "$tf" "${P[@]}" -o @D@/pt.json --timeline @D@/w.json
clobber plan-o-dotdot-workload 'w.json' "$tf" "${P[@]}" -o @D@/sub/../w.json
clobber plan-o-hardlink-to-workload 'hl.json|w.json' "$tf" "${P[@]}" -o @D@/hl.json
clobber plan-o-symlink-to-workload 'sl.json|w.json' "$tf" "${P[@]}" -o @D@/sl.json
clobber trace-import-o-self w.json "$tf" trace import @D@/w.json -o @D@/w.json
clobber trace-info-o-self w.json "$tf" trace info @D@/w.json -o @D@/w.json
clobber trace-gen-o-hf-config c.json \
  "$tf" trace gen --hf-config @D@/c.json --phase decode --context 128 --tokens 1 -o @D@/c.json
clobber hw-show-o-self topo.yaml "$tf" hw show @D@/topo.yaml -o @D@/topo.yaml
clobber sim-o-plan p.json "$tf" sim --plan @D@/p.json -o @D@/p.json
clobber sim-timeline-plan p.json "$tf" sim --plan @D@/p.json --timeline @D@/p.json
clobber sim-transfers-plan p.json "$tf" sim --plan @D@/p.json --transfers @D@/p.json
clobber sim-o-workload w.json "$tf" sim --plan @D@/p.json -o @D@/w.json
clobber sim-o-topology topo.yaml "$tf" sim --plan @D@/p.json -o @D@/topo.yaml
clobber export-csv-o-plan p.json "$tf" export --plan @D@/p.json --format csv -o @D@/p.json
clobber export-plan-json-o-workload w.json "$tf" export --plan @D@/p.json --format plan-json -o @D@/w.json
clobber report-o-plan p.json "$tf" report @D@/p.json -o @D@/p.json
clobber report-o-workload w.json "$tf" report @D@/p.json -o @D@/w.json

# The results database given as a CSV/JSONL output, or the spec as the database: refused,
# and r.db still opens as SQLite.
db_opens() {  # db_opens NAME DB
  selected "$1" || return 0
  started=$(($(date +%s%N) / 1000000))
  : >"$tmp/err"
  if python3 -c "import sqlite3,sys;sqlite3.connect(sys.argv[1]).execute('select count(*) from sqlite_master').fetchall()" "$2" 2>/dev/null; then
    pass_case "$1"
  else
    fail_case "$1" "$(basename "$2") no longer opens as SQLite"
  fi
}
clobber sweep-export-csv-db r.db "$tf" sweep export @D@/r.db --csv @D@/r.db
db_opens clobber/sweep-export-csv-db-opens "$d/r.db"
clobber sweep-export-jsonl-db r.db "$tf" sweep export @D@/r.db --jsonl @D@/r.db
db_opens clobber/sweep-export-jsonl-db-opens "$d/r.db"
clobber sweep-run-csv-db r.db "$tf" sweep @D@/tiny.yaml -o @D@/r.db --csv @D@/r.db --quiet
db_opens clobber/sweep-run-csv-db-opens "$d/r.db"
clobber sweep-run-jsonl-db r.db "$tf" sweep @D@/tiny.yaml -o @D@/r.db --jsonl @D@/r.db --quiet
db_opens clobber/sweep-run-jsonl-db-opens "$d/r.db"
clobber sweep-o-spec tiny.yaml "$tf" sweep @D@/tiny.yaml -o @D@/tiny.yaml --quiet

# Two sweeps started at once on the same new database: one runs it, the other is refused
# (exit 2 naming the database), and the database holds every point once. The race is
# tried in six rounds (one in a sanitizer build), each on a new database (a racy tierflow
# passes all six only rarely); a
# round where the second sweep started only after the first had finished (it resumes and
# runs nothing) tries no race and is not counted.
if selected sweep/concurrent-same-new-db; then
  d=$(fresh concurrent)
  # 24 points of about 30 ms each, so that the two runs overlap even on a loaded machine.
  cat >"$d/conc.yaml" <<'EOF'
name: hostile-concurrent
base:
  hw: h100-sxm-8gpu
  model: llama-3-8b
  layers: 8
  phase: decode
  context: 2048
  tokens: 32
  tiers.hbm.capacity: 3GB
  devices.h100.reserved: 0B
axes:
  - batch: [1, 2, 4, 8]
  - policy: all
EOF
  rows() { python3 -c "import sqlite3,sys;print(*sqlite3.connect(sys.argv[1]).execute('select count(*), count(distinct point) from results').fetchone())" "$1" 2>/dev/null; }
  started=$(($(date +%s%N) / 1000000))
  reason="" overlapped=0
  for round in $(seq "$rounds"); do
    db=$d/new$round.db
    capped 60 "$tf" sweep "$d/conc.yaml" -o "$db" --jobs 1 --quiet >"$d/c1.out" 2>"$d/c1.err" &
    pid1=$!
    capped 60 "$tf" sweep "$d/conc.yaml" -o "$db" --jobs 1 --quiet >"$d/c2.out" 2>"$d/c2.err" &
    pid2=$!
    wait "$pid1"; rc1=$?
    wait "$pid2"; rc2=$?
    case "$rc1 $rc2" in
      "0 2") loser=$d/c2.err ;;
      "2 0") loser=$d/c1.err ;;
      *) loser="" ;;
    esac
    if [ "$rc1 $rc2" = "0 0" ] && grep -qF 'ran 0 (24 already recorded)' "$d/c1.out" "$d/c2.out"; then
      continue  # the second started after the first had finished, and resumed: no race tried
    fi
    overlapped=$((overlapped + 1))
    if [ -z "$loser" ]; then
      reason="round $round: exits $rc1 and $rc2, expected one 0 and one 2"
      ran=$(cat "$d/c1.out" "$d/c2.out" | grep -c 'ran 24 (0 already recorded)')
      [ "$ran" -lt 2 ] || reason="$reason (both ran all 24 points)"
      loser=$d/c1.err
    elif ! grep -qF "new$round.db" "$loser"; then
      reason="round $round: the refused sweep does not name new$round.db"
    elif [ "$(rows "$db")" != "24 24" ]; then
      reason="round $round: the database holds $(rows "$db") (rows, points), expected 24 24"
    fi
    [ -z "$reason" ] || break
  done
  if [ -z "$reason" ] && [ "$overlapped" = 0 ]; then
    reason="the two sweeps never ran at the same time in $rounds rounds (the machine is too loaded?)"
    loser=$d/c2.err
  fi
  if [ -z "$reason" ]; then cp "$loser" "$tmp/err"; pass_case sweep/concurrent-same-new-db; else
    fail_case sweep/concurrent-same-new-db "$reason" "$loser"; fi
  stray=$(leftovers)
  if [ -n "$stray" ]; then
    fail_case sweep/concurrent-same-new-db-leftovers "left behind: $(echo "$stray" | tr '\n' ' ')"
    echo "$stray" | while read -r f; do rm -f -- "$f"; done
  fi
fi

# --------------------------------------------------------------------------------------
# A stale temporary of a dead process beside OUT is removed by the next successful write.
dead=999999
while kill -0 "$dead" 2>/dev/null; do dead=$((dead + 1)); done
stale() {  # stale NAME OUT COMMAND...: COMMAND writes OUT; OUT.tierflow-tmp.$dead must be gone
  # after, and a user's OUT.tmp.$dead (no marker) must stay
  local name=$1 out=$2
  shift 2
  selected "$name" || return 0
  started=$(($(date +%s%N) / 1000000))
  rm -f "$out"
  echo "half-written" >"$out.tierflow-tmp.$dead"
  echo "the user's" >"$out.tmp.$dead"
  capped 20 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" != 0 ]; then fail_case "$name" "exit $rc, expected 0" "$tmp/err"
  elif [ ! -s "$out" ]; then fail_case "$name" "did not write $out"
  elif [ -e "$out.tierflow-tmp.$dead" ]; then
    fail_case "$name" "stale $(basename "$out").tierflow-tmp.$dead still there"
  elif [ ! -e "$out.tmp.$dead" ]; then fail_case "$name" "removed the user's $(basename "$out").tmp.$dead"
  else pass_case "$name"; fi
  rm -f "$out.tierflow-tmp.$dead" "$out.tmp.$dead"
}
d=$(fresh stale)
stale stale-tmp/trace-gen "$d/st-w.json" "$tf" trace gen "${gen_small[@]}" -o "$d/st-w.json"
stale stale-tmp/hw-show "$d/st-hw.txt" "$tf" hw show "$hw" -o "$d/st-hw.txt"
stale stale-tmp/plan "$d/st-p.json" "$tf" plan --hw "$hw" --workload "$d/w.json" --policy layerwise -o "$d/st-p.json"
stale stale-tmp/sim "$d/st-s.txt" "$tf" sim --plan "$d/p.json" -o "$d/st-s.txt"
stale stale-tmp/sweep-export-csv "$d/st-r.csv" "$tf" sweep export "$d/r.db" --csv "$d/st-r.csv"

# Outputs that are not plain files: a FIFO is written into (not replaced by a file); a
# symbolic link's target is replaced and the link kept; a replaced file keeps its mode; a
# read-only file is refused before any work.
special_outputs() {
  local name=outputs/fifo-link-mode
  selected "$name" || return 0
  started=$(($(date +%s%N) / 1000000))
  local o
  o=$(fresh special)
  mkfifo "$o/ff" && mkdir "$o/sub" && echo old >"$o/sub/t.json" && ln -s sub/t.json "$o/l.json" &&
    echo x >"$o/m.json" && chmod 600 "$o/m.json" || { fail_case "$name" "could not set up"; return; }
  cat "$o/ff" >"$o/from-fifo" &
  local reader=$!
  capped 20 "$tf" hw show "$hw" -o "$o/ff" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  wait "$reader"
  capped 20 "$tf" hw show "$hw" -o "$o/l.json" >>"$tmp/out" 2>>"$tmp/err" || rc=$?
  capped 20 "$tf" hw show "$hw" -o "$o/m.json" >>"$tmp/out" 2>>"$tmp/err" || rc=$?
  if [ "$rc" != 0 ]; then fail_case "$name" "exit $rc, expected 0" "$tmp/err"
  elif [ ! -p "$o/ff" ]; then fail_case "$name" "the FIFO was replaced by a file"
  elif [ ! -s "$o/from-fifo" ]; then fail_case "$name" "nothing came through the FIFO"
  elif [ ! -L "$o/l.json" ]; then fail_case "$name" "the link was replaced by a file"
  elif ! cmp -s "$o/sub/t.json" "$o/from-fifo"; then fail_case "$name" "the link's target was not written"
  elif [ "$(stat -c %a "$o/m.json")" != 600 ]; then fail_case "$name" "m.json lost its mode 600"
  else pass_case "$name"; fi
}
special_outputs
d2=$(fresh readonly)
echo "keep" >"$d2/ro.json" && chmod 444 "$d2/ro.json"
hostile outputs/read-only 2 "is read-only (mode 0444)" --out "$d2/ro.json" -- \
  "$tf" plan --hw "$hw" --workload "$d/w.json" --policy layerwise -o "$d2/ro.json"
# A refused run writes nothing, found before the work: an output over the scenario's
# workload (compare), over a plan --plans writes, over a file a sweep spec names, or a link
# to another output; a --plans folder made for a run that plans nothing is removed.
cp -p "$d/w.json" "$d2/w.json"
hostile outputs/compare-timeline-over-workload 2 "--timeline: refusing to write this output: it is an input" \
  --out "$d2/x.json" --in "$d2/w.json" -- \
  "$tf" compare --hw "$hw" --workload "$d2/w.json" --policies layerwise --json -o "$d2/x.json" --timeline "$d2/w.json"
mkdir -p "$d2/pl"
hostile outputs/compare-output-over-plan 2 "--plans names the same file as -o" --out "$d2/pl/layerwise.json" -- \
  "$tf" compare --hw "$hw" --workload "$d2/w.json" --policies layerwise --plans "$d2/pl" -o "$d2/pl/layerwise.json"
if selected outputs/compare-plans-folder-removed; then
  started=$(($(date +%s%N) / 1000000))
  rc=0
  capped 20 "$tf" compare --hw "$hw" --workload "$d2/w.json" --policies layerwise --budget 1KiB \
    --plans "$d2/none" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" != 1 ]; then fail_case outputs/compare-plans-folder-removed "exit $rc, expected 1" "$tmp/err"
  elif [ -e "$d2/none" ]; then fail_case outputs/compare-plans-folder-removed "left the empty folder"
  else pass_case outputs/compare-plans-folder-removed; fi
fi
printf 'name: wk\nbase:\n  hw: %s\n  workload: w.json\naxes:\n  - policy: [layerwise]\n' "$root/$hw" >"$d2/wk.yaml"
hostile outputs/sweep-jsonl-over-spec-workload 2 "--jsonl: refusing to write this output: it is a file the sweep spec names" \
  --out "$d2/wk.db" --out "$d2/wk.csv" --in "$d2/w.json" -- \
  "$tf" sweep "$d2/wk.yaml" -o "$d2/wk.db" --csv "$d2/wk.csv" --jsonl "$d2/w.json" --quiet
# Every command names the flag of an output over its input, before writing.
hostile outputs/trace-info-over-input 2 "-o: refusing to write this output: it is an input" --in "$d2/w.json" -- \
  "$tf" trace info "$d2/w.json" -o "$d2/w.json"
hostile outputs/report-over-plan 2 "-o: refusing to write this output: it is an input" --in "$d/p.json" -- \
  "$tf" report "$d/p.json" -o "$d/p.json"
# Hints a new user needs: a name's leading part, an object's id without its list, the keys
# an object has when none is close.
hostile hints/hw-leading-part 2 "did you mean 'h200-sxm-8gpu' or 'gh200'?" -- "$tf" hw show h200
hostile hints/set-id-without-list 2 "unknown path 'hbm.capacity'; did you mean 'tiers.hbm.capacity'?" -- \
  "$tf" hw show h100-sxm-8gpu --set hbm.capacity=24GB
hostile hints/set-key-lists-keys 2 "unknown key 'size' in tier 'hbm' (its keys: " -- \
  "$tf" hw show h100-sxm-8gpu --set tiers.hbm.size=24GB
hostile hints/kv-tier-lists-tiers 2 "no tier 'cpu' in 'h100-sxm-8gpu' (its tiers: " -- \
  "$tf" serve --model llama-3-8b --kv-tiers cpu:100GiB --arrivals "poisson,rate=1/s,n=2,prompt=fixed:10,output=fixed:2"
# Stop 54: the lenient field and the default context cut: bad values exit 2 naming them.
hostile stop54/vary-lenient-not-bool 2 "--vary: lenient: 'maybe' is not true or false" -- \
  "$tf" whatif --model llama-3-8b --layers 1 --vary lenient=maybe
# replay --measured: a recorded replay of another plan, another format, an unknown key or a
# step the plan does not have is refused at its place; it runs nothing else.
d3=$(fresh measured)
"$tf" replay --plan "$d3/p.json" --time-scale 1 --json -o "$d3/rec.json" >/dev/null 2>&1
edit_rec() {  # edit_rec OUT PYTHON: rec.json changed by PYTHON (on `r`) into OUT
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(r, open(sys.argv[2], "w"), indent=1)' "$d3/rec.json" "$1" "$2"
}
edit_rec "$d3/other.json" 'r["plan"] = "another.plan"'
edit_rec "$d3/key.json" 'r["measured_stepz"] = r.pop("measured_steps")'
edit_rec "$d3/kind.json" 's = r["measured_steps"][0]; s["kind"] = "store" if s["kind"] != "store" else "compute"'
edit_rec "$d3/step.json" 'r["measured_steps"][0]["step"] = 99999'
hostile measured/another-plan 2 "a replay of plan 'another.plan', not of " -- \
  "$tf" replay --plan "$d3/p.json" --measured "$d3/other.json"
hostile measured/unknown-key 2 "unknown key 'measured_stepz' in a recorded replay (tierflow.replay/1); did you mean 'measured_steps'?" -- \
  "$tf" replay --plan "$d3/p.json" --measured "$d3/key.json"
hostile measured/step-kind 2 "not a replay of it" -- \
  "$tf" replay --plan "$d3/p.json" --measured "$d3/kind.json"
hostile measured/no-such-step 2 "program 0 step 99999: the plan" -- \
  "$tf" replay --plan "$d3/p.json" --measured "$d3/step.json"
hostile measured/a-plan-not-a-replay 2 "not a recorded replay" -- \
  "$tf" replay --plan "$d3/p.json" --measured "$d3/p.json"
hostile measured/report-over-the-recorded 2 "-o: refusing to write this output: it is the recorded replay it scores" \
  --in "$d3/rec.json" -- "$tf" replay --plan "$d3/p.json" --measured "$d3/rec.json" -o "$d3/rec.json"
hostile measured/with-a-backend 2 "--backend excludes --measured" -- \
  "$tf" replay --plan "$d3/p.json" --measured "$d3/rec.json" --backend cpu
# Several outputs of one command are written together: a report that cannot be written (a
# full device) leaves the summary and the rows as they were, and writes no timeline.
if [ -w /dev/full ]; then
  echo "old summary" >"$d3/sum.txt" && echo "old rows" >"$d3/rows.csv"
  hostile outputs/serve-set-together 2 "/dev/full: cannot write" --out "$d3/sum.txt" \
    --out "$d3/rows.csv" --out "$d3/serve-tl.json" -- "$tf" serve --model llama-3-8b --quiet \
    --summary "$d3/sum.txt" -o "$d3/rows.csv" --timeline "$d3/serve-tl.json" --report /dev/full \
    --arrivals "poisson,rate=2/s,n=4,prompt=fixed:64,output=fixed:2"
fi
# The same for every command that writes several (OutputSet): a timeline, report or table on
# a full device leaves every other output as it was or unwritten (the old binary renamed them
# one after another).
if [ -w /dev/full ]; then
  echo "old report" >"$d3/rep.txt"
  hostile outputs/sim-set-together 2 "/dev/full: cannot write" --out "$d3/rep.txt" \
    --out "$d3/tl.json" -- "$tf" sim --plan "$d3/p.json" -o "$d3/rep.txt" \
    --timeline "$d3/tl.json" --transfers /dev/full
  hostile outputs/plan-set-together 2 "/dev/full: cannot write" --out "$d3/new-plan.json" -- \
    "$tf" plan --hw "$d3/topo.yaml" --workload "$d3/w.json" -o "$d3/new-plan.json" \
    --timeline /dev/full
  hostile outputs/compare-set-together 2 "/dev/full: cannot write" --out "$d3/cmp/resident.json" \
    --out "$d3/cmp/layerwise.json" -- "$tf" compare "${scen[@]}" --policies resident,layerwise \
    --plans "$d3/cmp" --timeline "$d3/cmp-tl.json" -o /dev/full
  hostile outputs/replay-set-together 2 "/dev/full: cannot write" --out "$d3/rep.txt" -- \
    "$tf" replay --plan "$d3/p.json" --measured "$d3/rec.json" -o "$d3/rep.txt" --timeline /dev/full
  echo "old topology" >"$d3/cal.yaml"
  hostile outputs/calibrate-set-together 2 "/dev/full: cannot write" --out "$d3/cal.yaml" -- \
    "$tf" calibrate --backend cpu --max-size 1MiB --repeats 1 -o "$d3/cal.yaml" --report /dev/full
  hostile outputs/sweep-tables-together 2 "/dev/full: cannot write" --out "$d3/rows.csv" -- \
    "$tf" sweep "$d3/tiny.yaml" -o "$d3/r.db" --quiet --csv "$d3/rows.csv" --jsonl /dev/full
fi
# Two outputs on standard output interleave; an output on the file standard output goes to
# would be renamed over it: both refused before any work.
hostile outputs/two-on-stdout 2 "-o and --timeline both write to standard output" -- \
  "$tf" sim --plan "$d3/p.json" --timeline -
hostile outputs/dash-and-dev-stdout 2 "-o and --transfers both write to standard output" -- \
  "$tf" sim --plan "$d3/p.json" --transfers /dev/stdout
hostile outputs/compare-timeline-on-stdout 2 "-o and --timeline both write to standard output" -- \
  "$tf" compare "${scen[@]}" --policies resident --timeline -
hostile outputs/timeline-on-redirected-stdout 2 "--timeline names the file standard output goes to, where -o writes" -- \
  bash -c '"$1" sim --plan "$2" --timeline "$3" >"$3"' _ "$tf" "$d3/p.json" "$d3/redirected.json"
# whatif --plan-out with no answer: no plan to write, so the answer is not written either.
hostile outputs/whatif-no-plan-writes-nothing 2 "--plan-out: no plan to write" \
  --out "$d3/ans.txt" --out "$d3/ans-plan.json" -- "$tf" whatif --hw "$d3/topo.yaml" \
  --model llama-3-8b --layers 2 --context 1024 --tokens 2 --batch 1 --question max-batch \
  --min-throughput 1e9 --threads 1 -o "$d3/ans.txt" --plan-out "$d3/ans-plan.json"
hostile contended/negative 2 "bad value for 'contended_setup': negative value '-1us'" -- \
  "$tf" hw show h100-sxm-8gpu --set links.gpu-pcie.contended_setup=-1us
hostile contended/overflow 2 "'contended_setup_reverse': '1e300s' is too large" -- \
  "$tf" sim --plan "$d3/p.json" --set links.gpu-pcie.contended_setup_reverse=1e300s
hostile lenient/vary-with-a-model 2 "lenient: applies to an hf_config import, not to model 'llama-3-8b'" -- \
  "$tf" whatif --model llama-3-8b --layers 1 --vary lenient=false,true
hostile stop54/context-negative-given 2 "--context" -- \
  "$tf" whatif --model llama-2-7b --layers 1 --context -1
hostile stop54/context-huge-given 2 "--context" -- \
  "$tf" trace gen --model llama-2-7b --layers 1 --context 99999999999999999999 -o "$d2/huge.json"
ln -s wk2.db "$d2/link.db"
hostile outputs/sweep-csv-link-to-database 2 "--csv names the same file as -o" --out "$d2/wk2.db" -- \
  "$tf" sweep "$d2/wk.yaml" -o "$d2/wk2.db" --csv "$d2/link.db" --quiet

# SIGTERM while an output is being written (a timeline streams while the simulation runs):
# the process dies of the signal and its temporary goes with it; the output never appears.
# The host CPU (system.cpu), host steps (tierflow.plan/3) and --on-host: bad values of each
# refused naming the flag, field or key; no output over an input.
d=$(fresh stop46)
cp -p tests/fixtures/plans/host_attention.json "$d/host.json"
ut=(--hw "$root/tests/fixtures/unit_hw.yaml")
"$tf" trace gen --model opt-175b --layers 1 --phase decode --context 64 --tokens 1 --kv-block 8 \
  --weight-dtype fp16 --act-dtype fp16 -o "$d/opt.json" >/dev/null 2>&1
oh=(plan --hw t4-flexgen --workload "$d/opt.json" --pin weight=ddr --pin kv=ddr --policy layerwise)
hostile stop46/on-host-typo 2 "--on-host: 'atention' is not an op kind" --out "$d/p.json" -- \
  "$tf" "${oh[@]}" --on-host atention -o "$d/p.json"
hostile stop46/on-host-empty-kind 2 "--on-host: '' is not an op kind" --out "$d/p.json" -- \
  "$tf" "${oh[@]}" --on-host attention, -o "$d/p.json"
hostile stop46/on-host-no-cpu 2 "--on-host: 'h100-sxm-8gpu' describes no host CPU" --out "$d/p.json" -- \
  "$tf" plan --workload "$d/opt.json" --on-host attention -o "$d/p.json"
hostile stop46/on-host-output-over-workload 2 "opt.json" --in "$d/opt.json" -- \
  "$tf" "${oh[@]}" --on-host attention -o "$d/opt.json"
hostile stop46/on-host-vary 2 "on_host: 'bogus' is not an op kind" --out "$d/c.txt" -- \
  "$tf" whatif --hw t4-flexgen --workload "$d/opt.json" --pin kv=ddr --vary on_host=attention,bogus \
  --quiet -o "$d/c.txt"
hostile stop46/cpu-tier-per-device 2 "system cpu: tier 'hbm' is a 'per: device' tier" -- \
  "$tf" sim --plan "$d/host.json" "${ut[@]}" --set system.cpu.tier=hbm
hostile stop46/cpu-negative-peak 2 "'cpu.peak.bf16': negative value" -- \
  "$tf" sim --plan "$d/host.json" "${ut[@]}" --set system.cpu.peak.bf16=-1GFLOP/s
hostile stop46/cpu-efficiency-nan 2 "'cpu.memory_efficiency': must be in (0, 1], got nan" -- \
  "$tf" sim --plan "$d/host.json" "${ut[@]}" --set system.cpu.memory_efficiency=nan
hostile stop46/cpu-launch-overflow 2 "'cpu.launch_overhead': '1e30s' is too large" -- \
  "$tf" sim --plan "$d/host.json" "${ut[@]}" --set system.cpu.launch_overhead=1e30s
# A CPU too slow to finish within the simulator's time limit: refused as sim refuses any.
hostile stop46/cpu-slow-time-limit 2 "on the host, which takes" -- \
  "$tf" sim --plan "$d/host.json" "${ut[@]}" --set system.cpu.peak.bf16=1e-270FLOP/s
hostile stop46/host-plan-replay-over-plan 2 "host.json" --in "$d/host.json" -- \
  "$tf" replay --plan "$d/host.json" "${ut[@]}" --json -o "$d/host.json"
# A replay that would never end: refused before it starts, its report not written (a host
# op past the simulator's time limit; a plan hours long at the time scale asked).
hostile stop47/replay-host-op-time-limit 2 "reached at 341ns simulated); a replay would run as long" \
  --out "$d/r.json" -- \
  "$tf" replay --plan "$d/host.json" "${ut[@]}" --set system.cpu.peak.bf16=1e-270FLOP/s --json -o "$d/r.json"
hostile stop47/replay-hours-long 2 "more than the 3600s a replay may take; give a smaller --time-scale" \
  --out "$d/r.json" -- \
  "$tf" replay --plan "$d/host.json" "${ut[@]}" --set devices.dev.peak.bf16=1e-3FLOP/s --time-scale 1 -o "$d/r.json"
# The cache on disk (host copies): a host tier too small for what the host fetches is a
# capacity error naming it (exit 1) in sim and replay alike (each reports what ran).
cp -p tests/fixtures/plans/host_disk_attention.json "$d/disk.json"
hostile stop47/host-fetch-over-capacity 1 "'ddr[0]' is over capacity: prefetch step 0 needs 256B" -- \
  "$tf" sim --plan "$d/disk.json" "${ut[@]}" --set tiers.ddr.capacity=200B
hostile stop47/host-fetch-over-capacity-replay 1 "'ddr[0]' is over capacity: prefetch step 0" \
  --in "$d/disk.json" -- \
  "$tf" replay --plan "$d/disk.json" "${ut[@]}" --set tiers.ddr.capacity=200B
hostile stop47/replay-hours-long-cuda 2 "3600s a replay may take|--backend: cuda" --out "$d/r.json" -- \
  "$tf" replay --plan "$d/host.json" "${ut[@]}" --set devices.dev.peak.bf16=1e-3FLOP/s --backend cuda -o "$d/r.json"
hostile stop46/host-plan-sim-output-over-plan 2 "host.json" --in "$d/host.json" -- \
  "$tf" sim --plan "$d/host.json" "${ut[@]}" --json -o "$d/host.json"
sed 's/"on": "host"/"on": "hots"/' "$d/host.json" >"$d/engine.json"
hostile stop46/host-plan-bad-engine 2 "engine.json:33:28: on: 'hots'" --in "$d/engine.json" -- \
  "$tf" sim --plan "$d/engine.json" "${ut[@]}"

# --------------------------------------------------------------------------------------
# Absurd rates and scales: refused before any work, not overflowed into a wrong answer.
d=$(fresh rates)
hostile rates/link-bandwidth-1B-per-s 2 "is implausibly low" --out "$d/p1.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" --set links.gpu-pcie.bandwidth=1B/s --budget 1GiB -o "$d/p1.json"
hostile rates/link-bandwidth-1e-9 2 "is implausibly low" --out "$d/p2.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" --set links.gpu-pcie.bandwidth=1e-9B/s --budget 1GiB -o "$d/p2.json"
hostile rates/replay-time-scale-1e-9 2 "--time-scale: 1e-9 is outside" --in "$d/p.json" -- \
  "$tf" replay --backend cpu --plan "$d/p.json" --time-scale 1e-9
printf '%s\n' '{"timestamp": 0, "input_length": 2000, "output_length": 5, "hash_ids": [1, 1, 1, 1]}' >"$d/same-ids.jsonl"
hostile rates/trace-repeated-hash-ids 2 "same-ids.jsonl:1:76: hash id 1 follows 1 here" --in "$d/same-ids.jsonl" -- \
  "$tf" serve --model llama-3-8b --hw "$hw" --trace "$d/same-ids.jsonl" --kv-tiers ddr:1% --cache-only

# --------------------------------------------------------------------------------------
# Two outputs on one file, or an output in no folder: refused before any work, so that
# nothing is written (the user's file there stays as it was).
d=$(fresh outputs)
echo precious >"$d/mine.json"
hostile outputs/plan-output-is-timeline 2 "--timeline names the same file as -o" --out "$d/mine.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" -o "$d/mine.json" --timeline "$d/./mine.json"
hostile outputs/sim-output-is-transfers 2 "--transfers names the same file as -o" --out "$d/mine.json" -- \
  "$tf" sim --plan "$d/p.json" -o "$d/mine.json" --transfers "$d/mine.json"
hostile outputs/serve-output-is-timeline 2 "--timeline names the same file as -o" --out "$d/mine.json" -- \
  "$tf" serve --model llama-3-8b --hw "$hw" --arrivals poisson,rate=5/s,n=3,prompt=fixed:100,output=fixed:4 -o "$d/mine.json" --timeline "$d/mine.json"
hostile outputs/compare-output-is-timeline 2 "--timeline names the same file as -o" --out "$d/mine.json" -- \
  "$tf" compare "${scen[@]}" --policies layerwise -o "$d/mine.json" --timeline "$d/mine.json"
hostile outputs/sweep-csv-is-jsonl 2 "--jsonl names the same file as --csv" --out "$d/mine.json" --out "$d/new.db" -- \
  "$tf" sweep "$d/tiny.yaml" -o "$d/new.db" --csv "$d/mine.json" --jsonl "$d/mine.json"
hostile outputs/sweep-csv-no-folder 2 "--csv: cannot write: no folder" --out "$d/new.db" -- \
  "$tf" sweep "$d/tiny.yaml" -o "$d/new.db" --csv "$d/nodir/x.csv"
hostile outputs/sweep-export-csv-is-jsonl 2 "--jsonl names the same file as --csv" --out "$d/mine.json" -- \
  "$tf" sweep export "$d/r.db" --csv "$d/mine.json" --jsonl "$d/mine.json"
# compare --plans into the workload's own folder writes no plan; an export that does not
# fit leaves no folder behind.
mkdir -p "$d/pd"
cp "$d/w.json" "$d/pd/tierflow.json"
hostile outputs/compare-plans-over-workload 2 "it is an input of this command" --in "$d/pd/tierflow.json" --out "$d/pd/layerwise.json" -- \
  "$tf" compare --workload "$d/pd/tierflow.json" --policies layerwise,tierflow --plans "$d/pd"
hostile outputs/export-chakra-infeasible 1 "is full" --out "$d/chakra-out" -- \
  "$tf" export --plan "$d/p.json" --format chakra -o "$d/chakra-out" --set tiers.hbm.capacity=1.6GB
# A Chakra export's traces (one per program) appear together: one that cannot be written
# (its name taken by a folder) leaves the earlier trace of the other program as it was.
"$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" --devices 2 --policy layerwise -o "$d/p2.json" >/dev/null
mkdir -p "$d/et/p2.1.et" && echo "an earlier trace" >"$d/et/p2.0.et"
hostile outputs/export-chakra-traces-together 2 "p2.1.et: cannot write: it is a directory" \
  --out "$d/et/p2.0.et" -- "$tf" export --plan "$d/p2.json" --format chakra -o "$d/et"
# plan verify binds the plan to the topology it names: a program on a device it lacks.
python3 -c 'import json, sys
p = json.load(open(sys.argv[1])); p["programs"][0]["device"] = 99
json.dump(p, open(sys.argv[2], "w"))' "$d/p.json" "$d/p99.json"
hostile outputs/verify-device-99 2 "program 0 runs on device 99, but 'h100-sxm-8gpu' has 8 devices" --in "$d/p99.json" -- \
  "$tf" plan verify "$d/p99.json"

# --------------------------------------------------------------------------------------
# Stop 65.
d=$(fresh stop65)
# A pipeline without verify made a plan whose device-resident weights break the budget,
# scored with the budget not applied: exit 0, the plan written, and `sim` of it refused.
# The planner now scores each plan held to its budget.
hostile stop65/pipeline-place-over-budget 1 "the plan's simulation failed: 'hbm[0] within the plan's budget' is full before the step starts" --out "$d/pp.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" --budget 1GiB --pipeline place -o "$d/pp.json"

# YAML nested 1,000 deep said "malformed YAML: bad file" at the end of the line: now
# refused at the first bracket past 256 levels (as JSON is), and block nesting past the
# parser's own limit says so.
python3 - "$d/topo.yaml" "$d/deep.yaml" "$d/deep-block.yaml" <<'EOF'
import sys
s = open(sys.argv[1]).read()
open(sys.argv[2], "w").write("x: " + "[" * 1000 + "]" * 1000 + "\n" + s)
block = "\n".join(["x:"] + ["  " * (i + 1) + "k%d:" % i for i in range(1500)])
open(sys.argv[3], "w").write(block + " 1\n" + s)
EOF
hostile stop65/yaml-flow-nested-deep 2 "deep.yaml:1:260: YAML nested deeper than 256 levels" -- \
  "$tf" hw validate "$d/deep.yaml"
hostile stop65/yaml-block-nested-deep 2 "YAML nested deeper than its parser reads" -- \
  "$tf" hw validate "$d/deep-block.yaml"

# A device count of 10^8 (hw validate: ok) hung plan and serve for minutes; a million
# programs took over a minute and 12 GB. Counts are bounded in the file and after --set;
# a plan's programs too.
sed 's/count: {value: 8,/count: {value: 100000000,/' "$d/topo.yaml" >"$d/huge-count.yaml"
hostile stop65/device-count-huge 2 "huge-count.yaml:" -- "$tf" hw validate "$d/huge-count.yaml"
hostile stop65/device-count-huge-msg 2 "bad value for 'count': at most 1048576, got 100000000" -- "$tf" hw validate "$d/huge-count.yaml"
hostile stop65/hosts-huge-set 2 "--set:1:14: bad value for 'hosts': at most 1048576, got 2000000" -- \
  "$tf" hw show "$d/topo.yaml" --set system.hosts=2000000
hostile stop65/plan-programs-many 2 "--devices: 20000 programs (one per 'h100' device): at most 16384" --out "$d/many.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" --policy layerwise --set devices.h100.count=20000 --devices 0 -o "$d/many.json"

# The same value spelled twice in an axis (1000 and 1k; 1GB/s and 8Gb/s) ran its points
# twice, where the same text twice is refused.
cat >"$d/dup-spelled.yaml" <<'EOF'
name: dup-spelled
base: {model: llama-3-8b, layers: 2, phase: decode, context: 512, tokens: 2, policy: layerwise}
axes:
  - batch: [1000, 1k]
EOF
hostile stop65/sweep-same-value-spelled-twice 2 "dup-spelled.yaml:4:19: batch=1k appears twice in the axis (first at " --out "$d/dup.db" -- \
  "$tf" sweep "$d/dup-spelled.yaml" -o "$d/dup.db"
hostile stop65/vary-same-value-spelled-twice 2 "--vary: 'links.gpu-pcie.bandwidth=1GB/s,8Gb/s': 8Gb/s appears twice (as 1GB/s): its points would run twice" -- \
  "$tf" whatif "${scen[@]}" --vary links.gpu-pcie.bandwidth=1GB/s,8Gb/s

# Flags that were ignored without a word: a seed with expected routing, a router's
# settings for a dense model, a format's flag another format does not read, a decode
# router with --cache-only, the same --set path twice, a pass option twice, a policy
# named twice.
hostile stop65/gen-seed-expected 2 "--seed: it seeds the seeded router, and --routing expected runs none" --out "$d/m.json" -- \
  "$tf" trace gen --model mixtral-8x7b --layers 2 --phase decode --context 128 --tokens 1 --seed 5 -o "$d/m.json"
hostile stop65/gen-routing-dense 2 "--routing: llama-3-8b has no routed experts (a dense model)" --out "$d/m.json" -- \
  "$tf" trace gen "${gen_small[@]}" --routing seeded -o "$d/m.json"
hostile stop65/gen-skew-dense 2 "--routing-skew: llama-3-8b has no routed experts" --out "$d/m.json" -- \
  "$tf" trace gen "${gen_small[@]}" --routing-skew 2 -o "$d/m.json"
hostile stop65/export-stem-csv 2 "--stem: chakra names its traces by it; csv does not" --out "$d/e.csv" -- \
  "$tf" export --plan "$d/p.json" --format csv --stem foo -o "$d/e.csv"
hostile stop65/export-inline-csv 2 "--inline-workload: plan-json embeds the workload; csv does not read it" --out "$d/e.csv" -- \
  "$tf" export --plan "$d/p.json" --format csv --inline-workload -o "$d/e.csv"
hostile stop65/export-on-full-plan-json 2 "--on-full: plan-json is not simulated" --out "$d/e.json" -- \
  "$tf" export --plan "$d/p.json" --format plan-json --on-full wait -o "$d/e.json"
hostile stop65/cache-only-decode-router 2 "--decode-router: has no effect with --cache-only" -- \
  "$tf" serve --cache-only --model llama-3-8b --prefill-replicas 1 --replicas 3 --decode-router prefix --trace tests/data/serve/mooncake_conversation_200.jsonl
hostile stop65/set-twice 2 "--set: 'tiers.hbm.capacity' given twice (10GiB, then 20GiB): the last would win unnoticed" -- \
  "$tf" hw show "$d/topo.yaml" --set tiers.hbm.capacity=10GiB --set tiers.hbm.capacity=20GiB
hostile stop65/model-set-twice 2 "--model-set: 'layers' given twice (2, then 3)" --out "$d/s.csv" -- \
  "$tf" serve --model llama-3-8b --model-set layers=2 --model-set layers=3 --arrivals poisson,rate=1/s,n=2,prompt=fixed:64,output=fixed:2 -o "$d/s.csv"
hostile stop65/pass-option-twice 2 "--pipeline:1:16: option 'lead' of pass 'select': given twice (1, then 2)" --out "$d/x.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" --pipeline 'place,liveness,select{lead=1,lead=2},insert,verify' -o "$d/x.json"
hostile stop65/policy-twice 2 "--policies: 'layerwise' given twice: it would run twice" --out "$d/c.csv" -- \
  "$tf" compare "${scen[@]}" --policies layerwise,resident,layerwise -o "$d/c.csv"

# A workload's meta tp of -2, 1.5 or "2" was taken as 1; one of 16 was planned whole
# before the plan was refused; a workload without ops planned a makespan of 0; a plan's
# budget of 0 ran unbounded; a bound of -5 ps was printed.
python3 - "$d/w.json" "$d/p.json" "$d" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))
for name, tp in [("tp-neg", -2), ("tp-frac", 1.5), ("tp-str", "2"), ("tp-16", 16)]:
    x = dict(w); x["meta"] = dict(w["meta"]); x["meta"]["tp"] = tp
    json.dump(x, open(f"{sys.argv[3]}/{name}.json", "w"))
json.dump({"format": "tierflow.workload/1", "name": "x", "meta": {}, "tensors": [], "ops": []},
          open(f"{sys.argv[3]}/no-ops.json", "w"))
p = json.load(open(sys.argv[2])); p["budget"] = 0
json.dump(p, open(f"{sys.argv[3]}/p-budget0.json", "w"))
p = json.load(open(sys.argv[2])); p["meta"]["bounds_compute_ps"] = -5
json.dump(p, open(f"{sys.argv[3]}/p-bound-neg.json", "w"))
EOF
for n in tp-neg tp-frac tp-str; do
  hostile "stop65/workload-meta-$n" 2 "meta 'tp' (the tensor parallelism this workload is a shard of) must be a whole number from 1 to 65536" -- \
    "$tf" trace info "$d/$n.json"
done
hostile stop65/workload-tp16-before-planning 2 "tp-16.json: the workload is one shard of tensor parallelism 16: its group needs 16 devices" --out "$d/x.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/tp-16.json" --policy layerwise -o "$d/x.json"
hostile stop65/workload-no-ops 2 "no-ops.json:1:75: the workload has no ops: nothing to plan or run" -- \
  "$tf" trace info "$d/no-ops.json"
hostile stop65/plan-budget-zero 2 "budget: expected more than 0 bytes" -- "$tf" sim --plan "$d/p-budget0.json"
hostile stop65/plan-bound-negative 2 "meta 'bounds_compute_ps' (a lower bound) must be a whole number of picoseconds from 0, got -5" -- \
  "$tf" sim --plan "$d/p-bound-neg.json"

# A word outside a flag's set said CLI11's "Decode not in {prefill,decode,train}" and a
# negative count "Could not convert: --threads = -1": now the project's wording, with the
# nearest word.
hostile stop65/enum-phase-case 2 "--phase: expected one of prefill, decode, train, got 'Decode'; did you mean 'decode'?" --out "$d/x.json" -- \
  "$tf" trace gen --model llama-3-8b --phase Decode -o "$d/x.json"
hostile stop65/enum-on-full 2 "--on-full: expected one of fail, wait, got 'wiat'; did you mean 'wait'?" -- \
  "$tf" sim --plan "$d/p.json" --on-full wiat
hostile stop65/threads-negative 2 "--threads: expected a whole number from 0, got '-1'" --out "$d/x.json" -- \
  "$tf" plan --hw "$d/topo.yaml" --workload "$d/w.json" --threads -1 -o "$d/x.json"

# A pinned route that crossed one link the same way twice (a loop) was accepted, its
# setup counted thrice; a device rate far out of range was blamed on the workload.
sed 's|  - {from: gddr, to: ssd, via: \[gpu-pcie, nvme-link\]}|  - {from: gddr, to: ssd, via: [gpu-pcie, gpu-pcie, gpu-pcie, nvme-link]}|' \
  configs/hw/rtx4090-workstation.yaml >"$d/loop.yaml"
hostile stop65/route-pin-loop 2 "loop.yaml:147:53: route gddr -> ssd: link 'gpu-pcie' is crossed from 'gddr' to 'rc' again (as item 1 of via)" -- \
  "$tf" hw validate "$d/loop.yaml"
sed 's|launch_overhead: {value: 5us|launch_overhead: {value: 1000000s|' configs/hw/rtx4090-workstation.yaml >"$d/launch.yaml"
hostile stop65/device-launch-implausible 2 "launch.yaml:73:30: launch_overhead 1000000s is implausible" --out "$d/x.json" -- \
  "$tf" plan --hw "$d/launch.yaml" --workload "$d/w.json" -o "$d/x.json"

# Messages that pointed elsewhere: a stray word after a KV tier's capacity was "a second
# capacity"; min-capacity of the device tier said to add it to --kv-tiers, which refuses
# it; two bounds in --target were "not a duration"; an option of other commands said
# nothing of them.
arr=(--arrivals poisson,rate=1/s,n=4,prompt=fixed:512,output=fixed:8)
hostile stop65/kv-tier-stray-word 2 "'extra' is neither a capacity (512GiB, 25%), a policy" -- \
  "$tf" serve --model llama-3-8b "${arr[@]}" --kv-tiers ddr:1TB:lru:extra
hostile stop65/min-capacity-device-tier 2 "--find: min-capacity:hbm: 'hbm' is the devices' own tier" -- \
  "$tf" serve --model llama-3-8b "${arr[@]}" --find min-capacity:hbm --target hit=5%
hostile stop65/min-capacity-no-tier 2 "--find: min-capacity:dram: 'h100-sxm-8gpu' has no tier 'dram'" -- \
  "$tf" serve --model llama-3-8b "${arr[@]}" --find min-capacity:dram --target hit=5%
hostile stop65/target-two-bounds 2 "one bound at a time" -- \
  "$tf" serve --model llama-3-8b "${arr[@]}" --kv-tiers ddr:1TB --find min-capacity:ddr --target p99-ttft=1s,p90-tpot=1ms
hostile stop65/option-of-other-commands 2 "unknown option '--model' for 'tierflow plan' (it is an option of 'tierflow trace gen'" -- \
  "$tf" plan --model llama-3-8b

signal_case() {
  local name=signal/sim-timeline-sigterm
  selected "$name" || return 0
  started=$(($(date +%s%N) / 1000000))
  local d
  d=$(fresh signal)
  if ! "$tf" trace gen --model llama-3-8b --phase decode --context 4096 --tokens 300 -o "$d/wbig.json" >/dev/null 2>&1 ||
    ! "$tf" plan --hw "$hw" --workload "$d/wbig.json" --policy layerwise --devices 1 -o "$d/pbig.json" >/dev/null 2>&1; then
    fail_case "$name" "could not make the plan to simulate"
    return
  fi
  "$tf" sim --plan "$d/pbig.json" --timeline "$d/t.json" >/dev/null 2>"$tmp/err" &
  local pid=$! seen=0 i
  for i in $(seq 1 3000); do
    if compgen -G "$d/t.json.tierflow-tmp.*" >/dev/null; then seen=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  local rc=$?
  if [ "$seen" = 0 ]; then fail_case "$name" "never saw t.json.tierflow-tmp.* while sim ran (exit $rc)" "$tmp/err"
  elif [ "$rc" != 143 ]; then fail_case "$name" "exit $rc, expected 143 (SIGTERM)" "$tmp/err"
  elif compgen -G "$d/t.json.tierflow-tmp.*" >/dev/null; then fail_case "$name" "left $(ls "$d"/t.json.tierflow-tmp.*)"
  elif [ -e "$d/t.json" ]; then fail_case "$name" "wrote t.json"
  else pass_case "$name"; fi
}
signal_case

finish
