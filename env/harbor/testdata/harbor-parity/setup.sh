#!/usr/bin/env bash
# Makes the venv the Harbor parity test runs Harbor from: harbor==0.26.0
# (pinned), which needs Python >= 3.12. Usage: setup.sh VENV_DIR [PYTHON].
# Reuses a venv that already has that version.
#
# With a Python >= 3.12 (PYTHON, else python3.13 or python3.12 on PATH) it
# is a plain venv. Without one (stock Debian 12 has 3.11, and no registry
# this project reaches serves a CPython build) it makes a Debian 13 root
# from Debian's packages (debootstrap: its python3 is 3.13), installs
# harbor into a venv inside it, and writes VENV_DIR/bin/python: a wrapper
# that runs that venv's python in the root under bubblewrap, with the
# caller's working directory bound at the same path (parity.py reads
# only its own directory). PYTHON "debian13" takes that way even where a
# newer Python exists (.ci/run tests it so). Set DEBIAN_MIRROR to use
# another mirror.
set -euo pipefail
venv=$1
python=${2:-}
has_harbor() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("harbor") != "0.26.0")' 2>/dev/null
}
new_enough() {
  [ -n "$1" ] && command -v "$1" >/dev/null && "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null
}
has_harbor && exit 0

for cand in "$python" python3.13 python3.12 python3; do
  if [ "$python" != debian13 ] && new_enough "$cand"; then
    "$cand" -m venv "$venv"
    "$venv/bin/pip" install -q harbor==0.26.0
    exit 0
  fi
done

# No Python >= 3.12 here (or "debian13" asked for): Debian 13's, in a root of its own.
[ "$python" = debian13 ] || echo "setup.sh: no Python >= 3.12 (${python:-none given}, python3.13, python3.12, python3); making a Debian 13 root for harbor==0.26.0 in $venv" >&2
for tool in debootstrap bwrap; do
  command -v "$tool" >/dev/null || { echo "setup.sh: $tool is needed for the Debian 13 root (apt-get install debootstrap bubblewrap)" >&2; exit 1; }
done
root="$venv/debian13"
if [ ! -x "$root/usr/bin/python3" ]; then
  rm -rf "$root"
  mkdir -p "$venv"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    trixie "$root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$venv/debootstrap.log" 2>&1 ||
    { echo "setup.sh: debootstrap of Debian 13 into $root failed; its log:" >&2; tail -20 "$venv/debootstrap.log" >&2; exit 1; }
fi
# pip in the root trusts what this machine trusts (a proxy's CA among them)
# and reads this machine's pip.conf.
trust=(--ro-bind /etc/ssl/certs /etc/ssl/certs)
[ -f /etc/pip.conf ] && trust+=(--ro-bind /etc/pip.conf /etc/pip.conf)
in_root() {
  bwrap --bind "$root" / --proc /proc --dev /dev --tmpfs /tmp \
    --ro-bind /etc/resolv.conf /etc/resolv.conf "${trust[@]}" --setenv HOME /root "$@"
}
in_root python3 -m venv /opt/harbor-venv
in_root /opt/harbor-venv/bin/pip install -q harbor==0.26.0
mkdir -p "$venv/bin"
cat >"$venv/bin/python" <<'EOF'
#!/bin/sh
# harbor==0.26.0 on Debian 13's Python, in the root beside this file (made by
# env/harbor/testdata/harbor-parity/setup.sh); the working directory is bound
# read-only at the same path.
root=$(cd "$(dirname "$0")/../debian13" && pwd)
exec bwrap --bind "$root" / --proc /proc --dev /dev --tmpfs /tmp \
  --ro-bind "$PWD" "$PWD" --chdir "$PWD" --setenv HOME /root \
  /opt/harbor-venv/bin/python "$@"
EOF
chmod +x "$venv/bin/python"
has_harbor || { echo "setup.sh: harbor==0.26.0 does not import through $venv/bin/python" >&2; exit 1; }
