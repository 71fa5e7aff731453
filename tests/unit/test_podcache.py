"""The watch-fed pod cache: current views, relists after a broken watch, and the leader's
lifecycle reading it instead of listing every pod each round (over the fakes)."""

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bridge import keys
from bridge.controllers.lifecycle import Lifecycle
from bridge.jobs.owner import PodOwner
from bridge.link.podcache import PodCache
from bridge.link.views import view_of
from bridge.placement.index import JobIndex
from bridge.placement.registry import SeenPods
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm


@pytest.fixture
async def cached() -> AsyncIterator[tuple[FakeKube, PodCache]]:
    kube = FakeKube()
    cache = PodCache(kube)
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(cache.wait_synced(), 2)
    yield kube, cache
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _until(condition: Callable[[], bool], seconds: float = 2.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


async def test_the_cache_follows_adds_changes_and_deletes(
    cached: tuple[FakeKube, PodCache],
) -> None:
    kube, cache = cached
    kube.add(PodBuilder("p", "ns").gated().build())
    kube.add(PodBuilder("other", "ns").scheduler("default-scheduler").build())
    await _until(lambda: len(cache.views()) == 1)
    [view] = cache.views()
    assert (str(view), view.gated, view.job_id) == ("ns/p", True, None)
    await kube.patch(Pod, "p", {"metadata": {"annotations": {keys.JOB_ID: "12"}},
                                "spec": {"schedulingGates": None}},
                     namespace="ns", patch_type=PatchType.MERGE)
    await _until(lambda: (v := cache.get(view.uid)) is not None and v.job_id == 12)
    assert not cache.get(view.uid).gated  # type: ignore[union-attr]
    await kube.delete(Pod, "p", namespace="ns")
    await _until(lambda: cache.views() == [])


async def test_a_broken_watch_relists_and_forgets_pods_deleted_meanwhile(
    cached: tuple[FakeKube, PodCache],
) -> None:
    kube, cache = cached
    kube.add(PodBuilder("gone", "ns").build())
    await _until(lambda: len(cache.views()) == 1)
    kube.down = True  # the connection drops (noticed at the next event), and the pod is
    kube.add(PodBuilder("blip", "ns").build())  # deleted while nobody watches
    await _until(lambda: not cache.synced)
    del kube.objects[("Pod", "ns", "gone")]
    del kube.objects[("Pod", "ns", "blip")]
    kube.down = False
    kube.add(PodBuilder("new", "ns").build())
    await _until(lambda: cache.synced and [str(v) for v in cache.views()] == ["ns/new"], 5)


def test_a_view_is_small_and_says_what_the_readers_ask() -> None:
    pod = PodBuilder("p", "ns").uid("u").resource_version("41") \
        .spec(nodeName="node1", terminationGracePeriodSeconds=45) \
        .annotations({keys.JOB_ID: "7", keys.SLURM_NODE: "n1", keys.ACCOUNT: "physics"}).build()
    view = view_of(pod)
    assert (view.job_id, view.node_name, view.grace_seconds, view.resource_version) == (
        7, "node1", 45, 41)
    assert view.recorded == {keys.JOB_ID: "7", keys.SLURM_NODE: "n1"}  # the job's records only
    assert not view.releases_job  # bound, containers not known to have stopped


async def test_the_leaders_rounds_read_the_cache_not_the_apiserver(
    cached: tuple[FakeKube, PodCache],
) -> None:
    kube, cache = cached
    slurm = FakeSlurm(("node1",))
    lifecycle = Lifecycle(kube, slurm, JobIndex(slurm), SeenPods(), cache)
    for i in range(3):
        kube.add(PodBuilder(f"p{i}", "ns").build())
    await _until(lambda: len(cache.views()) == 3)
    before = kube.lists["Pod"]
    for _ in range(5):
        await lifecycle.reconcile_once()
    assert kube.lists["Pod"] == before


async def test_a_pending_pod_deleted_at_once_has_its_job_cancelled_at_once(
    cached: tuple[FakeKube, PodCache],
) -> None:
    """Between two rounds: the watch's DELETED says so; a pod merely absent from a lagging
    cache (intake has just seen it) is not taken for deleted."""
    kube, cache = cached
    slurm = FakeSlurm(("node1",))
    index, registry = JobIndex(slurm), SeenPods()
    lifecycle = Lifecycle(kube, slurm, index, registry, cache, orphan_grace=30.0)
    pods = []
    for name in ("deleted", "unseen"):
        pod = PodBuilder(name, "ns").uid(f"uid-{name}").gated().build()
        assert pod.metadata is not None and pod.metadata.uid is not None
        pods.append(pod)
        owner = PodOwner(pod.metadata.uid)
        registry.remember(view_of(pod))
        index.record(slurm.put(JobBuilder(len(pods), f"k8s:ns/{name}").owner(owner).build()))
    kube.add(pods[0])
    await _until(lambda: len(cache.views()) == 1)
    await kube.delete(Pod, "deleted", namespace="ns")
    await _until(lambda: cache.deleted("uid-deleted"))
    await lifecycle.reconcile_once()
    assert slurm.cancelled == [1]  # not 2: its pod is not in the cache yet, nor deleted
