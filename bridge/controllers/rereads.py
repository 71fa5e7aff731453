"""Which tracked jobs a poll cycle reads again though the state list shows no change: a
few pending jobs, for their reason and expected start, and a few running jobs of a preemptable
QOS, whose preemption signal changes no state; each round-robin (bridge/controllers/poller.py
reads them)."""

import asyncio
from collections import deque
from collections.abc import Callable

from bridge.slurm.types import NO_REASON, JobState, SlurmJob


class Rereads:
    def __init__(
        self, *, per_cycle: int, reason_interval: float,
        watch_running: Callable[[SlurmJob], bool] | None,
    ) -> None:
        """``watch_running``: may Slurm preempt this running job."""
        self._per_cycle = per_cycle
        self._reason_queue: deque[int] = deque()
        self._reason_interval = reason_interval
        self._reason_read: dict[int, float] = {}  # loop time each pending job's reason was read
        self._watch_running = watch_running
        self._watch_queue: deque[int] = deque()

    def reasons(self, tracked: dict[int, SlurmJob], skip: set[int]) -> list[SlurmJob]:
        """A few pending jobs whose reason (not in the state list) is re-read, none more often
        than every ``reason_interval``: a reason changes without a state change, but users
        read it after ``notify_quiet_seconds``, not every poll."""
        now = asyncio.get_running_loop().time()
        # First read after half the interval: most start by then, users wait the quiet time.
        first = now - self._reason_interval / 2
        self._reason_read = {i: self._reason_read.get(i, first) for i, j in tracked.items()
                             if j.state is JobState.PENDING}

        def due(job: SlurmJob) -> bool:
            read = self._reason_read.get(job.job_id)
            return (job.state is JobState.PENDING and job.job_id not in skip
                    and (read is None or now - read >= self._reason_interval))

        if not self._reason_queue:
            self._reason_queue.extend(i for i, j in tracked.items() if j.state is JobState.PENDING)
        # Jobs Slurm has not evaluated yet (reason "None") first: users wait for that one.
        batch = [j for j in tracked.values() if j.reason == NO_REASON and due(j)]
        batch = batch[: self._per_cycle]
        skip = skip | {j.job_id for j in batch}
        while self._reason_queue and len(batch) < self._per_cycle:
            job = tracked.get(self._reason_queue.popleft())
            if job is not None and due(job):
                batch.append(job)
                skip.add(job.job_id)
        self._reason_read.update((j.job_id, now) for j in batch)
        return batch

    def running(self, tracked: dict[int, SlurmJob], skip: set[int]) -> list[SlurmJob]:
        """A few running jobs of preemptable QOS, re-read round-robin: Slurm's preemption
        signal starts the GraceTime without changing the job's state, and the pod must be
        evicted within it, not after."""
        if self._watch_running is None:
            return []
        if not self._watch_queue:
            self._watch_queue.extend(
                i for i, j in tracked.items()
                if j.state is JobState.RUNNING and not j.preempting and self._watch_running(j)
            )
        batch: list[SlurmJob] = []
        while self._watch_queue and len(batch) < self._per_cycle:
            job = tracked.get(self._watch_queue.popleft())
            if job is not None and job.state is JobState.RUNNING and job.job_id not in skip:
                batch.append(job)
        return batch
