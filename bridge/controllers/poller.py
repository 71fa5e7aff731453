"""Keep the job index current with a load on slurmctld that follows the bridge's own jobs.

Each cycle is one ``GET /jobs/state/?job_id=..`` naming the live jobs the index tracks
(``SlurmClient.job_states``: ids and states of those jobs only, 400 ids a request), plus one
``GET /job/<id>`` per tracked job whose state changed (for one that started, ``GET
/resources/<id>`` where slurmrestd has it, ~600 bytes instead of every core of each node; not
for a heterogeneous job, whose leader's answer holds its own component alone), plus up to
``reasons_per_cycle`` pending jobs whose reason is refreshed round-robin, each at most every
``reason_interval`` (the same answer brings Slurm's expected start), and as many running jobs
of a preemptable QOS (their preemption changes no state).  Nothing tracked: ``GET /ping/``,
so /readyz and the controllers learn whether Slurm answers.  Nothing grows with Slurm's queue
(B5).  Cycles come every ``interval`` (``fast_interval`` for ``fast_window`` after a submit,
a submit during a longer sleep cutting it short);
the full listing (``JobIndex.resync``) at start, every ``resync_interval``, and when a new
leader needs one begun after its former holder went quiet (``listed_since``).

Jobs another replica submitted are not found here: the placer adopts the job recorded on a
pod it meets, the leader's lifecycle the one on any of the bridge's pods (lifecycle.py).

The loop never ends on an error: a job whose answer cannot be read is skipped for this
cycle, and any other failure (Slurm away, or a bug meeting an answer nobody expected) is
logged with its traceback, counted in ``slurmbridge_poll_errors_total`` and retried with
backoff.  ``read_within`` tells /readyz whether Slurm was read recently.
"""

import asyncio
import contextlib
import dataclasses
import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Protocol

import structlog

from bridge import metrics
from bridge.controllers.rereads import Rereads
from bridge.placement.index import JobIndex
from bridge.placement.job_events import NO_LISTENER, JobEvents, JobListener
from bridge.slurm.errors import SlurmError, SlurmJobNotFound, SlurmProtocolError
from bridge.slurm.types import NO_REASON, Allocation, JobState, SlurmJob

log = structlog.get_logger(__name__)

MISSES_BEFORE_GONE = 3  # one missing observation is never acted on
# A running job the state reads have not shown for this long is read again: requeued and
# started elsewhere unseen, both reads say RUNNING.  Slurm holds a requeued batch job for its
# credential's lifetime (BeginTime, 120 s by default), so polls closer than that see it
# pending; a gap of half of it means the bridge was blind (slurmrestd away, a new process).
# At most RECHECKS_PER_CYCLE a cycle, longest unseen first: a bounded load after an outage.
RECHECK_AFTER_SECONDS = 60.0
RECHECKS_PER_CYCLE = 50
_FETCH_CONCURRENCY = 16


class PollerSlurm(Protocol):
    async def job_states(self, ids: Iterable[int]) -> dict[int, JobState]: ...
    async def ping(self) -> None: ...
    async def job_allocation(self, job_id: int) -> Allocation | None: ...
    async def get_job(self, job_id: int) -> SlurmJob: ...


class Poller(JobListener):
    def __init__(
        self,
        client: PollerSlurm,
        index: JobIndex,
        events: JobEvents = NO_LISTENER,
        *,
        interval: float = 2.0, fast_interval: float = 0.5, fast_window: float = 10.0,
        resync_interval: float = 300.0,
        reasons_per_cycle: int = 5,
        reason_interval: float = 10.0,
        watch_running: Callable[[SlurmJob], bool] | None = None,
    ) -> None:
        """``events``: told of each job's change and of Slurm answering again;
        ``watch_running``: may Slurm preempt this running job (its signal changes no state)."""
        self._client = client
        self._index = index
        self._events = events
        self.interval = interval
        self._fast_interval = min(fast_interval, interval)
        self._fast_window = fast_window
        self.resync_interval = resync_interval
        self._rereads = Rereads(per_cycle=reasons_per_cycle, reason_interval=reason_interval,
                                watch_running=watch_running)
        self._misses: dict[int, int] = {}
        self._fetch_slots = asyncio.Semaphore(_FETCH_CONCURRENCY)
        self.healthy = False  # the last cycle reached Slurm
        self.synced = False  # the index was built from a full listing at least once
        self._last_read: float | None = None  # loop time of the last complete cycle
        self._resync_asked = asyncio.Event()  # cuts the sleep short: a new leader waits on it
        self._submitted = asyncio.Event()  # cuts a sleep longer than the fast interval short
        self._listing_began: datetime | None = None  # the resync under way or last done
        self._listed: datetime | None = None  # when the last completed resync's listing began
        self._resynced = asyncio.Condition()  # told at each completed resync

    async def poll_once(self) -> None:
        await self._refresh_tracked(self._index.live())
        counts = Counter(j.state for j in self._index.live().values())
        for state in JobState:
            metrics.PLACEHOLDER_JOBS.labels(state.value).set(counts[state])

    async def _refresh_tracked(self, tracked: dict[int, SlurmJob]) -> None:
        if tracked:
            states = await self._client.job_states(tracked)
        else:  # nothing to read, but /readyz and the controllers need to know Slurm answers
            await self._client.ping()
            states = {}
        stale = [j for i, j in tracked.items() if states.get(i) != j.state or j.unreadable]
        started = [j for j in stale if states.get(j.job_id) is JobState.RUNNING]
        unseen = []
        for job in tracked.values():
            if job.state is JobState.RUNNING and states.get(job.job_id) is JobState.RUNNING:
                if self._index.unseen_for(job.job_id) <= RECHECK_AFTER_SECONDS:
                    self._index.confirm(job.job_id)
                else:
                    unseen.append(job)
        # where do they run now?
        started += heapq.nlargest(RECHECKS_PER_CYCLE, unseen,
                                  key=lambda j: self._index.unseen_for(j.job_id))
        stale_ids = {j.job_id for j in stale + started}
        batch = [j for j in stale if j not in started] + self._rereads.reasons(tracked, stale_ids)
        batch += self._rereads.running(tracked, stale_ids | {j.job_id for j in batch})
        whole = batch + [j for j in started if j.het_components]  # read whole: see above
        await asyncio.gather(*(self._refresh(j) for j in whole),
                             *(self._started(j) for j in started if not j.het_components))

    async def resync(self) -> None:
        """Rebuild the index from a full listing; changes it reveals are reported too."""
        resynced = await self._index.resync()
        log.info("poller.resynced", jobs=len(self._index.jobs()), cancelled=resynced.cancelled)
        for old, new in resynced.replaced:
            if _changed(old, new):
                await self._events.job_changed(old, new)
        for job in resynced.discovered:  # news to every reader, as a change would be
            await self._events.job_changed(job, job)

    async def _started(self, before: SlurmJob) -> None:
        """The state list says RUNNING (it started, or it ran unseen for a while): where is
        all that changed (the small answer where slurmrestd has it), else the whole job."""
        async with self._fetch_slots:
            try:
                allocation = await self._client.job_allocation(before.job_id)
            except SlurmJobNotFound:
                allocation = None  # the whole job's read counts the miss
            except SlurmProtocolError as exc:  # this job's answer only: the others go on
                metrics.POLL_ERRORS.labels("unreadable").inc()
                log.warning("poller.job_unreadable", job_id=before.job_id, error=str(exc))
                return
        if allocation is None or not allocation.nodes:
            await self._refresh(before)
            return
        self._misses.pop(before.job_id, None)
        if before.state is JobState.RUNNING and allocation == before.allocation:
            self._index.confirm(before.job_id)  # re-read after a blind spell: still there
            return
        after = dataclasses.replace(before, state=JobState.RUNNING, reason=NO_REASON,
                                    allocation=allocation, preempting=False,
                                    expected_start=None, backfill_at=None, unreadable="")
        self._index.record(after)
        await self._events.job_changed(before, after)

    async def _refresh(self, before: SlurmJob) -> None:
        async with self._fetch_slots:
            try:
                after = await self._client.get_job(before.job_id)
            except SlurmJobNotFound:
                self._note_missing(before)
                return
            except SlurmProtocolError as exc:  # this job's answer only: the others go on
                metrics.POLL_ERRORS.labels("unreadable").inc()
                log.warning("poller.job_unreadable", job_id=before.job_id, error=str(exc))
                return
        self._misses.pop(before.job_id, None)
        after = self._index.screened(after)  # its owner as the index believes it, if at all
        self._index.record(after)
        if _changed(before, after):
            await self._events.job_changed(before, after)

    def _note_missing(self, job: SlurmJob) -> None:
        misses = self._misses.get(job.job_id, 0) + 1
        self._misses[job.job_id] = misses
        log.warning("poller.job_missing", job_id=job.job_id, misses=misses)
        if misses >= MISSES_BEFORE_GONE:
            self._misses.pop(job.job_id, None)
            self._index.forget(job.job_id)

    async def run(self) -> None:
        """Poll forever; back off while Slurm is unreachable, then carry on by itself."""
        loop = asyncio.get_running_loop()
        next_resync = 0.0
        delay = self.interval
        while True:
            try:
                if self._resync_asked.is_set() or loop.time() >= next_resync:
                    self._resync_asked.clear()
                    self._listing_began = began = datetime.now(UTC)
                    await self.resync()
                    async with self._resynced:
                        self._listed = began
                        self._resynced.notify_all()
                    next_resync = loop.time() + self.resync_interval
                await self.poll_once()
                recovered, self.healthy = not self.healthy, True
                self.synced = True
                self._last_read = loop.time()
                metrics.SLURM_REACHABLE.set(1)
                delay = self._next_delay()
                if recovered:
                    await self._events.slurm_recovered()
            except Exception as exc:  # the poller must outlive any one answer, and any bug
                self.healthy = False
                metrics.SLURM_REACHABLE.set(0)
                delay = min(delay * 2, 30.0)
                if isinstance(exc, SlurmError):
                    metrics.POLL_ERRORS.labels(_kind(exc)).inc()
                    log.warning("poller.slurm_error", error=str(exc), retry_in=delay)
                else:
                    metrics.POLL_ERRORS.labels("bug").inc()
                    log.exception("poller.failed", retry_in=delay)
            await self._sleep(delay)

    async def _sleep(self, delay: float) -> None:
        """``delay``, cut short by a resync asked for, or to the fast interval by a submit."""
        self._submitted.clear()
        loop = asyncio.get_running_loop()
        until = loop.time() + delay
        asked = asyncio.ensure_future(self._resync_asked.wait())
        submitted = asyncio.ensure_future(self._submitted.wait())
        try:
            done, _ = await asyncio.wait({asked, submitted}, timeout=delay,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            asked.cancel()
            submitted.cancel()
        if submitted in done and asked not in done:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resync_asked.wait(),
                                       min(self._fast_interval, until - loop.time()))

    async def job_submitted(self, pod: object) -> None:
        """Slurm starts most jobs within moments: poll at the fast interval from now on, not
        after the rest of a long sleep."""
        self._submitted.set()

    def list_again(self) -> None:
        """Resync at once, not after the cycle's sleep: a standby whose holder went quiet will
        lead with the jobs that holder submitted, which it was never told of."""
        self._resync_asked.set()

    async def listed_since(self, moment: datetime) -> None:
        """Return once the index was rebuilt from a listing begun at ``moment`` or later (the
        one under way serves if it began then): a new leader's intake and controllers act on
        every job its former holder could have submitted."""
        if self._listing_began is None or self._listing_began < moment:
            self.list_again()
        async with self._resynced:
            await self._resynced.wait_for(
                lambda: self._listed is not None and self._listed >= moment)

    def read_within(self, seconds: float) -> bool:
        """Did a poll cycle read Slurm completely in the last ``seconds``?"""
        return (
            self._last_read is not None
            and asyncio.get_running_loop().time() - self._last_read <= seconds
        )

    def _next_delay(self) -> float:
        """Poll faster for a while after submitting: Slurm starts most jobs within moments,
        and every second the index lags, kube-scheduler retries those pods in vain."""
        if self._index.submitted_within(self._fast_window):
            return self._fast_interval
        return self.interval


def _kind(exc: SlurmError) -> str:
    return "unreadable" if isinstance(exc, SlurmProtocolError) else "unavailable"


def _changed(before: SlurmJob, after: SlurmJob) -> bool:
    """What a pod is told of changed; a new backfill time alone is not news."""
    return (after.state, after.reason, after.allocation, after.preempting,
            after.expected_start) != (
        before.state, before.reason, before.allocation, before.preempting,
        before.expected_start,
    )
