#!/usr/bin/env bash
# Build the kind cluster's DRA GPU driver (main.go) and its image, without a registry; prints
# the image's name.  Cached by the sources' hash: the binary under the cache folder, the
# image (FROM scratch: one static binary) in the engine.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../dev/prelude.sh" dra

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
stamp="$(cd "$here" && cat go.mod go.sum main.go | sha256sum | cut -c1-12)"
IMAGE="slurmbridge/kind-dra-gpu-plugin:$stamp"
docker image inspect "$IMAGE" >/dev/null 2>&1 && { echo "$IMAGE"; exit 0; }

source "$here/../../dev/go.sh"   # Go new enough for the Kubernetes modules
work="$CACHE/kind/dra-$stamp"
mkdir -p "$work"
if [[ ! -x "$work/dra-gpu-plugin" ]]; then
  log "building the DRA GPU driver (k8s.io/dynamic-resource-allocation)"
  (cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice go build -trimpath -ldflags "-s -w" \
    -o "$work/dra-gpu-plugin.tmp" .)
  mv "$work/dra-gpu-plugin.tmp" "$work/dra-gpu-plugin"
fi
printf 'FROM scratch\nCOPY dra-gpu-plugin /dra-gpu-plugin\nENTRYPOINT ["/dra-gpu-plugin"]\n' \
  | docker build -q -t "$IMAGE" -f - "$work" >/dev/null
echo "$IMAGE"
