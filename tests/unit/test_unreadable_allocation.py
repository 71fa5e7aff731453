"""A placeholder whose allocation the bridge cannot read is still the pod's job.

The 30-minute soak at seed 1 (RESULTS.md) met one: Slurm's gres detail of a job on the
typed-GPU node (``gpu:1g.10gb:1(IDX:0),gpu:3g.40gb:0(IDX:)``) was refused by the parser of the
day.  The whole job became unreadable, so a new leader's index never held it: the group's
pods were never told why they waited, a second job was submitted for the same owner, and the
unreadable one ran on for minutes after its pods were deleted.  Whatever the allocation's
text, the job's owner and state are read; its allocation counts as unknown, which is never
a reason to release, bind or evict."""


from bridge.controllers.poller import Poller
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.link.bound import bound, holds
from bridge.placement.index import JobIndex
from bridge.placement.notifier import describe
from bridge.slurm.convert import comment_for, slurm_job
from bridge.slurm.types import Allocation, JobState
from bridge.slurm.wire.base import JobInfo
from slurmbridge_devkit.builders import JobBuilder
from slurmbridge_devkit.fakes import FakeSlurm
from slurmbridge_devkit.recorded_events import RecordedEvents
from tests.unit.slurm_answers import captured_job

BAD_GRES = "gpu:1g.10gb:1(IDX:0),gpu:3g.40gb:oops(IDX:?)"


def _unreadable_info() -> JobInfo:
    info = captured_job("24.11-v0.0.42-job-typed1g.10gb1_idx3.json")
    return info.model_copy(update={"gres_detail": [BAD_GRES],
                                   "comment": comment_for(PodOwner("uid-1"))})


def test_a_job_whose_gres_cannot_be_read_keeps_its_owner_and_state() -> None:
    job = slurm_job(_unreadable_info(), owned=True, signed=True)
    assert job.owner is not None
    assert job.state is JobState.RUNNING
    assert job.allocation is None
    assert BAD_GRES in job.unreadable
    assert "cannot be read" in describe(job) and BAD_GRES in describe(job)


async def test_a_new_index_knows_the_owner_has_a_job_and_submits_no_second_one() -> None:
    fake = FakeSlurm(("node4",))
    owner = PodOwner("uid-1")
    running = fake.put(JobBuilder(7).owner(owner).running()
                       .unreadable(f"bad GPU index list in gres {BAD_GRES!r}").build())
    index = JobIndex(fake)
    await index.resync()
    assert index.by_owner(owner) == running
    assert (await index.ensure(JobRequest(name="k8s:ns/p", owner=owner))).job_id == 7
    assert fake.submitted == []


def test_an_unreadable_rereading_keeps_the_allocation_held_and_evicts_nobody() -> None:
    index = JobIndex(FakeSlurm())
    owner = PodOwner("uid-1")
    held = JobBuilder(7).owner(owner).running("node4", gpus=(3,)).build()
    index.record(held)
    index.record(JobBuilder(7).owner(owner).running().unreadable("bad gres").build())
    job = index.by_id(7)
    assert job is not None and job.allocation == held.allocation
    recorded = bound(7, owner, "node4", "3", "0")
    never_read = JobBuilder(8, "k8s:ns/q").owner(owner).running().unreadable("bad gres").build()
    assert holds(recorded, never_read)  # unknown is no reason to evict


async def test_an_unknown_allocation_is_read_again_each_poll_until_it_is_known() -> None:
    """A garbled answer is often a passing one (tests/e2e/test_attacks.py garbles a job's
    reads for a few seconds): a job whose allocation is unknown is read on every poll, and
    its pod released as soon as the answer reads, not when its state next changes."""
    fake = FakeSlurm(("node4",))
    owner = PodOwner("uid-1")
    fake.put(JobBuilder(7).owner(owner).running().unreadable("bad gres").build())
    index = JobIndex(fake)
    events = RecordedEvents()
    changes = events.changed
    poller = Poller(fake, index, events, interval=0.01, resync_interval=3600)
    await poller.resync()
    assert [c.job_id for c in changes] == [7]  # discovered: its readers hear of it
    changes.clear()
    await poller.poll_once()
    assert changes == []  # still unreadable: nothing to release
    fake.start(7, "node4", gpus=(3,))  # the answer reads now
    await poller.poll_once()
    assert [c.allocation for c in changes] == [Allocation(("node4",), {"node4": (3,)})]
    job = index.by_id(7)
    assert job is not None and job.unreadable == ""
