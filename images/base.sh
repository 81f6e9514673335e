#!/usr/bin/env bash
# A Python base image made from the Debian archive, for hosts that cannot pull from a container registry (ours:
# CI reaches only Debian's archive and PyPI). It stands in for the official python:3.11-slim-bookworm image that
# real builds use (BASE_IMAGE in the Dockerfiles): Debian bookworm minbase + Debian's CPython 3.11 (cp311, the
# ABI every locked wheel is built for) with venv, `python`/`python3` on PATH as in the official image.
#   usage: images/base.sh [TAG]    prints the tag; default localhost/slipway/python:3.11-bookworm
# Cached by content: the image is saved to $SLIPWAY_CACHE/images/base-<hash of this script>.tar, so a machine
# with a cold image store but a warm cache loads it (seconds) instead of bootstrapping again (~2-3 min).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tag="${1:-localhost/slipway/python:3.11-bookworm}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
cache="${SLIPWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}/images"
key="$(sha256sum "$0" | cut -c1-16)"
archive="$cache/base-$key.tar"
log() { echo "images/base.sh: $*" >&2; }

if podman image exists "$tag" && [ "$(podman image inspect --format '{{index .Labels "slipway.base.key"}}' "$tag")" = "$key" ]; then
    echo "$tag"; exit 0
fi
if [ -f "$archive" ]; then
    log "loading $tag from the cache"
    podman load --quiet --input "$archive" >/dev/null
    echo "$tag"; exit 0
fi
command -v mmdebstrap >/dev/null || { log "mmdebstrap is missing: apt-get install mmdebstrap"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=$SECONDS
# The archive mirror comes from this host's own apt sources (nothing host-specific is written here).
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
log "bootstrapping Debian bookworm with Python 3.11 from the archive"
mmdebstrap --quiet --variant=minbase --include=ca-certificates,python3,python3-venv,tzdata \
    --customize-hook='chroot "$1" ln -sf /usr/bin/python3 /usr/local/bin/python' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$work/rootfs.tar" "$sources"
podman import --quiet \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --change "LABEL slipway.base.key=$key" \
    --change 'LABEL org.opencontainers.image.description="Debian bookworm minbase + CPython 3.11 from the Debian archive"' \
    "$work/rootfs.tar" "$tag" >/dev/null
mkdir -p "$cache"
podman save --quiet --format docker-archive --output "$archive.tmp" "$tag" && mv "$archive.tmp" "$archive"
log "built $tag in $((SECONDS - started)) s"
echo "$tag"
