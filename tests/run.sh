#!/usr/bin/env bash
# The test command (README): installs what the tests need, starts the real Slurm
# clusters (chroots and the dockerized one), the Kubernetes control plane and the kind
# cluster they use, then lints and runs pytest.
# Leaves the clusters running for a faster next run unless SLURMBRIDGE_STOP=1.
set -euo pipefail
cd "$(dirname "$0")/.."

# The virtualenv's python, ruff, mypy, lint-imports and slurmbridge from here on.
# (assigned first: `export X="$(cmd)"` would hide a failing cmd from `set -e`)
venv_bin="$(bash deploy/dev/install.sh)"
export PATH="$venv_bin:$PATH"
# The same install step on a stock Debian 12 (fresh container; skipped when nothing changed).
bash deploy/dev/check-install.sh
k8s_bin="$(bash deploy/k8s/build.sh)"
bash deploy/k8s/kueue.sh >/dev/null   # Kueue's manager + CRDs for tests/e2e/test_workloads.py
export PATH="$k8s_bin:$PATH"
versions="${SLURMBRIDGE_TEST_SLURM_VERSIONS:-24.11,26.05}"
if [[ -z "${SLURMBRIDGE_TEST_SLURM_URL:-}" ]]; then
  for v in ${versions//,/ }; do bash deploy/slurm/cluster.sh up "$v"; done
fi
bash deploy/k8s/controlplane.sh up
# The dockerized Slurm (deploy/slurm/compose.yaml, Slurm 26.05 in a container, REST on
# 127.0.0.1:6820): the integration suite runs against it too, ids [slurm-docker-26.05].
if [[ -z "${SLURMBRIDGE_TEST_SLURM_URL:-}" ]]; then
  docker_env="$(bash deploy/slurm/docker.sh up)"
fi

if [[ "${SLURMBRIDGE_STOP:-0}" == 1 ]]; then
  trap 'bash deploy/k8s/controlplane.sh down; for v in ${versions//,/ }; do bash deploy/slurm/cluster.sh down "$v"; done; bash deploy/slurm/docker.sh down; bash deploy/kind/up.sh down' EXIT
fi

ruff check .
mypy
lint-imports   # the layering (pyproject.toml [tool.importlinter], docs/architecture.md)
mkdir -p .ci
# pytest exits 5 when it collected nothing: with `set -e` that fails the run too.
python -m pytest --junitxml=.ci/junit.xml "$@"
if [[ -n "${docker_env:-}" ]]; then
  (eval "$docker_env"; python -m pytest tests/integration --junitxml=.ci/junit-docker.xml)
fi
# Real kubelets and hybrid nodes (kubelet + slurmd on each kind worker, Kubernetes 1.36, the
# chart installed with its own RBAC): deploy/kind/up.sh builds every image here, then tests/kind.
bash deploy/kind/up.sh
bash deploy/kind/up.sh demo-clean
python -m pytest -m kind tests/kind --junitxml=.ci/junit-kind.xml
