"""A researcher's pods scheduled through Slurm, end to end."""

import pytest
from lightkube import AsyncClient

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest, slurm_job_view, wait_bound
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory

pytestmark = pytest.mark.e2e


async def test_pods_appear_in_squeue_and_bind_where_slurm_allocated(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    plain = await e2e_namespace("plain")
    enrolled = await e2e_namespace("enrolled", enrolled=True)
    await create_pod(kube, plain, pod_manifest("named", cpu="2", memory="2Gi"))
    unnamed = pod_manifest("unnamed", scheduler=False, cpu="4", memory="8Gi", gpus=2)
    await create_pod(kube, enrolled, unnamed)
    for ns, name, gpus in ((plain, "named", 0), (enrolled, "unnamed", 2)):
        pod = await wait_bound(kube, ns, name)
        assert pod.spec is not None and pod.metadata is not None
        assert pod.spec.schedulerName == keys.SCHEDULER_NAME
        ann = pod.metadata.annotations or {}
        job = slurm_job_view(bridge_stack.slurm, ann[keys.JOB_ID])
        assert job["name"] == f"k8s:{ns}/{name}"
        assert job["state"] == "RUNNING"
        slurm_node = bridge_stack.slurm_node_of(pod.spec.nodeName or "")
        assert job["nodes"] == (slurm_node,)
        assert ann[keys.SLURM_NODE] == slurm_node
        expected_gpus = ",".join(map(str, job["gpus"].get(slurm_node, ())))
        assert ann[keys.GPU_IDS] == expected_gpus
        assert len(job["gpus"].get(slurm_node, ())) == gpus
        squeue = bridge_stack.slurm.admin("squeue", "-h", "-o", "%i %j")
        assert f"{ann[keys.JOB_ID]} k8s:{ns}/{name}" in squeue
