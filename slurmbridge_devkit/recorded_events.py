"""A listener that records the job events a raiser tells (bridge/placement/job_events.py), for a
unit test of the raiser alone to assert on."""

from lightkube.models.core_v1 import Pod

from bridge.placement.job_events import JobListener
from bridge.slurm.types import SlurmJob


class RecordedEvents(JobListener):
    def __init__(self) -> None:
        self.changes: list[tuple[SlurmJob, SlurmJob]] = []  # (before, after), in order
        self.changed: list[SlurmJob] = []  # the job after each change
        self.refusals: list[tuple[str, str]] = []  # (condition reason, message)

    async def job_changed(self, before: SlurmJob, after: SlurmJob) -> None:
        self.changes.append((before, after))
        self.changed.append(after)

    async def submit_refused(self, pod: Pod, reason: str, message: str) -> None:
        self.refusals.append((reason, message))
