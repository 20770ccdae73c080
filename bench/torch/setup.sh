#!/usr/bin/env bash
# Makes the venv `compactrl bench model` measures PyTorch in: Python 3.12 and
# torch 2.15.0 from PyPI with its dependencies, pinned in requirements.txt
# beside this script (about 4 GB: the PyPI wheel carries CUDA libraries).
#
# Usage: bench/torch/setup.sh [VENV_DIR [PYTHON]]
#   VENV_DIR  default ${XDG_CACHE_HOME:-$HOME/.cache}/compactrl/torch-venv, where
#             bench model looks when neither --python nor $COMPACTRL_TORCH_PYTHON is given
#   PYTHON    a Python 3.12 interpreter (default: python3.12 on PATH)
# A venv that already imports the pinned torch is kept as it is. Any other
# venv with PyTorch 2.x works too: point COMPACTRL_TORCH_PYTHON at its python.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/compactrl/torch-venv}
python=${2:-$(command -v python3.12 || true)}
want=$(sed -n 's/^torch==//p' "$here/requirements.txt")
[ -n "$want" ] || { echo "setup.sh: no torch pin in $here/requirements.txt" >&2; exit 1; }
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$want')" 2>/dev/null; then
  echo "setup.sh: $venv already has torch $want"
  exit 0
fi
if [ -z "$python" ] || ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
  echo "setup.sh: no Python 3.12 (got '${python:-none}'); pass one as the second argument" >&2
  exit 1
fi
"$python" -m venv "$venv"
"$venv/bin/pip" install -q -r "$here/requirements.txt"
"$venv/bin/python" -c "import torch; print('setup.sh: torch', torch.__version__, 'in $venv'); print(torch.__config__.show())" | head -8
