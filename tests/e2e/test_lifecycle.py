"""Kubernetes and Slurm stay in step when either side ends a pod's life."""

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    pod_manifest,
    quiet_namespace,
    slurm_job_view,
    wait_bound,
    wait_slurm_job,
)
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

POLL = 1.0  # the stack's poll interval (slurmbridge_devkit/stack.py)


def _live(stack: BridgeStack, job_id: str) -> bool:
    out = stack.slurm.admin("squeue", "-h", "-j", job_id, "-o", "%T", check=False)
    return out.strip() in ("RUNNING", "PENDING")


async def test_scancel_evicts_the_pod_with_the_reason(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("scancel")
    await create_pod(kube, ns, pod_manifest("victim"))
    pod = await wait_bound(kube, ns, "victim")
    await set_pod_phase(kube, pod, "Running")
    job_id = (pod.metadata.annotations or {})[keys.JOB_ID] if pod.metadata else ""
    bridge_stack.slurm.admin("scancel", job_id)

    async def evicted() -> list[tuple[str, str]]:
        events = await pod_events(kube, ns, "victim")
        return [e for e in events if e[0] == "SlurmJobEnded"]

    # Two poll intervals, plus the controller's own period and the apiserver round trips.
    events = await wait_for(evicted, 4 * POLL + 4, interval=0.25, what="eviction event")
    # Slurm lists a cancelled job as [CANCELLED, COMPLETING] until its nodes are released: a
    # poll may catch either, and the message says CANCELLED in both.
    message = events[0][1]
    assert job_id in message and "CANCELLED" in message, message
    assert await _gone_or_terminating(kube, ns, "victim")


async def _gone_or_terminating(kube: AsyncClient, ns: str, name: str) -> bool:
    try:
        pod = await kube.get(Pod, name, namespace=ns)
    except ApiError as exc:
        return exc.status.code == 404
    return bool(pod.metadata and pod.metadata.deletionTimestamp)


async def test_finished_pod_releases_its_job(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("finish")
    await create_pod(kube, ns, pod_manifest("done", gpus=1))
    pod = await wait_bound(kube, ns, "done")
    job_id = (pod.metadata.annotations or {})[keys.JOB_ID] if pod.metadata else ""
    await set_pod_phase(kube, pod, "Running")
    await asyncio.sleep(3 * POLL)
    assert _live(bridge_stack, job_id), "job released while the pod still ran"
    await set_pod_phase(kube, pod, "Succeeded")
    await wait_for(lambda: not _live(bridge_stack, job_id), 15, what=f"job {job_id} to end")


async def test_deleting_a_pending_pod_cancels_its_job(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "pending")
    # Native jobs hold every GPU: Slurm keeps the pod's job pending (reason Resources).
    blockers = [
        bridge_stack.slurm.admin("sbatch", "--parsable", "--gres=gpu:8", "-w", f"node{k}",
                                 "-o", "/dev/null", "--wrap", "sleep 900").strip()
        for k in range(1, 5)
    ]
    try:
        # All running before the pod's job exists: a blocker still pending leaves its node's
        # GPUs to the pod's job (RUNNING, not PENDING: failed on 24.11 at 15:44 and 15:47).
        def running() -> bool:
            return all(slurm_job_view(bridge_stack.slurm, b)["state"] == "RUNNING"
                       for b in blockers)

        await wait_for(running, 30, what=f"blockers {blockers} running")
        await create_pod(kube, ns, pod_manifest("waits", gpus=1))
        await _pending_pod_deleted(bridge_stack, kube, ns)
    finally:
        bridge_stack.slurm.admin("scancel", *blockers)


async def _pending_pod_deleted(bridge_stack: BridgeStack, kube: AsyncClient, ns: str) -> None:
    jid = await wait_slurm_job(bridge_stack.slurm, ns, "waits", 30)
    assert slurm_job_view(bridge_stack.slurm, jid)["state"] == "PENDING"
    await kube.delete(Pod, "waits", namespace=ns, grace_period=0)
    await wait_for(lambda: not _live(bridge_stack, jid), 15, what=f"job {jid} cancelled")
