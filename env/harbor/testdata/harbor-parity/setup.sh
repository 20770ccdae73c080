#!/usr/bin/env bash
# Makes the venv the Harbor parity test runs Harbor from: Python 3.12 and
# harbor==0.26.0 (pinned). Usage: setup.sh VENV_DIR [PYTHON]. Reuses a venv
# that already has that version.
set -euo pipefail
venv=$1
python=${2:-/root/.pyenv/versions/3.12.1/bin/python}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("harbor") != "0.26.0")' 2>/dev/null; then
  exit 0
fi
if ! command -v "$python" >/dev/null; then
  python=$(command -v python3.12) || { echo "setup.sh: no Python 3.12 ($python, python3.12) for harbor==0.26.0" >&2; exit 1; }
fi
"$python" -m venv "$venv"
"$venv/bin/pip" install -q harbor==0.26.0
