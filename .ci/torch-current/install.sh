#!/usr/bin/env bash
# Installs PyPI's current torch, torchvision and numpy (requirements.txt beside this script,
# every package pinned) into a virtual environment outside the repository, for the Python
# client's tests on a current torch (make test-python-torch); make test keeps Debian's 1.13.
# The venv is made from /usr/bin/python3 (or $SLUICE_PYTHON), without Debian's site packages.
# torch's Linux wheel brings NVIDIA's CUDA wheels, used or not: 3.0 GB from PyPI and 5.4 GB
# on disk the first time (6-7 minutes here: docs/pytorch.md), then nothing until requirements.txt
# changes. Prints the venv's directory.
#
# Usage: install.sh [VENV_DIR]  (default ${SLUICE_TORCH_VENV:-~/.cache/sluice/torch-current})
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${SLUICE_TORCH_VENV:-$HOME/.cache/sluice/torch-current}}
python=${SLUICE_PYTHON:-/usr/bin/python3}
key=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ "$(cat "$out/requirements.sha256" 2>/dev/null)" = "$key" ] && [ -x "$out/bin/python" ]; then
  echo "$out"
  exit 0
fi
if ! "$python" -c 'import ensurepip' 2>/dev/null; then
  echo "torch-current: $python cannot make a venv with pip (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
echo "torch-current: installing $here/requirements.txt into $out (about 3 GB from PyPI)" >&2
t0=$SECONDS
# Made in place (a venv's scripts name its directory); the key, written last, marks it whole.
rm -rf "$out"
mkdir -p "$(dirname "$out")"
"$python" -m venv "$out"
# --no-cache-dir: the venv is the cache; pip's own would keep the 3 GB of wheels a second time.
"$out/bin/python" -m pip install --no-cache-dir --disable-pip-version-check --quiet \
  --only-binary=:all: -r "$here/requirements.txt" >&2
"$out/bin/python" -c 'import torch, torchvision, numpy; print("torch-current:", "torch", torch.__version__, "torchvision", torchvision.__version__, "numpy", numpy.__version__)' >&2
echo "$key" > "$out/requirements.sha256"
echo "torch-current: installed in $((SECONDS - t0))s, $(du -sh "$out" | cut -f1) on disk" >&2
echo "$out"
