#!/usr/bin/env bash
# Make sure a Docker engine answers on this Debian machine (as root):
# installs Debian's docker.io when dockerd is missing, starts dockerd when no daemon
# answers, and leaves a running one alone.  Prints nothing on success.
#   deploy/docker/engine.sh          ensure the engine
#   deploy/docker/engine.sh stop     stop a dockerd this script started
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" docker

RUN_DIR="${SLURMBRIDGE_DOCKER_RUN:-/run/slurmbridge-docker}"

answers() { docker info >/dev/null 2>&1; }

install_engine() {
  command -v dockerd >/dev/null && command -v docker >/dev/null && return
  log "installing Debian's docker.io"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
}

start_engine() {
  answers && return
  mkdir -p "$RUN_DIR"
  log "starting dockerd (log: $RUN_DIR/dockerd.log)"
  # setsid: the daemon outlives the shell (and CI step) that started it.
  setsid dockerd --host unix:///var/run/docker.sock --pidfile "$RUN_DIR/dockerd.pid" \
    >"$RUN_DIR/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do answers && return; sleep 1; done
  tail -n 30 "$RUN_DIR/dockerd.log" >&2
  die "dockerd did not answer within 60 s (log above)"
}

# Waits for the daemon to exit: a start right after would otherwise race the old one's
# shutdown (its pidfile and socket) and fail.
stop_engine() {
  local pid
  pid="$(cat "$RUN_DIR/dockerd.pid" 2>/dev/null)" || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  die "dockerd (pid $pid) did not exit within 60 s"
}

case "${1:-up}" in
  up) install_engine; start_engine ;;
  stop) stop_engine ;;
  *) echo "usage: $0 [up|stop]" >&2; exit 2 ;;
esac
