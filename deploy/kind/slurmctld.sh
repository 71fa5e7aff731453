#!/bin/bash
# The Slurm controller of the kind cluster: slurmctld + slurmrestd in one container (the image
# of deploy/slurm/Dockerfile), no slurmd: the nodes are the kind workers, whose slurmd fetch
# slurm.conf and gres.conf from here (configless).  deploy/kind/up.sh mounts this script and
# runs it with:
#   SLURM_NODES  the kind workers' names (= Slurm node names = Docker host names)
#   CPUS MEMORY_MB GPUS  the shape each node declares (GPUs: placeholder files on the nodes;
#                        each GPU also SHARDS_PER_GPU Slurm gres/shard, as deploy/slurm/recipe.sh)
#   EXTERNAL_NODES  kind workers without slurmd that the bridge may register as EXTERNAL nodes
#                   (POST /new/node/: MaxNodeCount, NodeSet and partition `external`); each
#                   may bring EXTERNAL_GPUS GPUs (a gres.conf line names its device files)
# Also: accounting (slurmdbd + MariaDB, as recipe.sh's, mounted at /usr/local/sbin/
# slurmbridge-recipe) so sacct shows the bridge's jobs, and a network topology (topology.yaml:
# partition `tree`, each worker under a leaf switch of its own below one spine; partition
# `block`, both workers in one block of 2); partition main keeps the flat cluster default.
#   /keys/slurm.key, /keys/jwt_hs256.key  the keys (slurm.key is copied to the nodes too)
#   /var/lib/slurmbridge  where the JWT for user slurm is written as `token`
set -euo pipefail

: "${SLURM_NODES:?}"
cpus="${CPUS:-8}"; mem="${MEMORY_MB:-16384}"; gpus="${GPUS:-4}"
shards=$((gpus * ${SHARDS_PER_GPU:-4}))
external="${EXTERNAL_NODES:-}"; external_gpus="${EXTERNAL_GPUS:-2}"
recipe=/usr/local/sbin/slurmbridge-recipe
dbd_port=6819
token_dir=/var/lib/slurmbridge
token_lifespan="${TOKEN_LIFESPAN:-604800}"
log() { echo "[kind-slurm] $*" >&2; }

configure() {
  mkdir -p /etc/slurm /var/spool/slurmctld /var/log/slurm /run/slurmctld
  install -o slurm -g slurm -m 0600 /keys/slurm.key /etc/slurm/slurm.key
  install -o slurm -g slurm -m 0600 /keys/jwt_hs256.key /etc/slurm/jwt_hs256.key
  chown slurm:slurm /var/spool/slurmctld /var/log/slurm /run/slurmctld
  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=kind
SlurmctldHost=$(hostname)
SlurmctldParameters=enable_configless
SlurmUser=slurm
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$dbd_port
AccountingStorageTRES=gres/gpu,gres/shard
MaxNodeCount=$(( $(wc -w <<< "$SLURM_NODES $external") + 4 ))
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu,shard
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5,sched_min_interval=100000
MinJobAge=600
ReturnToService=2
SlurmdTimeout=60
MpiDefault=none
DefMemPerCPU=1024
CONF
  local node k=0 hybrid
  hybrid="$(tr ' ' ',' <<< "$SLURM_NODES")"
  for node in $SLURM_NODES; do
    k=$((k + 1))
    echo "NodeName=$node CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus$([[ $shards -eq 0 ]] || echo ",shard:$shards") Topology=tree:leaf$k,block:b1 State=UNKNOWN" >> /etc/slurm/slurm.conf
  done
  cat >> /etc/slurm/slurm.conf <<CONF
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=tree Nodes=$hybrid MaxTime=INFINITE State=UP Topology=tree
PartitionName=block Nodes=$hybrid MaxTime=INFINITE State=UP Topology=block
NodeSet=external Feature=slurmbridge-external
PartitionName=external Nodes=external MaxTime=INFINITE State=UP
CONF
  topology > /etc/slurm/topology.yaml
  echo "NodeName=$hybrid Name=gpu File=/var/lib/slurmbridge-gpu/gpu[0-$((gpus - 1))]" > /etc/slurm/gres.conf
  [[ $shards -eq 0 ]] \
    || echo "NodeName=$hybrid Name=shard Count=$shards File=/var/lib/slurmbridge-gpu/gpu[0-$((gpus - 1))]" >> /etc/slurm/gres.conf
  for node in $external; do
    echo "NodeName=$node Name=gpu File=/var/lib/slurmbridge-gpu/gpu[0-$((external_gpus - 1))]" >> /etc/slurm/gres.conf
  done
  echo "CgroupPlugin=disabled" > /etc/slurm/cgroup.conf
  "$recipe" slurmdbd-conf "$dbd_port"
}

topology() {  # flat by default; tree: a leaf switch per worker under one spine; block: one of all
  local node k=0
  printf -- '---\n- topology: flat\n  cluster_default: true\n  flat: true\n'
  printf -- '- topology: tree\n  cluster_default: false\n  tree:\n    switches:\n'
  printf -- '      - switch: spine\n        children: leaf[1-%d]\n' "$(wc -w <<< "$SLURM_NODES")"
  for node in $SLURM_NODES; do
    k=$((k + 1)); printf -- '      - switch: leaf%d\n        nodes: %s\n' "$k" "$node"
  done
  printf -- '- topology: block\n  cluster_default: false\n  block:\n    block_sizes:\n      - %d\n' "$k"
  printf -- '    blocks:\n      - block: b1\n        nodes: %s\n' "$(tr ' ' ',' <<< "$SLURM_NODES")"
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
  local since=0
  while kill -0 "$(cat /run/slurmctld/slurmctld.pid 2>/dev/null || echo 0)" 2>/dev/null; do
    sleep 5 & wait $!
    since=$((since + 5))
    if (( since >= 86400 )); then write_token || true; since=0; fi
  done
  log "slurmctld exited:"; tail -n 20 /var/log/slurm/slurmctld.log >&2
  exit 1
}

case "${1:-run}" in
  run) run ;;
  token) "$recipe" token slurm "$token_lifespan" ;;
  *) exec "$@" ;;
esac
