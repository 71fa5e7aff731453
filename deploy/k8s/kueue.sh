#!/usr/bin/env bash
# Build Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) with the Go toolchain and copy its
# CRDs next to it, cached by version: a second run builds nothing.  Prints the directory
# holding bin/kueue and crds/.  (~10 min the first time on 2 cores.)
#   KUEUE_VERSION=0.17.0 kueue.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" kueue-build

KUEUE_VERSION="${KUEUE_VERSION:-0.17.0}"
DIR="$CACHE/kueue-v$KUEUE_VERSION"
export GOFLAGS="${GOFLAGS:--mod=mod}" CGO_ENABLED=0
source "$(dirname "${BASH_SOURCE[0]}")/../dev/go.sh"   # Go new enough for Kueue

if [[ ! -x "$DIR/bin/kueue" || ! -d "$DIR/crds" ]]; then
  mkdir -p "$DIR/bin"
  log "building kueue v$KUEUE_VERSION (first run: ~10 minutes on 2 cores)"
  (cd "$DIR" && GOBIN="$DIR/bin" nice go install "sigs.k8s.io/kueue/cmd/kueue@v$KUEUE_VERSION")
  src="$(go mod download -json "sigs.k8s.io/kueue@v$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  rm -rf "$DIR/crds.tmp"
  cp -r "$src/config/components/crd/bases" "$DIR/crds.tmp"
  chmod -R u+w "$DIR/crds.tmp"
  rm -rf "$DIR/crds"; mv "$DIR/crds.tmp" "$DIR/crds"
fi
echo "$DIR"
