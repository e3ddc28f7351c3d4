#!/usr/bin/env bash
# Models nobody here wrote, exported from PyTorch by tools/python/tierflow_export, import and
# verify in tierflow: a Hugging Face Llama (prefill and a training step) and torchvision's
# ViT-B/16 (a training step). Usage: torch_import_test.sh TIERFLOW_BINARY (repo root).
set -u
tf=$1
py=.venv/bin/python
# The exporter package is on .venv's path (scripts/setup-python.sh writes a .pth file);
# tools/python goes last on PYTHONPATH as well, so that an older .venv works too.
export_cmd=(env "PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}tools/python" "$py" -m tierflow_export)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
run() {  # run NAME COMMAND...
  local name=$1
  shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then passes=$((passes + 1)); else
    echo "FAIL $name"; sed 's/^/  /' "$tmp/err" | tail -5; fails=$((fails + 1)); fi
}
run export-llama "${export_cmd[@]}" --hf-config tests/python/configs/llama_tiny.json --seq 16 -o "$tmp/llama.json"
run import-llama "$tf" trace import "$tmp/llama.json"
run export-llama-train "${export_cmd[@]}" --hf-config tests/python/configs/llama_tiny.json --seq 16 --train -o "$tmp/llama-train.json"
run import-llama-train "$tf" trace import "$tmp/llama-train.json"
# Mistral's sliding-window mask is or'ed in place on booleans: integer ops count no FLOPs,
# so the export plans on a shipped topology, which rates no integer dtype.
run export-mistral "${export_cmd[@]}" --hf-config tests/python/configs/mistral_tiny.json --seq 16 -o "$tmp/mistral.json"
run plan-mistral "$tf" plan --hw h100-sxm-8gpu --workload "$tmp/mistral.json" --devices 1 --budget 256KiB -o "$tmp/mistral.plan.json"
run export-vit-train "${export_cmd[@]}" --torchvision vit_b_16 --batch 1 --train -o "$tmp/vit.json"
run import-vit-train "$tf" trace import "$tmp/vit.json"
run info-vit "$tf" trace info "$tmp/vit.json"
# Backward is about twice the forward in the imported ViT training step.
if grep -qE '^  backward ' "$tmp/out" && grep -qE '^  optimizer ' "$tmp/out"; then
  passes=$((passes + 1))
else
  echo "FAIL info-vit: no backward/optimizer split"; fails=$((fails + 1))
fi
echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
