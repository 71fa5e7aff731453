#!/usr/bin/env bash
# Make `docker compose` (Compose v2, a Docker CLI plugin) work on this machine.
# Debian 12 packages only docker-compose v1 (Python) and no registry serves release
# binaries here, so the plugin is built from its Go module (github.com/docker/compose/v2)
# once, cached under the cache folder, and installed into /usr/local/lib/docker/cli-plugins.
# Leaves a working `docker compose` alone.  Prints nothing on success.
#   deploy/docker/compose.sh          ensure the plugin
# Compose negotiates the engine's API version (Debian's docker.io 20.10 speaks 1.41).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" compose

VERSION="${SLURMBRIDGE_COMPOSE_VERSION:-v2.40.3}"
PLUGINS=/usr/local/lib/docker/cli-plugins
bin="$CACHE/compose/$VERSION/docker-compose"
source "$(dirname "${BASH_SOURCE[0]}")/../dev/go.sh"   # Go new enough for Kubernetes
export CGO_ENABLED=0

docker compose version >/dev/null 2>&1 && exit 0

if [[ ! -x "$bin" ]]; then
  command -v go >/dev/null || die "Go is missing (deploy/dev/install.sh installs it)"
  log "building docker compose $VERSION from its Go module (first run only, a few minutes)"
  src="$(go mod download -json "github.com/docker/compose/v2@$VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  # `go install module@version` refuses modules whose go.mod has exclude directives
  # (compose's has): build inside a writable copy of the module instead.
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  cp -r "$src/." "$work"; chmod -R u+w "$work"
  mkdir -p "$(dirname "$bin")"
  (cd "$work" && GOFLAGS=-buildvcs=false go build -trimpath \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$VERSION" -o "$bin.tmp" ./cmd)
  mv "$bin.tmp" "$bin"
fi
install -D -m 0755 "$bin" "$PLUGINS/docker-compose"
docker compose version >/dev/null || die "$PLUGINS/docker-compose does not run"
