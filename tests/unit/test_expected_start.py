"""Issue 26 item 1: when Slurm expects a pending placeholder to start, read from the answer
the poller's reason refresh already gets (no extra request), and said in words."""

import dataclasses
from datetime import UTC, datetime, timedelta

from bridge.controllers.poller import Poller
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.placement.index import JobIndex
from bridge.placement.reasons import expected_start, said_expected
from bridge.slurm import convert
from bridge.slurm.types import JobState, SlurmJob
from bridge.slurm.wire.base import JobsResponse
from slurmbridge_devkit.builders import JobBuilder
from slurmbridge_devkit.fakes import FakeSlurm
from slurmbridge_devkit.recorded_events import RecordedEvents

NOW = datetime(2026, 12, 2, 13, 53, 20, tzinfo=UTC)
START = datetime(2026, 12, 2, 14, 5, 10, tzinfo=UTC)
BACKFILL = datetime(2026, 12, 2, 13, 53, 5, tzinfo=UTC)


def _answer(state: str, start: int, last_backfill: int) -> JobsResponse:
    """``GET /job/{id}`` as slurmrestd 24.11 answers it (v0.0.41/42; v0.0.44 names the same)."""
    return JobsResponse.model_validate({
        "jobs": [{"job_id": 7, "job_state": [state], "state_reason": "Resources",
                  "start_time": {"set": True, "infinite": False, "number": start}}],
        "last_backfill": {"set": True, "infinite": False, "number": last_backfill},
        "last_update": {"set": True, "infinite": False, "number": last_backfill + 3},
    })


def _job(answer: JobsResponse) -> SlurmJob:
    return convert.slurm_job(answer.jobs[0], owned=False, signed=True,
                             last_backfill=answer.last_backfill)


def test_a_pending_jobs_start_time_is_slurms_estimate_with_the_last_backfill() -> None:
    job = _job(_answer("PENDING", int(START.timestamp()), int(BACKFILL.timestamp())))
    assert (job.expected_start, job.backfill_at) == (START, BACKFILL)


def test_no_estimate_when_slurm_has_none_or_the_job_runs() -> None:
    assert _job(_answer("PENDING", 0, int(BACKFILL.timestamp()))).expected_start is None
    running = _job(_answer("RUNNING", int(START.timestamp()), int(BACKFILL.timestamp())))
    assert (running.expected_start, running.backfill_at) == (None, None)


def test_a_start_a_year_ahead_is_slurms_way_of_having_no_plan() -> None:
    """What blocks the job has no end (no time limits): 24.11 answers with now + 365 days."""
    now = datetime.now(UTC)
    ahead = int((now + timedelta(days=365)).timestamp())
    assert _job(_answer("PENDING", ahead, int(now.timestamp()))).expected_start is None
    far = now + timedelta(days=30)  # bf_window's maximum: still a plan
    assert _job(_answer("PENDING", int(far.timestamp()), int(now.timestamp()))).expected_start


def test_the_words_say_when_in_how_long_and_by_which_backfill() -> None:
    job = (JobBuilder(7).owner(None).state(JobState.PENDING, "Resources")
           .expected_start(START, BACKFILL).build())
    assert expected_start(job, NOW) == (
        "expected to start at 14:05 UTC, in about 12 minutes, by Slurm's backfill at 13:53")
    tomorrow = dataclasses.replace(job, expected_start=START + timedelta(days=1))
    assert expected_start(tomorrow, NOW) == (
        "expected to start at 2026-12-03 14:05 UTC, in about 24 hours, by Slurm's backfill "
        "at 13:53")
    assert expected_start(dataclasses.replace(job, expected_start=NOW - timedelta(seconds=5)),
                          NOW).startswith("expected to start at 13:53 UTC, any moment now")
    assert expected_start(dataclasses.replace(job, expected_start=None), NOW) == ""
    assert expected_start(dataclasses.replace(job, backfill_at=None), NOW) == (
        "expected to start at 14:05 UTC, in about 12 minutes")


def test_the_plugin_reads_the_time_back_from_the_words() -> None:
    assert said_expected("waiting for Slurm job 7 (PENDING, reason Resources): no node; "
                         "expected to start at 14:05 UTC, in about 12 minutes") == "14:05 UTC"
    assert said_expected("x; expected to start at 2026-12-03 14:05 UTC, in about 1 day") == (
        "2026-12-03 14:05 UTC")
    assert said_expected("waiting for Slurm job 7 (PENDING, reason Priority): other") == ""


async def test_the_reason_refresh_brings_the_estimate_and_costs_no_extra_request() -> None:
    slurm = FakeSlurm(("node1",))
    index = JobIndex(slurm)
    job = await index.ensure(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-1")))
    events = RecordedEvents()
    changes = events.changed
    poller = Poller(slurm, index, events, reason_interval=0)
    await poller.poll_once()
    slurm.put(dataclasses.replace(slurm.jobs[job.job_id], reason="Resources"))
    await poller.poll_once()
    slurm.put(dataclasses.replace(slurm.jobs[job.job_id], expected_start=START,
                                  backfill_at=BACKFILL))
    slurm.requests.clear()
    await poller.poll_once()
    assert dict(slurm.requests) == {"job_states": 1, "get_job": 1}  # as before the estimate
    assert [(j.reason, j.expected_start) for j in changes[-2:]] == [
        ("Resources", None), ("Resources", START)]
    assert index.by_id(job.job_id) == changes[-1]
