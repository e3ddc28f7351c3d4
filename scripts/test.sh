#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit, golden, bad-input and CLI tests)
# through CTest. scripts/setup-test.sh adds what only tests use: a single-node Slurm for the
# job-array sweep test (skipped, with the reason, where its daemons cannot start).
#   TIERFLOW_SANITIZE=1  build and test under AddressSanitizer + UndefinedBehaviorSanitizer
#   TIERFLOW_WERROR=1    treat compiler warnings as errors (CI does)
# The sanitizer run skips the pure-Python tests (label 'python'): they run no C++.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-test.sh
bash scripts/setup-python.sh
sanitize=${TIERFLOW_SANITIZE:-0}
werror=${TIERFLOW_WERROR:-0}
dir=build/test
type=RelWithDebInfo
if [ "$sanitize" = 1 ]; then dir=build/asan; type=Debug; fi
# Debug info as line tables only (-g1): failures and sanitizer reports still name file and
# line, and the suite compiles about 40% faster than with full debug info. The sanitizer
# build keeps its assertions (Debug) at -O1, the level AddressSanitizer is meant to run
# at: unoptimized, its e2e/sweep alone took 547 s of CI.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=$type \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DTIERFLOW_SANITIZE=$([ "$sanitize" = 1 ] && echo ON || echo OFF) \
  -DTIERFLOW_WERROR=$([ "$werror" = 1 ] && echo ON || echo OFF) >/dev/null
cmake --build "$dir"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
skip=()
if [ "$sanitize" = 1 ]; then skip=(-LE python); fi
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "${skip[@]}"
