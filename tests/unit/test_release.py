"""Gated pods: submitted by the leader alone, released with Slurm's node in one write.

Over the in-memory fakes (slurmbridge_devkit/fakes.py); the same flow against the real
apiserver is tests/e2e/test_gated.py."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bridge import keys
from bridge.jobs.owner import Owner, PodOwner
from bridge.link.gate import release_patch
from bridge.placement.release import RELEASES_IN_FLIGHT
from bridge.runtime import Bridge
from bridge.slurm.types import JobState
from extender.protocol import create_app
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, InFlight, bridge_over_fakes, intake_running
from slurmbridge_devkit.waiting import wait_for


class World:
    def __init__(self, workdir: Path, device_classes: dict[str, Any] | None = None) -> None:
        self.kube, self.slurm = FakeKube(), FakeSlurm(("node1", "node2", "node3"))
        self.bridge: Bridge = bridge_over_fakes(workdir, self.slurm, self.kube,
                                                device_classes=device_classes)

    def pod(self, name: str) -> dict[str, Any]:
        found = self.kube.obj(Pod, name, "ns")
        assert found is not None
        return found

    def pod_writes(self) -> list[str]:
        """The verbs of writes to pods (patches and Bindings), not Events or Leases."""
        return [verb for verb, kind, _ in self.kube.written if kind == "Pod"]

    async def gang(self, size: int) -> tuple[int, Owner]:
        """Members w0.. of group g, ranked and gated as the webhook leaves them; their one
        job (submitted, not started) and its owner, once intake has seen every member."""
        for rank in reversed(range(size)):
            self.kube.add(PodBuilder(f"w{rank}", "ns").group("g", size)
                          .label(keys.GROUP_RANK, str(rank)).gated().build())
        await until(lambda: len(self.slurm.submitted) == 1)
        [job_id] = self.slurm.jobs
        owner = self.slurm.jobs[job_id].owner
        assert owner is not None
        await until(lambda: len(self.bridge.seen.pods_of(owner)) == size)
        return job_id, owner

    async def allocate(self, job_id: int, *nodes: str, gpus: tuple[int, ...] = ()) -> None:
        self.slurm.start(job_id, *nodes, gpus=gpus)
        await self.bridge.poller.poll_once()
        await asyncio.wait_for(self.bridge.releaser.drain(), 5)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path)
    async with intake_running(world.bridge):
        yield world


async def until(condition: Callable[[], bool]) -> None:
    await wait_for(condition, 2, interval=0.01)


def _node_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


async def test_a_gated_pod_is_released_to_slurms_node_in_one_write(world: World) -> None:
    world.kube.add(PodBuilder("p", "ns").gated().build())
    await until(lambda: len(world.slurm.submitted) == 1)
    [job_id] = world.slurm.jobs
    assert world.pod_writes() == []  # no claim, no job-id record while the job pends
    assert world.pod("p")["spec"]["schedulingGates"] == [{"name": keys.SLURM_GATE}]

    await world.allocate(job_id, "node2", gpus=(1, 3))

    pod = world.pod("p")
    assert world.pod_writes() == ["patch"]
    assert not pod["spec"].get("schedulingGates")
    assert _node_terms(pod) == [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node2"]}]}]
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.JOB_ID] == str(job_id)
    assert annotations[keys.SLURM_NODE] == "node2"
    assert annotations[keys.GPU_IDS] == "1,3"
    assert annotations[keys.CUDA_DEVICES] == "0,1"


async def test_a_job_running_at_once_releases_its_pod_without_a_poll(world: World) -> None:
    """A new leader meets pods whose jobs already run: released from intake directly."""
    pod = PodBuilder("p", "ns").uid("uid-p").gated().build()
    job = world.slurm.put(JobBuilder(7).owner(PodOwner("uid-p")).running("node1").build())
    world.bridge.index.record(job)
    world.kube.add(pod)
    await until(lambda: not world.pod("p")["spec"].get("schedulingGates"))
    assert world.slurm.submitted == []
    assert world.pod("p")["metadata"]["annotations"][keys.JOB_ID] == "7"


async def test_other_gates_hold_the_submission_and_stay_after_release(world: World) -> None:
    world.kube.add(PodBuilder("p", "ns").gated("kueue.x-k8s.io/admission").build())
    await asyncio.sleep(0.1)
    assert world.slurm.submitted == []
    await world.kube.patch(Pod, "p", {"spec": {"schedulingGates": [{"name": keys.SLURM_GATE}]}},
                           namespace="ns", patch_type=PatchType.MERGE)
    await until(lambda: len(world.slurm.submitted) == 1)


def test_the_release_narrows_every_term_and_keeps_other_gates() -> None:
    pod = PodBuilder("p", "ns").uid("u").gated("user/hold").spec(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        ]}}}).build()
    stored = pod.to_dict()
    released = jsonpatch.apply_patch(stored, release_patch(pod, "node9", {keys.JOB_ID: "5"}))
    assert released["metadata"]["annotations"][keys.JOB_ID] == "5"
    assert released["spec"]["schedulingGates"] == [{"name": "user/hold"}]
    terms = released["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    on_node = {"key": "metadata.name", "operator": "In", "values": ["node9"]}
    assert [t["matchFields"] for t in terms] == [[on_node], [on_node]]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]
    # The precondition: once a release lifted the bridge's gate, a second one fails.
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(released, release_patch(pod, "node8", {keys.JOB_ID: "6"}))


def test_the_release_lets_the_pod_onto_its_node_after_slurm_drained_it() -> None:
    """Slurm allocated the node, then an admin drained it (running jobs stay; node sync
    taints the Node slurm-unavailable): the released pod is part of that running job and
    must still bind there (SOAK seed 1: a group member waited 50 s, unbound and untold,
    until the drain ended; a drain waiting for the job would never end)."""
    for tolerations in (None, [{"key": "x", "operator": "Exists"}]):
        pod = PodBuilder("p", "ns").uid("u").gated().spec(tolerations=tolerations).build()
        released = jsonpatch.apply_patch(pod.to_dict(),
                                         release_patch(pod, "node9", {keys.JOB_ID: "5"}))
        kept = tolerations or []
        assert released["spec"]["tolerations"] == [*kept, {
            "key": keys.UNAVAILABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]


async def test_a_group_is_released_member_by_rank_to_slurms_nodes(world: World) -> None:
    job_id, _ = await world.gang(3)
    await world.allocate(job_id, "node3", "node1", "node2")
    nodes = {f"w{r}": world.pod(f"w{r}")["metadata"]["annotations"][keys.SLURM_NODE]
             for r in range(3)}
    assert nodes == {"w0": "node3", "w1": "node1", "w2": "node2"}
    assert all(not world.pod(f"w{r}")["spec"].get("schedulingGates") for r in range(3))
    assert world.kube.obj(Pod, "w0", "ns") is not None
    leases = [k for k in world.kube.objects if k[0] == "Lease" and k[2].startswith("group-")]
    assert leases == []  # no group claim: the leader alone submitted


async def test_a_status_write_meanwhile_does_not_cost_the_release_a_second_try(
    world: World,
) -> None:
    """The copy intake holds is older than the pod (its pending status was written since):
    the release's precondition is the gates, not the resourceVersion."""
    world.kube.add(PodBuilder("p", "ns").gated().build())
    await until(lambda: len(world.slurm.submitted) == 1)
    [job_id] = world.slurm.jobs
    stored = world.pod("p")  # the status written, and the watch not delivered it yet
    stored["status"] = {"conditions": [
        {"type": keys.POD_CONDITION_SLURM, "status": "False", "reason": "Priority"}]}
    stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
    before = len(world.kube.written)
    await world.allocate(job_id, "node1")
    assert not world.pod("p")["spec"].get("schedulingGates")
    assert [w[0] for w in world.kube.written[before:] if w[1] == "Pod"] == ["patch"]


async def test_a_refused_gated_pod_is_told_why(world: World) -> None:
    """kube-scheduler never sees a gated pod: the refusal must reach its owner another way."""
    world.kube.add(PodBuilder("p", "ns").gated().annotate(keys.ACCOUNT, "other").build())
    await until(lambda: bool(world.kube.events(keys.EventReason.SUBMIT_REFUSED)))
    assert world.slurm.submitted == []
    await world.bridge.notifier.drain()
    conditions = world.pod("p").get("status", {}).get("conditions", [])
    assert [c["reason"] for c in conditions if c["type"] == keys.POD_CONDITION_SLURM] == [
        keys.REASON_CANNOT_SUBMIT]


async def test_a_released_pod_passes_filter_and_bind_without_a_read(world: World) -> None:
    """The pod cache holds the release as the watch delivered it: kube-scheduler's one
    filter and the bind cost the apiserver no GET."""
    cache = asyncio.create_task(world.bridge.pod_cache.run())
    try:
        world.kube.add(PodBuilder("p", "ns").gated().build())
        await until(lambda: len(world.slurm.submitted) == 1)
        [job_id] = world.slurm.jobs
        await world.allocate(job_id, "node2")
        pod = world.pod("p")
        uid = pod["metadata"]["uid"]
        await until(lambda: (v := world.bridge.pod_cache.get(uid)) is not None
                     and v.job_id == job_id)
        reads: list[str] = []
        real_get = world.kube.get

        async def counting_get(res: Any, name: str, **kw: Any) -> Any:
            reads.append(name)
            return await real_get(res, name, **kw)

        world.kube.get = counting_get  # type: ignore[method-assign]
        app = create_app(world.bridge)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://extender") as http:
            body = {"Pod": {"metadata": {k: pod["metadata"][k] for k in (
                "name", "namespace", "uid", "resourceVersion")}, "spec": pod["spec"]},
                "NodeNames": ["node1", "node2", "node3"]}
            answer = (await http.post("/filter", json=body)).json()
            assert answer["NodeNames"] == ["node2"]
            bound = (await http.post("/bind", json={
                "PodName": "p", "PodNamespace": "ns", "PodUID": uid, "Node": "node2"})).json()
        assert bound["Error"] == ""
        assert world.pod("p")["spec"]["nodeName"] == "node2"
        assert reads == []
    finally:
        cache.cancel()
        await asyncio.gather(cache, return_exceptions=True)


async def test_a_group_whose_job_ended_before_it_ran_is_submitted_again(world: World) -> None:
    """A suspended gang Job's new pods (or a cancel before Slurm started it): the gated
    members record no job, so they wait on the group's next one, not forever."""
    first, _ = await world.gang(2)
    world.slurm.end(first, JobState.CANCELLED)
    await world.bridge.poller.poll_once()
    await until(lambda: len(world.slurm.submitted) == 2)
    [second] = [j for j in world.slurm.jobs if j != first]
    await world.allocate(second, "node1", "node2")
    assert [world.pod(f"w{r}")["metadata"]["annotations"][keys.JOB_ID] for r in (0, 1)] == [
        str(second)] * 2


async def test_a_burst_of_started_jobs_keeps_the_releases_in_flight_bounded(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B1 at 5,000 pods: one poll found hundreds of jobs started and a release task per pod
    sent its PATCH at once; the apiserver client's 100 connections were all taken by them,
    so kube-scheduler's bind calls waited for a connection past their timeout (415 binds
    failed, each pod retried by kube-scheduler with a status write).  Releases wait their
    turn in the bridge instead; every pod is still released."""
    pods = 3 * RELEASES_IN_FLIGHT
    for i in range(pods):
        world.kube.add(PodBuilder(f"p{i}", "ns").gated().build())
    await until(lambda: len(world.slurm.submitted) == pods)
    patches = InFlight(world.kube.patch)
    monkeypatch.setattr(world.kube, "patch", patches)
    for job_id in list(world.slurm.jobs):
        world.slurm.start(job_id, "node1")
    await world.bridge.poller.poll_once()
    await world.bridge.releaser.drain()
    assert 0 < patches.most <= RELEASES_IN_FLIGHT
    assert all(not world.pod(f"p{i}")["spec"].get("schedulingGates") for i in range(pods))


async def test_a_pod_whose_release_a_lost_lead_cut_short_is_released_in_the_next_term(
    tmp_path: Path,
) -> None:
    """SOAK seed 2 met it: the apiserver restarted right after the leader submitted a gated
    pod's job; its release failed, the lease lapsed (the releases were dropped), and the same
    replica led again: its intake had seen the pod already and never tracked it again."""
    world = World(tmp_path)
    cache = asyncio.create_task(world.bridge.pod_cache.run())
    await world.bridge.pod_cache.wait_synced()
    term = asyncio.create_task(world.bridge.intake.run())
    world.kube.add(PodBuilder("p", "ns").gated().build())
    try:
        await until(lambda: len(world.slurm.submitted) == 1)
        [job_id] = world.slurm.jobs
        world.kube.down = True  # the release fails, and the lease lapses
        world.slurm.start(job_id, "node1")
        await world.bridge.poller.poll_once()
        await asyncio.sleep(0.05)
        term.cancel()  # the lead is lost
        await asyncio.gather(term, return_exceptions=True)
        world.kube.down = False
        term = asyncio.create_task(world.bridge.intake.run())  # and taken again
        await wait_for(lambda: not world.pod("p")["spec"].get("schedulingGates"), 5,
                       interval=0.01, what="the pod released in the new term")
        assert world.pod("p")["metadata"]["annotations"][keys.JOB_ID] == str(job_id)
        assert len(world.slurm.submitted) == 1
    finally:
        for task in (term, cache):
            task.cancel()
        await asyncio.gather(term, cache, return_exceptions=True)
        await world.bridge.notifier.drain()


async def test_a_pod_whose_tracked_job_a_resync_cancelled_for_an_older_running_one_is_released(
    world: World,
) -> None:
    """SOAK seed 3 met it: submits whose answers a cut ate left older jobs for the pod in
    Slurm; the resync kept the oldest (already running) and cancelled the one the bridge
    tracked, and nothing ever reported the kept job: the pod stayed gated, told nothing."""
    world.kube.add(PodBuilder("p", "ns").gated().build())
    await until(lambda: len(world.slurm.submitted) == 1)
    [tracked] = world.slurm.jobs
    owner = world.slurm.jobs[tracked].owner
    world.slurm.put(  # an earlier submit whose answer was lost: unknown to the index
        JobBuilder(tracked - 50, world.slurm.jobs[tracked].name).owner(owner).running("node3")
        .build()
    )
    await world.bridge.poller.resync()
    await world.bridge.releaser.drain()
    assert world.slurm.jobs[tracked].state is JobState.CANCELLED
    pod = world.pod("p")
    assert not pod["spec"].get("schedulingGates")
    assert pod["metadata"]["annotations"][keys.JOB_ID] == str(tracked - 50)
    assert pod["metadata"]["annotations"][keys.SLURM_NODE] == "node3"


# --- a group's seats and asks (issue 41, cases 1 and 2) --------------------------------------


def _member(name: str, rank: int | None, *, size: int = 2, gpus: int = 0) -> Any:
    built = PodBuilder(name, "ns").group("g", size).gpus(gpus).gated()
    return (built.label(keys.GROUP_RANK, str(rank)) if rank is not None else built).build()


def _told(world: World, reason: keys.EventReason, name: str) -> list[str]:
    return [e["message"] for e in world.kube.events(reason)
            if e["involvedObject"]["name"] == name]


async def test_a_second_pod_under_a_taken_rank_is_never_released_onto_the_same_seat(
    world: World,
) -> None:
    """A pod joins a placed group under a rank a running member holds (it got past the
    webhook): released, it would run on the same node with the same GPUs."""
    job_id, _ = await world.gang(2)
    await world.allocate(job_id, "node3", "node1", gpus=(7,))
    world.kube.add(_member("intruder", 0))
    await until(lambda: bool(_told(world, keys.EventReason.RELEASE_REFUSED, "intruder")))
    await world.bridge.notifier.drain()
    intruder = world.pod("intruder")
    assert intruder["spec"]["schedulingGates"] == [{"name": keys.SLURM_GATE}], (
        f"released onto {intruder['metadata'].get('annotations', {}).get(keys.SLURM_NODE)}")
    [message] = _told(world, keys.EventReason.RELEASE_REFUSED, "intruder")
    assert "w0" in message and "node3" in message and keys.GROUP_RANK in message, message
    assert world.pod("w0")["metadata"]["annotations"][keys.SLURM_NODE] == "node3"


async def test_a_replacement_gets_its_predecessors_seat_once_that_one_has_finished(
    world: World,
) -> None:
    job_id, _ = await world.gang(2)
    await world.allocate(job_id, "node3", "node1")
    world.kube.add(_member("w0-again", 0))
    await until(lambda: bool(_told(world, keys.EventReason.RELEASE_REFUSED, "w0-again")))
    await world.kube.patch(Pod, "w0", {"status": {"phase": "Failed"}}, namespace="ns",
                           patch_type=PatchType.MERGE)
    await wait_for(lambda: not world.pod("w0-again")["spec"].get("schedulingGates"), 10,
                   interval=0.05, what="the replacement released")
    assert world.pod("w0-again")["metadata"]["annotations"][keys.SLURM_NODE] == "node3"


async def test_a_group_whose_members_ask_for_different_things_is_not_submitted(
    world: World,
) -> None:
    """A CPU-only launcher and a GPU worker: one job built from either would be wrong for
    the other."""
    world.kube.add(_member("launcher", 0))
    world.kube.add(_member("worker", 1, gpus=2))
    await until(lambda: bool(world.kube.events(keys.EventReason.SUBMIT_REFUSED)))
    await asyncio.sleep(0.1)
    assert world.slurm.submitted == []
    message = world.kube.events(keys.EventReason.SUBMIT_REFUSED)[0]["message"]
    assert "launcher" in message and "worker" in message and "gpus 0 vs 2" in message, message


async def test_a_member_asking_for_other_things_than_its_groups_job_is_not_released(
    world: World,
) -> None:
    """The launcher came first and the group's job was built from it; a GPU worker joins:
    released, it would run on a node where Slurm gave the job no GPU."""
    world.kube.add(_member("launcher", 0))
    await until(lambda: len(world.slurm.submitted) == 1)
    [job_id] = world.slurm.jobs
    world.kube.add(_member("worker", 1, gpus=2))
    owner = world.slurm.jobs[job_id].owner
    assert owner is not None
    await until(lambda: len(world.bridge.seen.pods_of(owner)) == 2)
    world.slurm.start(job_id, "node1", "node2")  # the worker waits on: no drain
    await world.bridge.poller.poll_once()
    await until(lambda: bool(_told(world, keys.EventReason.RELEASE_REFUSED, "worker")))
    assert world.pod("worker")["spec"]["schedulingGates"] == [{"name": keys.SLURM_GATE}]
    [message] = _told(world, keys.EventReason.RELEASE_REFUSED, "worker")
    assert "launcher" in message and "gpus 0 vs 2" in message, message
