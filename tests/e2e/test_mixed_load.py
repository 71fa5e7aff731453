"""Pods and native Slurm jobs share 4 nodes; Slurm stays the only GPU allocator."""

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    pod_manifest,
    quiet_namespace,
    slurm_job_view,
)
from slurmbridge_devkit.scontrol import gpu_overlaps, show_jobs
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

GPU_PODS, CPU_PODS = 10, 20
GPU_JOBS, CPU_JOBS = 10, 20


async def _bound(kube: AsyncClient, ns: str) -> dict[str, Pod]:
    return {
        p.metadata.name: p
        async for p in kube.list(Pod, namespace=ns)
        if p.metadata and p.metadata.name and p.spec and p.spec.nodeName
    }


async def test_mixed_load_never_shares_a_gpu_and_pending_pods_say_why(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "mixed")
    native = [
        slurm.admin("sbatch", "--parsable", "-J", "native-gpu", "--gres=gpu:2", "-c", "2",
                    "-o", "/dev/null", "--wrap", "sleep 900").strip()
        for _ in range(GPU_JOBS)
    ] + [
        slurm.admin("sbatch", "--parsable", "-J", "native-cpu", "-c", "2",
                    "-o", "/dev/null", "--wrap", "sleep 900").strip()
        for _ in range(CPU_JOBS)
    ]
    try:
        async def natives_run() -> bool:  # else a pod could take a GPU a native job waits for
            return all(slurm_job_view(slurm, j)["state"] == "RUNNING" for j in native)

        await wait_for(natives_run, 60, interval=0.5, what="the native jobs to run")
        # 32 GPUs in all: native jobs take 20, so only 6 of the 10 two-GPU pods fit
        # (CPUs are plentiful: GPUs are the only thing that runs out).
        for i in range(GPU_PODS):
            await create_pod(kube, ns, pod_manifest(f"gpu-{i}", cpu="1", gpus=2))
        for i in range(CPU_PODS):
            await create_pod(kube, ns, pod_manifest(f"cpu-{i}", cpu="2"))

        samples = 0
        async def settled() -> bool:
            nonlocal samples
            shared = gpu_overlaps(show_jobs(slurm))
            samples += 1
            assert not shared, f"GPU indices held by two jobs: {shared}"
            return len(await _bound(kube, ns)) >= CPU_PODS + 6

        await wait_for(settled, 120, interval=0.5, what="all pods that fit to be bound")
        await asyncio.sleep(3)  # nothing else may bind while the native jobs hold the GPUs
        bound = await _bound(kube, ns)
        assert len(bound) == CPU_PODS + 6, sorted(bound)
        waiting = sorted(f"gpu-{i}" for i in range(GPU_PODS) if f"gpu-{i}" not in bound)
        assert len(waiting) == 4
        for name in waiting:

            async def says_why(pod: str = name) -> bool:
                return any(
                    r == "SlurmPending" and ("reason Resources" in m or "reason Priority" in m)
                    for r, m in await pod_events(kube, ns, pod)
                )

            await wait_for(says_why, 30, what=f"Slurm's pending reason in the events of {name}")
            # The gate holds it, so the event alone says it (no status write, nothing stale
            # to correct when it is released).
            got = await kube.get(Pod, name, namespace=ns)
            conditions = (got.status.conditions if got.status else None) or []
            assert not [c for c in conditions if c.type == keys.POD_CONDITION_SLURM], conditions
    finally:
        slurm.admin("scancel", *native)

    async def all_bound() -> bool:
        nonlocal samples
        samples += 1
        shared = gpu_overlaps(show_jobs(slurm))
        assert not shared, f"GPU indices held by two jobs: {shared}"
        return len(await _bound(kube, ns)) == GPU_PODS + CPU_PODS

    await wait_for(all_bound, 120, interval=0.5, what="the waiting pods to be bound")
    assert samples > 3  # GPU holders were sampled while pods were being placed
    for pod in (await _bound(kube, ns)).values():
        assert pod.metadata is not None and pod.spec is not None
        ann = pod.metadata.annotations or {}
        job = slurm_job_view(slurm, ann[keys.JOB_ID])
        assert job["state"] == "RUNNING"
        assert bridge_stack.slurm_node_of(pod.spec.nodeName or "") in job["nodes"]
