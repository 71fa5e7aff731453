#!/usr/bin/env bash
# Build the slurmbridge image here, without a registry; prints its name.
#   deploy/images/build.sh [IMAGE]        default slurmbridge:dev
# The base is Debian trixie (Python 3.13) from deploy/docker/base-image.sh plus python3-venv,
# passed to deploy/images/bridge.Dockerfile as BASE; the context holds only what the image
# installs (the classic builder ignores bridge.Dockerfile.dockerignore).  pip fetches the
# dependencies from PyPI during the build.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" images

IMAGE="${1:-${SLURMBRIDGE_IMAGE:-slurmbridge:dev}}"
PYBASE=slurmbridge/python:trixie

bash "$repo/deploy/docker/engine.sh"
debian="$(bash "$repo/deploy/docker/base-image.sh" trixie)"
stamp="$(docker image inspect "$debian" --format '{{.Id}}' | cut -c8-19)"
if [[ "$(docker image inspect "$PYBASE" --format '{{index .Config.Labels "slurmbridge.base"}}' 2>/dev/null)" != "$stamp" ]]; then
  log "building $PYBASE"
  docker build -q -t "$PYBASE" --label "slurmbridge.base=$stamp" - >/dev/null <<DOCKERFILE
FROM $debian
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null \
 && rm -rf /var/lib/apt/lists/*
DOCKERFILE
fi

ctx="$(mktemp -d)"; trap 'rm -rf "$ctx"' EXIT
cp -r "$repo/pyproject.toml" "$repo/README.md" "$repo/bridge" "$repo/extender" "$repo/admission" "$repo/slurmbridge_cli" "$ctx/"
find "$ctx" \( -name __pycache__ -o -name '*.pyc' -o -name .mypy_cache \) -prune -exec rm -rf {} +
log "building $IMAGE"
docker build -q --build-arg BASE="$PYBASE" -f "$repo/deploy/images/bridge.Dockerfile" -t "$IMAGE" "$ctx" >/dev/null
echo "$IMAGE"
