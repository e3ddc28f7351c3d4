#!/usr/bin/env bash
# Installs everything tierflow needs to build and test, from Debian 12 packages only.
# Safe to run again: it skips apt when every package is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libyaml-cpp-dev libboost-graph-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  doctest-dev libbenchmark-dev libsqlite3-dev
  # Chakra execution traces (tools/export/chakra): the schema compiler and runtime.
  protobuf-compiler libprotobuf-dev
  python3
  # The allocator the executables link (CMakeLists.txt, TIERFLOW_MIMALLOC).
  libmimalloc-dev
  # The Python API (tools/python): the binding, and pandas for the tables it returns.
  pybind11-dev python3-dev python3-pandas python3-setuptools
)

# shellcheck source=scripts/apt.sh
source scripts/apt.sh
apt_install_missing setup "${packages[@]}"
