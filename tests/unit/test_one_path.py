"""One path for every pod: a pod that came without the bridge's gate (the webhook skipped it,
or failed open) is submitted by the leader's intake alone, and its job recorded on it in one
write under its resourceVersion once Slurm runs it; filter and bind, on any replica, only read.

Two replicas over the in-memory fakes (slurmbridge_devkit/fakes.py): the leader runs intake,
the other only answers kube-scheduler."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from lightkube.models.core_v1 import Pod as PodModel
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import PodOwner
from bridge.placement.outcomes import Outcome
from bridge.runtime import Bridge
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes, intake_running
from slurmbridge_devkit.waiting import wait_for

NODES = ["node1", "node2", "node3"]


class World:
    def __init__(self, workdir: Path) -> None:
        self.kube, self.slurm = FakeKube(), FakeSlurm(tuple(NODES))
        (workdir / "a").mkdir()
        (workdir / "b").mkdir()
        self.leader: Bridge = bridge_over_fakes(workdir / "a", self.slurm, self.kube)
        self.other: Bridge = bridge_over_fakes(
            workdir / "b", self.slurm, self.kube, identity="replica-b")

    def pod(self, name: str) -> dict[str, Any]:
        found = self.kube.obj(Pod, name, "ns")
        assert found is not None
        return found

    async def read(self, name: str) -> PodModel:
        pod: PodModel = await self.kube.get(Pod, name, namespace="ns")
        return pod

    def pod_patches(self) -> list[Any]:
        return [body for verb, kind, body in self.kube.written if kind == "Pod" and verb == "patch"]

    async def allocate(self, job_id: int, *nodes: str, gpus: tuple[int, ...] = ()) -> None:
        self.slurm.start(job_id, *nodes, gpus=gpus)
        await self.leader.poller.poll_once()
        await asyncio.wait_for(self.leader.releaser.drain(), 5)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path)
    yield world
    await world.other.notifier.drain()


async def until(condition: Callable[[], bool]) -> None:
    await wait_for(condition, 2, interval=0.01)


async def test_filter_on_any_replica_never_submits_a_new_pods_job(world: World) -> None:
    world.kube.add(PodBuilder("p", "ns").build())
    pod = await world.read("p")
    verdicts = await asyncio.gather(world.leader.placer.filter(pod, NODES),
                                    world.other.placer.filter(pod, NODES))
    assert [v.outcome for v in verdicts] == [Outcome.PENDING, Outcome.PENDING]
    assert all("leader submits" in v.message for v in verdicts), verdicts
    assert world.slurm.submitted == []
    assert world.pod_patches() == []


async def test_an_ungated_pods_job_is_recorded_by_the_leader_in_one_write(
    world: World,
) -> None:
    async with intake_running(world.leader):
        world.kube.add(PodBuilder("p", "ns").build())
        await until(lambda: len(world.slurm.submitted) == 1)
        [job_id] = world.slurm.jobs
        pod = await world.read("p")
        waiting = await world.other.placer.filter(pod, NODES)
        assert waiting.outcome is Outcome.PENDING and waiting.keep == []
        assert world.pod_patches() == []  # no claim, no record while the job pends

        await world.allocate(job_id, "node2", gpus=(1,))

    [patch] = world.pod_patches()
    assert {"op": "test", "path": "/metadata/resourceVersion",
            "value": pod.metadata.resourceVersion if pod.metadata else None} in patch
    stored = world.pod("p")
    annotations = stored["metadata"]["annotations"]
    assert annotations[keys.JOB_ID] == str(job_id)
    assert annotations[keys.SLURM_NODE] == "node2"
    assert annotations[keys.GPU_IDS] == "1"
    assert not stored["spec"].get("affinity")  # an ungated pod's affinity cannot change

    recorded = await world.read("p")
    verdict = await world.other.placer.filter(recorded, NODES)
    assert verdict.keep == ["node2"]
    assert recorded.metadata is not None and recorded.metadata.uid
    await world.other.binder.bind("ns", "p", recorded.metadata.uid, "node2")
    assert world.pod("p")["spec"]["nodeName"] == "node2"
    assert len(world.slurm.submitted) == 1


async def test_an_ungated_group_gets_each_members_seat_from_the_leader(world: World) -> None:
    async with intake_running(world.leader):
        for rank in reversed(range(3)):
            world.kube.add(PodBuilder(f"w{rank}", "ns").group("g", 3)
                           .label(keys.GROUP_RANK, str(rank)).build())
        await until(lambda: len(world.slurm.submitted) == 1)
        [job_id] = world.slurm.jobs
        owner = world.slurm.jobs[job_id].owner
        assert owner is not None
        await until(lambda: len(world.leader.seen.pods_of(owner)) == 3)
        await world.allocate(job_id, "node3", "node1", "node2")

    nodes = {f"w{r}": world.pod(f"w{r}")["metadata"]["annotations"][keys.SLURM_NODE]
             for r in range(3)}
    assert nodes == {"w0": "node3", "w1": "node1", "w2": "node2"}
    for name, node in nodes.items():
        verdict = await world.other.placer.filter(await world.read(name), NODES)
        assert verdict.keep == [node], (name, verdict.message)
    assert [k for k in world.kube.objects if k[0] == "Lease"] == []


async def test_a_record_whose_pod_changed_meanwhile_is_written_on_a_fresh_read(
    world: World,
) -> None:
    """The precondition is the pod's resourceVersion: a status written since the copy the
    leader holds costs one read and a second write, never a record on a pod it did not see."""
    async with intake_running(world.leader):
        world.kube.add(PodBuilder("p", "ns").build())
        await until(lambda: len(world.slurm.submitted) == 1)
        [job_id] = world.slurm.jobs
        stored = world.pod("p")  # a write the watch has not delivered yet
        stored["metadata"]["resourceVersion"] = str(
            int(stored["metadata"]["resourceVersion"]) + 1)
        await world.allocate(job_id, "node1")

    assert len(world.pod_patches()) == 2
    annotations = world.pod("p")["metadata"]["annotations"]
    assert annotations[keys.JOB_ID] == str(job_id)
    assert annotations[keys.SLURM_NODE] == "node1"


async def test_an_ungated_pod_the_leader_cannot_submit_is_told_why(world: World) -> None:
    """filter only says the pod waits: the leader's refusal reaches its owner as it does a
    gated pod's."""
    async with intake_running(world.leader):
        world.kube.add(PodBuilder("p", "ns").annotate(keys.ACCOUNT, "other").build())
        await until(lambda: bool(world.kube.events(keys.EventReason.SUBMIT_REFUSED)))
    assert world.slurm.submitted == []


async def test_filter_tells_why_the_leader_will_not_submit_and_submits_nothing(
    world: World,
) -> None:
    """The same rule as the leader's intake, read by any replica: kube-scheduler's event
    says why the pod waits, and no job is submitted."""
    world.kube.add(PodBuilder("p", "ns").annotate(keys.ACCOUNT, "other").build())
    verdict = await world.other.placer.filter(await world.read("p"), NODES)
    assert verdict.outcome is Outcome.REFUSED and "other" in verdict.message, verdict.message
    assert world.slurm.submitted == []


async def test_a_job_id_an_earlier_version_recorded_alone_is_completed_by_the_leader(
    world: World,
) -> None:
    """Upgrading from the claim protocol: an unbound pod that came without the gate carries
    its job id alone (recorded at submit); the leader records the node, and filter reads it."""
    world.slurm.put(JobBuilder(7).owner(PodOwner("uid-p")).running("node3").build())
    async with intake_running(world.leader):
        world.kube.add(PodBuilder("p", "ns").uid("uid-p").annotate(keys.JOB_ID, "7")
                       .annotate(keys.OWNER, "uid-p").build())
        await until(lambda: world.pod("p")["metadata"]["annotations"].get(keys.SLURM_NODE)
                    == "node3")
    assert world.slurm.submitted == []
    verdict = await world.other.placer.filter(await world.read("p"), NODES)
    assert verdict.keep == ["node3"], verdict.message
