"""``kubectl slurmbridge gpus``: the GPU map a researcher may see, from the bridge's records
on pods (``gpu-ids`` on the Slurm node, for the job).  The bridge's pods of every namespace the
user may list; where RBAC allows only their own, theirs.  Another namespace's pods are never
named.  Slurm is not asked, so free GPUs and native jobs are not known here: an admin's
``slurmbridge gpus`` shows them."""

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.gpumap.kube_facts import pod_hold
from bridge.gpumap.model import Facts, GpuMap, build
from bridge.ports import KubePort

__all__ = ["GpuMap", "read_map"]

async def read_map(kube: KubePort, mine: str) -> GpuMap:
    """The map seen from namespace ``mine``."""
    try:
        pods = await _bridge_pods(kube, "*")
    except ApiError as exc:
        if exc.status.code != 403:
            raise
        pods = await _bridge_pods(kube, mine)
    holds = [hold for p in pods if (hold := pod_hold(p, reader=mine)) is not None]
    return build(Facts(pods=holds, slurm_read=False))


async def _bridge_pods(kube: KubePort, namespace: str) -> list[Pod]:
    return [p async for p in kube.list(
        Pod, namespace=namespace, fields={"spec.schedulerName": keys.SCHEDULER_NAME})]
