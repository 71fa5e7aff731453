"""JobIndex invariants against the dev kit's fake Slurm (the real one is in tests/integration)."""

import asyncio
from datetime import UTC, datetime, timedelta

from lightkube.models.core_v1 import Pod
from prometheus_client import REGISTRY

from bridge import keys
from bridge.controllers.poller import Poller
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.kube.nodecache import NodeCache
from bridge.placement.index import JobIndex
from bridge.placement.placer import Placer
from bridge.placement.registry import SeenPods
from bridge.slurm.errors import SlurmProtocolError
from bridge.slurm.types import JobState, SlurmJob
from slurmbridge_devkit import fakes
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.recorded_events import RecordedEvents


class FakeSlurm(fakes.FakeSlurm):
    """The dev kit's fake Slurm, numbering jobs from 1, whose listing can be held and which
    remembers the jobs read one by one."""

    def __init__(self) -> None:
        super().__init__(first_id=1)
        self.fetched: list[int] = []
        self.hold_listing: asyncio.Event | None = None
        self.listing_started = asyncio.Event()

    async def get_job(self, job_id: int) -> SlurmJob:
        self.fetched.append(job_id)
        return await super().get_job(job_id)

    async def every_job_state(self) -> dict[int, JobState | None]:
        snapshot = await super().every_job_state()
        self.listing_started.set()
        if self.hold_listing is not None:
            await self.hold_listing.wait()
        return snapshot


class CountingSlurm(FakeSlurm):
    """Counts the full state listings."""

    listings = 0

    async def every_job_state(self) -> dict[int, JobState | None]:
        self.listings += 1
        return await super().every_job_state()


def _index(fake: FakeSlurm) -> JobIndex:
    return JobIndex(fake)


async def test_a_submit_during_resync_is_not_forgotten() -> None:
    """A resync's listing may predate a submit; forgetting it would submit the pod twice."""
    fake = FakeSlurm()
    fake.hold_listing = asyncio.Event()
    index = _index(fake)
    resync = asyncio.create_task(index.resync())
    await fake.listing_started.wait()
    job = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-1")))
    fake.hold_listing.set()
    assert (await resync).cancelled == []
    assert index.by_owner(PodOwner("uid-1")) == job
    again = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-1")))
    assert again.job_id == job.job_id and len(fake.jobs) == 1


async def test_resync_keeps_one_live_job_per_owner() -> None:
    fake = FakeSlurm()
    for _ in range(3):
        await fake.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-2")))
    index = _index(fake)
    cancelled = (await index.resync()).cancelled
    assert sorted(cancelled) == [2, 3]
    kept = index.by_owner(PodOwner("uid-2"))
    assert kept is not None and kept.job_id == 1


async def test_a_change_seen_only_by_a_resync_is_reported() -> None:
    """The poller's resync must not swallow PENDING → RUNNING: waiting pods are requeued on it."""
    fake = FakeSlurm()
    index = _index(fake)
    job = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-3")))
    fake.jobs[job.job_id] = (JobBuilder(job.job_id, job.name).owner(PodOwner("uid-3"))
                             .running("node1").build())
    events = RecordedEvents()
    await Poller(fake, index, events).resync()
    seen = [(before.state, after.state) for before, after in events.changes]
    assert seen == [(JobState.PENDING, JobState.RUNNING)]


async def test_a_job_submitted_as_a_resync_began_and_started_before_its_listing_is_reported(
) -> None:
    """Submitted after the resync took its "before" and started before Slurm's state list:
    the resync reads it RUNNING, and the poller must say so (its pod waits for that news to
    be released; later polls see RUNNING both times).  B1 at 5,000 pods left 7 gated pods of
    one such burst unreleased for good."""
    fake = FakeSlurm()
    index = _index(fake)
    events = RecordedEvents()
    listing = fake.every_job_state

    async def submitted_and_started_first() -> dict[int, JobState | None]:
        job = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-4")))
        fake.start(job.job_id, "node1")
        return await listing()

    fake.every_job_state = submitted_and_started_first  # type: ignore[method-assign]
    await Poller(fake, index, events).resync()
    seen = [(before.state, after.state) for before, after in events.changes]
    assert seen == [(JobState.PENDING, JobState.RUNNING)]


def _member(uid: str, annotations: dict[str, str] | None = None) -> Pod:
    return (PodBuilder(f"train-{uid}", "ns").bare().scheduler(keys.SCHEDULER_NAME).uid(uid)
            .group("train", 2).annotations(annotations or {}).cpu("1").requests_only().build())


async def test_a_group_created_again_after_its_job_ended_gets_a_new_job() -> None:
    """A resumed Job (or a group re-created under its name) has new pods: the ended job of
    the group's earlier run must not hold them ("will not resubmit: recreate the pod")."""
    fake = FakeSlurm()
    index = _index(fake)
    placer = Placer(index, NodeCache(FakeKube()), SeenPods())
    first = await placer.prepare(_member("a"))
    index.record(JobBuilder(first.job_id, first.name).owner(first.owner)
                 .state(JobState.CANCELLED).build())
    tied = _member("a", {"slurmbridge.io/job-id": str(first.job_id)})
    verdict = await placer.filter(tied, ["kube-node1"])
    assert "will not resubmit" in verdict.message  # a member the ended job was recorded on
    second = await placer.prepare(_member("b"))  # the resumed Job's pod: never saw job 1
    assert second.job_id != first.job_id and second.state is JobState.PENDING


async def test_a_resync_reads_each_native_job_once_and_never_lists_every_job() -> None:
    """``GET /jobs/`` answers every job with its per-core allocation: hundreds of MB at a
    site's queue, and slurmrestd was OOM-killed at 21 GB serving it (B1: 5,000 jobs on
    1,250-CPU nodes).  A resync reads the state list and each job it has not classified yet,
    once; a known job again only when its state changed.  Duplicates are still cancelled."""
    fake = FakeSlurm()
    for job_id in (100, 101, 102):
        fake.put(JobBuilder(job_id, "native").owner(None).running().build())
    first = await fake.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-5")))
    second = await fake.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-5")))
    index = _index(fake)
    assert (await index.resync()).cancelled == [second]
    assert fake.requests["every_job_state"] == 1  # the port has no full listing any more
    assert sorted(fake.fetched) == sorted([100, 101, 102, first, second])
    fake.fetched.clear()
    assert (await index.resync()).cancelled == []
    # natives remembered, known jobs unchanged, the cancelled duplicate ended: nothing read
    assert fake.fetched == []
    fake.start(first, "node1")
    fake.put(JobBuilder(103, "native").owner(None).state(JobState.PENDING, "Priority").build())
    await index.resync()
    assert sorted(fake.fetched) == [first, 103]
    running = index.by_owner(PodOwner("uid-5"))
    assert running is not None and running.state is JobState.RUNNING


async def test_a_new_leader_learns_jobs_another_replica_submitted_within_a_cycle() -> None:
    """Found on kind: with no leader, replica B's filter submitted the pods' jobs; replica A
    then took the lease, never held them, and their pods' deletion cancelled nothing until
    A's next resync (300 s). Taking the lease asks for a resync on the next cycle."""
    fake = FakeSlurm()
    index = _index(fake)
    poller = Poller(fake, index, interval=0.01, resync_interval=3600)
    task = asyncio.create_task(poller.run())
    try:
        while not poller.synced:
            await asyncio.sleep(0.01)
        other = await fake.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-7")))
        await asyncio.sleep(0.1)
        assert index.by_id(other) is None  # unseen: nothing tracks it, no resync is due
        await asyncio.wait_for(poller.listed_since(datetime.now(UTC)), 1)
        assert index.by_id(other) is not None
    finally:
        task.cancel()


async def test_a_new_leaders_resync_starts_at_once_not_after_the_poll_sleep() -> None:
    """B6's failover (issue 42): a new leader's intake waits for the resync it asks for,
    which waited for the poller's sleep (2 s shipped) before it started."""
    fake = FakeSlurm()
    index = _index(fake)
    poller = Poller(fake, index, interval=5, resync_interval=3600)
    task = asyncio.create_task(poller.run())
    try:
        await asyncio.wait_for(poller.listed_since(datetime.now(UTC) - timedelta(hours=1)), 1)
        await asyncio.sleep(0.1)  # the first cycle done: the poller sleeps 5 s
        other = await fake.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-9")))
        await asyncio.wait_for(poller.listed_since(datetime.now(UTC)), 1)
        assert index.by_id(other) is not None
    finally:
        task.cancel()


async def test_a_new_leader_uses_the_listing_begun_after_its_holder_went_quiet() -> None:
    """B6's failover (issue 42): a new leader listed Slurm again as it took the lease (3 s at
    20,000 jobs) though its standby had listed it as the dead holder went quiet. A listing
    begun after the quiet moment serves; one begun before it does not."""
    fake = CountingSlurm()
    index = _index(fake)
    poller = Poller(fake, index, interval=5, resync_interval=3600)
    task = asyncio.create_task(poller.run())
    try:
        await asyncio.wait_for(poller.listed_since(datetime.now(UTC) - timedelta(hours=1)), 1)
        quiet = datetime.now(UTC)
        other = await fake.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-9")))
        poller.list_again()  # the standby, told its holder went quiet
        await asyncio.wait_for(poller.listed_since(quiet), 1)
        assert (fake.listings, index.by_id(other) is not None) == (2, True)
        await asyncio.wait_for(poller.listed_since(quiet), 1)  # the lease taken
        assert fake.listings == 2  # that listing serves: none again
    finally:
        task.cancel()


async def test_a_known_job_unreadable_during_a_resync_stays_tracked_and_is_counted() -> None:
    """Found by CI (24.11): a new leader's resync read a garbled answer for a job it had just
    submitted; the resync dropped the job from the index, so the poller never read it again
    and nothing counted the error. The job is still in Slurm's state list: it stays tracked
    as last read (the next cycle reads it again), and the error is counted."""
    fake = UnreadableSlurm()
    index = _index(fake)
    job = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-8")))
    fake.start(job.job_id, "node1")
    fake.unreadable.add(job.job_id)
    before = _unreadable_count()
    await index.resync()
    assert index.by_owner(PodOwner("uid-8")) == job  # as last read: PENDING
    assert _unreadable_count() == before + 1
    fake.unreadable.clear()
    await index.resync()
    tracked = index.by_owner(PodOwner("uid-8"))
    assert tracked is not None and tracked.state is JobState.RUNNING


class UnreadableSlurm(FakeSlurm):
    """Answers for the jobs in ``unreadable`` cannot be parsed."""

    def __init__(self) -> None:
        super().__init__()
        self.unreadable: set[int] = set()

    async def get_job(self, job_id: int) -> SlurmJob:
        if job_id in self.unreadable:
            raise SlurmProtocolError(f"job {job_id}: gres_detail unreadable")
        return await super().get_job(job_id)


def _unreadable_count() -> float:
    value = REGISTRY.get_sample_value("slurmbridge_poll_errors_total", {"kind": "unreadable"})
    return value or 0.0


async def test_no_resync_reads_jobs_that_ended_before_it_saw_them() -> None:
    """B1 at 5,000 pods: the round before (Slurm alone) left 5,000 cancelled native jobs in
    Slurm's list for MinJobAge; the bridge's next periodic resync read every one of them
    (6,824 ``GET /job/<id>`` of 375 kB each, slurmrestd 89 CPU-s in a 178 s round).  A new
    leader's first resync did the same before its intake could submit: after an interrupted
    benchmark left 10,909 cancelled placeholders, 10,909 reads and 104 s of stalled intake.
    An ended job the index never knew holds nothing; a pod whose job it was records its id
    (first status, release, bind) and lifecycle reads it from there.  Every resync reads the
    unknown jobs that are live, the ones the one-live-job-per-owner guarantee needs."""
    fake = FakeSlurm()
    index = _index(fake)
    poller = Poller(fake, index, interval=0.01, resync_interval=3600)
    await poller.resync()  # the first
    for job_id in range(100, 150):
        fake.put(JobBuilder(job_id, "native").owner(None).state(JobState.CANCELLED).build())
    fake.put(JobBuilder(150, "native").owner(None).running().build())
    ours = await fake.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-9")))
    fake.end(ours, JobState.CANCELLED)  # another replica's job, ended unseen
    live = await fake.submit(JobRequest(name="k8s:ns/q", owner=PodOwner("uid-10")))
    fake.fetched.clear()
    await poller.resync()  # periodic
    assert sorted(fake.fetched) == sorted([150, live])
    fake.fetched.clear()
    await poller.resync()  # this replica took the lease
    assert fake.fetched == []  # the live ones are known; the ended ones stay unread
    assert index.by_id(ours) is None
    fresh = _index(fake)  # a new leader's process: it reads the live ones only
    await Poller(fake, fresh, interval=0.01, resync_interval=3600).resync()
    tracked = fresh.by_owner(PodOwner("uid-10"))
    assert tracked is not None and tracked.job_id == live
    assert fresh.by_id(ours) is None


async def test_the_live_jobs_a_poll_names_follow_every_record_end_forget_and_resync() -> None:
    """A poll cycle names the live jobs only, read from a view the index keeps as records
    change (it used to walk every job held, ended ones included, and again per state for
    the gauge: 2.8 % of the extender's samples in B1's profiled round)."""
    fake = FakeSlurm()
    index = _index(fake)
    first = await index.ensure(JobRequest(name="k8s:ns/a", owner=PodOwner("uid-a")))
    second = await index.ensure(JobRequest(name="k8s:ns/b", owner=PodOwner("uid-b")))
    assert set(index.live()) == {first.job_id, second.job_id}
    fake.end(first.job_id, JobState.CANCELLED)
    index.record(await fake.get_job(first.job_id))
    assert set(index.live()) == {second.job_id}
    index.forget(second.job_id)
    assert index.live() == {}
    await index.resync()  # the listing brings back the job Slurm still runs
    assert set(index.live()) == {second.job_id}
    assert index.live()[second.job_id].state is JobState.PENDING


async def test_a_submit_during_the_pollers_long_sleep_is_polled_at_the_fast_interval() -> None:
    """A lone pod on an idle bridge waited up to the poll interval (2 s shipped) before its
    job's start was seen: the fast interval began only at the next cycle. A submit cuts the
    sleep short to the fast interval."""
    fake = FakeSlurm()
    index = _index(fake)
    poller = Poller(fake, index, interval=5, fast_interval=0.05, resync_interval=3600)
    task = asyncio.create_task(poller.run())
    try:
        await asyncio.wait_for(poller.listed_since(datetime.now(UTC) - timedelta(hours=1)), 1)
        await asyncio.sleep(0.1)  # the first cycle done: nothing tracked, the poller sleeps 5 s
        job = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-3")))
        await poller.job_submitted(PodBuilder("p", "ns").build())
        fake.start(job.job_id, "node1")
        for _ in range(50):
            if (seen := index.by_id(job.job_id)) is not None and seen.state is JobState.RUNNING:
                break
            await asyncio.sleep(0.02)
        assert seen is not None and seen.state is JobState.RUNNING  # within 1 s, not 5
    finally:
        task.cancel()
