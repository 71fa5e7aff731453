"""Two extender replicas seeing the same new pod at once submit one Slurm job, not two: the
leader's intake submits it, and the other replica's filter only reads (issue 42, one path)."""

import asyncio

import pytest
from lightkube import AsyncClient

from bridge.kube.nodecache import NodeCache
from bridge.placement.index import JobIndex
from bridge.placement.outcomes import Outcome
from bridge.placement.placer import Placer
from bridge.placement.registry import SeenPods
from bridge.slurm.client import SlurmClient
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod
from slurmbridge_devkit.kube import ControlPlane
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import NamespaceFactory

pytestmark = pytest.mark.e2e


async def test_only_the_leader_submits_while_another_replica_filters_the_pod(
    slurm: SlurmTarget, control_plane: ControlPlane, kube: AsyncClient,
    e2e_namespace: NamespaceFactory,
) -> None:
    ns = await e2e_namespace("replicas")
    # No scheduler runs under this name: only the two replicas below ever look at the pod.
    pod = await create_pod(kube, ns, PodBuilder("raced").scheduler("nobody").build())
    name = f"k8s:{ns}/raced"
    try:
        async with SlurmClient(slurm.settings()) as one, SlurmClient(slurm.settings()) as two:
            leader, other = (Placer(JobIndex(client), NodeCache(kube), SeenPods())
                             for client in (one, two))
            before, job, after = await asyncio.gather(
                other.filter(pod, ["kube-node1"]), leader.prepare(pod),
                other.filter(pod, ["kube-node1"]))
        assert before.outcome is Outcome.PENDING and after.outcome is Outcome.PENDING, (
            before.message, after.message)
        queue = slurm.admin("squeue", "-h", "-o", "%i %j")
        assert queue.splitlines().count(f"{job.job_id} {name}") == 1, queue
        assert [line.split()[1] for line in queue.splitlines()].count(name) == 1, queue
    finally:
        slurm.admin("scancel", "--name", name)
