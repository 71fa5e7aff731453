"""A pod group is one Slurm job: all members bind together, each to its own node."""

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest, slurm_idle, slurm_job_view, wait_bound
from slurmbridge_devkit.kube import wait_for
from slurmbridge_devkit.stack import BridgeStack, make_e2e_namespace

pytestmark = pytest.mark.e2e


async def test_four_pod_group_binds_all_or_none(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespaces: list[str]
) -> None:
    slurm = bridge_stack.slurm
    ns = await make_e2e_namespace(kube, "group")
    e2e_namespaces.append(ns)
    await slurm_idle(slurm)
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
