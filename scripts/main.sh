#!/usr/bin/env bash
# The main job: set up, build tierflow, and run the default what-if on a shipped
# topology (for now: validate every shipped topology and show one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERFLOW_BUILD_TESTS=OFF >/dev/null
cmake --build build/release --target tierflow
tf=build/release/tools/tierflow
"$tf" hw validate --require-sources configs/hw/*.yaml
echo
"$tf" hw show configs/hw/h100-sxm-8gpu.yaml "$@"
