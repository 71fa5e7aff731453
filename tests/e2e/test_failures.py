"""Correct under failure: slurmrestd outages, SIGKILLed bridges, leader handover."""

import asyncio
import random
import signal
import subprocess

import httpx
import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import PodOwner
from bridge.slurm.client import SlurmClient
from slurmbridge_devkit.e2e import create_pod, pod_manifest, quiet_namespace, wait_bound
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.processes import BridgeProcess, another_replica, leader_identity, leads
from slurmbridge_devkit.slurm import CLUSTER_SH
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


async def _pods(kube: AsyncClient, ns: str) -> list[Pod]:
    return [p async for p in kube.list(Pod, namespace=ns)]


def _rest(stack: BridgeStack, action: str) -> None:
    if stack.slurm.version not in ("24.11", "26.05"):
        pytest.fail("the outage test stops slurmrestd: it needs a local cluster (cluster.sh)")
    subprocess.run(["bash", str(CLUSTER_SH), "rest", action, stack.slurm.version],
                   check=True, capture_output=True, timeout=60)


async def test_slurmrestd_outage_evicts_nothing_and_scheduling_resumes(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("outage")
    for i in range(4):
        await create_pod(kube, ns, pod_manifest(f"before-{i}"))
    for i in range(4):
        await set_pod_phase(kube, await wait_bound(kube, ns, f"before-{i}"), "Running")
    _rest(bridge_stack, "stop")
    try:
        for i in range(2):
            await create_pod(kube, ns, pod_manifest(f"during-{i}"))
        await asyncio.sleep(30)
        pods = {p.metadata.name: p for p in await _pods(kube, ns) if p.metadata and p.metadata.name}
        for i in range(4):
            pod = pods[f"before-{i}"]
            assert pod.metadata and not pod.metadata.deletionTimestamp, "evicted during outage"
            assert pod.status and pod.status.phase == "Running"
        assert not any(pods[f"during-{i}"].spec.nodeName for i in range(2))  # type: ignore[union-attr]
        # Still ready (kube-scheduler must keep reaching it), and saying what is wrong.
        async with httpx.AsyncClient() as http:
            ready = await http.get(bridge_stack.extender.health_url.replace("/healthz", "/readyz"))
        assert ready.status_code == 200 and ready.json()["slurm"] == "unreachable"
    finally:
        _rest(bridge_stack, "start")
    for i in range(2):
        await wait_bound(kube, ns, f"during-{i}", timeout=60)


async def test_sigkill_at_random_moments_leaves_one_job_per_pod(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "crash")
    rng = random.Random(20261129)
    created = 0
    for _ in range(10):
        for _ in range(5):
            await create_pod(kube, ns, pod_manifest(f"p{created}"))
            created += 1
        await asyncio.sleep(rng.uniform(0.2, 2.5))
        bridge_stack.extender.kill(signal.SIGKILL)
        bridge_stack.extender.start()
    assert created == 50

    async def all_bound() -> bool:
        return sum(1 for p in await _pods(kube, ns) if p.spec and p.spec.nodeName) == 50

    await wait_for(all_bound, 240, interval=1, what="all 50 pods bound")
    pods = {p.metadata.uid: p for p in await _pods(kube, ns) if p.metadata and p.metadata.uid}
    owners_of_pods = {PodOwner(uid) for uid in pods}

    async with SlurmClient(bridge_stack.slurm.settings()) as slurm:
        async def clean() -> bool:
            live = [j for j in await slurm.list_jobs() if j.owner and j.state.is_live
                    and j.name.startswith(f"k8s:{ns}/")]
            owners = [j.owner for j in live]
            duplicates = len(owners) - len(set(owners))
            leaked = [j.job_id for j in live if j.owner not in owners_of_pods]
            return duplicates == 0 and not leaked and len(live) == 50

        # duplicates from a crash mid-submit go at the next resync (30 s), orphans after 20 s
        await wait_for(clean, 90, interval=2, what="no duplicate or leaked jobs")
        for uid, pod in pods.items():
            assert pod.metadata and pod.spec
            job = await slurm.get_job(int((pod.metadata.annotations or {})[keys.JOB_ID]))
            assert job.owner == PodOwner(uid) and job.state.is_live
            assert job.allocation is not None
            assert bridge_stack.slurm_node_of(pod.spec.nodeName or "") in job.allocation.nodes


def _reconciles(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics/", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("slurmbridge_reconcile_total{")
    )


async def test_only_the_leader_acts_and_a_new_one_takes_over(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    first = bridge_stack.extender
    assert first.proc is not None
    second, port = await _second_replica(kube, first)
    try:
        await asyncio.sleep(5)
        assert _reconciles(port) == 0, "a follower reconciled"
        assert (await leader_identity(kube)).endswith(f"_{first.proc.pid}")
        first.kill(signal.SIGKILL)
        killed = asyncio.get_running_loop().time()
        assert second.proc is not None
        await wait_for(
            lambda: _holder_is(kube, second), 30, interval=0.25, what="the second replica leading"
        )
        handover = asyncio.get_running_loop().time() - killed
        lease_seconds = int(first.env.get("SLURMBRIDGE_CONTROLLERS__LEASE_SECONDS", "15"))
        assert handover <= lease_seconds + lease_seconds / 3 + 1
        await wait_for(lambda: _reconciles(port) > 0, 10, what="the new leader reconciling")
    finally:
        second.kill(signal.SIGKILL)
        first.start()


async def test_a_leader_stopped_gracefully_hands_over_within_a_renew_period(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    """A rolling restart (SIGTERM) releases the lease: the other replica leads at its next
    renew, not after the whole lease duration with no controllers running."""
    first = bridge_stack.extender
    second, port = await _second_replica(kube, first)
    try:
        first.kill(signal.SIGTERM)
        stopped = asyncio.get_running_loop().time()
        await wait_for(
            lambda: _holder_is(kube, second), 30, interval=0.25, what="the second replica leading"
        )
        handover = asyncio.get_running_loop().time() - stopped
        lease_seconds = int(first.env.get("SLURMBRIDGE_CONTROLLERS__LEASE_SECONDS", "15"))
        assert handover <= lease_seconds / 3 + 2, f"handed over after {handover:.1f}s"
        await wait_for(lambda: _reconciles(port) > 0, 10, what="the new leader reconciling")
    finally:
        second.kill(signal.SIGTERM)
        first.start()


async def _second_replica(kube: AsyncClient, first: BridgeProcess) -> tuple[BridgeProcess, int]:
    """Another extender replica next to the stack's, started once the stack's leads; and
    its health and metrics port (the protocol port is another free one)."""
    # After earlier restarts a dead identity may hold the lease until it expires.
    await wait_for(lambda: _holder_is(kube, first), 30, what="the stack's extender leading")
    second = another_replica(first)
    second.start()
    return second, int(second.env["SLURMBRIDGE_EXTENDER__HEALTH_PORT"])


async def _holder_is(kube: AsyncClient, proc: BridgeProcess) -> bool:
    return leads(await leader_identity(kube), proc)
