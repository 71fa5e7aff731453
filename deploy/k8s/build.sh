#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (from k8s.io/kubernetes) and
# helm (from helm.sh/helm/v3) with the Go toolchain, cached by version.  A
# second run builds nothing.  Prints the bin directory on stdout.
#   K8S_VERSION=1.36.3 K8S_TOOLS="kubelet kubeadm ..." build.sh    other version / binaries
#   build.sh bin                                                   print the bin directory only
# (deploy/kind/node-image.sh builds the kind node's set this way).  Callers may run at once:
# one build per version at a time (a lock), each finding what the other built.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" k8s-build

K8S_VERSION="${K8S_VERSION:-1.37.2}"
HELM_VERSION="${HELM_VERSION:-3.22.0}"
BIN="$CACHE/k8s-$K8S_VERSION/bin"
HELM_BIN="$CACHE/helm-$HELM_VERSION/bin"
read -r -a K8S_TOOLS <<< "${K8S_TOOLS:-kube-apiserver kube-controller-manager kube-scheduler kubectl}"
# Every command any caller builds: tools.go pins them all, so the wrapper module's
# go.sum stays the same whichever subset one run asks for.
ALL_TOOLS=(kube-apiserver kube-scheduler kubectl kube-controller-manager kube-proxy kubelet kubeadm)
export GOFLAGS="${GOFLAGS:--mod=mod}" CGO_ENABLED=0
[[ "${1:-}" == bin ]] && { echo "$BIN"; exit 0; }
source "$(dirname "${BASH_SOURCE[0]}")/../dev/go.sh"   # Go new enough for Kubernetes

missing_tools() {
  local t
  for t in "${K8S_TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || echo "$t"; done
}

# The wrapper module requires k8s.io/kubernetes and points every staging
# module at its published v0.x.y: k8s.io/kubernetes's own go.mod replaces them
# with local ./staging paths, which a consumer cannot use.
prepare_module() {
  local staging_minor="v0.${K8S_VERSION#1.}" modfile staging m args=()
  log "preparing wrapper module for k8s.io/kubernetes v$K8S_VERSION"
  cat > go.mod <<MOD
module slurmbridge.local/k8sbuild

go 1.25
MOD
  modfile="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  staging=$(sed -n 's#^\s*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/.*#\1#p' "$modfile" | sort -u)
  [[ -n "$staging" ]] || { log "no staging replaces found in $modfile"; exit 1; }
  for m in $staging; do args+=("-replace=$m=$m@$staging_minor"); done
  go mod edit "${args[@]}"
  go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
}

# tools.go pins every command we build, so `go mod tidy` keeps their deps.
# Rewritten when a tool is added (older caches only had apiserver+scheduler).
write_tools_go() {
  local t want
  want=$'//go:build tools\n\npackage k8sbuild\n\nimport (\n'
  for t in "${ALL_TOOLS[@]}"; do want+=$'\t_ "k8s.io/kubernetes/cmd/'"$t"$'"\n'; done
  want+=$')\n'
  if [[ ! -f tools.go || "$(cat tools.go; echo x)" != "${want}x" ]]; then
    printf '%s' "$want" > tools.go
    go mod tidy >&2
  fi
}

build_k8s_tools() {
  local work="$CACHE/k8s-$K8S_VERSION/src" t
  mkdir -p "$work" "$BIN"
  cd "$work"
  [[ -f go.mod ]] || prepare_module
  write_tools_go
  local minor="${K8S_VERSION#1.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for t in "$@"; do
    log "building $t v$K8S_VERSION (first run: several minutes each on 2 cores)"
    nice go build -trimpath -ldflags "$ldflags" -o "$BIN/$t.tmp" "k8s.io/kubernetes/cmd/$t"
    mv "$BIN/$t.tmp" "$BIN/$t"
  done
}

mkdir -p "$CACHE/k8s-$K8S_VERSION"
exec 8>"$CACHE/k8s-$K8S_VERSION/.build.lock"; flock 8
mapfile -t missing < <(missing_tools)
if (( ${#missing[@]} )); then
  ( build_k8s_tools "${missing[@]}" )
fi

if [[ "${WITH_HELM:-1}" == 1 && ! -x "$HELM_BIN/helm" ]]; then
  log "building helm v$HELM_VERSION"
  mkdir -p "$HELM_BIN"
  GOBIN="$HELM_BIN" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
fi
echo "$BIN"
