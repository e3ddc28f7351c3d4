#!/usr/bin/env bash
# Installs the Debian 12 packages that only the test suite needs: a single-node Slurm and
# MUNGE for tests/e2e/slurm_sweep_test.sh, which starts its own daemons in a temp folder;
# Python's protobuf for tests/export/chakra_decode_test.py, which decodes Chakra traces with
# Debian's /usr/bin/python3; Chromium (with the fonts it recommends) and the Python Imaging
# Library for tests/e2e/report_browser_test.sh, which opens a `tierflow report` page headless
# and checks its screenshot.
# Safe to run again: it skips apt when every package is already installed.
#
# The packages' maintainer scripts would start the system's munge, slurmctld and slurmd
# services (through invoke-rc.d or deb-systemd-invoke). The test needs none of them, and on
# a machine without systemd as init a started munged would outlive the install. So while
# apt runs, /usr/sbin/policy-rc.d answers 101 ("action forbidden") when the machine has no
# policy of its own; the file is removed afterwards. On a systemd machine the services are
# still enabled for the next boot, where slurmctld and slurmd stay down until an
# /etc/slurm/slurm.conf exists.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(slurm-wlm munge python3-protobuf chromium fonts-liberation python3-pil)

# shellcheck source=scripts/apt.sh
source scripts/apt.sh

policy=/usr/sbin/policy-rc.d
need_install=0
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_install=1
done
sudo=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi
if [ "$need_install" = 1 ] && [ ! -e "$policy" ]; then
  trap '$sudo rm -f "$policy"' EXIT
  printf '#!/bin/sh\n# scripts/setup-test.sh: no service starts while its packages install\nexit 101\n' |
    $sudo tee "$policy" >/dev/null
  $sudo chmod 0755 "$policy"
fi
apt_install_missing setup-test "${packages[@]}"
