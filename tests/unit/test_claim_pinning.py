"""DRA claims of gated pods written with Slurm's GPUs before release, freed after the job.

Over the in-memory fakes; the same against a real apiserver, kube-scheduler and DRA driver is
tests/kind/test_dra_claims.py."""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from lightkube.resources.resource_v1 import ResourceClaimStatus as ClaimStatus
from lightkube.types import PatchType

from bridge import keys
from bridge.devices.freeing import ClaimReleaser, FreeingKube
from bridge.slurm.types import JobState
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fakes import intake_running
from tests.unit.test_release import World as ReleaseWorld
from tests.unit.test_release import until

DRIVER = "gpu.example.com"


def gpu_slice(node: str, gpus: int) -> ResourceSlice:
    return cast(ResourceSlice, ResourceSlice.from_dict({
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
                             for i in range(gpus)]},
    }))


def claim(name: str, count: int = 1) -> ResourceClaim:
    return cast(ResourceClaim, ResourceClaim.from_dict({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": count}}]}},
    }))


class World(ReleaseWorld):
    """test_release's fakes, the bridge mapping DRIVER's class, and each node's 4 GPUs
    published as its DRA driver would."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, device_classes={DRIVER: {"gres": "gpu"}})
        self.kube.add(cast(DeviceClass, DeviceClass.from_dict({"metadata": {"name": DRIVER}})))
        for node in ("node1", "node2"):
            self.kube.add(gpu_slice(node, 4))

    def claim(self, name: str) -> dict[str, Any]:
        found = self.kube.obj(ResourceClaim, name, "ns")
        assert found is not None
        return found

    async def pod_with_claim(self, name: str, claim_name: str, count: int) -> int:
        """A gated pod with the claim, as the webhook leaves it; its job (submitted)."""
        self.kube.add(claim(claim_name, count))
        self.kube.add(PodBuilder(name, "ns").gated().annotate(keys.GPUS, str(count))
                      .spec(resourceClaims=[{"name": "gpu", "resourceClaimName": claim_name}])
                      .build())
        await until(lambda: any(j.name == f"k8s:ns/{name}" for j in self.slurm.jobs.values()))
        return next(i for i, j in self.slurm.jobs.items() if j.name == f"k8s:ns/{name}")


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path)
    async with intake_running(world.bridge):
        yield world


def devices(claim: dict[str, Any]) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r["device"] for r in allocation.get("devices", {}).get("results", [])]


async def test_the_claim_names_slurms_gpus_before_the_pod_is_released(world: World) -> None:
    job_id = await world.pod_with_claim("p", "c", 2)
    await world.allocate(job_id, "node2", gpus=(1, 3))
    stored = world.claim("c")
    assert devices(stored) == ["gpu-1", "gpu-3"]
    allocation = stored["status"]["allocation"]
    assert allocation["devices"]["results"][0] == {
        "request": "gpu", "driver": DRIVER, "pool": "node2", "device": "gpu-1"}
    assert allocation["nodeSelector"]["nodeSelectorTerms"] == [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node2"]}]}]
    pod = world.pod("p")
    assert stored["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}]
    assert keys.CLAIM_FINALIZER in stored["metadata"]["finalizers"]
    assert stored["metadata"]["labels"][keys.CLAIM_JOB_LABEL] == str(job_id)
    assert not pod["spec"].get("schedulingGates")  # released after the claim was written


@pytest.mark.parametrize(("gpus", "words"), [
    ((1,), "1 GPU index(es) on node1 ([1]) but the pod's claims ask for 2"),
    ((5, 6), "no device of driver gpu.example.com there has index=5"),
])
async def test_a_claim_that_cannot_name_slurms_gpus_keeps_the_pod_and_says_why(
    world: World, gpus: tuple[int, ...], words: str
) -> None:
    job_id = await world.pod_with_claim("p", "c", 2)
    await world.allocate(job_id, "node1", gpus=gpus)
    await world.bridge.notifier.drain()
    assert devices(world.claim("c")) == []
    assert world.pod("p")["spec"]["schedulingGates"] == [{"name": keys.SLURM_GATE}]
    [event] = world.kube.events(keys.EventReason.CLAIMS_UNALLOCATED)
    assert words in event["message"]


async def test_a_claim_is_freed_once_its_job_ended_and_its_pod_is_gone(world: World) -> None:
    job_id = await world.pod_with_claim("p", "c", 1)
    await world.allocate(job_id, "node1", gpus=(2,))
    assert devices(world.claim("c")) == ["gpu-2"]
    await world.kube.delete(Pod, "p", namespace="ns")
    await world.bridge.lifecycle.reconcile_once()
    assert devices(world.claim("c")) == ["gpu-2"], "the job still holds the GPU"
    world.slurm.end(job_id, JobState.CANCELLED)
    await world.bridge.poller.poll_once()
    await world.bridge.lifecycle.reconcile_once()
    freed = world.claim("c")
    assert devices(freed) == []
    assert keys.CLAIM_FINALIZER not in (freed["metadata"].get("finalizers") or [])
    assert keys.CLAIM_JOB_LABEL not in (freed["metadata"].get("labels") or {})


async def test_slurm_giving_a_device_to_another_job_frees_the_old_claim_first(
    world: World,
) -> None:
    """A requeued job's pod went, its claim not freed yet; Slurm gives GPU 0 to a new job:
    the old claim is freed before the new one names GPU 0, never two claims on it."""
    old = await world.pod_with_claim("a", "old", 1)
    await world.allocate(old, "node1", gpus=(0,))
    new = await world.pod_with_claim("b", "new", 1)
    await world.allocate(new, "node1", gpus=(0,))
    assert devices(world.claim("old")) == []
    assert devices(world.claim("new")) == ["gpu-0"]


async def test_the_lifecycle_lists_claims_only_while_some_may_be_pinned(world: World) -> None:
    """A cluster whose pods bring no claims costs no claim listing per round."""
    await world.bridge.lifecycle.reconcile_once()  # a new leader: another's may exist
    await world.bridge.lifecycle.reconcile_once()
    assert world.kube.lists["ResourceClaim"] == 1
    job_id = await world.pod_with_claim("p", "c", 1)
    await world.allocate(job_id, "node1", gpus=(2,))
    listed = world.kube.lists["ResourceClaim"]
    await world.bridge.lifecycle.reconcile_once()
    assert world.kube.lists["ResourceClaim"] == listed + 1


def scheduled_claim(name: str, pod: str, device: str, labels: dict[str, str]) -> ResourceClaim:
    """A claim as kube-scheduler leaves it for an ordinary pod (node2's ``device``), with
    ``labels`` its user set."""
    return cast(ResourceClaim, ResourceClaim.from_dict({
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": claim(name).spec.to_dict(),  # type: ignore[union-attr]
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "node2", "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]},
    }))


async def _ended_and_gone(world: World, job_id: int, pod: str) -> None:
    """The job ended, its pod deleted, and the lifecycle's freeing round run."""
    await world.kube.delete(Pod, pod, namespace="ns")
    world.slurm.end(job_id, JobState.CANCELLED)
    await world.bridge.poller.poll_once()
    await world.bridge.lifecycle.reconcile_once()


@pytest.mark.parametrize("finalized", [False, True], ids=["label", "label+finalizer"])
async def test_a_users_job_label_never_frees_an_allocation_kube_scheduler_made(
    world: World, finalized: bool
) -> None:
    """Issue 41, case 4: a user labels their own claim, which kube-scheduler allocated for
    an ordinary pod, with an ended job's id (and the bridge's finalizer): the round that
    frees the bridge's claim of that job leaves the user's allocation as it is."""
    job_id = await world.pod_with_claim("p", "c", 1)
    await world.allocate(job_id, "node1", gpus=(2,))
    mine = scheduled_claim("mine", "ordinary", "gpu-0", {keys.CLAIM_JOB_LABEL: str(job_id)})
    if finalized:
        assert mine.metadata is not None
        mine.metadata.finalizers = [keys.CLAIM_FINALIZER]
    world.kube.add(mine)
    record = json.loads(world.claim("c")["metadata"]["annotations"][keys.CLAIM_PINNED])
    pod_uid = world.pod("p")["metadata"]["uid"]
    assert record == {"job": job_id, "pod": pod_uid, "devices": [[DRIVER, "node1", "gpu-2"]]}
    await _ended_and_gone(world, job_id, "p")
    assert devices(world.claim("c")) == [], "the bridge's own claim is freed"
    kept = world.claim("mine")
    assert devices(kept) == ["gpu-0"], "the ordinary pod's device must stay allocated"
    assert kept["status"]["reservedFor"] == [
        {"resource": "pods", "name": "ordinary", "uid": "uid-ordinary"}]


async def test_slurm_giving_a_device_never_frees_a_claim_the_bridge_did_not_pin(
    world: World,
) -> None:
    """A user-labelled claim kube-scheduler allocated on node2's GPU 0, which Slurm now
    gives a job: the bridge writes its own claim and leaves the user's allocation alone."""
    world.kube.add(scheduled_claim("mine", "ordinary", "gpu-0", {keys.CLAIM_JOB_LABEL: "1"}))
    job_id = await world.pod_with_claim("p", "c", 1)
    await world.allocate(job_id, "node2", gpus=(0,))
    assert devices(world.claim("c")) == ["gpu-0"]
    assert devices(world.claim("mine")) == ["gpu-0"]


async def test_a_claim_allocated_again_by_someone_else_is_unmarked_never_cleared(
    world: World,
) -> None:
    """The bridge's record stays on a claim whose allocation is now another's (kube-scheduler
    allocated it for an ordinary pod after a free cut short): the record no longer proves the
    allocation, so the bridge lifts its marks and leaves the allocation."""
    job_id = await world.pod_with_claim("p", "c", 1)
    await world.allocate(job_id, "node1", gpus=(2,))
    other = scheduled_claim("c", "ordinary", "gpu-1", {}).to_dict()["status"]
    await world.kube.patch(ClaimStatus, "c", {"status": other}, namespace="ns",
                           patch_type=PatchType.MERGE)
    await _ended_and_gone(world, job_id, "p")
    kept = world.claim("c")
    assert devices(kept) == ["gpu-1"], "kube-scheduler's allocation must stay"
    assert keys.CLAIM_FINALIZER not in (kept["metadata"].get("finalizers") or [])
    assert keys.CLAIM_JOB_LABEL not in (kept["metadata"].get("labels") or {})


class _ListingHeld:
    """A claim listing that answers only when told, with the claims as they were when asked."""

    def __init__(self) -> None:
        self.claims: list[ResourceClaim] = []
        self.lists = 0
        self.asked, self.answer = asyncio.Event(), asyncio.Event()

    async def list(self, *_: object, **__: object) -> AsyncIterator[ResourceClaim]:
        self.lists += 1
        seen = list(self.claims)
        self.asked.set()
        await self.answer.wait()
        for found in seen:
            yield found

    async def patch(self, *_: object, **__: object) -> object:
        raise AssertionError("nothing to free here")


async def test_a_claim_pinned_while_a_round_lists_is_looked_at_next_round() -> None:
    """A claim written while the lifecycle's listing is under way (it read none yet): the
    empty answer must not hide that claim from the rounds after, or it is never freed."""
    kube = _ListingHeld()
    releaser = ClaimReleaser(cast(FreeingKube, kube))
    round_one = asyncio.create_task(releaser.free_finished(_holds, lambda _: False))
    await kube.asked.wait()
    with releaser.pinning():  # the pinner writes a claim the listing did not see
        kube.answer.set()
        await round_one
    await releaser.free_finished(_holds, lambda _: False)
    assert kube.lists == 2, "the round after the pin must list the claims again"


async def _holds(_: int) -> bool:
    return True


async def test_a_round_listing_between_the_pin_begun_and_its_write_looks_again_after() -> None:
    """The pinner has begun (it lists the claims it may replace, then writes) when a round
    lists and finds none: the write lands after that answer, so the rounds after it list
    again, or the claim is never freed."""
    kube = _ListingHeld()
    kube.answer.set()
    releaser = ClaimReleaser(cast(FreeingKube, kube))
    with releaser.pinning():  # the claim is being written
        await releaser.free_finished(_holds, lambda _: False)  # it found none
    await releaser.free_finished(_holds, lambda _: False)
    assert kube.lists == 2, "the round after the write must list the claims again"
