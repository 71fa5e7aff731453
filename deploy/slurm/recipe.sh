#!/bin/sh
# The one Slurm recipe, run *inside* the target root file system (a Debian chroot or a
# container), the only writer of every cluster's slurm.conf, gres.conf, topology.yaml,
# slurmdbd.conf and tokens: cluster.sh's chroots, the docker cluster (docker-entrypoint.sh)
# and kind's controller (deploy/kind/slurmctld.sh).  Steps:
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
#   recipe.sh keep-token DIR USER LIFESPAN EVERY   write it again every EVERY seconds while
#                                  slurmctld runs; fails with slurmctld's last log lines then
# Node shape comes from NODES (default 4), CPUS (64), MEMORY_MB (262144), GPUS (8).
# Each GPU is also SHARDS_PER_GPU (4) Slurm gres/shard on the same placeholder file, so pods and
# native jobs can share one GPU (--gres=shard:N); a GPU is either whole or shared at one time.
# With 2+ nodes and 2+ GPUs, the last node's GPUs are MIG-style typed slices instead (no
# shards): the first half Type=1g.10gb, the rest Type=3g.40gb (--gres=gpu:1g.10gb:N); an
# untyped request (--gres=gpu:N) may still take them.
#
# What sets one cluster apart from another: configure's options, from the environment.  The
# default is the chroot and docker clusters' setting; "kind:" is deploy/kind/slurmctld.sh's.
# "Why: not stated" marks a setting nothing in the tree explains; kind keeps its own value.
#   NODE_HOSTS="h1 h2"     one slurmd on each host, its Slurm node named as the host, on Slurm's
#                          default port, one spool, pid and log file per host.  Unset: NODES
#                          slurmd in this root, nodeK on 127.0.0.1 port BASE+10+K, files per
#                          node (%n), their spool folders and GPU files made here.  kind: its
#                          workers with slurmd (up.sh's SLURM_NODES)
#   CONTROLLER_HOST        SlurmctldHost (localhost(127.0.0.1)).  kind: the container's host
#                          name, which slurmd on the workers reach
#   CONFIGLESS=1           slurmd fetch slurm.conf and gres.conf from slurmctld (0).  kind: 1,
#                          its workers have no copy
#   KEYS_FROM=DIR          slurm.key and jwt_hs256.key copied from DIR, shared with slurmd on
#                          other hosts (unset: made here when missing).  kind: /keys
#   EXTERNAL_NODES="h3"    Kubernetes nodes without slurmd the bridge registers as dynamic
#                          nodes; gres.conf gives each EXTERNAL_GPUS (2) GPUs (none).  kind:
#                          its worker without slurmd
#   SPARE_NODE_SLOTS       MaxNodeCount beyond the declared and the external nodes: room for
#                          the dynamic nodes tests register (8).  kind: 4, why: not stated
#   TOPOLOGY_LAYOUT        pairs: a leaf switch and a block of 2 per pair of nodes (an even
#                          count); leaf-per-node: a leaf per node, one block of all (pairs).
#                          kind: leaf-per-node, which tests/kind/test_cluster.py's topology
#                          test expects (leafK per worker, all in b1)
#   TOPOLOGY_PARTITIONS    all-nodes: partitions tree and block on Nodes=ALL, which dynamic
#                          nodes join too; slurmd-nodes: on the declared nodes alone
#                          (all-nodes).  kind: slurmd-nodes, why: not stated
#   TYPED_GPU_SLICES=0     no typed GPUs, and AccountingStorageTRES names none (1).  kind: 0,
#                          why: not stated
#   ACCOUNT_POLICY=0       no AccountingStorageEnforce (associations, limits, QOS), multifactor
#                          priority (QOS, fair share, age) or preempt/qos: the policy of the
#                          tree `accounts` makes (1).  kind: 0, it never runs `accounts`, and
#                          enforced associations would refuse every job of a user without one
#   JOB_ACCT_GATHER        the jobacct_gather plugin (linux).  kind: none, why: not stated
#   MAX_JOB_COUNT          MaxJobCount, empty for Slurm's 10000 (100000: benchmark B5 queues
#                          10,000 jobs beside the bridge's).  kind: empty, why: not stated
#   OPENMETRICS=0          no MetricsType=metrics/openmetrics, even where the plugin is
#                          installed (1).  kind: 0, why: not stated
#   SLURMD_TIMEOUT         SlurmdTimeout, empty for Slurm's 300 s (empty).  kind: 60, why:
#                          not stated
#   DEBUG_PARTITION=0      no partition debug (MaxTime=60 on all nodes) (1).  kind: 0, why:
#                          not stated
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

joined() { echo "$1" | xargs | tr ' ' ','; }  # joined "a b": the Slurm node list a,b

untyped_nodes() {  # the declared nodes whose GPUs are untyped, as gres.conf names them
  if [ -z "$hosts" ]; then echo "node[1-$((nodes - 1))]"; return; fi
  joined "$(for host in $hosts; do [ "$host" = "$typed" ] || echo "$host"; done)"
}

# The GPU and shard devices (placeholder files, one per GPU): of every node, or where nodes
# differ (typed slices, external nodes) of the named ones.
gres_conf() {
  dev=/var/lib/slurmbridge-gpu/gpu; last=$((gpus - 1)); scope=""
  if [ -n "$typed" ] || [ -n "$hosts" ]; then scope="NodeName=$(untyped_nodes) "; fi
  echo "${scope}Name=gpu File=${dev}[0-$last]"
  [ "$shards" -eq 0 ] || echo "${scope}Name=shard Count=$shards File=${dev}[0-$last]"
  if [ -n "$typed" ]; then
    half=$((gpus / 2))
    echo "NodeName=$typed Name=gpu Type=1g.10gb File=${dev}[0-$((half - 1))]"
    echo "NodeName=$typed Name=gpu Type=3g.40gb File=${dev}[$half-$last]"
  fi
  for node in $external; do
    echo "NodeName=$node Name=gpu File=${dev}[0-$((${EXTERNAL_GPUS:-2} - 1))]"
  done
}

# Network topology, where Slurm has topology.yaml (25.05+; several topologies in one cluster):
# partitions main and debug keep the flat cluster default; partition `tree` places by leaf
# switches under one spine (--switches=N), partition `block` by blocks (--segment=N), both as
# TOPOLOGY_LAYOUT lays them out.  Each node also names its units (NodeName ... Topology=
# tree:leafI,block:bI), the only form slurmrestd shows (a node's "topology"; no endpoint serves
# the structure).  Tests choose by partition.  24.11 has one topology plugin per cluster: it
# stays flat.
slurm_at_least() {  # slurm_at_least 25.05: the installed slurmctld is that version or newer
  v="$(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null | cut -d- -f1)"
  [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$v" "$1" | sort -V | head -n 1)" = "$1" ]
}

has_topology() {  # Slurm has topology.yaml, and the layout fits the node count
  slurm_at_least 25.05 || return 1
  case "$layout" in
    pairs) [ "$nodes" -ge 2 ] && [ $((nodes % 2)) -eq 0 ] ;;
    leaf-per-node) [ "$nodes" -ge 1 ] ;;
    *) echo "recipe.sh: TOPOLOGY_LAYOUT=$layout: pairs or leaf-per-node" >&2; exit 2 ;;
  esac
}

nth_node() { echo "$names" | cut -d' ' -f"$1"; }

# The layout's units: how many leaves (= blocks for pairs), and which nodes each holds.
leaf_count() { if [ "$layout" = pairs ]; then echo $((nodes / 2)); else echo "$nodes"; fi; }
leaf_nodes() {
  if [ "$layout" = pairs ]; then echo "node[$((2 * $1 - 1))-$((2 * $1))]"; else nth_node "$1"; fi
}
block_count() { if [ "$layout" = pairs ]; then leaf_count; else echo 1; fi; }
block_size() { if [ "$layout" = pairs ]; then echo 2; else echo "$nodes"; fi; }
block_nodes() { if [ "$layout" = pairs ]; then leaf_nodes "$1"; else joined "$names"; fi; }
topology_units() {  # topology_units K: the units of node K
  if [ "$layout" = pairs ]; then echo "tree:leaf$(( ($1 + 1) / 2 )),block:b$(( ($1 + 1) / 2 ))"
  else echo "tree:leaf$1,block:b1"; fi
}

topology_yaml() {
  printf -- '---\n- topology: flat\n  cluster_default: true\n  flat: true\n'
  printf -- '- topology: tree\n  cluster_default: false\n  tree:\n    switches:\n'
  printf -- '      - switch: spine\n        children: leaf[1-%d]\n' "$(leaf_count)"
  i=1; while [ "$i" -le "$(leaf_count)" ]; do
    printf -- '      - switch: leaf%d\n        nodes: %s\n' "$i" "$(leaf_nodes "$i")"
    i=$((i + 1))
  done
  printf -- '- topology: block\n  cluster_default: false\n  block:\n    block_sizes:\n      - %d\n    blocks:\n' "$(block_size)"
  i=1; while [ "$i" -le "$(block_count)" ]; do
    printf -- '      - block: b%d\n        nodes: %s\n' "$i" "$(block_nodes "$i")"
    i=$((i + 1))
  done
}

setting() { [ -z "$2" ] || echo "$1=$2"; }  # a slurm.conf line, left out when its value is empty
on() { [ "$1" = 1 ] && echo "$2"; }          # on FLAG VALUE: VALUE when FLAG is 1

# Files per slurmd: several in this root tell theirs apart by node name (%n).
slurmd_files() {  # slurmd_files: SlurmdSpoolDir, SlurmdPidFile, SlurmdLogFile as shell words
  if [ -n "$hosts" ]; then echo "/var/spool/slurmd /run/slurmd.pid /var/log/slurm/slurmd.log"
  else echo "/var/spool/slurmd/%n /run/slurm/slurmd-%n.pid /var/log/slurm/slurmd-%n.log"; fi
}

slurm_conf_head() {  # the cluster-wide settings
  policy="${ACCOUNT_POLICY:-1}"
  # shellcheck disable=SC2046  # three paths without spaces, one per word
  set -- $(slurmd_files)
  cat <<CONF
ClusterName=$name
SlurmctldHost=${CONTROLLER_HOST:-localhost(127.0.0.1)}
SlurmctldPort=$base
CONF
  setting SlurmctldParameters "$(on "${CONFIGLESS:-0}" enable_configless)"
  cat <<CONF
SlurmUser=slurm
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=$1
SlurmctldPidFile=/run/slurmctld/slurmctld.pid
SlurmdPidFile=$2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=$3
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/${JOB_ACCT_GATHER:-linux}
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((base + 2))
CONF
  setting AccountingStorageEnforce "$(on "$policy" associations,limits,qos)"
  echo "AccountingStorageTRES=gres/gpu,$(on "${TYPED_GPU_SLICES:-1}" gres/gpu:1g.10gb,gres/gpu:3g.40gb,)gres/shard"
  if [ "$policy" = 1 ]; then
    printf '%s\n' PriorityType=priority/multifactor PriorityWeightQOS=100000 \
      PriorityWeightFairshare=10000 PriorityWeightAge=100 PreemptType=preempt/qos PreemptMode=CANCEL
  fi
  cat <<CONF
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu,shard
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5,sched_min_interval=100000
MinJobAge=600
ReturnToService=2
CONF
  setting SlurmdTimeout "${SLURMD_TIMEOUT:-}"
  echo "MpiDefault=none"
  setting MaxJobCount "${MAX_JOB_COUNT-100000}"
  echo "DefMemPerCPU=1024"
  # slurmctld's own /metrics (Slurm >= 25.11, here 26.05; 24.11 has no metrics plugin): served on
  # SlurmctldPort, e.g. http://127.0.0.1:BASE/metrics/jobs (also /nodes, /partitions, /scheduler).
  if [ "${OPENMETRICS:-1}" = 1 ] && ls /usr/lib/*/slurm-wlm/metrics_openmetrics.so >/dev/null 2>&1; then
    echo "MetricsType=metrics/openmetrics"
  fi
}

slurm_conf_nodes() {  # the nodes (with their topology units when $topology) and partitions
  k=1; for node in $names; do
    units=""; [ -z "$topology" ] || units="Topology=$(topology_units "$k") "
    where=""; [ -n "$hosts" ] || where="NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 10 + k)) "
    echo "NodeName=$node ${where}CPUs=$cpus RealMemory=$mem Gres=$(node_gres "$node") ${units}State=UNKNOWN"
    k=$((k + 1))
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  [ "${DEBUG_PARTITION:-1}" = 0 ] || echo "PartitionName=debug Nodes=ALL MaxTime=60 State=UP"
  if [ -n "$topology" ]; then
    case "${TOPOLOGY_PARTITIONS:-all-nodes}" in
      all-nodes) on_nodes=ALL ;;
      slurmd-nodes) on_nodes="$(joined "$names")" ;;
      *) echo "recipe.sh: TOPOLOGY_PARTITIONS: all-nodes or slurmd-nodes" >&2; exit 2 ;;
    esac
    echo "PartitionName=tree Nodes=$on_nodes MaxTime=INFINITE State=UP Topology=tree"
    echo "PartitionName=block Nodes=$on_nodes MaxTime=INFINITE State=UP Topology=block"
  fi
  # External nodes (Slurm 25.11+: POST /new/node/): Kubernetes nodes without slurmd the bridge
  # registers as dynamic nodes with feature slurmbridge-external; the NodeSet by that feature
  # is partition `external` (they also join the Nodes=ALL partitions).
  if slurm_at_least 25.11; then
    echo "MaxNodeCount=$((nodes + $(echo "$external" | wc -w) + ${SPARE_NODE_SLOTS:-8}))"
    echo "NodeSet=external Feature=slurmbridge-external"
    echo "PartitionName=external Nodes=external MaxTime=INFINITE State=UP"
  fi
}

# slurm.key and the JWT key: from KEYS_FROM (shared with slurmd on other hosts), or made once.
install_keys() {
  if [ -n "${KEYS_FROM:-}" ]; then install -m 0600 "$KEYS_FROM/slurm.key" "$KEYS_FROM/jwt_hs256.key" /etc/slurm/; fi
  [ -s /etc/slurm/slurm.key ] || { head -c 1024 /dev/urandom > /etc/slurm/slurm.key; }
  [ -s /etc/slurm/jwt_hs256.key ] || { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > /etc/slurm/jwt_hs256.key; }
  chown slurm:slurm /etc/slurm/slurm.key /etc/slurm/jwt_hs256.key
  chmod 600 /etc/slurm/slurm.key /etc/slurm/jwt_hs256.key
}

# The folders of the daemons in this root; slurmd's, and its GPU files, only when it runs here.
make_folders() {
  mkdir -p /etc/slurm /var/spool/slurmctld /var/log/slurm /run/slurmctld
  chown slurm:slurm /var/spool/slurmctld /var/log/slurm /run/slurmctld
  [ -z "$hosts" ] || return 0
  mkdir -p /var/spool/slurmd /run/slurm /var/lib/slurmbridge-gpu
  chown root:root /run/slurm
  i=0; while [ "$i" -lt "$gpus" ]; do : > "/var/lib/slurmbridge-gpu/gpu$i"; i=$((i + 1)); done
}

configure() {
  name="$1"; base="$2"; hosts="${NODE_HOSTS:-}"; external="${EXTERNAL_NODES:-}"
  layout="${TOPOLOGY_LAYOUT:-pairs}"
  if [ -n "$hosts" ]; then names="$(echo "$hosts" | xargs)"; nodes="$(echo "$hosts" | wc -w)"
  else nodes="${NODES:-4}"; names="$(seq -f 'node%g' -s ' ' 1 "$nodes")"; fi
  cpus="${CPUS:-64}"; mem="${MEMORY_MB:-262144}"; gpus="${GPUS:-8}"
  shards=$((gpus * ${SHARDS_PER_GPU:-4}))
  typed=""
  if [ "${TYPED_GPU_SLICES:-1}" = 1 ] && [ "$nodes" -ge 2 ] && [ "$gpus" -ge 2 ]; then typed="$(nth_node "$nodes")"; fi
  make_folders
  install_keys
  topology=""; rm -f /etc/slurm/topology.yaml
  if has_topology; then topology=yes; topology_yaml > /etc/slurm/topology.yaml; fi
  { slurm_conf_head; slurm_conf_nodes; } > /etc/slurm/slurm.conf
  gres_conf > /etc/slurm/gres.conf
  echo "CgroupPlugin=disabled" > /etc/slurm/cgroup.conf
  slurmdbd_conf $((base + 2))
}

# slurmdbd.conf (port $1) and MariaDB's: the accounting of one cluster, the database on a Unix
# socket only, written by configure.
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

# keep_token DIR USER LIFESPAN EVERY: a container's last step, so it ends when slurmctld does
# (a pid file gone or a dead pid) and its restart policy can start it again.
keep_token() {
  since=0
  while kill -0 "$(cat /run/slurmctld/slurmctld.pid 2>/dev/null || echo 0)" 2>/dev/null; do
    sleep 5
    since=$((since + 5))
    if [ "$since" -ge "$4" ]; then
      write_token "$1" "$2" "$3" || echo "recipe.sh: scontrol token printed nothing" >&2
      since=0
    fi
  done
  echo "recipe.sh: slurmctld exited:" >&2; tail -n 20 /var/log/slurm/slurmctld.log >&2
  return 1
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
  accounting) shift; accounting "$@" ;;
  accounts) accounts ;;
  token) shift; token "$@" ;;
  write-token) shift; write_token "$@" ;;
  keep-token) shift; keep_token "$@" ;;
  *) echo "usage: recipe.sh install | configure NAME PORT_BASE | accounting NAME | accounts" \
       "| token USER LIFESPAN | write-token DIR USER LIFESPAN | keep-token DIR USER LIFESPAN EVERY" >&2
     exit 2 ;;
esac
