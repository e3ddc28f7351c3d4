#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with Debian's clang (ASan + UBSan) and fuzzes
# each for SECONDS (default 60, CI's smoke run) on JOBS processes (default 1).
#   scripts/fuzz.sh [SECONDS] [TARGET ...]     targets: topology model workload plan hf_config requests routing generate serve
# The first seven are the readers; `generate` is the command line's value paths: `trace gen`
# flags and a Hugging Face config's sizes through the generator to bytes, a plan and a
# simulation (its seeds: every flag set below with every small config); `serve` the serving
# engine under combinations of `serve`'s flags (its seeds: tests/fuzz/seeds/serve).
# The corpus grows in build/asan/corpus/TARGET across runs (seeded from the shipped files,
# the bad-input fixtures and tests/fuzz/seeds); a finding is written to
# build/asan/artifacts/TARGET/ and the script exits 1 naming it. Every file in
# tests/fuzz/regressions/TARGET (the reproducers of fixed findings) is run first.
# FUZZ_KEEP_GOING=1 (long unattended runs) keeps fuzzing after a finding (libFuzzer's fork
# mode), collecting every one. FUZZ_CPU_SECONDS=N stops a target once the fuzzer and its
# workers have used N CPU seconds (SECONDS, wall time, still bounds it): CPU-hour targets
# met on a machine that does other work meanwhile. Each target's executions and corpus size are printed, and
# appended to build/asan/runs.tsv (target, wall seconds, CPU seconds, jobs, executions,
# corpus files, result).
# FUZZ_BUILD_DIR (default build/asan, the sanitizer test run's tree) is where it builds,
# keeps the corpus and writes logs.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(topology model workload plan hf_config requests routing generate serve)
jobs=${FUZZ_JOBS:-1}
cpu_budget=${FUZZ_CPU_SECONDS:-0}

# Process $1 and its descendants, parents first (libFuzzer's fork mode runs each worker
# under sh).
tree_pids() {
  local pids=("$1") p
  while [ ${#pids[@]} -gt 0 ]; do
    p=${pids[0]}
    pids=("${pids[@]:1}")
    [ -e "/proc/$p/stat" ] && echo "$p"
    # shellcheck disable=SC2207
    pids+=($(cat /proc/"$p"/task/*/children 2>/dev/null || true))
  done
}

# CPU seconds used so far by process $1 and its descendants: each live process's own time
# and that of the children it has reaped.
tree_cpu() {
  local tick p
  tick=$(getconf CLK_TCK)
  for p in $(tree_pids "$1"); do
    awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || true
  done | awk -v tick="$tick" '{s += $1} END {printf "%d", s / tick}'
}

bash scripts/setup.sh >/dev/null
# shellcheck source=scripts/configure.sh
source scripts/configure.sh

# The sanitizer test run's tree (scripts/test.sh with TIERFLOW_SANITIZE=1): one build for both.
dir=${FUZZ_BUILD_DIR:-build/asan}
configure_tree "$dir" sanitize
cmake --build "$dir" --target $(printf 'fuzz_%s ' "${targets[@]}")

# The seeds of each target: files of its format in the repository.
seeds() {
  case $1 in
    topology) ls configs/hw/*.yaml tests/errors/*.yaml tests/fixtures/*.yaml ;;
    model) ls configs/models/*.yaml tests/fuzz/seeds/model/*.yaml ;;
    workload) ls tests/errors/workload/*.json tests/fuzz/seeds/workload/*.json ;;
    plan) ls tests/errors/plan/*.json tests/fixtures/plans/*.json tests/fuzz/seeds/plan/*.json ;;
    hf_config) ls tests/fixtures/hf/*.json tests/fixtures/hf/released/*.json tests/errors/hf/*.json \
      tests/python/configs/*.json ;;
    requests) ls tests/data/serve/*.jsonl tests/data/serve/*.csv tests/errors/requests/* ;;
    routing) ls tests/fuzz/seeds/routing/* ;;
    serve) ls tests/fuzz/seeds/serve/* ;;
    generate) ;;  # made by generate_seeds
  esac
}

# `generate`'s seeds: flag lines, then a config. Small configs whole; released ones cut to
# a layer or two by --layers so that the generated workloads stay small.
generate_flag_sets=(
  "--phase decode --context 128 --tokens 2 --batch 4"
  "--phase prefill --seq 64 --kv-block 16 --weight-dtype int4 --quant-group 32"
  "--phase train --seq 32 --batch 2 --checkpoint --act-dtype fp16 --weight-dtype fp16"
  "--phase decode --context 4096 --tokens 1 --tp 2 --kv-dtype fp8 --weight-dtype fp8 --compute-dtype fp8"
  "--phase decode --context 300 --tokens 3 --routing seeded --seed 7 --weight-dtype int8 --quant-zeros"
)
generate_seeds() {
  local corpus=$1 f i=0 flags layers
  for f in tests/fixtures/hf/llama.json tests/fixtures/hf/gemma2_small.json \
    tests/fixtures/hf/gpt_oss_small.json tests/fixtures/hf/deepseek_v3.json \
    tests/fixtures/hf/released/mistral-7b-v0.1.json tests/fixtures/hf/released/qwen3-8b.json \
    tests/fixtures/hf/released/gpt-oss-20b.json; do
    layers=""
    case $f in */released/*) layers="--layers 1" ;; esac
    for flags in "${generate_flag_sets[@]}"; do
      i=$((i + 1))
      [ -e "$corpus/seed-$i" ] || { echo "$flags $layers"; cat "$f"; } >"$corpus/seed-$i"
    done
  done
}

# A dictionary of the keys and words the seeds use, so that mutations speak the format.
dictionary() {
  local t=$1
  if [ "$t" = topology ] || [ "$t" = model ]; then
    {
      seeds "$t" | xargs cat | grep -oE '[A-Za-z_][A-Za-z0-9_-]*:' | sed 's/.*/"&"/'
      # YAML's repetition: anchors, aliases, merge keys, the x- keys that hold anchors.
      printf '"%s"\n' '&a ' '*a' '<<: ' '<<: [*a, *b]' 'x-a: '
    } | sort -u
  elif [ "$t" = serve ]; then
    {
      seeds serve | xargs cat | tr ' ,' '\n\n' | grep -v '^$' | sed 's/.*/"&"/'
      printf '"%s"\n' 9223372036854775807 2147483647 1e300 -1 0 ',' '=' ':'
    } | sort -u
  elif [ "$t" = generate ]; then
    {
      seeds hf_config | xargs cat | grep -oE '"[A-Za-z_][A-Za-z0-9_./-]{0,40}"'
      printf '%s\n' "${generate_flag_sets[@]}" | tr ' ' '\n' | sed 's/.*/"& "/'
      printf '"%s"\n' 9223372036854775807 4294967296 2147483647 1099511627776 1e300 -1 0
    } | sort -u
  else
    seeds "$t" | xargs cat | grep -oE '"[A-Za-z_][A-Za-z0-9_./-]{0,40}"' | sort -u
  fi
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  corpus=$dir/corpus/$t
  artifacts=$dir/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  seeds "$t" | while read -r f; do cp -n "$f" "$corpus/seed-$(basename "$f")"; done
  [ "$t" != generate ] || generate_seeds "$corpus"
  dictionary "$t" >"$dir/$t.dict"
  bin=$dir/tests/fuzz/fuzz_$t
  regressions=()
  if [ -d "tests/fuzz/regressions/$t" ]; then
    mapfile -t regressions < <(find "tests/fuzz/regressions/$t" -type f | sort)
  fi
  if [ ${#regressions[@]} -gt 0 ]; then
    echo "== fuzz_$t: ${#regressions[@]} regression inputs"
    "$bin" -timeout=10 -rss_limit_mb=4096 "${regressions[@]}" >"$dir/$t.regressions.log" 2>&1 || {
      tail -40 "$dir/$t.regressions.log"
      echo "fuzz_$t: a regression input fails again (log: $dir/$t.regressions.log)"
      status=1
      continue
    }
  fi
  echo "== fuzz_$t: ${seconds}s on $jobs process(es)"
  log=$dir/$t.log
  result=ok
  found_before=$(find "$artifacts" -type f | wc -l)
  # -max_len covers the largest seed; -timeout flags an input that takes over 10 s (a hang).
  # With several jobs libFuzzer runs workers that write fuzz-N.log in the current folder.
  parallel=()
  if [ "${FUZZ_KEEP_GOING:-0}" = 1 ]; then
    parallel=(-fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  elif [ "$jobs" -gt 1 ]; then
    parallel=(-jobs="$jobs" -workers="$jobs")
  fi
  rm -f "$dir/$t.budget-reached"
  (cd "$dir" || exit 1
    "tests/fuzz/fuzz_$t" "corpus/$t" -dict="$t.dict" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="artifacts/$t/" \
      -print_final_stats=1 "${parallel[@]}" >"$t.log" 2>&1 &
    fuzzer=$!
    if [ "$cpu_budget" -gt 0 ]; then
      # Stops the fuzzer and its workers once they have used the budget, noting the CPU
      # seconds used (a worker stopped this way is never reaped by the fuzzer, so the
      # shell's accounting would miss it). SIGTERM: a shell starts background jobs with
      # SIGINT ignored.
      while kill -0 "$fuzzer" 2>/dev/null; do
        used=$(tree_cpu "$fuzzer")
        if [ "$used" -ge "$cpu_budget" ]; then
          echo "$used" >"$t.budget-reached"
          # shellcheck disable=SC2046
          kill -TERM $(tree_pids "$fuzzer" | tac) 2>/dev/null
          break
        fi
        sleep 5
      done &
    fi
    wait "$fuzzer"
    rc=$?
    wait
    times >"$t.times"
    # Stopped at the budget with nothing found: a run that ended as planned.
    if [ -e "$t.budget-reached" ] && ! grep -qaE 'ERROR: libFuzzer|ERROR: AddressSanitizer|runtime error|fuzz property failed' "$t.log"; then
      rc=0
    fi
    exit $rc) || result=finding
  # CPU seconds of the fuzzer and its workers: the children line of the subshell's times.
  cpu=$(awk 'NR == 2 {
      n = split($1 " " $2, f, " "); s = 0
      for (i = 1; i <= n; i++) { split(f[i], ms, /[ms]/); s += ms[1] * 60 + ms[2] }
      printf "%.0f", s }' "$dir/$t.times")
  if [ -s "$dir/$t.budget-reached" ] && [ "$(cat "$dir/$t.budget-reached")" -gt "$cpu" ]; then
    cpu=$(cat "$dir/$t.budget-reached")
  fi
  # Workers' logs (-jobs mode; fork mode, FUZZ_KEEP_GOING=1, writes none).
  if [ "$jobs" -gt 1 ]; then
    cat "$dir"/fuzz-*.log >>"$log" 2>/dev/null || true
    rm -f "$dir"/fuzz-*.log
  fi
  # Executions: the final statistics of each worker, or in fork mode the last status line.
  execs=$( (grep -aoE 'stat::number_of_executed_units: *[0-9]+' "$log" || true) |
    awk '{s += $2} END {print s + 0}')
  if [ "$execs" = 0 ]; then
    execs=$( (grep -aoE '^#[0-9]+' "$log" || true) | tail -1 | tr -d '#')
    execs=${execs:-0}
  fi
  if [ "$(find "$artifacts" -type f | wc -l)" -gt "$found_before" ]; then result=finding; fi
  files=$(find "$corpus" -type f | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$seconds" "$cpu" "$jobs" "$execs" "$files" "$result" \
    >>"$dir/runs.tsv"
  echo "fuzz_$t: $execs executions in $cpu CPU seconds, corpus $files files, $result"
  if [ "$result" != ok ]; then
    grep -aE 'ERROR|SUMMARY|fuzz property failed|internal error|Assertion|terminate called|runtime error|Test unit written' "$log" | head -20 || true
    # What the target printed before it died (the lines above libFuzzer's own report), and
    # the inputs found, so that a finding of a run elsewhere (CI) can be reproduced here.
    grep -avE '^#[0-9]+|^INFO:|^"|^######|^MS:|^base unit:|^0x' "$log" | grep -aB30 -m1 'ERROR: ' | head -40 || true
    find "$artifacts" -type f -newer "$dir/$t.dict" -size -16k | head -3 | while read -r f; do
      echo "--- $f (base64; decode with base64 -d):"
      base64 -w 100 "$f"
    done
    echo "fuzz_$t: finding in $artifacts (log: $log)"
    status=1
  fi
done
exit $status
