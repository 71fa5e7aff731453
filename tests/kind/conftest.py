"""Fixtures of the kind tests: the cluster of deploy/kind/up.sh, a namespace per test, and
cleanup of the native Slurm jobs a test submits.  A missing cluster fails every test with
what is missing and the command that starts it; nothing here skips."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import keys
from slurmbridge_devkit.namespaces import unique_name
from tests.kind.cluster import UP, Kind, run, wait

START = f"start it with: bash {UP.relative_to(UP.parents[2])}"


@pytest.fixture(scope="session")
def kind() -> Kind:
    try:
        env = dict(line.split("=", 1) for line in run(["bash", str(UP), "env"]).splitlines())
    except (OSError, AssertionError) as exc:
        pytest.fail(f"kind cluster: cannot read its settings ({exc}); {START}")
    cluster = Kind(
        kubeconfig=Path(env["KUBECONFIG"]),
        slurm_container=env["SLURMBRIDGE_KIND_SLURM_CONTAINER"],
        namespace=env["SLURMBRIDGE_KIND_NAMESPACE"],
        release=env["SLURMBRIDGE_KIND_RELEASE"],
    )
    problems = []
    try:
        workers, external = cluster.workers(), cluster.external_workers()
        if len(workers) < 2 or not external:
            problems.append(f"2 kind workers with slurmd and 1 without wanted, found {workers} "
                            f"and {external}")
    except (OSError, AssertionError) as exc:
        problems.append(f"kubectl cannot reach the kind cluster ({exc})")
    try:
        cluster.slurm("scontrol", "ping")
    except (OSError, AssertionError) as exc:
        problems.append(f"Slurm controller container {cluster.slurm_container} ({exc})")
    if not problems:
        try:
            cluster.kubectl("-n", cluster.namespace, "rollout", "status",
                            f"deploy/{cluster.release}-extender", "--timeout=60s")
        except AssertionError as exc:
            problems.append(f"the bridge is not deployed ({exc})")
    if problems:
        pytest.fail("kind cluster missing: " + "; ".join(problems) + f"; {START}")
    # The tests count GPUs: they need nodes no one else uses (a previous test's jobs may
    # still be leaving).
    try:
        wait(lambda: not kind_jobs(cluster), 60, "idle Slurm nodes", interval=1)
    except AssertionError:
        pytest.fail(f"kind cluster busy: Slurm jobs {kind_jobs(cluster)} hold its nodes; the "
                    f"tests need idle nodes (bash {UP.relative_to(UP.parents[2])} demo-clean "
                    "removes the demo's)")
    return cluster


def kind_jobs(cluster: Kind) -> list[str]:
    return cluster.slurm("squeue", "-h", "-o", "%i %j %T").splitlines()


@pytest.fixture
def ns(kind: Kind, request: pytest.FixtureRequest) -> Iterator[str]:
    """An enrolled namespace: every pod in it goes through Slurm."""
    name = unique_name(f"kt-{request.node.name}")
    # Labelled in the create: the webhook must see the namespace enrolled from its first pod.
    kind.kubectl("create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {keys.NAMESPACE_ENROLLED: "true"}}}))
    yield name
    kind.kubectl("delete", "namespace", name, "--wait=false", check=False)
    # The bridge cancels the jobs of deleted pods: wait so the next test finds free GPUs.
    wait(lambda: not kind.slurm("squeue", "-h", "-o", "%j", check=False).count(f"k8s:{name}/"),
         120, f"the jobs of namespace {name} to leave Slurm")


@pytest.fixture
def plain_ns(kind: Kind, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace the bridge does not serve (not enrolled): the default scheduler's pods."""
    name = unique_name(f"kt-{request.node.name}")
    kind.kubectl("create", "namespace", name)
    yield name
    kind.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def native(kind: Kind) -> Iterator[list[str]]:
    """Native sbatch job ids a test appends to; cancelled at the end."""
    jobs: list[str] = []
    yield jobs
    if jobs:
        kind.slurm("scancel", *jobs, check=False)
