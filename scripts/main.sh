#!/usr/bin/env bash
# The main job: set up, build tierflow, and compare every planning policy on the default
# what-if: Llama-3-70B decode (8 tokens from a 4,096-token context) on one H100 of an
# 8-GPU server, whose 141 GB of bf16 weights do not fit the 80 GB of HBM. Writes the
# Perfetto timeline of the best plan to build/main/best-timeline.json.
# Extra arguments go to `tierflow compare` (e.g. --budget 40GiB, --model llama-3-8b).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERFLOW_BUILD_TESTS=OFF >/dev/null
cmake --build build/release --target tierflow
tf=build/release/tools/tierflow
"$tf" hw validate --require-sources configs/hw/*.yaml
echo
mkdir -p build/main
"$tf" compare --timeline build/main/best-timeline.json "$@"
echo "open build/main/best-timeline.json in the Perfetto UI to see the best plan's timeline"
