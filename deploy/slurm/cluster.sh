#!/usr/bin/env bash
# Local Slurm clusters from Debian packages in cached debootstrap chroots: slurmctld, slurmd,
# slurmrestd, slurmdbd + MariaDB (accounting, QOS, preemption; account tree in recipe.sh).
#   cluster.sh up VERSION     start (idempotent); prints REST URL and token file
#   cluster.sh down VERSION   stop every process it started, unmount what it mounted
#   cluster.sh env VERSION    print the environment the tests and the bridge read
#   cluster.sh rootfs VERSION  build the cached chroot if needed and print its path
#   cluster.sh rest stop|start VERSION   stop or start slurmrestd alone (outage tests)
#   cluster.sh exec VERSION CMD...   run an admin tool (squeue, scontrol, sbatch) in it
# VERSION is 24.11 (Debian trixie) or 26.05 (Debian sid).  Both can run at once.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" slurm

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

select_version() {
  VERSION="${1:-}"
  case "$VERSION" in
    24.11) SUITE=trixie; BASE=6817 ;;
    26.05) SUITE=sid; BASE=7817 ;;
    *) die "unknown Slurm version '${VERSION}': use 24.11 or 26.05" ;;
  esac
  ROOT="$CACHE/slurm/$SUITE"
  RUN="$CACHE/slurm/run/$VERSION"
  REST_PORT=$((BASE + 1))
  URL="http://127.0.0.1:$REST_PORT"
}

in_root() { chroot "$ROOT" "$@"; }

ensure_root() {
  # Only the install step decides whether the cached chroot is still good.
  local stamp; stamp="$(sed -n '/^install_packages()/,/^}/p' "$here/recipe.sh" | sha256sum | cut -c1-16)"
  if [[ -f "$ROOT/.slurmbridge-recipe" && "$(cat "$ROOT/.slurmbridge-recipe")" == "$stamp" ]]; then
    install -m 0755 "$here/recipe.sh" "$ROOT/usr/local/sbin/slurmbridge-recipe"
    return
  fi
  command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
  if [[ ! -x "$ROOT/bin/sh" ]]; then
    log "debootstrap $SUITE into $ROOT (first run only, about a minute)"
    rm -rf "$ROOT.tmp"; mkdir -p "$(dirname "$ROOT")"
    debootstrap --variant=minbase "$SUITE" "$ROOT.tmp" "$MIRROR" >&2
    mv "$ROOT.tmp" "$ROOT"
  fi
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  install -m 0755 "$here/recipe.sh" "$ROOT/usr/local/sbin/slurmbridge-recipe"
  log "installing Slurm packages in the $SUITE chroot"
  in_root /usr/local/sbin/slurmbridge-recipe install >&2
  echo "$stamp" > "$ROOT/.slurmbridge-recipe"
}

mount_once() {  # mount_once TYPE-or-bind SOURCE TARGET
  mountpoint -q "$3" && return
  mkdir -p "$3"
  if [[ "$1" == bind ]]; then mount --bind "$2" "$3"; else mount -t "$1" "$2" "$3"; fi
}

pid_alive() {  # pid_alive NAME: the daemon whose pid file is /run/slurmctld/NAME.pid runs
  local pid
  pid="$(cat "$ROOT/run/slurmctld/$1.pid" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

rest_alive() { python3 - "$URL" <<'PY' 2>/dev/null
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1] + "/openapi/v3", timeout=2)
except urllib.error.HTTPError:
    pass  # 401 still means the daemon answers
PY
}

write_env() {
  mkdir -p "$RUN"
  in_root /usr/local/sbin/slurmbridge-recipe token slurm "${SLURM_TOKEN_LIFESPAN:-604800}" > "$RUN/token.tmp"
  [[ -s "$RUN/token.tmp" ]] || die "scontrol token printed no token (see $ROOT/var/log/slurm/slurmctld.log)"
  mv "$RUN/token.tmp" "$RUN/token"
  cat > "$RUN/env" <<ENV
SLURMBRIDGE_SLURM__URL=$URL
SLURMBRIDGE_SLURM__USER=slurm
SLURMBRIDGE_SLURM__TOKEN_FILE=$RUN/token
SLURMBRIDGE_TEST_SLURM_VERSION=$VERSION
SLURMBRIDGE_TEST_SLURM_ADMIN=$here/cluster.sh exec $VERSION
ENV
}

cmd_up() {
  select_version "$1"
  ensure_root
  # A node shape given (NODES/CPUS/GPUS/MEMORY_MB, as B1 and B6 do) is part of the stamp, so
  # `up` with another shape restarts; a plain `up` takes the running cluster whatever its shape
  # (the benchmarks' own `down` + `up` put the default back).
  local config; config="$(sha256sum "$here/recipe.sh" | cut -c1-16)"
  local var; for var in NODES CPUS GPUS MEMORY_MB; do
    if [[ -n "${!var:-}" ]]; then config+=" $var=${!var}"; fi
  done
  local running; running="$(cat "$RUN/config" 2>/dev/null || true)"
  [[ "$config" == *" "* ]] || running="${running%% *}"
  if pid_alive slurmctld && pid_alive slurmdbd && rest_alive && [[ "$running" == "$config" ]]; then
    log "Slurm $VERSION already running"
  else
    cmd_down "$VERSION" quiet
    mount_once proc proc "$ROOT/proc"
    mount_once sysfs sys "$ROOT/sys"
    mount_once bind /dev "$ROOT/dev"
    cp /etc/hosts "$ROOT/etc/hosts"
    NODES="${NODES:-4}" in_root /usr/local/sbin/slurmbridge-recipe configure "sb${VERSION/./}" "$BASE"
    # Stale sockets and pid files from a killed run make the new daemons refuse to start.
    rm -rf "$ROOT"/var/spool/slurmctld/* "$ROOT"/var/spool/slurmd/* "$ROOT"/var/log/slurm/* \
      "$ROOT"/run/slurm/* "$ROOT"/run/slurmctld/*
    log "starting MariaDB (socket only) and slurmdbd (port $((BASE + 2)))"
    in_root /usr/local/sbin/slurmbridge-recipe accounting "sb${VERSION/./}"
    log "starting slurmctld (port $BASE) and ${NODES:-4} slurmd"
    in_root slurmctld -c
    for k in $(seq 1 "${NODES:-4}"); do
      mkdir -p "$ROOT/var/spool/slurmd/node$k"
      in_root slurmd -N "node$k"
    done
    start_rest
    for i in $(seq 1 $((120 + 2 * ${NODES:-4}))); do  # 60 s plus 1 s per node
      if rest_alive && [[ "$(in_root sinfo -h -o '%D %t' 2>/dev/null | awk '$2=="idle"{n+=$1} END{print n+0}')" == "${NODES:-4}" ]]; then
        break
      fi
      if (( i % 20 == 0 )); then  # a slurmd that died at start (seen once under load): again
        for node in $(in_root sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /\*$/ {print $1}'); do
          log "restarting slurmd for $node (not responding)"
          in_root slurmd -N "$node" || true
        done
      fi
      sleep 0.5
    done
    log "account tree, users and QOS (recipe.sh accounts)"
    in_root /usr/local/sbin/slurmbridge-recipe accounts
    mkdir -p "$RUN"; echo "$config" > "$RUN/config"
    rest_alive || die "slurmrestd did not answer on $URL (see $ROOT/var/log/slurm/slurmrestd.log)"
    [[ "$(in_root sinfo -h -o '%D %t' | awk '$2=="idle"{n+=$1} END{print n+0}')" == "${NODES:-4}" ]] \
      || die "nodes not idle: $(in_root sinfo -h -o '%N %t %E') (see $ROOT/var/log/slurm/)"
  fi
  write_env
  log "Slurm $VERSION ($(in_root sinfo -V)) is up"
  echo "REST URL:   $URL"
  echo "token file: $RUN/token (user slurm)"
  echo "env file:   $RUN/env"
}

start_rest() {  # with slurmdbd, every OpenAPI plugin loads (/slurm/ and /slurmdb/)
  setsid chroot "$ROOT" env SLURM_JWT=daemon SLURMRESTD_JSON=compact slurmrestd -u slurmrest -g slurmrest \
    -a rest_auth/jwt "127.0.0.1:$REST_PORT" \
    >>"$ROOT/var/log/slurm/slurmrestd.log" 2>&1 < /dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
}

# `rest stop|start VERSION`: take slurmrestd alone away and back (outage tests).
cmd_rest() {
  select_version "$2"
  case "$1" in
    stop)
      local p
      for p in $(chroot_pids); do
        [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == slurmrestd ]] && kill "$p"
      done
      for _ in $(seq 1 40); do rest_alive || return 0; sleep 0.25; done
      die "slurmrestd still answers on $URL" ;;
    start)
      rest_alive && return 0
      start_rest
      for _ in $(seq 1 60); do rest_alive && return 0; sleep 0.25; done
      die "slurmrestd did not come back on $URL" ;;
    *) die "usage: $0 rest stop|start VERSION" ;;
  esac
}

chroot_pids() {
  local p root
  for p in /proc/[0-9]*; do
    root="$(readlink "$p/root" 2>/dev/null)" || continue
    [[ "$root" == "$ROOT" ]] && echo "${p#/proc/}"
  done
  return 0
}

cmd_down() {
  select_version "$1"
  local pids; pids="$(chroot_pids)"
  if [[ -n "$pids" ]]; then
    # shellcheck disable=SC2086  # $pids: one PID per line, split into words on purpose
    kill $pids 2>/dev/null || true
    for _ in $(seq 1 20); do [[ -z "$(chroot_pids)" ]] && break; sleep 0.25; done
    pids="$(chroot_pids)"
    # shellcheck disable=SC2086  # as above
    if [[ -n "$pids" ]]; then kill -9 $pids 2>/dev/null || true; fi
  fi
  for m in dev sys proc; do
    mountpoint -q "$ROOT/$m" 2>/dev/null && { umount "$ROOT/$m" 2>/dev/null || umount -l "$ROOT/$m"; }
  done
  rm -f "$RUN/env"
  [[ "${2:-}" == quiet ]] || log "Slurm $VERSION stopped"
}

cmd_env() { select_version "$1"; [[ -f "$RUN/env" ]] || die "Slurm $VERSION is not up: run $0 up $VERSION"; cat "$RUN/env"; }

cmd_rootfs() { select_version "$1"; ensure_root; echo "$ROOT"; }

cmd_exec() { select_version "$1"; shift; exec chroot "$ROOT" "$@"; }

case "${1:-}" in
  up|down|env|rootfs) "cmd_$1" "${2:-}" ;;
  exec) shift; cmd_exec "$@" ;;
  rest) cmd_rest "${2:-}" "${3:-}" ;;
  *) echo "usage: $0 up|down|env|rootfs VERSION | exec VERSION CMD..." >&2; exit 2 ;;
esac
