"""A mixed group's heterogeneous job ended by Slurm (issue 43): a higher-priority native job
needs a worker's node, and the group's members are told as a preempted pod is.  What Slurm
does, on 24.11 and 26.05 alike: it preempts the heterogeneous job whole, signalling every
component (slurmrestd: each record's ``preempt_time``), the launcher's too, though only the
workers' node was wanted; the bridge evicts every member at the signal and, once they are
gone, cancels what is left before the QOS's GraceTime ends it.  A time limit is each
component's own: Slurm ends the workers' component alone (TIMEOUT), and the bridge ends the
group.

Needs slurmdbd behind every local Slurm (deploy/slurm/recipe.sh: account team-a, user alice,
QOS low (preemptable, GraceTime 15 s) and high (preempts low))."""

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.slurm.client import SlurmClient
from bridge.slurm.wire.base import JobsResponse
from slurmbridge_devkit.e2e import create_pod, pod_events, pod_manifest, quiet_namespace, wait_bound
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.namespaces import kubectl_plugin, namespace_user
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import DEFAULT_TENANCY, BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for
from tests.e2e.test_accounting import accounting_ready
from tests.e2e.test_kubectl_plugin import READ_PODS_AND_EVENTS

pytestmark = pytest.mark.e2e

NAMES = ("launcher", "worker-0", "worker-1")


def _member(name: str, rank: int, component: str, gpus: int) -> Pod:
    labels = {keys.GROUP: "mix", keys.GROUP_SIZE: "3", keys.GROUP_RANK: str(rank),
              keys.GROUP_COMPONENT: component}
    annotations = {keys.GROUP_COMPONENTS: "launcher=1,workers=2", keys.QOS: "low"}
    return pod_manifest(name, cpu="1", gpus=gpus, labels=labels, annotations=annotations)


@pytest.fixture
async def low_qos(
    bridge_stack: BridgeStack, e2e_namespace: NamespaceFactory
) -> AsyncIterator[tuple[SlurmTarget, str]]:
    """A quiet Slurm and a fresh namespace running as alice in account team-a, whose pods may
    ask for QOS low."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "hetpre")
    accounting_ready(slurm)
    bridge_stack.tenancy_file.write_text(yaml.safe_dump({"namespaces": {
        ns: {"account": "team-a", "user": "alice", "qos": ["normal", "low"]}}}))
    try:
        yield slurm, ns
    finally:
        slurm.admin("scancel", "-u", "alice")
        bridge_stack.tenancy_file.write_text(yaml.safe_dump(DEFAULT_TENANCY))


async def _gone_or_going(kube: AsyncClient, ns: str, name: str) -> bool:
    try:
        pod = await kube.get(Pod, name, namespace=ns)
    except ApiError as exc:
        if exc.status.code == 404:
            return True
        raise
    return bool(pod.metadata and pod.metadata.deletionTimestamp)


async def _signalled(slurm: SlurmTarget, job_id: str) -> list[tuple[int, bool]]:
    """Each component's offset and whether slurmrestd shows Slurm's preemption signal."""
    async with SlurmClient(slurm.settings()) as client:
        await client.connect()
        whole = await client.rest.call("GET", f"/job/{job_id}", "get_job", JobsResponse)
    return [(j.het_job_offset.number, j.preempt_time.number > 0) for j in whole.jobs]


def _accounted(slurm: SlurmTarget, job_id: str) -> dict[str, str]:
    out = slurm.admin("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State")
    return dict(line.split("|")[:2] for line in out.splitlines() if "|" in line)


async def test_a_preempted_heterogeneous_job_evicts_every_member_as_preempted(
    bridge_stack: BridgeStack, kube: AsyncClient, low_qos: tuple[SlurmTarget, str]
) -> None:
    """A native QOS-high job needs every GPU of a worker's node: Slurm preempts the group's
    QOS-low heterogeneous job there.  Every member is evicted with the bridge's preemption
    words (SlurmPreempted, the QOS, its own grace period), the launcher too."""
    slurm, ns = low_qos
    await create_pod(kube, ns, _member("launcher", 0, "launcher", 0))
    for i in range(2):
        await create_pod(kube, ns, _member(f"worker-{i}", 1 + i, "workers", 2))
    bound = {name: await wait_bound(kube, ns, name, timeout=120) for name in NAMES}
    for pod in bound.values():  # running: evicted, each keeps its grace period to stop
        await set_pod_phase(kube, pod, "Running")
    worker = bound["worker-0"].metadata
    assert worker is not None and worker.annotations is not None
    job_id, node = worker.annotations[keys.JOB_ID], worker.annotations[keys.SLURM_NODE]
    native = slurm.admin("sbatch", "--parsable", "--qos=high", "--gres=gpu:8", "-w", node,
                         "-o", "/dev/null", "--wrap", "sleep 600").strip()
    try:
        said = await _every_member_told(kube, ns, keys.EventReason.PREEMPTED, 90, interval=1)
        signalled = await _signalled(slurm, job_id)
        listed = slurm.admin("squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", job_id)
        print(f"slurm {slurm.version} preempting {job_id}: {signalled} {listed.split()}")
        assert signalled == [(0, True), (1, True)], signalled  # the whole job, not +1 alone
        for name, message in said.items():
            assert "preempted by Slurm" in message and job_id in message, (name, message)
            assert "QOS low" in message, (name, message)
        async def all_evicted() -> bool:
            return all([await _gone_or_going(kube, ns, name) for name in NAMES])

        await wait_for(all_evicted, 30, interval=1, what="every member evicted")
        await wait_for(lambda: "RUNNING" not in _accounted(slurm, job_id).values(), 120,
                       interval=2, what=f"every component of {job_id} ended in sacct")
        print(f"slurm {slurm.version} sacct: {_accounted(slurm, job_id)}")
    finally:
        slurm.admin("scancel", native)


async def test_a_component_past_its_time_limit_ends_the_group(
    bridge_stack: BridgeStack, kube: AsyncClient, low_qos: tuple[SlurmTarget, str]
) -> None:
    """The workers ask a 1-minute time limit, the launcher none: Slurm keeps each component's
    own limit (``squeue`` %l: UNLIMITED and 1:00) and ends the workers' component alone,
    TIMEOUT, the launcher's still running.  The bridge ends the group: every member evicted
    with Slurm's words (SlurmJobEnded, TIMEOUT, the component), and the rest cancelled."""
    slurm, ns = low_qos
    await create_pod(kube, ns, _member("launcher", 0, "launcher", 0))
    for i in range(2):
        worker = _member(f"worker-{i}", 1 + i, "workers", 2)
        assert worker.metadata is not None and worker.metadata.annotations is not None
        worker.metadata.annotations[keys.TIME_LIMIT] = "1"
        await create_pod(kube, ns, worker)
    bound = {name: await wait_bound(kube, ns, name, timeout=120) for name in NAMES}
    meta = bound["launcher"].metadata
    assert meta is not None and meta.annotations is not None
    job_id = meta.annotations[keys.JOB_ID]
    limits = slurm.admin("squeue", "-h", "-o", "%i|%l", "-j", job_id).split()
    assert sorted(limits) == [f"{job_id}+0|UNLIMITED", f"{job_id}+1|1:00"], limits
    said = await _every_member_told(kube, ns, keys.EventReason.JOB_ENDED, 150, interval=2)
    print(f"slurm {slurm.version} {job_id} at the time limit: {_accounted(slurm, job_id)}; "
          f"told: {said['launcher']}")
    for name, message in said.items():
        assert "TIMEOUT" in message and "component +1" in message, (name, message)

    async def all_evicted() -> bool:
        return all([await _gone_or_going(kube, ns, name) for name in NAMES])

    await wait_for(all_evicted, 30, interval=1, what="every member evicted")
    await wait_for(lambda: _accounted(slurm, job_id).get(f"{job_id}+0", "").startswith(
        "CANCELLED"), 60, interval=1, what=f"the launcher's component {job_id}+0 cancelled")
    assert _accounted(slurm, job_id)[f"{job_id}+1"] == "TIMEOUT"


async def test_kubectl_slurmbridge_status_shows_each_members_component(
    bridge_stack: BridgeStack, kube: AsyncClient, low_qos: tuple[SlurmTarget, str],
    tmp_path: Path,
) -> None:
    """A researcher who reads only their namespace's pods and events sees each member as
    squeue lists its component (``<job>+0``, ``<job>+1``), from what the bridge wrote."""
    slurm, ns = low_qos
    await create_pod(kube, ns, _member("launcher", 0, "launcher", 0))
    for i in range(2):
        await create_pod(kube, ns, _member(f"worker-{i}", 1 + i, "workers", 2))
    bound = {name: await wait_bound(kube, ns, name, timeout=120) for name in NAMES}
    meta = bound["launcher"].metadata
    assert meta is not None and meta.annotations is not None
    job_id = meta.annotations[keys.JOB_ID]
    researcher = tmp_path / "researcher.kubeconfig"
    config = await namespace_user(kube, bridge_stack.control_plane, ns, READ_PODS_AND_EVENTS)
    researcher.write_text(yaml.safe_dump(config))
    table = kubectl_plugin(bridge_stack.control_plane, researcher, "status")
    assert table.returncode == 0, table.stdout + table.stderr
    jobs = {line.split()[0]: line.split()[1] for line in table.stdout.splitlines()[1:]}
    assert jobs == {f"{ns}/launcher": f"{job_id}+0", f"{ns}/worker-0": f"{job_id}+1",
                    f"{ns}/worker-1": f"{job_id}+1"}, table.stdout
    listed = slurm.admin("squeue", "-h", "-o", "%i", "-n", f"k8s:{ns}/mix").split()
    assert sorted(set(jobs.values())) == sorted(listed), (jobs, listed)
    rows = json.loads(kubectl_plugin(bridge_stack.control_plane, researcher, "status",
                                     "-o", "json").stdout)
    assert {(r["pod"], r["component"], r["offset"]) for r in rows} == {
        ("launcher", "launcher", 0), ("worker-0", "workers", 1), ("worker-1", "workers", 1)}


async def _every_member_told(
    kube: AsyncClient, ns: str, reason: keys.EventReason, seconds: float, *, interval: float
) -> dict[str, str]:
    """Each member's first event of ``reason``, once every member has one."""
    said: dict[str, str] = {}

    async def told() -> bool:
        for name in NAMES:
            said[name] = next((m for r, m in await pod_events(kube, ns, name)
                               if r == reason.value), said.get(name, ""))
        return all(said.values())

    await wait_for(told, seconds, interval=interval, what=f"every member told {reason.value}")
    return said
