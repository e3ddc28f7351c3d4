#!/usr/bin/env bash
# Sets up the Python side of tierflow (tools/python/tierflow_export, tests/python) on Debian 12:
# PyTorch and torchvision from Debian packages, then a virtual environment .venv in the
# repository root, made by Debian's /usr/bin/python3 with --system-site-packages so that it
# sees those packages, holding the pinned packages of tools/requirements.txt, and a .pth
# file that puts tools/python on its path (`.venv/bin/python -m tierflow_export` from
# anywhere, no PYTHONPATH).
# Safe to run again: it skips apt when every package is installed and pip when every pin
# is already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."

python=/usr/bin/python3
venv=.venv
requirements=tools/requirements.txt

# Debian packages: PyTorch 1.13.1, torchvision 0.14.1, pytest 7.2.1, venv and pip; the
# dependencies of transformers that Debian provides (the rest is pinned in requirements);
# and OpenBLAS, which libtorch1.13 recommends: without it torch runs on the reference BLAS,
# about 40 times slower.
packages=(
  python3 python3-venv python3-pip python3-pytest
  python3-torch python3-torchvision
  python3-numpy python3-packaging python3-yaml python3-requests python3-filelock
  python3-tqdm python3-regex python3-typing-extensions
  libopenblas0
)

# shellcheck source=scripts/apt.sh
source scripts/apt.sh
apt_install_missing setup-python "${packages[@]}"

# The environment must come from Debian's interpreter (a pyenv or other python first on
# PATH cannot import Debian's torch) and must see the system site-packages.
if [ -f "$venv/pyvenv.cfg" ]; then
  if ! grep -Eq '^home = /usr/bin$' "$venv/pyvenv.cfg" ||
     ! grep -Eq '^include-system-site-packages = true$' "$venv/pyvenv.cfg" ||
     [ ! -x "$venv/bin/python" ]; then
    echo "setup-python: $venv was not made by $python with --system-site-packages; recreating it"
    rm -rf "$venv"
  fi
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "setup-python: creating $venv with $python --system-site-packages"
  "$python" -m venv --system-site-packages "$venv"
fi

# Every line of the requirements is NAME==VERSION; install only when one is unmet.
pins_met() {
  "$venv/bin/python" - "$requirements" <<'PY'
import sys
from importlib import metadata
unmet = []
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    try:
        have = metadata.version(name.strip())
    except metadata.PackageNotFoundError:
        have = None
    if have != version.strip():
        unmet.append(f"{name.strip()} {version.strip()} (have {have or 'none'})")
if unmet:
    print("setup-python: to install: " + ", ".join(unmet))
    sys.exit(1)
PY
}
if pins_met; then
  echo "setup-python: all pins in $requirements satisfied"
else
  # --no-deps: the requirements list is complete, so nothing unpinned comes in.
  "$venv/bin/python" -m pip install --no-deps --disable-pip-version-check -q -r "$requirements"
  pins_met
fi

# tools/python on the environment's path: a .pth file in its site-packages naming the
# folder by absolute path, rewritten only when it says something else (a moved checkout).
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pth="$site/tierflow-tools.pth"
want="$(pwd)/tools/python"
if [ "$(cat "$pth" 2>/dev/null)" != "$want" ]; then
  printf '%s\n' "$want" >"$pth"
  echo "setup-python: $pth -> $want"
else
  echo "setup-python: $pth already names $want"
fi

# Fail here, not in the tests, when the environment is broken.
"$venv/bin/python" -c '
import torch, torchvision, transformers, pytest, tierflow_export
print(f"setup-python: torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"transformers {transformers.__version__}, pytest {pytest.__version__}")
'
