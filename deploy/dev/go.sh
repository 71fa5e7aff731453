# shellcheck shell=bash
# Sourced by every script that runs `go` (deploy/k8s/build.sh, deploy/kind/*.sh,
# deploy/docker/compose.sh, deploy/dev/install.sh): makes `go` on PATH a toolchain new
# enough for Kubernetes, through Go's own toolchain mechanism.
#   go >= GO_MIN installed      used as it is (GOTOOLCHAIN=local)
#   go 1.21 .. < GO_MIN         GOTOOLCHAIN=$GO_TOOLCHAIN: the go command fetches that
#                               toolchain module from the module proxy and runs it
#   go < 1.21 (Debian 12: 1.19) it does not know GOTOOLCHAIN: the same toolchain module
#                               (golang.org/toolchain@v0.0.1-<version>.<os>-<arch>) is
#                               downloaded with `go mod download` and put first on PATH
#   no go at all                Debian's golang-go is installed first (as root)
# Cached under ${SLURMBRIDGE_CACHE:-~/.cache/slurmbridge}/go.
# GO_MIN: k8s.io/kubernetes v1.37's go.mod says `go 1.26.0`.
GO_MIN="${SLURMBRIDGE_GO_MIN:-1.26}"
GO_TOOLCHAIN="${SLURMBRIDGE_GO_TOOLCHAIN:-go1.26.8}"

_go_log() { echo "[go] $*" >&2; }

# 0 when version $1 (e.g. 1.19.8) is at least $2 (e.g. 1.26).
_go_at_least() {
  local IFS=. a b i
  read -r -a a <<< "$1"; read -r -a b <<< "$2"
  for i in 0 1 2; do
    (( ${a[i]:-0} > ${b[i]:-0} )) && return 0
    (( ${a[i]:-0} < ${b[i]:-0} )) && return 1
  done
  return 0
}

_go_setup() {
  local cache="${SLURMBRIDGE_CACHE:-$HOME/.cache/slurmbridge}/go/$GO_TOOLCHAIN" have mod dir
  [[ -d /usr/local/go/bin ]] && PATH="/usr/local/go/bin:$PATH"
  [[ -x "$cache/bin/go" ]] && PATH="$cache/bin:$PATH"
  if ! command -v go >/dev/null; then
    _go_log "no Go: installing Debian's golang-go"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null; } \
      || { _go_log "error: could not install golang-go; install Go >= $GO_MIN"; return 1; }
  fi
  have="$(GOTOOLCHAIN=local go env GOVERSION)"; have="${have#go}"; have="${have%%[!0-9.]*}"
  if _go_at_least "$have" "$GO_MIN"; then
    export GOTOOLCHAIN=local
  elif _go_at_least "$have" 1.21; then
    export GOTOOLCHAIN="$GO_TOOLCHAIN"
  else
    mod="golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.$(go env GOHOSTOS)-$(go env GOHOSTARCH)"
    _go_log "go $have knows no GOTOOLCHAIN: fetching $mod from the module proxy"
    dir="$(cd / && GOFLAGS='' go mod download -json "$mod" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
    [[ -x "$dir/bin/go" || -f "$dir/bin/go" ]] || { _go_log "error: $mod: no bin/go in '$dir'"; return 1; }
    rm -rf "$cache.tmp"; mkdir -p "$(dirname "$cache")"
    cp -r "$dir" "$cache.tmp"; chmod -R u+w "$cache.tmp"
    # Module zips carry no file modes: the go command sets them when it switches
    # toolchains itself, so this does too.
    chmod +x "$cache.tmp"/bin/* "$cache.tmp"/pkg/tool/*/*
    rm -rf "$cache"; mv "$cache.tmp" "$cache"
    PATH="$cache/bin:$PATH"
    export GOTOOLCHAIN=local
  fi
  export PATH
}
_go_setup
