#!/usr/bin/env bash
# The test command (README): installs what the tests need, builds and starts the real Slurm
# clusters (chroots and the dockerized one), the Kubernetes control planes and the kind
# cluster they use, then lints and runs every test tier.  Independent steps run side by
# side (deploy/dev/stages.sh): the Go builds (CPU) beside the debootstraps, apt downloads and
# image builds (network, disk); then the tiers, each with its own Slurm, control plane and
# JUnit file in .ci/.  One line per stage with its duration; stage logs in .ci/logs/.
#   bash tests/run.sh              everything
#   bash tests/run.sh ARGS...      the same set-up, then one pytest with ARGS (no tiers, no kind)
# Leaves the clusters running for a faster next run unless SLURMBRIDGE_STOP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../deploy/dev/stages.sh
source deploy/dev/stages.sh

# The virtualenv's python, ruff, mypy, lint-imports and slurmbridge from here on.
venv_install() { bash deploy/dev/install.sh > "$STAGE_LOGS/venv-bin"; }
stage install venv_install
venv_bin="$(cat "$STAGE_LOGS/venv-bin")"
export PATH="$venv_bin:$PATH"
k8s_bin="$(bash deploy/k8s/build.sh bin)"
export PATH="$k8s_bin:$PATH"
versions="${SLURMBRIDGE_TEST_SLURM_VERSIONS:-24.11,26.05}"
[[ -z "${SLURMBRIDGE_TEST_SLURM_URL:-}" ]] || versions=""   # a site's Slurm: one target, no chroots
docker_env="$STAGE_LOGS/docker.env"

# --- set-up: CPU-bound Go builds one after the other, the rest beside them ---------------------

install_check() { after engine; bash deploy/dev/check-install.sh; }
kueue_build() { after k8s-build; bash deploy/k8s/kueue.sh; }
slurm_docker() { after engine; bash deploy/slurm/docker.sh up > "$docker_env"; }
kind_build() { after engine kueue-build; bash deploy/kind/up.sh build; }
k8s_136_build() { after kueue-build; K8S_VERSION=1.36.3 bash deploy/k8s/build.sh; }
# Lint: the Python (ruff, mypy, the layers) and every shell script (deploy/'s, this one, .ci/run).
lint() { ruff check .; mypy; lint-imports; find deploy tests -name '*.sh' -exec shellcheck .ci/run {} +; }

stage_start engine bash deploy/docker/engine.sh
stage_start install-check install_check
stage_start k8s-build bash deploy/k8s/build.sh
stage_start kueue-build kueue_build
for v in ${versions//,/ }; do
  stage_start "slurm-$v" bash deploy/slurm/cluster.sh up "$v"
done
[[ -z "$versions" ]] || stage_start slurm-docker slurm_docker
(( $# )) || stage_start kind-build kind_build
(( $# )) || [[ -z "$versions" ]] || stage_start k8s-1.36-build k8s_136_build
stage lint lint
stage_start unit python -m pytest tests/unit --junitxml=.ci/junit-unit.xml -p no:cacheprovider

if [[ "${SLURMBRIDGE_STOP:-0}" == 1 ]]; then
  trap 'for i in 0 1 2; do SLURMBRIDGE_CP_INSTANCE=$i bash deploy/k8s/controlplane.sh down; done; for v in ${versions//,/ }; do bash deploy/slurm/cluster.sh down "$v"; done; bash deploy/slurm/docker.sh down; bash deploy/kind/up.sh down' EXIT
fi

# --- test tiers -----------------------------------------------------------------------------

# One control plane per Slurm version (deploy/k8s/controlplane.sh instances): each tier's
# bridge, its second kube-scheduler, its Nodes kube-node1..4 and its webhooks are cluster-wide
# objects, so two tiers never share an API server.  Both run etcd from the sid chroot, which
# `cluster.sh up 26.05` builds: they start after it.
tier_e2e() {  # VERSION INSTANCE: integration + e2e against that Slurm, on control plane INSTANCE
  local v="$1"
  after k8s-build kueue-build "slurm-$v"
  [[ ",$versions," != *,26.05,* ]] || after slurm-26.05   # etcd's chroot
  export SLURMBRIDGE_CP_INSTANCE="$2" SLURMBRIDGE_TEST_SLURM_VERSIONS="$v"
  export SLURMBRIDGE_SCHEDULER_VERBOSITY=2   # a pod left pending says why in its scheduler's log
  bash deploy/k8s/controlplane.sh up >/dev/null
  # The tests that use no Slurm (control plane, chart, admission alone) run in the first tier.
  (( $2 == 0 )) || export SLURMBRIDGE_TEST_SLURM_ONLY=1
  python -m pytest tests/integration tests/e2e --junitxml=".ci/junit-e2e-$v.xml" \
    -p no:cacheprovider --durations=30
}

# Kubernetes 1.36, the other minor the bridge supports: the gated pod's release (one write lifts
# the gate, records the job, narrows the pod's node affinity: KEP-3838) and the Workload API
# (v1alpha2 there) against a 1.36.3 control plane, instance 2, on the first tier's Slurm once
# that tier is done (two bridges on one Slurm would cancel each other's jobs as orphans, and
# test_gated fills every node).
tier_k8s_136() {
  local v="${versions%%,*}"
  after k8s-1.36-build "e2e-$v"
  export K8S_VERSION=1.36.3 SLURMBRIDGE_CP_INSTANCE=2 SLURMBRIDGE_TEST_SLURM_VERSIONS="$v"
  export SLURMBRIDGE_TEST_SLURM_ONLY=1
  PATH="$(bash deploy/k8s/build.sh bin):$PATH"
  bash deploy/k8s/controlplane.sh up >/dev/null
  python -m pytest tests/e2e/test_gated.py \
    tests/e2e/test_workloads.py::test_workload_api_gang_pod_group_is_one_slurm_job_and_finishing_leaves_none \
    --junitxml=.ci/junit-e2e-k8s-1.36.xml -p no:cacheprovider
}

tier_site() {  # a site's own slurmrestd (SLURMBRIDGE_TEST_SLURM_URL): one tier, every test
  after k8s-build kueue-build
  bash deploy/k8s/controlplane.sh up >/dev/null
  python -m pytest tests/integration tests/e2e --junitxml=.ci/junit-e2e-site.xml -p no:cacheprovider
}

tier_docker() {  # the integration suite against the dockerized Slurm, ids [slurm-docker-26.05]
  after slurm-docker
  eval "$(cat "$docker_env")"
  python -m pytest tests/integration --junitxml=.ci/junit-docker.xml -p no:cacheprovider
}

# Real kubelets and hybrid nodes (kubelet + slurmd on each kind worker, the chart installed
# with its own RBAC): deploy/kind/up.sh builds every image here, then tests/kind.
tier_kind() {
  after kind-build
  bash deploy/kind/up.sh
  bash deploy/kind/up.sh demo-clean
  python -m pytest -m kind tests/kind --junitxml=.ci/junit-kind.xml -p no:cacheprovider
}

if (( $# )); then   # one pytest with the caller's arguments, every Slurm set up
  stage_wait "${!STAGE_PID[@]}"
  bash deploy/k8s/controlplane.sh up >/dev/null
  python -m pytest "$@"
  exit
fi

tiers=(unit)
if [[ -n "$versions" ]]; then
  i=0
  for v in ${versions//,/ }; do
    stage_start "e2e-$v" tier_e2e "$v" "$i"; tiers+=("e2e-$v"); i=$((i + 1))
  done
  stage_start e2e-k8s-1.36 tier_k8s_136; tiers+=(e2e-k8s-1.36)
  stage_start integration-docker tier_docker; tiers+=(integration-docker)
else
  stage_start e2e-site tier_site; tiers+=(e2e-site)
fi
stage_start kind tier_kind; tiers+=(kind)
stage_wait "${!STAGE_PID[@]}"

# Every tier's own closing line, then the sum (pytest exits 5 when it collected nothing: a
# tier with no test fails above).
python - "${tiers[@]}" <<'PY'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

totals = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
for tier in sys.argv[1:]:
    root = ET.parse(Path(".ci") / f"junit-{tier.removeprefix('integration-')}.xml").getroot()
    n = dict.fromkeys(totals, 0)
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            n["failed"] += 1
        elif (skip := case.find("skipped")) is not None:
            n["xfailed" if skip.get("type") == "pytest.xfail" else "skipped"] += 1
        else:
            n["passed"] += 1
    known = f", {n['xfailed']} xfailed (known bugs)" if n["xfailed"] else ""
    print(f"[tier] {tier:<18} {n['passed']} passed, {n['failed']} failed, "
          f"{n['skipped']} skipped{known}")
    for key in totals:
        totals[key] += n[key]
print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
PY
printf '[stage] all tiers passed in %d s\n' "$((SECONDS - STAGE_RUN_T0))"
