#!/usr/bin/env bash
# The demo (README's first command): local Slurm 26.05 + Kubernetes control plane +
# the bridge; sample pods (CPU, GPU, a 2-pod group) next to a native sbatch GPU job;
# prints `slurmbridge status` and `squeue`.  `bash deploy/demo.sh down` tears it down.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [[ "${1:-}" == down ]]; then
  "${SLURMBRIDGE_VENV:-.venv}/bin/python" deploy/demo/demo.py down || true
  bash deploy/k8s/controlplane.sh down
  bash deploy/slurm/cluster.sh down 26.05
  exit 0
fi

start=$SECONDS
venv_bin="$(bash deploy/dev/install.sh)"   # assigned first: `set -e` sees a failure
k8s_bin="$(bash deploy/k8s/build.sh)"
export PATH="$venv_bin:$k8s_bin:$PATH"     # the virtualenv first
bash deploy/slurm/cluster.sh up 26.05 >/dev/null
bash deploy/k8s/controlplane.sh up >/dev/null
python deploy/demo/demo.py down   # a previous demo's bridge, if any
python deploy/demo/demo.py up
echo "demo ready in $((SECONDS - start)) s"
