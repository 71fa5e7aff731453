"""Submit on create (Intake), in a bridge wired over the in-memory fakes."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bridge import keys
from bridge.runtime import Bridge
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes, intake_running


class World:
    def __init__(self, workdir: Path) -> None:
        self.kube, self.slurm = FakeKube(), FakeSlurm(("node1",))
        self.bridge: Bridge = bridge_over_fakes(workdir, self.slurm, self.kube)

    def annotations(self, name: str) -> dict[str, str]:
        found = self.kube.obj(Pod, name, "ns")
        assert found is not None
        return dict(found["metadata"].get("annotations") or {})


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path)
    async with intake_running(world.bridge):
        yield world


async def _until(condition: Callable[[], bool], seconds: float = 2.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


async def test_a_new_pods_job_is_submitted_at_once_and_recorded_on_the_pod(world: World) -> None:
    world.kube.add(PodBuilder("p", "ns").gpus(0).build())
    await _until(lambda: len(world.slurm.submitted) == 1)
    assert world.slurm.submitted[0].name == "k8s:ns/p"
    [job_id] = world.slurm.jobs
    world.slurm.start(job_id, "node1")  # recorded by the leader once Slurm runs it
    await world.bridge.poller.poll_once()
    await _until(lambda: world.annotations("p").get(keys.JOB_ID) == str(job_id))


async def test_many_pods_get_one_job_each(world: World) -> None:
    for i in range(20):
        world.kube.add(PodBuilder(f"p{i}", "ns").build())
    await _until(lambda: len(world.slurm.submitted) == 20)
    await asyncio.sleep(0.1)
    assert sorted(r.name for r in world.slurm.submitted) == sorted(
        f"k8s:ns/p{i}" for i in range(20))


async def test_a_gated_pod_waits_until_its_gates_are_gone(world: World) -> None:
    world.kube.add(PodBuilder("p", "ns").spec(schedulingGates=[{"name": "quota"}]).build())
    await asyncio.sleep(0.1)
    assert world.slurm.submitted == []
    await world.kube.patch(Pod, "p", {"spec": {"schedulingGates": None}}, namespace="ns",
                           patch_type=PatchType.MERGE)
    await _until(lambda: len(world.slurm.submitted) == 1)


async def test_a_pod_that_has_a_job_already_is_not_submitted_again(world: World) -> None:
    """After a restart the pods carry their job ids: nothing is submitted twice."""
    world.kube.add(PodBuilder("p", "ns").annotate(keys.JOB_ID, "42").build())
    world.kube.add(PodBuilder("q", "ns").scheduler("default-scheduler").build())
    await asyncio.sleep(0.1)
    assert world.slurm.submitted == []


async def test_intake_rides_the_pod_caches_watch(world: World) -> None:
    """One pod watch per replica: the leader's intake follows the cache's, it opens none."""
    world.kube.add(PodBuilder("p", "ns").build())
    await _until(lambda: len(world.slurm.submitted) == 1)
    assert world.kube.watches_open == 1


async def test_pods_from_before_the_lead_are_submitted_once(tmp_path: Path) -> None:
    """A new leader's intake lists the waiting pods once (the cache's watch only shows
    changes to them), and the overlap with the watch submits nothing twice."""
    world = World(tmp_path)
    for i in range(5):
        world.kube.add(PodBuilder(f"p{i}", "ns").build())
    cache = asyncio.create_task(world.bridge.pod_cache.run())
    await world.bridge.pod_cache.wait_synced()
    intake = asyncio.create_task(world.bridge.intake.run())
    try:
        await _until(lambda: len(world.slurm.submitted) == 5)
        await asyncio.sleep(0.1)
    finally:
        for task in (intake, cache):
            task.cancel()
        await asyncio.gather(intake, cache, return_exceptions=True)
        await world.bridge.notifier.drain()
    assert sorted(r.name for r in world.slurm.submitted) == [f"k8s:ns/p{i}" for i in range(5)]
