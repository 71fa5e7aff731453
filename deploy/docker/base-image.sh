#!/usr/bin/env bash
# Build a Debian base image without any image registry: debootstrap a minbase rootfs
# and `docker import` it.  Cached: the rootfs tarball under the cache folder, the image
# in the engine; a second run only checks.  Prints the image name.
#   deploy/docker/base-image.sh [SUITE]      SUITE: sid (default), trixie, bookworm
# Every Dockerfile of the project takes its base as a build argument whose default is the
# public image (debian:sid, python:3.11-slim); scripts pass this image instead.
# The rootfs trusts the host's extra CA certificates (/usr/local/share/ca-certificates),
# so package installs inside builds work behind the same TLS proxy as the host.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" base-image

SUITE="${1:-sid}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
IMAGE="slurmbridge/debian:$SUITE"
dir="$CACHE/images"
tarball="$dir/debian-$SUITE.tar"

# The recipe's fingerprint: change what goes into the rootfs and the image is rebuilt.
stamp="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
# Scripts running side by side (tests/run.sh) build each suite once.
mkdir -p "$dir"; exec 8>"$dir/.$SUITE.lock"; flock 8

if docker image inspect "$IMAGE" --format '{{index .Config.Labels "slurmbridge.stamp"}}' 2>/dev/null \
    | grep -qx "$stamp"; then
  echo "$IMAGE"; exit 0
fi

if [[ ! -s "$tarball" || "$(cat "$tarball.stamp" 2>/dev/null)" != "$stamp" ]]; then
  command -v debootstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  root="$dir/rootfs-$SUITE"
  rm -rf "$root"; mkdir -p "$dir"
  log "debootstrap $SUITE (minbase, about a minute)"
  debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$root" "$MIRROR" > "$dir/debootstrap-$SUITE.log" 2>&1 || { tail -n 20 "$dir/debootstrap-$SUITE.log" >&2; exit 1; }
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
  fi
  # As the public debian images: no recommends, no docs, apt cleans after itself.
  # Stored mirrors may serve a Release file past its Valid-Until date.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\nAcquire::Check-Valid-Until "false";\n' \
    > "$root/etc/apt/apt.conf.d/90slurmbridge"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  : > "$root/etc/resolv.conf"
  tar -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"; echo "$stamp" > "$tarball.stamp"
  rm -rf "$root"
fi
log "importing $tarball as $IMAGE"
docker import --change "LABEL slurmbridge.stamp=$stamp" --change 'CMD ["/bin/bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  "$tarball" "$IMAGE" >/dev/null
echo "$IMAGE"
