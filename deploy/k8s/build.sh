#!/usr/bin/env bash
# Build kube-apiserver, kube-scheduler (from k8s.io/kubernetes) and helm (from
# helm.sh/helm/v3) with the Go toolchain, cached by version.  A second run
# builds nothing.  Prints the bin directory on stdout.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
HELM_VERSION="${HELM_VERSION:-3.22.0}"
CACHE="${SLURMBRIDGE_CACHE:-$HOME/.cache/slurmbridge}"
BIN="$CACHE/k8s-$K8S_VERSION/bin"
HELM_BIN="$CACHE/helm-$HELM_VERSION/bin"
export GOFLAGS="${GOFLAGS:--mod=mod}" CGO_ENABLED=0
export PATH="/usr/local/go/bin:$PATH"

log() { echo "[k8s-build] $*" >&2; }

if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kube-scheduler" ]]; then
  work="$CACHE/k8s-$K8S_VERSION/src"
  mkdir -p "$work" "$BIN"
  cd "$work"
  staging_minor="v0.${K8S_VERSION#1.}"
  if [[ ! -f go.mod ]]; then
    log "preparing wrapper module for k8s.io/kubernetes v$K8S_VERSION"
    cat > go.mod <<MOD
module slurmbridge.local/k8sbuild

go 1.25
MOD
    cat > tools.go <<'GO'
//go:build tools

package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
    # k8s.io/kubernetes's go.mod replaces every staging module with a local
    # path; a consumer must point those at the published v0.x.y instead.
    modfile="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    staging=$(sed -n 's#^\s*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/.*#\1#p' "$modfile" | sort -u)
    [[ -n "$staging" ]] || { log "no staging replaces found in $modfile"; exit 1; }
    args=()
    for m in $staging; do args+=("-replace=$m=$m@$staging_minor"); done
    go mod edit "${args[@]}"
    go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
    go mod tidy >&2
  fi
  log "building kube-apiserver and kube-scheduler v$K8S_VERSION (first run: tens of minutes on 2 cores)"
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.} -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"
  go build -trimpath -ldflags "$ldflags" -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  go build -trimpath -ldflags "$ldflags" -o "$BIN/kube-scheduler.tmp" k8s.io/kubernetes/cmd/kube-scheduler
  mv "$BIN/kube-scheduler.tmp" "$BIN/kube-scheduler"
fi

if [[ "${WITH_HELM:-1}" == 1 && ! -x "$HELM_BIN/helm" ]]; then
  log "building helm v$HELM_VERSION"
  mkdir -p "$HELM_BIN"
  GOBIN="$HELM_BIN" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
fi
echo "$BIN"
