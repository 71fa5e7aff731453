"""What happens to a pod's job, as named events: the placer, the submitter, the poller, the
releaser and intake raise them; the notifier, the grace watcher and intake act on them.

A raiser holds one ``JobEvents`` (the ``JobEventFanout`` bridge/runtime.py wires, or a single
listener in a unit test) instead of a callback per sibling, so what reacts to a job's change
is listed in one place.  Questions a raiser asks (may this pod be submitted, may this job be
preempted) are not events: they stay explicit collaborators.
"""

from typing import Protocol

from lightkube.models.core_v1 import Pod

from bridge.link.views import PodView
from bridge.slurm.types import SlurmJob


class JobEvents(Protocol):
    async def job_known(self, pod: PodView, job: SlurmJob) -> None:
        """The placer met ``pod`` (read once, at the edge) and knows its job."""

    async def job_submitted(self, pod: Pod) -> None:
        """Slurm took the job of ``pod``."""

    async def submit_refused(self, pod: Pod, reason: str, message: str) -> None:
        """The job of ``pod`` was not submitted: a condition reason, and words for its owner."""

    async def job_changed(self, before: SlurmJob, after: SlurmJob) -> None:
        """The poller saw a job change (or a resync found one)."""

    async def slurm_recovered(self) -> None:
        """slurmrestd answers again after a failed poll."""

    async def claims_unallocated(self, pod: Pod, message: str) -> None:
        """Slurm runs the job of ``pod``, but its DRA claims cannot name the GPUs."""

    async def release_refused(self, pod: Pod, reason: str, message: str) -> None:
        """Slurm runs the group's job of ``pod``, but not for it (placement/seats.py): it
        stays gated; a condition reason, and words for its owner."""


class JobListener:
    """Hears every event and acts on none: a listener overrides the events it acts on."""

    async def job_known(self, pod: PodView, job: SlurmJob) -> None:
        return None

    async def job_submitted(self, pod: Pod) -> None:
        return None

    async def submit_refused(self, pod: Pod, reason: str, message: str) -> None:
        return None

    async def job_changed(self, before: SlurmJob, after: SlurmJob) -> None:
        return None

    async def slurm_recovered(self) -> None:
        return None

    async def claims_unallocated(self, pod: Pod, message: str) -> None:
        return None

    async def release_refused(self, pod: Pod, reason: str, message: str) -> None:
        return None


NO_LISTENER = JobListener()  # a raiser nobody listens to (unit tests of the raiser alone)


class JobEventFanout:
    """Tells each event to every listener, one after the other in the order they were added
    (intake releases a job's pods before the notifier writes on them)."""

    def __init__(self) -> None:
        self._listeners: list[JobEvents] = []

    def listen(self, *listeners: JobEvents) -> None:
        self._listeners.extend(listeners)

    async def job_known(self, pod: PodView, job: SlurmJob) -> None:
        for listener in self._listeners:
            await listener.job_known(pod, job)

    async def job_submitted(self, pod: Pod) -> None:
        for listener in self._listeners:
            await listener.job_submitted(pod)

    async def submit_refused(self, pod: Pod, reason: str, message: str) -> None:
        for listener in self._listeners:
            await listener.submit_refused(pod, reason, message)

    async def job_changed(self, before: SlurmJob, after: SlurmJob) -> None:
        for listener in self._listeners:
            await listener.job_changed(before, after)

    async def slurm_recovered(self) -> None:
        for listener in self._listeners:
            await listener.slurm_recovered()

    async def claims_unallocated(self, pod: Pod, message: str) -> None:
        for listener in self._listeners:
            await listener.claims_unallocated(pod, message)

    async def release_refused(self, pod: Pod, reason: str, message: str) -> None:
        for listener in self._listeners:
            await listener.release_refused(pod, reason, message)
