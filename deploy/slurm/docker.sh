#!/usr/bin/env bash
# The dockerized Slurm dev cluster (compose.yaml) on a machine without an image registry.
#   docker.sh up     Docker engine (deploy/docker/engine.sh), the local Debian sid base image
#                    (base-image.sh), `docker compose` (compose.sh), then `docker compose up
#                    --build --wait`; prints the env of `docker.sh env`.  Idempotent.
#   docker.sh env    the environment the tests read, as `export` lines:
#                      eval "$(bash deploy/slurm/docker.sh env)"; python -m pytest tests/integration
#   docker.sh down   stop and remove the container
# Runs beside the chroot clusters of cluster.sh: the container has its own network and
# publishes only slurmrestd, on 127.0.0.1:${SLURMBRIDGE_DOCKER_REST_PORT:-6820}.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" slurm-docker

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SLURMBRIDGE_DOCKER_TOKEN_DIR="${SLURMBRIDGE_DOCKER_TOKEN_DIR:-/tmp/slurmbridge-docker}"
export SLURMBRIDGE_DOCKER_REST_PORT="${SLURMBRIDGE_DOCKER_REST_PORT:-6820}"
compose=(docker compose -f "$here/compose.yaml")

cmd_up() {
  bash "$repo/deploy/docker/engine.sh"
  # compose.yaml builds the image FROM this (build arg BASE): nothing comes from a registry.
  export SLURMBRIDGE_SLURM_BASE; SLURMBRIDGE_SLURM_BASE="$(bash "$repo/deploy/docker/base-image.sh" sid)"
  bash "$repo/deploy/docker/compose.sh"
  mkdir -p "$SLURMBRIDGE_DOCKER_TOKEN_DIR" "$CACHE/slurm/docker"
  local up_log="$CACHE/slurm/docker/up.log"
  log "docker compose up --build --wait (log: $up_log)"
  # --build: the engine's build cache makes an unchanged image a no-op, and compose
  # recreates the container only when the image or the service changed.
  "${compose[@]}" up -d --build --wait --wait-timeout 180 >"$up_log" 2>&1 || {
    tail -n 30 "$up_log" >&2; "${compose[@]}" logs --tail 30 >&2 || true
    die "the Slurm container did not become healthy (output above)"
  }
  log "Slurm $(slurm_version) is up in container slurmbridge-dev-slurm"
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
