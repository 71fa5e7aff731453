"""In-memory index of placeholder jobs by owner (pod or group), and idempotent submission.

All truth lives in Slurm (the owner in each job's comment, believed as ``trust.py`` says), so
the index can be rebuilt from Slurm after any restart; between rebuilds it is fed by the cheap
polls.  Submitting through it gives one live job per owner in a process; ``resync`` cancels
the extras that racing processes may leave.

A rebuild never asks for ``GET /jobs/``: Slurm answers it with every job's per-core
allocation (28 kB for a 4-CPU job on a 64-CPU node, 46 kB on 128 CPUs), hundreds of MB at
a site's queue, and slurmrestd needs tens of times that in memory (B1 with 5,000 jobs on
1,250-CPU nodes: slurmrestd OOM-killed at 21 GB).  It reads the state list of every job
(``GET /jobs/state/``, ~80 bytes a job), then each job it has not classified yet, once
(``GET /job/<id>``, ``_READS_IN_FLIGHT`` at a time): native jobs are remembered as such and
never read again, the index's own jobs are re-read only when their state changed.  A job
that ended before the index saw it is never read: it holds nothing, and a pod whose job it
was records the job id (first status, release, bind), from which lifecycle reads it.  Reading
them cost every native job that ran and ended between two resyncs once, in Slurm's whole
per-core detail (B1: the 5,000 jobs of the round before, 375 kB each), and a new leader's
first resync all of MinJobAge's ended jobs before its intake could submit (10,909 reads,
104 s).  The price: a pending job with no id on its pod yet, cancelled while no replica
led, is not known for the pod's, which gets a new job.
"""

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from bridge import metrics
from bridge.jobs.owner import Owner
from bridge.jobs.request import JobRequest
from bridge.placement.trust import JobTrust
from bridge.slurm.errors import SlurmJobNotFound, SlurmProtocolError
from bridge.slurm.types import NO_REASON, JobState, SlurmJob

log = structlog.get_logger(__name__)

_READS_IN_FLIGHT = 8  # GET /job/<id> at once while a resync reads unclassified jobs


@dataclass(frozen=True, slots=True)
class Resynced:
    cancelled: list[int] = field(default_factory=list)  # duplicate live jobs cancelled
    # (as held, as read) for every record the listing replaced with a new reading: a job
    # submitted while the listing ran included, which nobody else will report changed.
    replaced: list[tuple[SlurmJob, SlurmJob]] = field(default_factory=list)
    # Live placeholders the index did not hold: e.g. a submit whose answer was lost, kept
    # over the duplicate the bridge tracked; their pods wait on them from now on.
    discovered: list[SlurmJob] = field(default_factory=list)


def _keeper(jobs: list[SlurmJob], pinned: int | None = None) -> SlurmJob:
    """Of several live jobs for one pod, keep the one recorded on the pod (``pinned``), else
    the one furthest along, then the oldest."""
    return min(jobs, key=lambda j: (j.job_id != pinned, j.state is JobState.PENDING, j.job_id))


class IndexSlurm(Protocol):
    async def submit(self, req: JobRequest) -> int: ...
    async def get_job(self, job_id: int) -> SlurmJob: ...
    async def cancel(self, job_id: int) -> None: ...
    async def every_job_state(self) -> dict[int, JobState | None]: ...


class JobIndex:
    def __init__(self, client: IndexSlurm, *, clock: Callable[[], float] = time.monotonic,
                 trust: JobTrust | None = None) -> None:
        """``trust``: whose placeholder a job is; None: the client's word (the dev kit's fake)."""
        self._client = client
        self.clock = clock
        self._trust = trust
        self._own: set[int] = set()  # submitted by this process: its placeholders for good
        # job id → when Slurm last showed it as recorded: read whole, or its state seen
        # unchanged by a poll that followed the one before closely (``confirm``).
        self._seen_at: dict[int, float] = {}
        self._by_owner: dict[Owner, SlurmJob] = {}
        self._by_id: dict[int, SlurmJob] = {}
        self._live: dict[int, SlurmJob] = {}  # the live ones of _by_id: what each poll names
        self._locks: dict[Owner, asyncio.Lock] = {}
        self._submitted: set[int] = set()  # jobs submitted while a resync lists
        self._last_submit = -float("inf")  # loop time of the latest submit
        self._resyncing = False
        self._listing: asyncio.Future[list[SlurmJob]] | None = None
        self._native: set[int] = set()  # ids read once and found not to be placeholders
        self._pinned: dict[Owner, int] = {}  # owner → the job id recorded on its pod(s)

    def by_owner(self, owner: Owner) -> SlurmJob | None:
        return self._by_owner.get(owner)

    def by_id(self, job_id: int) -> SlurmJob | None:
        return self._by_id.get(job_id)

    def submitted_within(self, seconds: float) -> bool:
        """Did this process submit a job in the last ``seconds``?"""
        return asyncio.get_running_loop().time() - self._last_submit <= seconds

    def jobs(self) -> list[SlurmJob]:
        return list(self._by_id.values())

    def live(self) -> dict[int, SlurmJob]:
        """The live jobs by id, kept as records change: a poll cycle reads them without
        walking every job the index holds (ended ones stay until a resync drops them)."""
        return dict(self._live)

    def screened(self, job: SlurmJob) -> SlurmJob:
        """``job`` as the bridge may act on it (``JobTrust.screened``; its own submissions are)."""
        if self._trust is None or job.job_id in self._own:
            return job
        return self._trust.screened(job)

    def record(self, job: SlurmJob, *, read: bool | None = None) -> None:
        """Remember a placeholder job (a native one is ignored; one held whose owner is no longer
        believed is forgotten).  ``read``: just read from Slurm; by default, unless it is the
        very record held (a record kept because its state looked unchanged is no new reading)."""
        job = self.screened(job)
        held = self._by_id.get(job.job_id)
        if read is None:
            read = held is not job
        if job.unreadable:  # counted, and re-read by each poll until it is known
            metrics.POLL_ERRORS.labels("unreadable").inc()
            log.warning("placement.allocation_unreadable", job_id=job.job_id,
                        error=job.unreadable)
            if held is not None and held.allocation and job.state is held.state:
                job = dataclasses.replace(job, allocation=held.allocation, unreadable="")
        if job.owner is None:
            if held is not None:
                self.forget(job.job_id)
            return
        self._by_id[job.job_id] = job
        if job.state.is_live:
            self._live[job.job_id] = job
        else:
            self._live.pop(job.job_id, None)
        if read or job.job_id not in self._seen_at:
            self._seen_at[job.job_id] = self.clock()
        current = self._by_owner.get(job.owner)
        if current is None or current.job_id == job.job_id or not current.state.is_live:
            self._by_owner[job.owner] = job

    def pin(self, owner: Owner, job_id: int) -> None:
        """``job_id`` is recorded on the owner's pod: of duplicates, it is the one kept (a
        deposed leader's late submission never takes a released pod's job away)."""
        self._pinned[owner] = job_id

    def unseen_for(self, job_id: int) -> float:
        """Seconds since Slurm last showed this job as recorded (infinite: never)."""
        seen = self._seen_at.get(job_id)
        return float("inf") if seen is None else self.clock() - seen

    def confirm(self, job_id: int) -> None:
        """A state read found the job as recorded, soon enough after the last one that it
        cannot have left and come back unseen."""
        if job_id in self._by_id:
            self._seen_at[job_id] = self.clock()

    def forget(self, job_id: int) -> None:
        self._seen_at.pop(job_id, None)
        self._live.pop(job_id, None)
        job = self._by_id.pop(job_id, None)
        if job and job.owner and self._by_owner.get(job.owner) is job:
            del self._by_owner[job.owner]

    async def adopt(self, job_id: int) -> SlurmJob:
        """Fetch a job we did not submit (named on a pod) and track it."""
        job = self.screened(self._by_id.get(job_id) or await self._client.get_job(job_id))
        self.record(job)
        return job

    async def find_live(self, owner: Owner) -> SlurmJob | None:
        """The owner's live job, looked up in a full listing (shared by concurrent callers):
        for the rare case where another process may have submitted it unseen."""
        if self._listing is None:
            self._listing = asyncio.ensure_future(self._placeholders())
            self._listing.add_done_callback(lambda _: setattr(self, "_listing", None))
        listing = await asyncio.shield(self._listing)
        live = _live_by_owner(listing).get(owner, [])
        if not live:
            return None
        job = _keeper(live)
        self.record(job)
        return job

    async def ensure(self, req: JobRequest) -> SlurmJob:
        """The pod's live placeholder job, submitting it only if there is none."""
        lock = self._locks.setdefault(req.owner, asyncio.Lock())
        async with lock:
            known = self._by_owner.get(req.owner)
            if known is not None and known.state.is_live:
                return known
            job_id = await self._client.submit(req)
            self._own.add(job_id)
            self._last_submit = asyncio.get_running_loop().time()
            if self._resyncing:
                self._submitted.add(job_id)
            # Not read back: slurmctld schedules after it answers, so a read now would say
            # PENDING anyway; the poller reads the job when its state changes.
            job = SlurmJob(
                job_id, req.name, JobState.PENDING, NO_REASON, req.owner, None,
                partition=req.placement.partition or "", account=req.placement.account or "",
                qos=req.placement.qos or "", het_components=len(req.components),
            )
            self.record(job)
            return job

    async def resync(self) -> Resynced:
        """Rebuild from what Slurm lists; cancel duplicate live jobs."""
        self._resyncing = True
        try:
            listing = await self._placeholders()
        finally:
            self._resyncing = False
        # Jobs submitted while the listing was under way may be missing from it: keep them.
        listed = {j.job_id for j in listing}
        newer = [self._by_id[i] for i in self._submitted - listed if i in self._by_id]
        held = self._by_id.copy()
        self._submitted.clear()
        self._by_owner.clear()
        self._by_id.clear()
        self._live.clear()
        for job in newer:
            self.record(job, read=False)
        cancelled = []
        for owner, jobs in _live_by_owner(listing).items():
            if len(jobs) > 1:
                keep = _keeper(jobs, self._pinned.get(owner))
                for extra in jobs:
                    if extra is not keep:
                        log.warning(
                            "placement.duplicate_cancelled",
                            owner=str(owner), job_id=extra.job_id, kept=keep.job_id,
                        )
                        await self._client.cancel(extra.job_id)
                        cancelled.append(extra.job_id)
        replaced, discovered = [], []
        for job in listing:
            if job.job_id not in cancelled:
                old = held.get(job.job_id)
                self.record(job, read=old is not job)
                if old is not None and old is not job:
                    replaced.append((old, job))
                elif old is None and job.owner is not None and job.state.is_live:
                    discovered.append(job)
        self._seen_at = {i: t for i, t in self._seen_at.items() if i in self._by_id}
        self._own &= self._by_id.keys()
        # Submit locks and pins of owners whose jobs left Slurm's listing: not kept forever.
        self._locks = {
            o: lock for o, lock in self._locks.items() if lock.locked() or o in self._by_owner
        }
        self._pinned = {o: i for o, i in self._pinned.items() if o in self._by_owner}
        return Resynced(cancelled, replaced, discovered)


    async def _placeholders(self) -> list[SlurmJob]:
        """Every placeholder Slurm lists (live or recently ended), without the full listing:
        the state list, then a read of each job not classified yet or whose state changed."""
        states = await self._client.every_job_state()
        self._native &= states.keys()

        def unclassified(job_id: int, state: JobState | None) -> bool:
            if job_id in self._native:
                return False
            if (known := self._by_id.get(job_id)) is None:
                return state is None or state.is_live
            return state is None or known.state is not state

        unread = [i for i, state in states.items() if unclassified(i, state)]
        slots = asyncio.Semaphore(_READS_IN_FLIGHT)

        async def read(job_id: int) -> SlurmJob | None:
            async with slots:
                try:
                    return await self._client.get_job(job_id)
                except SlurmJobNotFound:  # ended and purged since the state list
                    return None
                except SlurmProtocolError as exc:
                    # Kept as last read (it is still listed), so it is read again next time.
                    metrics.POLL_ERRORS.labels("unreadable").inc()
                    log.warning("placement.job_unreadable", job_id=job_id, error=str(exc))
                    return self._by_id.get(job_id)

        fresh = [job for job in await asyncio.gather(*map(read, unread)) if job is not None]
        changed = set(unread)
        kept = [self._by_id[i] for i in states if i in self._by_id and i not in changed]
        # Held ones are screened again too: a pod the bridge did not know may have come since.
        listed = [self.screened(job) for job in kept + fresh]
        self._native |= {job.job_id for job in listed if job.owner is None}
        return [job for job in listed if job.owner is not None]


def _live_by_owner(jobs: Iterable[SlurmJob]) -> dict[Owner, list[SlurmJob]]:
    out: dict[Owner, list[SlurmJob]] = {}
    for job in jobs:
        if job.owner is not None and job.state.is_live:
            out.setdefault(job.owner, []).append(job)
    return out
