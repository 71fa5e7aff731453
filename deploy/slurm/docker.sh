#!/usr/bin/env bash
# The dockerized Slurm dev cluster (compose.yaml) on a machine without an image registry.
#   docker.sh up     Docker engine (deploy/docker/engine.sh), the local Debian sid base image
#                    (base-image.sh), `docker compose` (compose.sh), the Slurm image, then
#                    `docker compose up --wait`; prints the env of `docker.sh env`.  Idempotent.
#   docker.sh env    the environment the tests read, as `export` lines:
#                      eval "$(bash deploy/slurm/docker.sh env)"; python -m pytest tests/integration
#   docker.sh down   stop and remove the container
# Runs beside the chroot clusters of cluster.sh: the container has its own network and
# publishes only slurmrestd, on 127.0.0.1:${SLURMBRIDGE_DOCKER_REST_PORT:-6820}.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CACHE="${SLURMBRIDGE_CACHE:-$HOME/.cache/slurmbridge}"
IMAGE=slurmbridge/slurm-dev:sid   # compose.yaml's image
export SLURMBRIDGE_DOCKER_TOKEN_DIR="${SLURMBRIDGE_DOCKER_TOKEN_DIR:-/tmp/slurmbridge-docker}"
export SLURMBRIDGE_DOCKER_REST_PORT="${SLURMBRIDGE_DOCKER_REST_PORT:-6820}"
compose=(docker compose -f "$here/compose.yaml")
log() { echo "[slurm-docker] $*" >&2; }
die() { echo "[slurm-docker] error: $*" >&2; exit 1; }

cmd_up() {
  bash "$repo/deploy/docker/engine.sh"
  export SLURMBRIDGE_SLURM_BASE; SLURMBRIDGE_SLURM_BASE="$(bash "$repo/deploy/docker/base-image.sh" sid)"
  bash "$repo/deploy/docker/compose.sh"
  # The classic builder (no buildx here); its layer cache makes an unchanged rebuild instant,
  # and `compose up` recreates the container when the image changed.
  mkdir -p "$CACHE/slurm/docker"
  local build_log="$CACHE/slurm/docker/build.log"
  log "building $IMAGE on $SLURMBRIDGE_SLURM_BASE (log: $build_log)"
  DOCKER_BUILDKIT=0 docker build --build-arg BASE="$SLURMBRIDGE_SLURM_BASE" -t "$IMAGE" "$here" \
    >"$build_log" 2>&1 || { tail -n 30 "$build_log" >&2; die "docker build failed (log above)"; }
  mkdir -p "$SLURMBRIDGE_DOCKER_TOKEN_DIR"
  "${compose[@]}" up -d --wait --wait-timeout 180 >&2 \
    || { "${compose[@]}" logs --tail 30 >&2; die "the Slurm container did not become healthy (logs above)"; }
  log "Slurm $(slurm_version) is up in container slurmbridge-slurm"
  cmd_env
}

slurm_version() {  # "26.05" from "slurm-wlm 26.05.5"
  "${compose[@]}" exec -T slurm sinfo -V | awk '{split($2, v, "."); print v[1] "." v[2]}'
}

cmd_env() {
  local version; version="$(slurm_version)" || die "the Slurm container is not running: $0 up"
  [[ -s "$SLURMBRIDGE_DOCKER_TOKEN_DIR/token" ]] || die "no token in $SLURMBRIDGE_DOCKER_TOKEN_DIR"
  local -A env=(
    [SLURMBRIDGE_TEST_SLURM_URL]="http://127.0.0.1:$SLURMBRIDGE_DOCKER_REST_PORT"
    [SLURMBRIDGE_TEST_SLURM_TOKEN_FILE]="$SLURMBRIDGE_DOCKER_TOKEN_DIR/token"
    [SLURMBRIDGE_TEST_SLURM_USER]=slurm
    [SLURMBRIDGE_TEST_SLURM_VERSION]="$version"
    [SLURMBRIDGE_TEST_SLURM_NAME]="docker-$version"
    [SLURMBRIDGE_TEST_SLURM_ADMIN]="${compose[*]} exec -T slurm"
  )
  local key
  for key in "${!env[@]}"; do printf 'export %s=%s\n' "$key" "${env[$key]@Q}"; done | sort
}

case "${1:-}" in
  up) cmd_up ;;
  env) cmd_env ;;
  down) "${compose[@]}" down >&2 ;;
  *) echo "usage: $0 up|env|down" >&2; exit 2 ;;
esac
