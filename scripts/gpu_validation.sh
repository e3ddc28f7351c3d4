#!/usr/bin/env bash
# The simulator against a real GPU (docs/validation.md, "CUDA"), in one unattended run:
#   env        the GPU, driver, CUDA, tierflow and Python versions (env.txt)
#   tests      the CUDA backend's unit tests (tierflow_tests, cases of tests/replay/cuda_*)
#   calibrate  `tierflow calibrate --backend cuda`: gpu.yaml and the measurements
#   replay     three workloads planned on gpu.yaml and replayed RUNS times with --compute
#              timed and --compute gemm: measured against simulated makespan, per-transfer
#              error, exposed wait, device peak (summary.md); ops-NAME.md: where each
#              workload's time went, op by op and transfers by size (scripts/replay_ops.py)
#   full       the full-size case: Llama-3-70B, all 80 layers, int8 weights, decode 2 tokens
#              from 4,096 in a 16 GiB budget, replayed RUNS_FULL times (default 2) per mode
#              with the default memory limit (GPU and host memory; the report says which)
#   torch      a Hugging Face model built from a config (random bf16 weights) run by
#              tierflow_torch on the GPU with a device budget below its weights: once with
#              --profile, once plain and once with --memory-profile; `tierflow_torch
#              calibrate` reads the runtime's host time per step from the profile
#              (dispatch.json) and what it holds beyond the plan from the memory profile
#              (memory.json), and plans made with the dispatch at two budgets run TORCH_RUNS
#              times (default 2) each against their prediction (time, and peak plus that)
#
#   scripts/gpu_validation.sh                run every step
#   scripts/gpu_validation.sh bundle DIR     make DIR: the CUDA build's binaries with the
#                                            libraries they need that a GPU host may lack
#
# Environment:
#   TIERFLOW_BUNDLE  a bundle made by `bundle` (its bin/tierflow and bin/tierflow_tests);
#                    otherwise TIERFLOW_BIN and TIERFLOW_TESTS, default build/gpu/..., built
#                    when missing (Release, CUDA on, sm_90):
#                    cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
#                      -DTIERFLOW_CUDA=ON -DTIERFLOW_CUDA_ARCHITECTURES=90 -DTIERFLOW_PYTHON=OFF
#   OUT_DIR   where results go (default build/gpu-validation); OUT_DIR.tar.gz holds them all
#   RUNS      replays per plan and compute mode (default 3)
#   STEPS     the steps to run (default "env tests calibrate replay full torch")
#   BACKEND   cuda (default); cpu rehearses the sequence on a machine without a GPU (paced
#             copies, sizes divided to fit 2 GiB, timed compute only, no CUDA tests, the
#             torch step on the CPU)
#   PYTHON    the interpreter with torch and transformers for the torch step (default
#             python3); the step is skipped, saying why, when it cannot import them
#
# Workloads (host tiers pinned; budgets are the device bytes each plan may use):
#   weights  Llama-3-70B, 4 layers, int8 weights (embeddings and head bf16), decode 2 tokens
#            from a 4,096-token context: 7.2 GiB of weights streamed through a 3 GiB budget
#   kv       Llama-3-8B, 4 layers, batch 8, decode 2 tokens from a 32,768-token context in
#            1,024-token KV blocks: 4.1 GiB of KV cache and 3.6 GiB of weights in 4 GiB
#   train    Llama-2-7B, 2 layers, a training step of 4,096 tokens (AdamW): 1.4 GiB of
#            activations, 2.7 GiB of gradients, 7.5 GiB of optimizer state in 4 GiB
#   torch    Mistral-7B-v0.1's config cut to 4 layers (2.3 GB of bf16 weights), a 512-token
#            forward step in a 1.5 GiB budget
#
# Exit status: 0 when every step ran (targets met or not: summary.md says), 1 when a step
# failed (the rest still run; failed.txt names them), 2 bad usage or no binaries.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD

os_name() { sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null; }
die() {
  echo "gpu_validation: $*" >&2
  exit 2
}

# The Release build with the CUDA backend for sm_90 (H100, H200) in build/gpu.
build_gpu() {
  echo "== build build/gpu" >&2
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERFLOW_CUDA=ON \
    -DTIERFLOW_CUDA_ARCHITECTURES=90 -DTIERFLOW_PYTHON=OFF >/dev/null || die "cmake failed"
  cmake --build build/gpu --target tierflow tierflow_tests || die "build failed"
}

# ---------------------------------------------------------------------------------------
# bundle DIR: bin/ wrappers that set the library path, libexec/ the stripped binaries,
# lib/ every library they link that is not the C/C++ runtime or CUDA's (those come from
# the GPU host: its driver must match its CUDA runtime).
# ---------------------------------------------------------------------------------------
bundle() {
  local dir=$1 build=build/gpu
  [ -n "$dir" ] || die "usage: scripts/gpu_validation.sh bundle DIR"
  build_gpu
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/libexec" "$dir/lib"
  local name bin lib
  for name in tierflow tierflow_tests; do
    bin=$build/tools/tierflow
    [ "$name" = tierflow_tests ] && bin=$build/tests/tierflow_tests
    strip -o "$dir/libexec/$name" "$bin" || die "strip $bin failed"
    for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
      case $(basename "$lib") in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libgcc_s.so.* | \
          libstdc++.so.* | libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.*) ;;
        *) cp -L "$lib" "$dir/lib/" ;;
      esac
    done
    cat >"$dir/bin/$name" <<'EOF'
#!/bin/sh
# Runs the bundled binary with the bundle's libraries, then CUDA's (CUDA_HOME; else the
# toolkit of the nvcc on PATH; else /usr/local/cuda) ahead of the system's.
here=$(cd "$(dirname "$0")/.." && pwd)
cuda=${CUDA_HOME:-}
if [ -z "$cuda" ] && command -v nvcc >/dev/null 2>&1; then
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")
fi
cuda=${cuda:-/usr/local/cuda}
LD_LIBRARY_PATH="$here/lib:$cuda/lib64:$cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  exec "$here/libexec/$(basename "$0")" "$@"
EOF
    chmod +x "$dir/bin/$name"
  done
  bundle_wheels "$dir/wheels"
  {
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "source_dir $root"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(os_name)"
    echo "cuda $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  } >"$dir/BUNDLE"
  du -sh "$dir"
  cat "$dir/BUNDLE"
}

# The exporter traces Hugging Face models with transformers.utils.fx, which transformers 5
# removed; a GPU host's Python may have only transformers 5 (it had 4.47.1 on 2026-11-27 and
# 5.17.0 on 2026-11-30). bundle_wheels DIR puts there the wheels of the exporter's pinned
# packages (tools/requirements.txt) and the requests stack transformers 4 checks for at
# import, for Python 3.10 to 3.13 on x86-64 Linux; the torch step puts the ones the host's
# Python can load ahead of its own when it lacks the tracer (use_bundled_transformers).
bundle_wheels() {
  local dir=$1 v pins
  pins=$(sed -n 's/^\([A-Za-z0-9_.-]*==[^ ]*\).*/\1/p' tools/requirements.txt)
  mkdir -p "$dir"
  for v in 3.10 3.11 3.12 3.13; do
    # shellcheck disable=SC2086 # one word per pin
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
      --python-version "$v" --implementation cp -d "$dir" $pins requests==2.32.3 \
      urllib3==2.2.3 idna==3.10 certifi==2024.12.14 charset-normalizer==3.4.0 ||
      die "pip download of the exporter's wheels for Python $v failed"
  done
}

# use_bundled_transformers: the bundle's wheels that this Python can load, unpacked into
# $bundle_dir/python, go ahead of its own on PYTHONPATH; says what it unpacked.
use_bundled_transformers() {
  local into=$bundle_dir/python
  rm -rf "$into"
  mkdir -p "$into"
  "$python" - "$bundle_dir/wheels" "$into" <<'EOF' || return 1
import glob, os, sys, zipfile
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
ours = set(sys_tags())
taken = set()
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    name, _, _, tags = parse_wheel_filename(os.path.basename(path))
    if name not in taken and ours & set(tags):
        zipfile.ZipFile(path).extractall(sys.argv[2])
        taken.add(name)
print("unpacked:", ", ".join(sorted(taken)))
EOF
  export PYTHONPATH="$into${PYTHONPATH:+:$PYTHONPATH}"
}

if [ "${1:-}" = bundle ]; then
  bundle "${2:-}"
  exit 0
fi
[ $# -eq 0 ] || die "usage: scripts/gpu_validation.sh [bundle DIR]"

backend=${BACKEND:-cuda}
runs=${RUNS:-3}
steps=" ${STEPS:-env tests calibrate replay full torch} "
out=${OUT_DIR:-build/gpu-validation}
python=${PYTHON:-python3}
case $backend in cuda | cpu) ;; *) die "BACKEND is cuda or cpu, not '$backend'" ;; esac

if [ -n "${TIERFLOW_BUNDLE:-}" ]; then
  bundle_dir=$(cd "$TIERFLOW_BUNDLE" && pwd) || die "no bundle at $TIERFLOW_BUNDLE"
  tf=$bundle_dir/bin/tierflow
  tests=$bundle_dir/bin/tierflow_tests
  source_dir=$(awk '$1 == "source_dir" {print $2}' "$bundle_dir/BUNDLE")
else
  tf=${TIERFLOW_BIN:-build/gpu/tools/tierflow}
  tests=${TIERFLOW_TESTS:-build/gpu/tests/tierflow_tests}
  source_dir=$root
  if [ ! -x "$tf" ] && [ -z "${TIERFLOW_BIN:-}" ]; then
    build_gpu
  fi
fi
[ -x "$tf" ] || die "$tf not found"
"$tf" --version >/dev/null 2>&1 || die "$tf does not run here: $("$tf" --version 2>&1 | head -3)"
tf=$(cd "$(dirname "$tf")" && pwd)/$(basename "$tf")

mkdir -p "$out"
out=$(cd "$out" && pwd)
: >"$out/failed.txt"
log=$out/log.txt
: >"$log"

# step NAME: true when NAME is among STEPS.
step() { [[ $steps == *" $1 "* ]]; }
# A step that runs replaces its table of an earlier run in OUT_DIR; the others' stay.
step env && rm -f "$out/env.txt"
step tests && rm -f "$out/tests.txt"
step replay && rm -f "$out/replay.md" "$out"/ops-*.md
step full && rm -f "$out/full.md" "$out"/full.*.replay*.json
step torch && rm -f "$out/torch.md" "$out"/hf.run*.json "$out"/hf-d*.json "$out/hf.profile.json" \
  "$out/dispatch.json" "$out/hf.memory.json" "$out/memory.json"
failed() {
  echo "$1" >>"$out/failed.txt"
  echo "gpu_validation: FAILED: $1 (see $log)" >&2
}
# run LABEL CMD...: runs CMD with its output in the log; a failure is recorded, not fatal.
run() {
  local label=$1
  shift
  echo "== [$(date +%T)] $label" | tee -a "$log" >&2
  echo "\$ $*" >>"$log"
  if ! "$@" >>"$log" 2>&1; then
    failed "$label"
    return 1
  fi
}

if step env; then
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -srm); $(os_name)"
    echo "cpus: $(nproc); memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm \
        --format=csv 2>&1
    else
      echo "nvidia-smi: not found"
    fi
    echo "nvcc: $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "tierflow: $("$tf" --version 2>&1)"
    [ -n "${bundle_dir:-}" ] && sed 's/^/bundle: /' "$bundle_dir/BUNDLE"
    git rev-parse HEAD 2>/dev/null | sed 's/^/tree: /'
    "$python" -c 'import sys, torch, transformers; print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}, available {torch.cuda.is_available()}), transformers {transformers.__version__}")' 2>&1 | tail -1
  } >"$out/env.txt"
  cat "$out/env.txt" >&2
fi

if step tests; then
  if [ "$backend" != cuda ]; then
    echo "== tests: skipped: BACKEND=$backend" | tee -a "$log" >&2
  elif [ ! -x "$tests" ]; then
    echo "== tests: skipped: $tests not found" | tee -a "$log" >&2
    failed tests
  elif [ ! -d "$source_dir/tests/fixtures" ]; then
    echo "== tests: skipped: they read fixtures from $source_dir (ln -s $root $source_dir)" |
      tee -a "$log" >&2
    failed tests
  else
    run tests sh -c "'$tests' --source-file='*cuda*' >'$out/tests.log' 2>&1; rc=\$?; cat '$out/tests.log'; exit \$rc"
    {
      grep -E '^\[doctest\] (test cases|assertions|Status)' "$out/tests.log" | tail -3
      # Each failed case with its message: doctest's blocks between rules of '='.
      awk '/^====================+$/ { if (block ~ /ERROR|FATAL/) printf "%s", block; block = ""; next }
           { block = block $0 "\n" }
           END { if (block ~ /ERROR|FATAL/) printf "%s", block }' "$out/tests.log"
    } >"$out/tests.txt"
  fi
fi

hw=$out/$backend.yaml
if step calibrate; then
  extra=()
  [ "$backend" = cpu ] && extra=(--device-memory 4GiB)
  run calibrate "$tf" calibrate --backend "$backend" "${extra[@]}" -o "$hw" --json \
    --report "$out/calibration.json" &&
    run "hw show" sh -c "'$tf' hw show '$hw' >'$out/$backend.txt'"
fi

# The workloads of the replay step: name, budget, `trace gen` arguments.
workloads=(
  "weights|3GiB|--model llama-3-70b --phase decode --layers 4 --weight-dtype int8 --context 4096 --tokens 2"
  "kv|4GiB|--model llama-3-8b --phase decode --batch 8 --layers 4 --context 32768 --tokens 2 --kv-block 1024"
  "train|4GiB|--model llama-2-7b --phase train --layers 2 --seq 4096"
)
modes=(timed gemm)
plan_sets=()
if [ "$backend" = cpu ]; then
  modes=(timed)
  # A CPU's measured FLOP/s would make the training step last minutes of real time: the
  # rehearsal plans with a GPU's compute rate (the replay's compute steps are timed waits).
  plan_sets=(--set devices.dev.peak.bf16=20TFLOP/s)
fi

if step replay && [ ! -f "$hw" ]; then
  echo "== replay: skipped: no $hw (the calibrate step writes it)" | tee -a "$log" >&2
  failed replay
elif step replay; then
  for spec in "${workloads[@]}"; do
    IFS='|' read -r w budget args <<<"$spec"
    rm -f "$out/$w.plan.json" "$out/$w".*.replay*.json  # no table row from an earlier run
    # shellcheck disable=SC2086
    run "trace $w" "$tf" trace gen $args -o "$out/$w.json" || continue
    run "plan $w" sh -c "'$tf' plan --hw '$hw' ${plan_sets[*]} --workload '$out/$w.json' \
      --devices 1 --budget $budget --policy tierflow --explain -o '$out/$w.plan.json' \
      --timeline '$out/$w.sim.trace.json' >'$out/$w.plan.txt'" || continue
    run "sim $w" "$tf" sim --plan "$out/$w.plan.json" --json -o "$out/$w.sim.json"
    for mode in "${modes[@]}"; do
      for i in $(seq 1 "$runs"); do
        flags=(--backend "$backend")
        if [ "$backend" = cuda ]; then
          flags+=(--compute "$mode")
        else
          flags+=(--copy paced --memory-limit 2GiB)
        fi
        # The first run of each mode also writes the measured timeline.
        [ "$i" = 1 ] && flags+=(--timeline "$out/$w.$mode.trace.json")
        run "replay $w $mode $i/$runs" "$tf" replay "${flags[@]}" --plan "$out/$w.plan.json" \
          --json -o "$out/$w.$mode.replay$i.json"
      done
    done
  done
  rows=()
  for spec in "${workloads[@]}"; do
    w=${spec%%|*}
    for mode in "${modes[@]}"; do
      rows+=("$w $mode|$out/$w.plan.json|$out/$w.$mode.replay")
    done
  done
  "$python" scripts/replay_table.py "$runs" "${rows[@]}" >"$out/replay.md"
  cat "$out/replay.md" >&2
  for spec in "${workloads[@]}"; do
    w=${spec%%|*}
    [ -f "$out/$w.sim.json" ] || continue
    globs=()
    for mode in "${modes[@]}"; do globs+=("$mode=$out/$w.$mode.replay*.json"); done
    "$python" scripts/replay_ops.py --workload "$out/$w.json" --plan "$out/$w.plan.json" \
      --sim "$out/$w.sim.json" "${globs[@]}" >"$out/ops-$w.md" 2>>"$log" ||
      failed "ops $w"
  done
fi

# The full-size case: every layer of a 70B model, the size a deployment streams.
if step full && [ "$backend" != cuda ]; then
  echo "== full: skipped: BACKEND=$backend (70 GB of weights are a GPU host's case)" |
    tee -a "$log" >&2
elif step full && [ ! -f "$hw" ]; then
  echo "== full: skipped: no $hw (the calibrate step writes it)" | tee -a "$log" >&2
  failed full
elif step full; then
  w=full
  if run "trace $w" "$tf" trace gen --model llama-3-70b --phase decode --weight-dtype int8 \
    --context 4096 --tokens 2 -o "$out/$w.json" &&
    run "plan $w" sh -c "'$tf' plan --hw '$hw' --workload '$out/$w.json' --devices 1 \
      --budget 16GiB --policy tierflow --explain -o '$out/$w.plan.json' >'$out/$w.plan.txt'" &&
    run "sim $w" "$tf" sim --plan "$out/$w.plan.json" --json -o "$out/$w.sim.json"; then
    rows=()
    for mode in "${modes[@]}"; do
      for i in $(seq 1 "${RUNS_FULL:-2}"); do
        # The default --memory-limit: the GPU's free memory and the host's available memory.
        run "replay $w $mode $i/${RUNS_FULL:-2}" "$tf" replay --backend cuda --compute "$mode" \
          --plan "$out/$w.plan.json" --json -o "$out/$w.$mode.replay$i.json"
      done
      rows+=("70b-int8-80L $mode|$out/$w.plan.json|$out/$w.$mode.replay")
    done
    "$python" scripts/replay_table.py "${RUNS_FULL:-2}" "${rows[@]}" >"$out/full.md"
    cat "$out/full.md" >&2
  fi
fi

# torch_run PLAN NAME [FLAGS]: tierflow_torch runs $out/PLAN.plan.json on the model, with
# --check (the un-offloaded model runs too; every output must be equal), to $out/NAME.json.
torch_run() {
  run "torch run $2" env PYTHONPATH="$root/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$python" -m tierflow_torch run --plan "$out/$1.plan.json" --hf-config "$out/mistral-4l.json" \
    --seq 512 --device "$backend" --check --sim-report "$out/$1.sim.json" --json \
    -o "$out/$2.json" "${@:3}"
}

if step torch; then
  if [ ! -f "$hw" ]; then
    echo "== torch: skipped: no $hw (the calibrate step writes it)" | tee -a "$log" >&2
    failed torch
  elif ! "$python" -c 'import torch, transformers' >/dev/null 2>&1; then
    echo "== torch: skipped: $python cannot import torch and transformers" | tee -a "$log" >&2
    failed torch
  elif [ "$backend" = cuda ] && ! "$python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "== torch: skipped: torch sees no CUDA device" | tee -a "$log" >&2
    failed torch
  elif ! "$python" -c 'from transformers.utils import fx' >/dev/null 2>&1 &&
    { [ ! -d "${bundle_dir:-}/wheels" ] || ! use_bundled_transformers >>"$log" 2>&1 ||
      ! "$python" -c 'from transformers.utils import fx' >>"$log" 2>&1; }; then
    echo "== torch: skipped: $python's transformers has no torch.fx tracer (transformers.utils.fx, gone in 5.0), and no bundle's could stand in" | tee -a "$log" >&2
    failed torch
  else
    "$python" -c 'import torch, transformers; print(f"torch step: torch {torch.__version__}, transformers {transformers.__version__} from {transformers.__file__}")' 2>&1 |
      tail -1 | tee -a "$log" "$out/env.txt" >&2
    "$python" - "$root/tests/fixtures/hf/released/mistral-7b-v0.1.json" "$out/mistral-4l.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = 4
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
    run "torch export" env PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$root/tools/python" \
      "$python" -m tierflow_export --hf-config "$out/mistral-4l.json" \
      --seq 512 -o "$out/hf.json" &&
      run "torch plan" sh -c "'$tf' plan --hw '$hw' --workload '$out/hf.json' --devices 1 \
        --budget 1.5GiB --policy tierflow -o '$out/hf.plan.json' >'$out/hf.plan.txt'" &&
      run "torch sim" "$tf" sim --plan "$out/hf.plan.json" --hw "$hw" --json -o "$out/hf.sim.json" &&
      # A run with --profile: every step's host time and time on its stream, what the
      # runtime's own costs are read from (its timing events cost it a little), then one
      # plain run of the same plan.
      torch_run hf hf.profile --profile && torch_run hf hf.run1 &&
      run "torch calibrate" env PYTHONPATH="$root/tools/python" "$python" -m tierflow_torch \
        calibrate --profile "$out/hf.profile.json" --json -o "$out/dispatch.json" &&
      # A run with --memory-profile: the caching allocator's bytes at every step, and what
      # the runtime holds beyond the plan's tensors and the ops' workspace (its reserved).
      # (On the CPU there is no allocator to read: the rehearsal runs it, and reads nothing.)
      torch_run hf hf.memory --memory-profile &&
      { [ "$backend" != cuda ] || run "torch calibrate memory" env PYTHONPATH="$root/tools/python" \
        "$python" -m tierflow_torch calibrate --profile "$out/hf.memory.json" --json \
        -o "$out/memory.json"; } &&
      mapfile -t dispatch < <("$python" -c 'import json, sys
for s in json.load(open(sys.argv[1]))["sets"]: print("--set"); print(s)' "$out/dispatch.json") &&
      # The plan made with the runtime's dispatch, at the profiled budget and a smaller one
      # (another plan, more copies): each must predict its runs.
      for budget in 1.5GiB 1GiB; do
        n=hf-d$budget
        run "torch plan $n" sh -c "'$tf' plan --hw '$hw' ${dispatch[*]} --workload '$out/hf.json' \
          --devices 1 --budget $budget --policy tierflow -o '$out/$n.plan.json' >'$out/$n.plan.txt'" &&
          run "torch sim $n" "$tf" sim --plan "$out/$n.plan.json" --json -o "$out/$n.sim.json" &&
          for i in $(seq 1 "${TORCH_RUNS:-2}"); do torch_run "$n" "$n.run$i"; done
      done
    "$python" - "$out" >"$out/torch.md" <<'EOF2'
import glob, json, os, sys
out = sys.argv[1]
extra = None
if os.path.exists(f"{out}/memory.json"):
    extra = (json.load(open(f"{out}/memory.json")).get("extra_memory") or {}).get("bytes")
print("| plan | run | measured makespan | predicted | error | tokens/s | peak allocated | "
      "tracked peak | predicted peak | predicted + runtime's extra | error | outputs equal |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(f"{out}/hf*.run*.json")) + sorted(glob.glob(f"{out}/hf.profile.json")):
    r = json.load(open(f))
    m, t, d = r.get("measured", {}), r["timings"], r["device_bytes"]
    ms, sim = m.get("makespan_s"), t.get("simulated_makespan_s")
    name = f.rsplit("/", 1)[1].removesuffix(".json")
    plan, run = name.rsplit(".", 1)
    plan = {"hf": "1.5GiB, no dispatch"}.get(plan, plan.removeprefix("hf-d") + ", dispatch")
    peak = m.get("peak_bytes")
    with_extra = d["predicted_peak"] + extra if d["predicted_peak"] and extra is not None \
        else None
    print(f"| {plan} | {run} | " + (f"{ms * 1e3:.1f} ms" if ms else "-") + " | " +
          (f"{sim * 1e3:.1f} ms" if sim else "-") + " | " +
          (f"{100 * (ms - sim) / sim:+.1f}%" if ms and sim else "-") + " | " +
          (f"{512 / ms:,.0f}" if ms else "-") + " | " + (f"{peak:,} B" if peak else "-") +
          f" | {d['tracked_peak']:,} B | {d['predicted_peak'] or 0:,} B | " +
          (f"{with_extra:,} B | {100 * (peak - with_extra) / with_extra:+.2f}%"
           if with_extra and peak else "- | -") + " | " +
          ("yes" if r.get("check", {}).get("ok") else "NO") + " |")
EOF2
    cat "$out/torch.md" >&2
  fi
fi

{
  echo "# tierflow against $(if [ "$backend" = cuda ]; then sed -n 2p "$out/env.txt" 2>/dev/null | grep -o '^NVIDIA[^,]*' || echo "a GPU"; else echo "this machine (BACKEND=cpu rehearsal)"; fi)"
  echo
  echo '```'
  cat "$out/env.txt" 2>/dev/null
  echo '```'
  for f in tests.txt replay.md full.md torch.md; do
    [ -s "$out/$f" ] && { echo; echo "## ${f%.*}"; echo; cat "$out/$f"; }
  done
  if [ -s "$out/failed.txt" ]; then
    echo
    echo "## failed steps"
    echo
    sed 's/^/- /' "$out/failed.txt"
  fi
} >"$out/summary.md"
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
echo "gpu_validation: $out/summary.md, all files in $out.tar.gz" >&2
[ -s "$out/failed.txt" ] && exit 1
exit 0
