#!/usr/bin/env bash
# The main job: set up, build tierflow, and answer the default what-if: Llama-3-70B decode
# at batch 16 with a 32k-token context (8 tokens) on one H100 of an 8-GPU server.
#   1. the least HBM that keeps decode within 1% of the fastest possible, with its plan;
#   2. on the H100's real 80 GB, which link or tier upgrade is worth most, ranked.
# The plan at 80 GB is written to build/main/plan.json and its Perfetto timeline to
# build/main/timeline.json. Extra arguments go to both `tierflow whatif` runs (e.g.
# --model llama-3-8b, --batch 32, --context 8192, --hw configs/hw/h200-sxm-8gpu.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERFLOW_BUILD_TESTS=OFF >/dev/null
cmake --build build/release --target tierflow
tf=build/release/tools/tierflow
"$tf" hw validate --require-sources configs/hw/*.yaml
mkdir -p build/main
echo
"$tf" whatif --question min-memory "$@"
echo
"$tf" whatif --question upgrade --plan-out build/main/plan.json "$@"
"$tf" sim --plan build/main/plan.json --timeline build/main/timeline.json -o /dev/null
echo
echo "the plan at the device's memory: build/main/plan.json; its timeline (open in Perfetto): build/main/timeline.json"
# The Python module (`import tierflow`) after the answer, where pybind11 was found.
if cmake --build build/release --target help | grep -q '^tierflow_python:'; then
  echo
  echo "building the Python module (import tierflow) ..."
  cmake --build build/release --target tierflow_python >/dev/null
  py=$(sed -n 's/^TIERFLOW_PYTHON_EXECUTABLE:FILEPATH=//p' build/release/CMakeCache.txt)
  PYTHONPATH=build/release/python "$py" -c 'import tierflow'
  echo "import tierflow: PYTHONPATH=build/release/python $py (docs/python.md)"
fi
