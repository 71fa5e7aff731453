"""Pods and their jobs live and die together (Lifecycle), against the in-memory fakes."""

import dataclasses
from typing import Any

from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.controllers.lifecycle import Lifecycle
from bridge.jobs.owner import PodOwner
from bridge.link.podcache import PodCache
from bridge.placement.index import JobIndex
from bridge.placement.registry import SeenPods
from bridge.slurm.convert import comment_for, slurm_job
from bridge.slurm.types import Allocation, JobState
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm
from tests.unit.slurm_answers import captured_job

UID = "0000-pod-uid"
JOB = 101


class World:
    """A Lifecycle over fakes, with a clock the test moves."""

    def __init__(self) -> None:
        self.kube, self.slurm = FakeKube(), FakeSlurm(("node1",))
        self.index = JobIndex(self.slurm)
        self.now = 0.0
        self.lifecycle = Lifecycle(self.kube, self.slurm, self.index, SeenPods(),
                                   PodCache(self.kube), orphan_grace=30.0,
                                   clock=lambda: self.now)

    def job(self, state: JobState = JobState.RUNNING, reason: str = "None") -> None:
        """Slurm has the pod's job, running on node1 with GPU 3 (the index knows it)."""
        allocation = Allocation(("node1",), {"node1": (3,)})
        self.index.record(self.slurm.put(
            JobBuilder(JOB).owner(PodOwner(UID)).state(state, reason).allocation(allocation)
            .qos("low").build()))

    def pod(self, *, bound: bool = True, phase: str = "Running") -> None:
        builder = PodBuilder("p", "ns").uid(UID).phase(phase)
        if bound:
            builder.node("node1").annotations(
                {keys.JOB_ID: str(JOB), keys.SLURM_NODE: "node1", keys.GPU_IDS: "3"})
        self.kube.add(builder.build())

    def polled(self) -> None:
        """The poller saw the job change (it records Slurm's view in the index)."""
        self.index.record(self.slurm.jobs[JOB])

    def pod_object(self) -> dict[str, Any]:
        found = self.kube.obj(Pod, "p", "ns")
        assert found is not None
        return found

    def cancelled(self) -> bool:
        return JOB in self.slurm.cancelled


async def test_a_running_pod_whose_job_holds_its_node_is_left_alone() -> None:
    world = World()
    world.job()
    world.pod()
    await world.lifecycle.reconcile_once()
    assert not world.cancelled() and world.kube.evicted == []


async def test_a_waiting_pods_job_that_ended_unseen_is_found_from_the_pod() -> None:
    """A new leader's index holds no job that ended before it looked (resyncs read only the
    live ones); the job id recorded on a waiting pod leads to it, and the pod is told."""
    world = World()
    world.slurm.put(JobBuilder(JOB).owner(PodOwner(UID)).state(JobState.CANCELLED).build())
    world.kube.add(PodBuilder("p", "ns").uid(UID).phase("Pending")
                   .annotations({keys.JOB_ID: str(JOB)}).build())
    await world.lifecycle.reconcile_once()
    assert world.kube.evicted == ["ns/p"]


async def test_a_deleted_pods_job_is_cancelled() -> None:
    world = World()
    world.job(JobState.PENDING, "Priority")
    world.pod(bound=False, phase="Pending")
    await world.lifecycle.reconcile_once()
    assert not world.cancelled()
    await world.kube.delete(Pod, "p", namespace="ns")
    await world.lifecycle.reconcile_once()
    assert world.cancelled()
    assert world.slurm.jobs[JOB].state is JobState.CANCELLED


async def test_a_job_cancelled_by_the_bridge_is_not_read_back() -> None:
    """The bridge knows why the job ends: no read after the cancel, and the index no
    longer counts it live, so the poller does not read it again either (after a burst of
    5,000 deleted pods, 2,627 such reads slowed B1's next round)."""
    world = World()
    world.job(JobState.PENDING, "Priority")
    await world.lifecycle.reconcile_once()  # no pod: an orphan, cancelled after the grace
    world.now += 31
    world.slurm.requests.clear()
    await world.lifecycle.reconcile_once()
    assert world.cancelled()
    assert world.slurm.requests["get_job"] == 0, world.slurm.requests
    job = world.index.by_id(JOB)
    assert job is not None and job.state is JobState.CANCELLED and not job.state.is_live


async def test_a_finished_pods_job_is_cancelled() -> None:
    world = World()
    world.job()
    world.pod(phase="Succeeded")
    await world.lifecycle.reconcile_once()
    assert world.cancelled()


async def test_a_job_without_a_pod_is_cancelled_only_after_the_grace_period() -> None:
    """A replica may have submitted just now, before the pod shows up in a listing."""
    world = World()
    world.job(JobState.PENDING, "Priority")
    await world.lifecycle.reconcile_once()
    world.now = 29.0
    await world.lifecycle.reconcile_once()
    assert not world.cancelled()
    world.now = 31.0
    await world.lifecycle.reconcile_once()
    assert world.cancelled()


async def test_a_bound_pod_whose_job_ended_is_evicted_with_an_event_saying_why() -> None:
    world = World()
    world.job()
    world.pod()
    world.slurm.end(JOB, JobState.TIMEOUT, "TimeLimit")
    world.polled()
    await world.lifecycle.reconcile_once()
    assert world.kube.evicted == ["ns/p"]
    assert world.pod_object()["metadata"].get("deletionTimestamp")
    [event] = world.kube.events(keys.EventReason.JOB_ENDED)
    assert f"Slurm job {JOB} ended (TIMEOUT" in event["message"]
    await world.lifecycle.reconcile_once()
    assert len(world.kube.evicted) == 1  # once


async def test_a_cancelled_job_still_completing_is_named_cancelled_in_the_eviction() -> None:
    """Slurm lists a cancelled job as [CANCELLED, COMPLETING] until its nodes are free; the
    bridge treats it as COMPLETING (it still holds the nodes), and the pod is told both."""
    info = captured_job("24.11-v0.0.42-job-gpu3_idx0-2.json")
    info = info.model_copy(update={"job_state": ["CANCELLED", "COMPLETING"],
                                   "comment": comment_for(PodOwner(UID))})
    read = slurm_job(info, owned=True, signed=True)
    assert read.state is JobState.COMPLETING and read.ended_as is JobState.CANCELLED
    world = World()
    world.job()
    world.pod()
    world.slurm.put(dataclasses.replace(read, job_id=JOB, allocation=None))
    world.polled()
    await world.lifecycle.reconcile_once()
    assert world.kube.evicted == ["ns/p"]
    [event] = world.kube.events(keys.EventReason.JOB_ENDED)
    assert f"Slurm job {JOB} no longer runs (CANCELLED, COMPLETING" in event["message"]


async def test_one_stale_observation_is_not_enough_to_evict() -> None:
    """The index says the job ended, a fresh read says it runs on the pod's GPUs: no eviction."""
    world = World()
    world.job()  # Slurm has it running where the pod is bound; the index is told it ended
    world.index.record(JobBuilder(JOB).owner(PodOwner(UID)).state(JobState.COMPLETED).build())
    world.pod()
    await world.lifecycle.reconcile_once()
    assert world.kube.evicted == []


async def test_a_pod_preempted_in_slurm_is_evicted_and_told_so() -> None:
    world = World()
    world.job()
    world.pod()
    world.slurm.end(JOB, JobState.PREEMPTED)
    world.polled()
    await world.lifecycle.reconcile_once()
    assert world.kube.evicted == ["ns/p"]
    [event] = world.kube.events(keys.EventReason.PREEMPTED)
    assert "preempted by Slurm" in event["message"] and "QOS low" in event["message"]
    conditions = world.pod_object()["status"]["conditions"]
    assert [c["reason"] for c in conditions if c["type"] == keys.POD_CONDITION_SLURM] == [
        keys.REASON_PREEMPTED]


async def test_a_pod_whose_job_runs_elsewhere_now_is_evicted() -> None:
    world = World()
    world.job()
    world.pod()
    world.slurm.put(JobBuilder(JOB).owner(PodOwner(UID)).running("node2", gpus=(0,)).build())
    world.polled()
    await world.lifecycle.reconcile_once()
    [event] = world.kube.events(keys.EventReason.JOB_ENDED)
    assert "restarted on other resources (node2)" in event["message"]


async def test_a_job_another_replica_submitted_is_adopted_from_its_pod_and_cancelled() -> None:
    """The leader cancels the jobs of deleted pods from its own index: a job another replica
    submitted reaches it through the job id recorded on the pod (the poller no longer scans
    Slurm's queue for new jobs), read once however many rounds the pod lives."""
    world = World()
    world.slurm.put(
        JobBuilder(JOB).owner(PodOwner(UID)).state(JobState.PENDING, "Priority").build())
    world.kube.add(PodBuilder("p", "ns").uid(UID).annotations({keys.JOB_ID: str(JOB)}).build())
    for _ in range(3):
        await world.lifecycle.reconcile_once()
    adopted = world.index.by_owner(PodOwner(UID))
    assert adopted is not None and adopted.job_id == JOB
    assert world.slurm.requests["get_job"] == 1 and not world.cancelled()
    await world.kube.delete(Pod, "p", namespace="ns")
    await world.lifecycle.reconcile_once()
    assert world.cancelled()
