#!/usr/bin/env bash
# Builds the local Debian image that the container tests' task Dockerfiles
# start FROM, without any image registry: debootstrap a minimal bookworm
# (Debian's package mirror is reachable), then `podman import` it.
# Usage: .ci/base-image.sh [IMAGE]   (default localhost/compactrl-base:bookworm)
set -euo pipefail
image=${1:-localhost/compactrl-base:bookworm}
if podman image exists "$image"; then
  echo "base image $image present"
  exit 0
fi
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,procps,curl,ca-certificates bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "base image $image built"
