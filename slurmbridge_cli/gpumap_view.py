"""``slurmbridge gpus``: the GPU map an admin reads, from Slurm (every job holding GPUs, the
nodes' declared GPUs) and Kubernetes (the bridge's pods, the Nodes behind Slurm's nodes)."""

from typing import Protocol

from lightkube.resources.core_v1 import Node, Pod

from bridge import keys
from bridge.gpumap.kube_facts import pod_hold
from bridge.gpumap.model import Facts, GpuMap, build
from bridge.gpumap.slurm_facts import job_holds, node_slots
from bridge.jobs.owner import PodOwner
from bridge.kube.nodecache import node_view
from bridge.policy.tenancy import OwnerTrust
from bridge.ports import KubeList
from bridge.slurm.types import SlurmJob, SlurmNode


class MapSlurm(Protocol):
    async def list_jobs(self) -> list[SlurmJob]: ...
    async def list_nodes(self) -> list[SlurmNode]: ...


async def collect(kube: KubeList, slurm: MapSlurm, believe: OwnerTrust) -> GpuMap:
    """``believe``: whose placeholder a job is, as the bridge decides it; a job it does not
    believe is drawn as the native job of its user."""
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
        jobs=job_holds(await slurm.list_jobs(), believed),
        pods=[hold for p in pods if (hold := pod_hold(p)) is not None],
    ))
