#!/bin/bash
# The Slurm controller of the kind cluster: slurmctld + slurmrestd in one container (the image
# of deploy/slurm/Dockerfile), no slurmd: the nodes are the kind workers, whose slurmd fetch
# slurm.conf and gres.conf from here (configless).  Every file is deploy/slurm/recipe.sh's
# (mounted at /usr/local/sbin/slurmbridge-recipe), with kind's options (`configure` below):
# slurmdbd + MariaDB so sacct shows the bridge's jobs, a leaf switch per worker and one block
# of all (partitions `tree`, `block`), partition `external` for the workers without slurmd.
# deploy/kind/up.sh mounts this script and runs it with:
#   SLURM_NODES  the kind workers' names (= Slurm node names = Docker host names)
#   EXTERNAL_NODES  kind workers without slurmd that the bridge may register as EXTERNAL nodes
#   CPUS MEMORY_MB GPUS EXTERNAL_GPUS SHARDS_PER_GPU  another node shape (recipe.sh's options)
#   /keys/slurm.key, /keys/jwt_hs256.key  the keys (slurm.key is copied to the nodes too)
#   /var/lib/slurmbridge  where the JWT for user slurm is written as `token`
set -euo pipefail

: "${SLURM_NODES:?}"
external="${EXTERNAL_NODES:-}"
recipe=/usr/local/sbin/slurmbridge-recipe
token_dir=/var/lib/slurmbridge
token_lifespan="${TOKEN_LIFESPAN:-604800}"
log() { echo "[kind-slurm] $*" >&2; }

# kind's choices among recipe.sh configure's options (its header says what each is for).
configure() {
  CONTROLLER_HOST="$(hostname)" NODE_HOSTS="$SLURM_NODES" CONFIGLESS=1 KEYS_FROM=/keys \
    CPUS="${CPUS:-8}" MEMORY_MB="${MEMORY_MB:-16384}" GPUS="${GPUS:-4}" \
    EXTERNAL_NODES="$external" EXTERNAL_GPUS="${EXTERNAL_GPUS:-2}" SPARE_NODE_SLOTS=4 \
    TOPOLOGY_LAYOUT=leaf-per-node TOPOLOGY_PARTITIONS=slurmd-nodes TYPED_GPU_SLICES=0 \
    ACCOUNT_POLICY=0 JOB_ACCT_GATHER=none MAX_JOB_COUNT='' OPENMETRICS=0 SLURMD_TIMEOUT=60 \
    DEBUG_PARTITION=0 "$recipe" configure kind 6817
}

write_token() {  # the JWT of user slurm, minted by the recipe
  "$recipe" write-token "$token_dir" slurm "$token_lifespan" \
    || { log "scontrol token printed nothing"; return 1; }
}

run() {
  configure
  rm -f "$token_dir/token"
  "$recipe" accounting kind
  log "starting slurmctld for nodes: $SLURM_NODES (external: ${external:-none})"
  slurmctld -i
  # As in deploy/slurm/docker-entrypoint.sh: unshare(2) is refused in a container.
  export SLURMRESTD_SECURITY=disable_unshare_sysv,disable_unshare_files
  SLURM_JWT=daemon SLURMRESTD_JSON=compact slurmrestd -u slurmrest -g slurmrest -a rest_auth/jwt 0.0.0.0:6820 \
    >/var/log/slurm/slurmrestd.log 2>&1 </dev/null &
  trap 'kill $! $(cat /run/slurmctld/slurmctld.pid 2>/dev/null) 2>/dev/null; exit 0' TERM INT
  for _ in $(seq 1 60); do scontrol ping >/dev/null 2>&1 && break; sleep 0.5; done
  write_token
  log "up: $(sinfo -V); REST on :6820; token in $token_dir/token"
  # Waited for in the background: SIGTERM's trap runs at once.  Ends when slurmctld does.
  "$recipe" keep-token "$token_dir" slurm "$token_lifespan" 86400 & wait $!
}

case "${1:-run}" in
  run) run ;;
  token) "$recipe" token slurm "$token_lifespan" ;;
  *) exec "$@" ;;
esac
