#!/bin/sh
# The one Slurm recipe, run *inside* the target root file system (a Debian
# chroot or a container image).  Two steps:
#   recipe.sh install              install the Debian packages and users
#   recipe.sh configure NAME BASE  write slurm.conf & co for cluster NAME whose
#                                  ports start at BASE (ctld=BASE, rest=BASE+1,
#                                  slurmd nodeK=BASE+10+K)
# Node shape comes from NODES (default 4), CPUS (64), MEMORY_MB (262144), GPUS (8).
set -eu

install_packages() {
  export DEBIAN_FRONTEND=noninteractive
  # Stored mirrors may serve a sid Release file past its Valid-Until date.
  apt-get -o Acquire::Check-Valid-Until=false update -qq
  apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin procps ca-certificates >/dev/null
  apt-get clean
  getent passwd slurmrest >/dev/null || useradd -r -M -s /usr/sbin/nologin slurmrest
  getent passwd researcher >/dev/null || useradd -m -s /bin/sh researcher
}

configure() {
  name="$1"; base="$2"
  nodes="${NODES:-4}"; cpus="${CPUS:-64}"; mem="${MEMORY_MB:-262144}"; gpus="${GPUS:-8}"
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
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5,sched_min_interval=100000
MinJobAge=600
ReturnToService=2
MpiDefault=none
MaxJobCount=100000
DefMemPerCPU=1024
CONF
  k=1; while [ "$k" -le "$nodes" ]; do
    echo "NodeName=node$k NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 10 + k)) CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN" >> /etc/slurm/slurm.conf
    k=$((k + 1))
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >> /etc/slurm/slurm.conf
  echo "PartitionName=debug Nodes=ALL MaxTime=60 State=UP" >> /etc/slurm/slurm.conf

  last=$((gpus - 1))
  echo "Name=gpu File=/var/lib/slurmbridge-gpu/gpu[0-$last]" > /etc/slurm/gres.conf
  echo "CgroupPlugin=disabled" > /etc/slurm/cgroup.conf
}

case "${1:-}" in
  install) install_packages ;;
  configure) shift; configure "$@" ;;
  *) echo "usage: recipe.sh install | configure NAME PORT_BASE" >&2; exit 2 ;;
esac
