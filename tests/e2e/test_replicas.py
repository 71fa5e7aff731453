"""Two extender replicas seeing the same new pod at once submit one Slurm job, not two."""

import asyncio

import pytest
from lightkube import AsyncClient

from bridge.kube.nodecache import NodeCache
from bridge.link.claims import Claims
from bridge.placement.index import JobIndex
from bridge.placement.placer import Placer
from bridge.placement.registry import PodRegistry
from bridge.slurm.client import SlurmClient
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod
from slurmbridge_devkit.kube import ControlPlane
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import NamespaceFactory

pytestmark = pytest.mark.e2e


async def test_two_replicas_racing_on_one_pod_submit_one_job(
    slurm: SlurmTarget, control_plane: ControlPlane, kube: AsyncClient,
    e2e_namespace: NamespaceFactory,
) -> None:
    ns = await e2e_namespace("replicas")
    # No scheduler runs under this name: only the two replicas below ever look at the pod.
    pod = await create_pod(kube, ns, PodBuilder("raced").scheduler("nobody").build())
    assert pod.metadata is not None
    async with SlurmClient(slurm.settings()) as one, SlurmClient(slurm.settings()) as two:
        replicas = [
            Placer(
                JobIndex(client), NodeCache(kube), PodRegistry(),
                claims=Claims(kube, name, namespace=ns),
            )
            for name, client in (("replica-a", one), ("replica-b", two))
        ]
        verdicts = await asyncio.gather(*(r.filter(pod, ["kube-node1"]) for r in replicas))
    name = f"k8s:{ns}/raced"
    try:
        lost = [v.message for v in verdicts if "is submitting this pod's job" in v.message]
        assert len(lost) == 1, [v.message for v in verdicts]
        queue = slurm.admin("squeue", "-h", "-o", "%j")
        assert queue.splitlines().count(name) == 1, queue
    finally:
        slurm.admin("scancel", "--name", name)
