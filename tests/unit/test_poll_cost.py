"""A poll cycle costs what the bridge's own jobs cost, not what Slurm's whole queue does
(issue 15, B5): the poller asks Slurm only about the jobs it tracks."""

import asyncio

import httpx
import pytest

from bridge.config import SlurmSettings
from bridge.controllers.poller import RECHECK_AFTER_SECONDS, RECHECKS_PER_CYCLE, Poller
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.placement.index import JobIndex
from bridge.slurm.client import IDS_PER_REQUEST, SlurmClient
from bridge.slurm.errors import SlurmProtocolError, SlurmUnavailable
from bridge.slurm.types import Allocation, JobState
from bridge.slurm.wire.base import PingResponse
from slurmbridge_devkit.builders import JobBuilder
from slurmbridge_devkit.fakes import FakeSlurm
from slurmbridge_devkit.recorded_events import RecordedEvents
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange

OWN = 10


async def _idle_cycle(foreign: int) -> tuple[dict[str, int], int]:
    """Requests and job states answered in one poll cycle where nothing changed, with
    ``OWN`` running placeholders of the bridge and ``foreign`` native jobs in Slurm."""
    slurm = FakeSlurm(("node1",))
    index = JobIndex(slurm)
    for i in range(OWN):
        job = await index.ensure(JobRequest(name=f"k8s:ns/p{i}", owner=PodOwner(f"uid-{i}")))
        slurm.start(job.job_id, "node1")
    for _ in range(foreign):
        job_id = max(slurm.jobs) + 1
        slurm.put(JobBuilder(job_id, "native").owner(None)
                  .state(JobState.PENDING, "Priority").build())
    poller = Poller(slurm, index)
    await poller.resync()
    await poller.poll_once()  # the first cycle reads the jobs that started
    slurm.requests.clear()
    slurm.states_returned = 0
    await poller.poll_once()
    return dict(slurm.requests), slurm.states_returned


async def test_an_idle_cycle_costs_the_same_with_100_or_10000_foreign_jobs() -> None:
    small, large = await _idle_cycle(100), await _idle_cycle(10_000)
    assert small == large
    assert small == ({"job_states": 1}, OWN)


async def test_with_nothing_tracked_a_cycle_is_one_ping_and_still_notices_slurm_away() -> None:
    """No job named, no listing (without ids Slurm answers with every job); /readyz and the
    controllers still learn whether Slurm answers."""
    slurm = FakeSlurm()
    slurm.put(JobBuilder(1, "native").owner(None).running().build())
    poller = Poller(slurm, JobIndex(slurm))
    await poller.poll_once()
    assert dict(slurm.requests) == {"ping": 1} and slurm.states_returned == 0
    slurm.down = True
    with pytest.raises(SlurmUnavailable):
        await poller.poll_once()


class StateRest:
    """slurmrestd's ``/jobs/state/`` as checked on 24.11 and 26.05: ``job_id`` repeated,
    unknown ids absent, no ``job_id`` = every job; records each query's ids."""

    def __init__(self, known: range) -> None:
        self.known = known
        self.queries: list[list[int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.44/jobs/": {}}})
        if request.url.path.endswith("/ping/"):
            return httpx.Response(200, json={"pings": [{"pinged": "DOWN", "responding": False}]})
        ids = [int(i) for i in request.url.params.get_list("job_id")] or list(self.known)
        self.queries.append(ids)
        found = [{"job_id": i, "state": ["RUNNING"]} for i in ids if i in self.known]
        return httpx.Response(200, json={"jobs": found})


async def test_the_client_names_the_jobs_it_wants_in_chunks_and_never_lists_all() -> None:
    rest = StateRest(range(1, 1_001))
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token="t", retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest)) as client:
        assert await client.job_states([]) == {}
        assert rest.queries == []  # no ids, no request: Slurm would answer every job
        states = await client.job_states([*range(500, 1_500), 500])
        with pytest.raises(SlurmUnavailable, match="no slurmctld is up"):
            await client.ping()
    assert sorted(states) == list(range(500, 1_001))
    assert [len(q) for q in rest.queries] == [IDS_PER_REQUEST, IDS_PER_REQUEST, 200]


async def test_pending_reasons_are_re_read_in_turn_but_not_every_cycle() -> None:
    """A reason changes without a state change, so pending jobs are re-read round-robin,
    each at most every ``reason_interval``: idle cycles then cost the state query alone."""
    slurm = FakeSlurm()
    index = JobIndex(slurm)
    for i in range(OWN):
        job = await index.ensure(JobRequest(name=f"k8s:ns/p{i}", owner=PodOwner(f"uid-{i}")))
        slurm.end(job.job_id, JobState.PENDING, "Priority")
    poller = Poller(slurm, index, reasons_per_cycle=5, reason_interval=0.4)
    reads = []
    for pause in (0, 0, 0.25, 0, 0, 0):  # the first reads come half the interval after
        await asyncio.sleep(pause)
        slurm.requests.clear()
        await poller.poll_once()
        reads.append(slurm.requests["get_job"])
    assert reads == [0, 0, 5, 5, 0, 0]
    assert {j.reason for j in index.jobs()} == {"Priority"}


@pytest.mark.parametrize(("entry", "up"), [
    ({"pinged": "UP", "mode": "primary"}, True),  # v0.0.41 (24.11)
    ({"pinged": "UP", "responding": True}, True),  # v0.0.42, v0.0.44
    ({"responding": True, "status": "No error"}, True),  # v0.0.45 (26.05): no "pinged"
    ({"responding": False, "status": "Unable to contact slurm controller"}, False),
    ({"pinged": "DOWN"}, False),
])
def test_a_ping_is_read_in_every_parser_version(entry: dict[str, object], up: bool) -> None:
    assert PingResponse.model_validate({"pings": [entry]}).pings[0].up is up


async def test_every_job_state_reads_text_ids_and_leaves_array_records_out() -> None:
    """v0.0.45 writes ids as text; a pending array record ("4_[1-3]") is no job of the bridge."""
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.45/jobs/": {}}})
        return httpx.Response(200, json={"jobs": [
            {"job_id": "7", "state": ["RUNNING"]}, {"job_id": 8, "state": ["PENDING"]},
            {"job_id": "4_[1-3]", "state": ["PENDING"]}, {"job_id": "9", "state": ["ODD"]},
        ]})

    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token="t", retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(answer)) as client:
        states = await client.every_job_state()
        assert await client.job_states([7, 8]) == {7: JobState.RUNNING, 8: JobState.PENDING}
    assert states == {7: JobState.RUNNING, 8: JobState.PENDING, 9: None}


async def test_a_job_that_started_is_read_through_its_allocation_alone() -> None:
    slurm = FakeSlurm(("node1",))
    index = JobIndex(slurm)
    job = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-p")))
    slurm.start(job.job_id, "node1", gpus=(2,))
    events = RecordedEvents()
    changes = events.changed
    await Poller(slurm, index, events).poll_once()
    assert (slurm.requests["job_allocation"], slurm.requests["get_job"]) == (1, 0)
    [after] = changes
    assert after.state is JobState.RUNNING and after.owner == PodOwner("uid-p")
    assert after.allocation is not None and after.allocation.gpu_ids == {"node1": (2,)}


async def test_an_unreadable_allocation_skips_that_job_for_the_cycle_only() -> None:
    slurm = FakeSlurm(("node1",))
    index = JobIndex(slurm)
    jobs = [await index.ensure(JobRequest(name=f"k8s:ns/p{i}", owner=PodOwner(f"uid-{i}")))
            for i in range(2)]
    for job in jobs:
        slurm.start(job.job_id, "node1")
    answer = slurm.job_allocation

    async def garbled(job_id: int) -> Allocation | None:
        if job_id == jobs[0].job_id:
            raise SlurmProtocolError(f"the allocation of job {job_id} cannot be read")
        return await answer(job_id)

    slurm.job_allocation = garbled  # type: ignore[method-assign]
    await Poller(slurm, index).poll_once()
    assert [index.by_id(j.job_id).state for j in jobs] == [  # type: ignore[union-attr]
        JobState.PENDING, JobState.RUNNING]


async def test_running_jobs_are_read_again_only_after_a_blind_spell() -> None:
    """Polls seconds apart confirm a running job by its state alone; after a gap longer than
    Slurm's requeue hold allows to pass unseen, each is read once more, at most
    ``RECHECKS_PER_CYCLE`` a cycle (a bounded load, never a slower next cycle), then no more."""
    slurm = FakeSlurm(("node1",))
    now = [0.0]
    index = JobIndex(slurm, clock=lambda: now[0])
    running = RECHECKS_PER_CYCLE + OWN
    for i in range(running):
        job = await index.ensure(JobRequest(name=f"k8s:ns/p{i}", owner=PodOwner(f"uid-{i}")))
        slurm.start(job.job_id, "node1")
    poller = Poller(slurm, index)
    await poller.poll_once()  # the first cycle reads the jobs that started
    counts = []
    for gap in (2.0, 2.0, RECHECK_AFTER_SECONDS + 30, 2.0, 2.0):
        now[0] += gap
        slurm.requests.clear()
        await poller.poll_once()
        counts.append(dict(slurm.requests))
    states = {"job_states": 1}
    assert counts == [states, states, states | {"job_allocation": RECHECKS_PER_CYCLE},
                      states | {"job_allocation": OWN}, states]
