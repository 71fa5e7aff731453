"""Jobs are submitted when pods appear, not when kube-scheduler first gets to them."""

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod, pod_manifest, slurm_job_view, wait_bound
from slurmbridge_devkit.kube import stop_scheduler
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory, replace_scheduler
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


def _squeue_ids(stack: BridgeStack, job_name: str) -> list[str]:
    out = stack.slurm.admin("squeue", "-h", "-n", job_name, "-o", "%i")
    return out.split()


async def test_the_job_is_in_squeue_while_kube_scheduler_is_down(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("intake")
    await asyncio.to_thread(stop_scheduler, bridge_stack.scheduler_name)
    try:
        await create_pod(kube, ns, pod_manifest("early", cpu="2"))

        async def submitted() -> list[str]:
            return _squeue_ids(bridge_stack, f"k8s:{ns}/early")

        ids = await wait_for(submitted, 30, interval=0.5, what="the pod's job in squeue")
        assert len(ids) == 1

        async def annotated() -> Pod | None:
            pod = await kube.get(Pod, "early", namespace=ns)
            annotations = (pod.metadata.annotations if pod.metadata else None) or {}
            return pod if annotations.get(keys.JOB_ID) == ids[0] else None

        pod = await wait_for(annotated, 15, interval=0.5, what="the job id on the pod")
        assert pod.spec is not None and not pod.spec.nodeName  # nobody scheduled it yet
    finally:
        await asyncio.to_thread(replace_scheduler, bridge_stack)
    bound = await wait_bound(kube, ns, "early")
    assert bound.spec is not None
    job = slurm_job_view(bridge_stack.slurm, ids[0])
    assert job["nodes"] == (bridge_stack.slurm_node_of(bound.spec.nodeName or ""),)
    assert _squeue_ids(bridge_stack, f"k8s:{ns}/early") == ids  # submitted once


async def test_a_gated_pod_gets_no_job_until_its_gates_are_removed(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("gated")
    pod = PodBuilder("gated").spec(schedulingGates=[{"name": "example.com/quota"}]).build()
    await create_pod(kube, ns, pod)
    await asyncio.sleep(4)  # several poll and watch rounds: nothing may be submitted
    assert _squeue_ids(bridge_stack, f"k8s:{ns}/gated") == []
    await kube.patch(  # the quota's gate lifted, as its controller does; the bridge's stays
        Pod, "gated", {"spec": {"schedulingGates": [{"name": keys.SLURM_GATE}]}},
        namespace=ns, patch_type=PatchType.MERGE,
    )
    bound = await wait_bound(kube, ns, "gated")
    ann = (bound.metadata.annotations if bound.metadata else None) or {}
    assert _squeue_ids(bridge_stack, f"k8s:{ns}/gated") == [ann[keys.JOB_ID]]
