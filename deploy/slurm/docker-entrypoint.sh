#!/bin/bash
# Container entrypoint of the dockerized Slurm dev cluster (deploy/slurm/Dockerfile).
#   run          configure (recipe.sh), start MariaDB + slurmdbd (PORT_BASE+2, recipe.sh
#                accounting), slurmctld + NODES slurmd + slurmrestd on
#                0.0.0.0:PORT_BASE+1, mint a JWT into $TOKEN_DIR/token, re-mint it every
#                TOKEN_REFRESH seconds, stop the daemons on SIGTERM
#   healthcheck  slurmrestd answers, every node is idle (or allocated), the token is written
#   token        print a fresh JWT (lifespan TOKEN_LIFESPAN) for TOKEN_USER
# Tokens are minted by slurmbridge-recipe (recipe.sh token, write-token).
# Daemons start as cluster.sh starts them in its chroot; only the listen address differs.
set -euo pipefail

base="${PORT_BASE:-6819}"; nodes="${NODES:-4}"; rest_port=$((base + 1))
token_dir="${TOKEN_DIR:-/var/lib/slurmbridge}"
token_user="${TOKEN_USER:-slurm}"; token_lifespan="${TOKEN_LIFESPAN:-604800}"
log() { echo "[slurm-docker] $*" >&2; }

rest_up() { (exec 3<>"/dev/tcp/127.0.0.1/$rest_port") 2>/dev/null; }

nodes_ready() {  # every node idle, mixed or allocated: registered and usable
  [[ "$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix|alloc)/ {n++} END {print n+0}')" -ge "$nodes" ]]
}

write_token() {  # a dev cluster: readable by whoever mounts $token_dir
  slurmbridge-recipe write-token "$token_dir" "$token_user" "$token_lifespan" \
    || { log "scontrol token printed nothing"; return 1; }
}

run() {
  NODES="$nodes" slurmbridge-recipe configure "${CLUSTER_NAME:-sbdocker}" "$base"
  rm -rf /var/spool/slurmctld/* /var/spool/slurmd/* /var/log/slurm/*
  rm -f "$token_dir/token"   # left by an earlier container (another JWT key): not healthy yet
  log "starting MariaDB (socket only), slurmdbd (port $((base + 2)))"
  slurmbridge-recipe accounting "${CLUSTER_NAME:-sbdocker}"
  log "starting slurmctld (port $base), $nodes slurmd, slurmrestd (0.0.0.0:$rest_port)"
  slurmctld -c
  for k in $(seq 1 "$nodes"); do
    mkdir -p "/var/spool/slurmd/node$k"
    slurmd -N "node$k"
  done
  # slurmrestd unshares its file table and System V IPC namespace; Docker's default seccomp
  # profile refuses unshare(2) to an unprivileged container, and slurmrestd dies with
  # "Unable to unshare System V namespace" / "... file descriptors: Operation not permitted".
  export SLURMRESTD_SECURITY="${SLURMRESTD_SECURITY:-disable_unshare_sysv,disable_unshare_files}"
  # shellcheck disable=SC2086  # SLURMRESTD_FLAGS: extra words, e.g. "-s openapi/slurmctld" (24.11)
  SLURM_JWT=daemon SLURMRESTD_JSON=compact slurmrestd -u slurmrest -g slurmrest -a rest_auth/jwt ${SLURMRESTD_FLAGS:-} \
    "0.0.0.0:$rest_port" >/var/log/slurm/slurmrestd.log 2>&1 </dev/null &
  local rest_pid=$!
  trap 'log stopping; kill "$rest_pid" $(cat /run/slurm/slurmd-*.pid /run/slurmctld/*.pid /run/mysqld/mysqld.pid 2>/dev/null) 2>/dev/null; exit 0' TERM INT

  for _ in $(seq 1 120); do
    rest_up && nodes_ready && break
    kill -0 "$rest_pid" 2>/dev/null || break   # slurmrestd died at start: say so now
    sleep 0.5
  done
  rest_up || { log "slurmrestd did not start:"; tail -n 20 /var/log/slurm/slurmrestd.log >&2; exit 1; }
  nodes_ready || { log "nodes not ready: $(sinfo -h -N -o '%N %t %E')"; tail -n 20 /var/log/slurm/slurmctld.log >&2; exit 1; }
  slurmbridge-recipe accounts   # the account tree, users and QOS (docs: deploy/slurm/recipe.sh)
  write_token
  log "Slurm $(sinfo -V) is up: REST http://0.0.0.0:$rest_port, token $token_dir/token (user $token_user)"

  # Keep the token fresh; exit (and let the container restart) if slurmctld dies.  Waited for in
  # the background: SIGTERM's trap runs at once.
  slurmbridge-recipe keep-token "$token_dir" "$token_user" "$token_lifespan" "${TOKEN_REFRESH:-86400}" & wait $!
}

case "${1:-run}" in
  run) run ;;
  healthcheck) rest_up && nodes_ready && [[ -s "$token_dir/token" ]] ;;
  token) slurmbridge-recipe token "$token_user" "$token_lifespan" ;;
  *) exec "$@" ;;
esac
