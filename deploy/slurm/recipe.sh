#!/bin/sh
# The one Slurm recipe, run *inside* the target root file system (a Debian
# chroot or a container image).  Steps:
#   recipe.sh install              install the Debian packages and users
#   recipe.sh configure NAME BASE  write slurm.conf, slurmdbd.conf & co for cluster NAME
#                                  whose ports start at BASE (ctld=BASE, rest=BASE+1,
#                                  slurmdbd=BASE+2, slurmd nodeK=BASE+10+K); MariaDB
#                                  listens on its Unix socket only (no TCP port)
#   recipe.sh accounting NAME      start MariaDB and slurmdbd with an empty accounting
#                                  database and register cluster NAME (before slurmctld)
#   recipe.sh accounts             the account tree, users and QOS (once slurmctld runs:
#                                  the gres/gpu TRES exists only after it registered)
#   recipe.sh token USER LIFESPAN  print a JWT for USER (LIFESPAN seconds), nothing else
#   recipe.sh write-token DIR USER LIFESPAN   that JWT into DIR/token (readable by all)
# Node shape comes from NODES (default 4), CPUS (64), MEMORY_MB (262144), GPUS (8).
# Each GPU is also SHARDS_PER_GPU (4) Slurm gres/shard on the same placeholder file, so pods and
# native jobs can share one GPU (--gres=shard:N); a GPU is either whole or shared at one time.
# With 2+ nodes and 2+ GPUs, the last node's GPUs are MIG-style typed slices instead (no
# shards): the first half Type=1g.10gb, the rest Type=3g.40gb (--gres=gpu:1g.10gb:N); an
# untyped request (--gres=gpu:N) may still take them.
#
# Two writers of slurm.conf so far: `configure` here (cluster.sh's chroots, the docker
# cluster) and deploy/kind/slurmctld.sh (kind's controller; its nodes are the kind workers).
# What kind's differs in, as a first step to one writer ("-": not set, Slurm's default;
# "why:" where the setup explains it, "why: ?" where nothing says whether it is meant):
#   ClusterName            kind (here: NAME)                  why: its own accounting cluster
#   SlurmctldHost          the container's host name          why: slurmd on other hosts
#                          (here: localhost(127.0.0.1))
#   SlurmctldPort          - (6817; here: BASE)               why: one cluster per network
#   SlurmctldParameters    enable_configless (here: -)        why: the workers fetch the config
#   SlurmdSpoolDir, SlurmdPidFile, SlurmdLogFile   one per host (here: per node, %n)
#                                                             why: one slurmd per host there
#   NodeName lines         the worker's name, no NodeHostname/NodeAddr/Port (here: nodeK on
#                          127.0.0.1, Port BASE+10+K)         why: one slurmd per host there
#   AccountingStoragePort  6819 (here: BASE+2)                why: ports as above
#   node shape defaults    CPUS 8, MEMORY_MB 16384, GPUS 4 (here: 64, 262144, 8)
#                                                             why: kind's workers are small
#   gres.conf              NodeName=<workers> lines, and each external worker's
#                          EXTERNAL_GPUS (here: one line for all nodes)
#                                                             why: external GPU nodes
#   NodeSet and partition `external`, MaxNodeCount   always, MaxNodeCount workers + external + 4
#                          (here: on Slurm 25.11+ only, NODES + 8)   why: ? (kind: 26.05 only)
#   topology               always: a leaf switch per worker, one block of all workers,
#                          partitions tree/block on the workers with slurmd (here: on 25.05+
#                          with an even node count, a leaf and a block of 2 per pair of
#                          nodes, tree/block on all nodes)    why: ?
#   typed GPUs             none (here: the last node's GPUs are 1g.10gb/3g.40gb slices, and
#                          AccountingStorageTRES names them)  why: ?
#   JobAcctGatherType      jobacct_gather/none (here: linux)  why: ?
#   AccountingStorageEnforce   - (here: associations,limits,qos; kind never runs `accounts`:
#                          no account tree, no QOS)           why: ?
#   PriorityType, PriorityWeight*, PreemptType, PreemptMode   - (here: multifactor with QOS,
#                          fair share and age weights; preempt/qos, CANCEL)   why: ?
#   MaxJobCount            - (10000; here: 100000)            why: ?
#   MetricsType            - (here: metrics/openmetrics when the plugin is there)   why: ?
#   SlurmdTimeout          60 (here: -, 300)                  why: ?
#   partition debug        none (here: MaxTime=60 on all nodes)   why: ?
#   keys                   copied from /keys, shared with the workers (here: made when
#                          missing)                           why: slurmd on other hosts
set -eu

install_packages() {
  export DEBIAN_FRONTEND=noninteractive
  # Stored mirrors may serve a sid Release file past its Valid-Until date.
  apt-get -o Acquire::Check-Valid-Until=false update -qq
  # Nothing starts a service at install time (no init here): recipe.sh starts the daemons.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
  apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin slurmdbd mariadb-server \
    procps ca-certificates >/dev/null
  apt-get clean
  getent passwd slurmrest >/dev/null || useradd -r -M -s /usr/sbin/nologin slurmrest
  getent passwd researcher >/dev/null || useradd -m -s /bin/sh researcher
  # The users namespaces map to (docs/notes: account tree); fixed uids, as on a real site.
  getent passwd alice >/dev/null || useradd -m -u 2001 -s /bin/sh alice
  getent passwd bob >/dev/null || useradd -m -u 2002 -s /bin/sh bob
}

# Account tree (accounts): team-a (alice), team-b (bob), slurmbridge (the bridge's own user,
# SlurmUser `slurm`), research (researcher: a user no namespace maps to).  QOS: normal (default), low (preemptable: cancelled after GraceTime),
# high (preempts low), gpu2 (GrpTRES gres/gpu=2 across all its jobs).
QOS_ALL=normal,low,high,gpu2
LOW_GRACE_SECONDS=15

node_gres() {  # node_gres NODE: the Gres= of one node: its GPUs (typed on $typed), and shards
  if [ "$1" = "$typed" ]; then
    echo "gpu:1g.10gb:$((gpus / 2)),gpu:3g.40gb:$((gpus - gpus / 2))"
  elif [ "$shards" -gt 0 ]; then echo "gpu:$gpus,shard:$shards"; else echo "gpu:$gpus"; fi
}

gres_conf() {  # the GPU and shard devices of every node (placeholder files, one per GPU)
  dev=/var/lib/slurmbridge-gpu/gpu; last=$((gpus - 1))
  if [ -z "$typed" ]; then
    echo "Name=gpu File=${dev}[0-$last]"
    [ "$shards" -eq 0 ] || echo "Name=shard Count=$shards File=${dev}[0-$last]"
    return
  fi
  half=$((gpus / 2)); plain="node[1-$((nodes - 1))]"
  echo "NodeName=$plain Name=gpu File=${dev}[0-$last]"
  [ "$shards" -eq 0 ] || echo "NodeName=$plain Name=shard Count=$shards File=${dev}[0-$last]"
  echo "NodeName=$typed Name=gpu Type=1g.10gb File=${dev}[0-$((half - 1))]"
  echo "NodeName=$typed Name=gpu Type=3g.40gb File=${dev}[$half-$last]"
}

# Network topology, where Slurm has topology.yaml (25.05+; several topologies in one cluster):
# partitions main and debug keep the flat cluster default; partition `tree` places by leaf
# switches of 2 nodes each under one spine (--switches=N), partition `block` by blocks of 2
# nodes (--segment=N).  Each node also names its units (NodeName ... Topology=tree:leafI,block:bI),
# the only form slurmrestd shows (a node's "topology"; no endpoint serves the structure).
# Tests choose by partition.  24.11 has one topology plugin per cluster: it stays flat.
slurm_at_least() {  # slurm_at_least 25.05: the installed slurmctld is that version or newer
  v="$(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null | cut -d- -f1)"
  [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$v" "$1" | sort -V | head -n 1)" = "$1" ]
}

has_topology_yaml() { slurm_at_least 25.05; }

topology_units() {  # topology_units K: the units of node K (pairs of nodes)
  echo "tree:leaf$(( (${1} + 1) / 2 )),block:b$(( (${1} + 1) / 2 ))"
}

topology_yaml() {  # for $nodes nodes (even): leaves/blocks node[2i-1,2i]
  pairs=$((nodes / 2))
  printf -- '---\n- topology: flat\n  cluster_default: true\n  flat: true\n'
  printf -- '- topology: tree\n  cluster_default: false\n  tree:\n    switches:\n'
  printf -- '      - switch: spine\n        children: leaf[1-%d]\n' "$pairs"
  i=1; while [ "$i" -le "$pairs" ]; do
    printf -- '      - switch: leaf%d\n        nodes: node[%d-%d]\n' "$i" $((2 * i - 1)) $((2 * i))
    i=$((i + 1))
  done
  printf -- '- topology: block\n  cluster_default: false\n  block:\n    block_sizes:\n      - 2\n    blocks:\n'
  i=1; while [ "$i" -le "$pairs" ]; do
    printf -- '      - block: b%d\n        nodes: node[%d-%d]\n' "$i" $((2 * i - 1)) $((2 * i))
    i=$((i + 1))
  done
}

configure() {
  name="$1"; base="$2"
  nodes="${NODES:-4}"; cpus="${CPUS:-64}"; mem="${MEMORY_MB:-262144}"; gpus="${GPUS:-8}"
  shards=$((gpus * ${SHARDS_PER_GPU:-4}))
  typed=""; if [ "$nodes" -ge 2 ] && [ "$gpus" -ge 2 ]; then typed="node$nodes"; fi
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm /run/slurmctld /var/lib/slurmbridge-gpu
  chown slurm:slurm /var/spool/slurmctld /var/log/slurm /run/slurmctld
  chown root:root /run/slurm
  i=0; while [ "$i" -lt "$gpus" ]; do : > "/var/lib/slurmbridge-gpu/gpu$i"; i=$((i + 1)); done
  [ -s /etc/slurm/slurm.key ] || { head -c 1024 /dev/urandom > /etc/slurm/slurm.key; }
  [ -s /etc/slurm/jwt_hs256.key ] || { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > /etc/slurm/jwt_hs256.key; }
  chown slurm:slurm /etc/slurm/slurm.key /etc/slurm/jwt_hs256.key
  chmod 600 /etc/slurm/slurm.key /etc/slurm/jwt_hs256.key

  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=$name
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
SlurmUser=slurm
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((base + 2))
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu,gres/gpu:1g.10gb,gres/gpu:3g.40gb,gres/shard
PriorityType=priority/multifactor
PriorityWeightQOS=100000
PriorityWeightFairshare=10000
PriorityWeightAge=100
PreemptType=preempt/qos
PreemptMode=CANCEL
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu,shard
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5,sched_min_interval=100000
MinJobAge=600
ReturnToService=2
MpiDefault=none
MaxJobCount=100000
DefMemPerCPU=1024
CONF
  # slurmctld's own /metrics (Slurm >= 25.11, here 26.05; 24.11 has no metrics plugin): served on
  # SlurmctldPort, e.g. http://127.0.0.1:BASE/metrics/jobs (also /nodes, /partitions, /scheduler).
  if ls /usr/lib/*/slurm-wlm/metrics_openmetrics.so >/dev/null 2>&1; then
    echo "MetricsType=metrics/openmetrics" >> /etc/slurm/slurm.conf
  fi
  topology=""; rm -f /etc/slurm/topology.yaml
  if has_topology_yaml && [ "$nodes" -ge 2 ] && [ $((nodes % 2)) -eq 0 ]; then
    topology=yes; topology_yaml > /etc/slurm/topology.yaml
  fi
  k=1; while [ "$k" -le "$nodes" ]; do
    units=""; [ -z "$topology" ] || units="Topology=$(topology_units "$k") "
    echo "NodeName=node$k NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 10 + k)) CPUs=$cpus RealMemory=$mem Gres=$(node_gres "node$k") ${units}State=UNKNOWN" >> /etc/slurm/slurm.conf
    k=$((k + 1))
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >> /etc/slurm/slurm.conf
  echo "PartitionName=debug Nodes=ALL MaxTime=60 State=UP" >> /etc/slurm/slurm.conf
  if [ -n "$topology" ]; then
    echo "PartitionName=tree Nodes=ALL MaxTime=INFINITE State=UP Topology=tree" >> /etc/slurm/slurm.conf
    echo "PartitionName=block Nodes=ALL MaxTime=INFINITE State=UP Topology=block" >> /etc/slurm/slurm.conf
  fi
  # External nodes (Slurm 25.11+: POST /new/node/): Kubernetes nodes without slurmd the bridge
  # registers as dynamic nodes with feature slurmbridge-external; the NodeSet by that feature
  # is partition `external` (they also join the Nodes=ALL partitions).
  if slurm_at_least 25.11; then
    { echo "MaxNodeCount=$((nodes + 8))"
      echo "NodeSet=external Feature=slurmbridge-external"
      echo "PartitionName=external Nodes=external MaxTime=INFINITE State=UP"
    } >> /etc/slurm/slurm.conf
  fi

  gres_conf > /etc/slurm/gres.conf
  echo "CgroupPlugin=disabled" > /etc/slurm/cgroup.conf

  slurmdbd_conf $((base + 2))
}

# slurmdbd.conf (port $1) and MariaDB's: the accounting of one cluster, the database on a Unix
# socket only.  configure writes it; kind's controller (deploy/kind/slurmctld.sh) too.
slurmdbd_conf() {
  [ -s /etc/slurm/db.pass ] || { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > /etc/slurm/db.pass; }
  chown slurm:slurm /etc/slurm/db.pass; chmod 600 /etc/slurm/db.pass
  cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$1
SlurmUser=slurm
PidFile=/run/slurmctld/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$(cat /etc/slurm/db.pass)
StorageLoc=slurm_acct_db
CONF
  chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 600 /etc/slurm/slurmdbd.conf
  # MariaDB for this cluster alone: its Unix socket inside this root, no TCP port at all.
  mkdir -p /etc/mysql/mariadb.conf.d
  # The socket stays where the suite's client library looks (sid: /run/mariadbd, trixie: /run/mysqld).
  printf '[mysqld]\nskip-networking\ninnodb_lock_wait_timeout=900\n' \
    > /etc/mysql/mariadb.conf.d/90-slurmbridge.cnf
}

wait_for() {  # wait_for SECONDS WHAT CMD...: poll CMD every 0.25 s
  n=$(($1 * 4)); what="$2"; shift 2
  while ! "$@" >/dev/null 2>&1; do
    n=$((n - 1)); [ "$n" -gt 0 ] || { echo "recipe.sh: $what did not come up" >&2; return 1; }
    sleep 0.25
  done
}

# Start MariaDB (if not running) and slurmdbd on an empty accounting database: job ids start
# again at 1 with slurmctld's wiped state, so old records would collide with new jobs.
accounting() {
  name="$1"
  mkdir -p /run/mysqld /run/mariadbd /var/log/mysql /run/slurmdbd
  chown mysql:mysql /run/mysqld /run/mariadbd /var/log/mysql
  chown slurm:slurm /run/slurmdbd
  if ! mariadb-admin ping >/dev/null 2>&1; then
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    # Closing fds 3-9: a caller's lock (flock on /tmp/team/e2e.lock) must not outlive it here.
    setsid mariadbd --user=mysql --datadir=/var/lib/mysql --log-error=/var/log/mysql/mariadb.log \
      </dev/null >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
    wait_for 60 "MariaDB (/var/log/mysql/mariadb.log)" mariadb-admin ping
  fi
  # The database must exist before slurmdbd connects: 24.11's slurmdbd with trixie's
  # libmariadb 3.4 fails its first query on a connection that had to create it ("Number of
  # columns in result (=1) set execeeds maxmimum allowed number of columns (=0)").
  mariadb -u root <<SQL
DROP DATABASE IF EXISTS slurm_acct_db;
CREATE DATABASE slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$(cat /etc/slurm/db.pass)';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$(cat /etc/slurm/db.pass)';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
  slurmdbd 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-  # it keeps inherited fds (a caller's flock) when it forks
  wait_for 60 "slurmdbd (/var/log/slurm/slurmdbd.log)" sacctmgr -n list cluster
  sam add cluster "$name"
}

# The JWT of Slurm user $1, valid $2 seconds, alone on stdout: every cluster's token is
# minted here (cluster.sh's chroots, docker-entrypoint.sh's container, kind/slurmctld.sh's).
token() {
  scontrol token username="$1" lifespan="$2" | sed -n 's/^SLURM_JWT=//p'
}

# write_token DIR USER LIFESPAN: DIR/token replaced in one step (a reader never sees half of
# one), readable by whoever mounts DIR (dev clusters); fails, keeping the old one, when
# scontrol printed none.
write_token() {
  mkdir -p "$1"
  token "$2" "$3" > "$1/token.tmp"
  [ -s "$1/token.tmp" ] || return 1
  chmod 0644 "$1/token.tmp"
  mv "$1/token.tmp" "$1/token"
}

sam() {  # sacctmgr -i, where "it is already there" counts as done
  out="$(sacctmgr -i "$@" 2>&1)" && return 0
  case "$out" in *"Nothing new added"*|*"already exist"*|*"Nothing modified"*) return 0 ;; esac
  echo "recipe.sh: sacctmgr $*: $out" >&2; return 1
}

accounts() {
  wait_for 60 "the gres/gpu TRES (slurmctld registered with slurmdbd)" \
    sh -c 'sacctmgr -n -P list tres | grep -q "^gres|gpu|"'
  sam add qos low,high,gpu2
  sam modify qos where name=normal set priority=10
  sam modify qos where name=low set priority=0 preemptmode=cancel gracetime=$LOW_GRACE_SECONDS
  sam modify qos where name=high set priority=1000 preempt=low
  sam modify qos where name=gpu2 set priority=10 grptres=gres/gpu=2
  sam add account team-a,team-b,slurmbridge,research description=slurmbridge organization=slurmbridge
  sam add user alice account=team-a
  sam add user bob account=team-b
  sam add user slurm account=slurmbridge
  sam add user researcher account=research  # a Slurm user no namespace maps to (attack tests)
  for user in alice bob slurm root; do
    sam modify user where name=$user set qos=$QOS_ALL defaultqos=normal
  done
}

case "${1:-}" in
  install) install_packages ;;
  configure) shift; configure "$@" ;;
  slurmdbd-conf) shift; slurmdbd_conf "$@" ;;
  accounting) shift; accounting "$@" ;;
  accounts) accounts ;;
  token) shift; token "$@" ;;
  write-token) shift; write_token "$@" ;;
  *) echo "usage: recipe.sh install | configure NAME PORT_BASE | slurmdbd-conf PORT | accounting NAME | accounts" \
       "| token USER LIFESPAN | write-token DIR USER LIFESPAN" >&2
     exit 2 ;;
esac
