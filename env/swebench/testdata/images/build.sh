#!/bin/bash
# Builds the tiny SWE-bench test images env/swebench's container tests use:
# localhost/compactrl-swe-test-{pytest,django,sympy}:latest, from
# localhost/compactrl-base:bookworm (a debootstrap'ed Debian bookworm
# minbase with python3, python3-pip, python3-venv, git, procps, imported
# with podman import). The builds install python3-pytest and patch from
# Debian, so they need the network.
#   env/swebench/testdata/images/build.sh [podman|docker]
set -eu
engine=${1:-podman}
dir=$(cd "$(dirname "$0")" && pwd)
args=""
if [ "$(basename "$engine")" = podman ]; then
	# runc (crun refuses hybrid cgroup layouts) and the ulimits
	# sandbox.Container sets: nofile 20000, nproc 4096, or this shell's
	# hard limits where lower.
	if command -v runc >/dev/null 2>&1; then args="--runtime $(command -v runc)"; fi
	n=$(ulimit -Hn); p=$(ulimit -Hu)
	if [ "$n" = unlimited ] || [ "$n" -gt 20000 ]; then n=20000; fi
	if [ "$p" = unlimited ] || [ "$p" -gt 4096 ]; then p=4096; fi
	args="$args --ulimit nofile=$n:$n --ulimit nproc=$p:$p"
fi
for family in pytest django sympy; do
	# shellcheck disable=SC2086
	"$engine" build $args --build-arg FAMILY=$family -t "localhost/compactrl-swe-test-$family:latest" -f "$dir/Dockerfile" "$dir"
done
