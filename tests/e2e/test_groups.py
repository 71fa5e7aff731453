"""A pod group is one Slurm job: all members bind together, each to its own node."""

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from bridge import keys
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_manifest,
    quiet_namespace,
    slurm_job_view,
    wait_bound,
)
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


async def test_four_pod_group_binds_all_or_none(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "group")
    # An admin's job holds half of node1: a job wanting 48 CPUs on each of 4 nodes waits.
    blocker = slurm.admin(
        "sbatch", "--parsable", "-c", "32", "-w", "node1", "-o", "/dev/null",
        "--wrap", "sleep 900",
    ).strip()
    # Running before the group's job exists: otherwise Slurm may give node1 to the group first.
    await wait_for(lambda: slurm_job_view(slurm, blocker)["state"] == "RUNNING", 30,
                   what=f"blocker {blocker} running")
    labels = {keys.GROUP: "train", keys.GROUP_SIZE: "4"}
    try:
        for i in range(4):
            pod = pod_manifest(f"worker-{i}", cpu="48", labels=labels)
            await create_pod(kube, ns, pod)
        await asyncio.sleep(8)
        pods = [await kube.get(Pod, f"worker-{i}", namespace=ns) for i in range(4)]
        assert not [p for p in pods if p.spec and p.spec.nodeName], "bound before allocation"
    finally:
        slurm.admin("scancel", blocker)
    bound = [await wait_bound(kube, ns, f"worker-{i}", timeout=90) for i in range(4)]
    job_ids = {(p.metadata.annotations or {})[keys.JOB_ID] for p in bound if p.metadata}
    assert len(job_ids) == 1
    job = slurm_job_view(slurm, job_ids.pop())
    assert job["name"] == f"k8s:{ns}/train"
    assert len(job["nodes"]) == 4
    slurm_nodes = [bridge_stack.slurm_node_of(p.spec.nodeName or "") for p in bound if p.spec]
    assert sorted(slurm_nodes) == sorted(job["nodes"])


async def test_a_member_arriving_after_slurm_drained_its_node_still_joins_the_running_job(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Slurm allocated the group's nodes; then an admin drained one (running jobs stay,
    node sync taints its Node slurm-unavailable); the member released to it is part of the
    running job and binds there (SOAK seed 1: such a member waited unbound and untold until
    the drain ended; a drain that waits for the job would never end)."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "late")
    labels = {keys.GROUP: "late", keys.GROUP_SIZE: "2"}
    await create_pod(kube, ns, pod_manifest("late-0", labels=labels))
    first = await wait_bound(kube, ns, "late-0")
    assert first.metadata is not None and first.spec is not None
    job_id = (first.metadata.annotations or {})[keys.JOB_ID]
    held = bridge_stack.slurm_node_of(first.spec.nodeName or "")
    other = next(n for n in slurm_job_view(slurm, job_id)["nodes"] if n != held)
    kube_other = next(k for k, s in bridge_stack.kube_nodes.items() if s == other)
    with slurm.drained(other, "maint"):
        async def tainted() -> bool:
            node = await kube.get(Node, kube_other)
            taints = (node.spec.taints if node.spec else None) or []
            return any(t.key == keys.UNAVAILABLE_TAINT for t in taints)
        await wait_for(tainted, 30, interval=0.5, what=f"{kube_other} tainted after the drain")
        await create_pod(kube, ns, pod_manifest("late-1", labels=labels))
        second = await wait_bound(kube, ns, "late-1", timeout=30)
        assert second.spec is not None and second.spec.nodeName == kube_other
        assert slurm_job_view(slurm, job_id)["state"] == "RUNNING"
