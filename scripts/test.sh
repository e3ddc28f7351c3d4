#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit, golden, bad-input and CLI tests)
# through CTest. scripts/setup-test.sh adds what only tests use: a single-node Slurm for the
# job-array sweep test (skipped, with the reason, where its daemons cannot start).
#   TIERFLOW_SANITIZE=1  build with clang under AddressSanitizer + UndefinedBehaviorSanitizer
#                        (build/asan, which also holds scripts/fuzz.sh's fuzz targets) and test
#   TIERFLOW_WERROR=1    treat compiler warnings as errors (CI does)
# The sanitizer run skips the pure-Python tests (label 'python'): they run no C++; and the
# headless-browser check of the report page (label 'browser'), whose time is the browser's:
# the page it opens is made by the same commands e2e/report runs under the sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-test.sh
bash scripts/setup-python.sh
sanitize=${TIERFLOW_SANITIZE:-0}
# shellcheck source=scripts/configure.sh
source scripts/configure.sh
if [ "$sanitize" = 1 ]; then
  dir=build/asan
  configure_tree "$dir" sanitize
else
  dir=build/test
  configure_tree "$dir" test
fi
cmake --build "$dir"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
skip=()
if [ "$sanitize" = 1 ]; then skip=(-LE 'python|browser'); fi
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "${skip[@]}"
