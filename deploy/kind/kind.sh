#!/usr/bin/env bash
# Build the kind CLI from its Go module (sigs.k8s.io/kind), cached by version; prints the
# directory holding `kind`.  A second run builds nothing.
#   KIND_VERSION=v0.33.0 deploy/kind/kind.sh
# v0.33.0: the newest served here; it writes kubeadm's v1beta4 config for Kubernetes 1.36.
# It only warns about cgroup v1 hosts (this one): its node entrypoint still handles them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" kind

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
BIN="$CACHE/kind-$KIND_VERSION/bin"
source "$(dirname "${BASH_SOURCE[0]}")/../dev/go.sh"   # Go new enough for Kubernetes
export CGO_ENABLED=0

if [[ ! -x "$BIN/kind" ]]; then
  log "building kind $KIND_VERSION from its Go module"
  mkdir -p "$BIN"
  GOBIN="$BIN" nice go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"
fi
echo "$BIN"
