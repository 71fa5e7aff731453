"""``slurmbridge gpus``: the GPU map an admin reads, from Slurm (every job holding GPUs, the
nodes' declared GPUs) and Kubernetes (the bridge's pods, the Nodes behind Slurm's nodes)."""

from collections.abc import Collection
from typing import Protocol

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from bridge import keys
from bridge.devices.slices import device_indices
from bridge.gpumap.claim_facts import claim_holds
from bridge.gpumap.kube_facts import pod_hold
from bridge.gpumap.model import ClaimHold, Facts, GpuMap, build
from bridge.gpumap.slurm_facts import job_holds, node_slots
from bridge.jobs.owner import PodOwner
from bridge.kube.apierrors import is_not_found
from bridge.kube.nodecache import node_view
from bridge.policy.tenancy import OwnerTrust
from bridge.ports import KubeList
from bridge.slurm.types import SlurmJob, SlurmNode


class MapSlurm(Protocol):
    async def list_jobs(self, *, every_allocation: bool = False) -> list[SlurmJob]: ...
    async def list_nodes(self) -> list[SlurmNode]: ...


async def collect(
    kube: KubeList, slurm: MapSlurm, believe: OwnerTrust, index_names: Collection[str] = (),
) -> GpuMap:
    """``believe``: whose placeholder a job is, as the bridge decides it; a job it does not
    believe is drawn as the native job of its user.  ``index_names``: the device attributes
    holding Slurm's index (the device classes' ``index_attribute``); none: no DRA claims."""
    pods = [p async for p in kube.list(
        Pod, namespace="*", fields={"spec.schedulerName": keys.SCHEDULER_NAME})]
    namespaces = {p.metadata.uid: p.metadata.namespace for p in pods if p.metadata}

    def believed(job: SlurmJob) -> bool:
        owner = job.owner
        namespace = namespaces.get(owner.uid) if isinstance(owner, PodOwner) else None
        return owner is not None and believe(job.user, owner, job.name, namespace)

    views = [v async for n in kube.list(Node) if (v := node_view(n)) is not None]
    return build(Facts(
        slots=node_slots(await slurm.list_nodes()),
        kube_nodes={v.slurm_name: v.name for v in views},
        jobs=job_holds(await slurm.list_jobs(every_allocation=True), believed),
        pods=[hold for p in pods if (hold := pod_hold(p)) is not None],
        claims=await _claims(kube, index_names, {v.name: v.slurm_name for v in views}),
    ))


async def _claims(
    kube: KubeList, index_names: Collection[str], slurm_nodes: dict[str, str],
) -> list[ClaimHold]:
    """The claims the bridge pinned; none where it pins none or the cluster serves no DRA."""
    if not index_names:
        return []
    try:
        claims = [c async for c in kube.list(ResourceClaim, namespace="*")]
        slices = [s async for s in kube.list(ResourceSlice)]
    except ApiError as exc:
        if is_not_found(exc):
            return []
        raise
    return claim_holds(claims, device_indices(slices, index_names), slurm_nodes)
