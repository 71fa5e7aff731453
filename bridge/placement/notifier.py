"""Tell the pod's owner what Slurm is doing, and nudge kube-scheduler on allocation.

Writes happen in background tasks so the extender's filter answers at once.
Every write costs the apiserver, so a pod is written to only when it matters:
a job still pending after ``quiet_seconds`` is shown (event and condition) as soon as
its reason has been read (a burst's jobs are re-read a few per poll), later pending
reasons of a shown job at once; its allocation, and that of a
pod kube-scheduler parked after a "waiting" filter, is the condition alone
(for a parked pod the write is what requeues it; an allocation event would
only repeat kube-scheduler's "Scheduled").  kube-scheduler's own FailedScheduling events
already carry filter's "waiting for Slurm job N (reason)" message.  A pod the bridge's gate
holds is told by events alone: kube-scheduler has nothing to requeue, an event costs the
apiserver less than a pod status write (sent to every pod watcher), and nothing stale is
left on the pod to correct when its release lifts the gate.

A pending job's words include when Slurm expects it to start (reasons.expected_start); the
estimate is shown again when it moves by more than ``estimate_moves_seconds``, and the
poller reads it with the reason, so at most once per ``placement.reason_refresh_seconds``.
"""

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.kube import writes
from bridge.link.views import PodView, view_of
from bridge.placement.job_events import JobListener
from bridge.placement.reasons import Part, component_view, expected_start, waiting_message
from bridge.placement.registry import ParkedPods, SeenPods, SlurmTrouble
from bridge.ports import KubeCreateEvent, KubePatch
from bridge.slurm.types import NO_REASON, JobState, SlurmJob

log = structlog.get_logger(__name__)
NOTIFICATIONS_IN_FLIGHT = 16  # writes at once (see Releaser: RELEASES_IN_FLIGHT)


def describe(job: SlurmJob, part: Part | None = None) -> str:
    """``part``: the pod's component of a heterogeneous job, told its own state and reason."""
    if job.unreadable and job.allocation is None:
        return (f"Slurm job {job.job_id} is {job.state.value.lower()}, but its allocation "
                f"cannot be read: {job.unreadable}; the pod waits (report Slurm's answer: "
                f"scontrol show job -d {job.job_id})")
    if job.allocation is not None and job.state is not JobState.PENDING:
        return f"Slurm job {job.job_id} allocated {','.join(job.allocation.nodes)}"
    expected = expected_start(job, datetime.now(UTC))
    return waiting_message(job, part) + (f"; {expected}" if expected else "")


Status = tuple[int, JobState, str, datetime | None]


def _status(job: SlurmJob, part: Part | None) -> Status:
    own = component_view(job, part)
    return (job.job_id, own.state, own.reason, job.expected_start)


def _same(before: Status | None, after: Status, moves: float) -> bool:
    """Nothing to tell: the same job, state and reason, and an estimate that moved by no more
    than ``moves`` seconds (compared with the last one acted on, so a drift adds up)."""
    if before is None or before[:3] != after[:3]:
        return False
    if before[3] is None or after[3] is None:
        return before[3] is after[3]
    return abs((after[3] - before[3]).total_seconds()) <= moves


def _allocated(job: SlurmJob) -> bool:
    return job.allocation is not None and job.state is not JobState.PENDING


class NotifierKube(KubeCreateEvent, KubePatch, Protocol):
    """Events (created), the job's annotations and the pod's Slurm condition (patched)."""


@dataclass(slots=True)
class _Told:
    """What the notifier knows of one pod's job and has told the pod: one record per pod,
    dropped with it."""

    status: Status | None = None  # its job's last known
    latest: SlurmJob | None = None  # that job, until its quiet period is over
    shown: Status | None = None  # the status written on the pod
    refusal: str | None = None  # Slurm's last submit refusal shown
    gated: bool = False  # held by the bridge's gate: events alone
    unread: bool = False  # quiet period over, Slurm's reason not read yet
    part: Part | None = None  # its component of a heterogeneous job


def _events_only(told: _Told) -> bool:
    """Gated, and no condition of the bridge's on the pod (a refusal's) to correct."""
    return told.gated and told.refusal is None


class PodNotifier(JobListener):
    def __init__(
        self, kube: NotifierKube, seen: SeenPods, *, quiet_seconds: float = 10.0,
        estimate_moves_seconds: float = 120.0,
    ) -> None:
        """``seen``: the pods whose jobs it follows.  ``parked`` and ``trouble`` hold the pods
        owed a nudge, which filter notes (runtime.py gives them to ``Placer``)."""
        self._kube = kube
        self._pods = seen
        self.parked = ParkedPods()
        self.trouble = SlurmTrouble()
        self._quiet = quiet_seconds
        self._moves = estimate_moves_seconds
        self._seen: dict[str, _Told] = {}  # pod uid -> what it knows and told of it
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(NOTIFICATIONS_IN_FLIGHT)

    def _told(self, uid: str) -> _Told:
        told = self._seen.get(uid)
        if told is None:
            told = self._seen[uid] = _Told()
        return told

    async def job_known(self, pod: PodView, job: SlurmJob) -> None:
        """Called for every pod whose job filter or intake meets; cheap when nothing changed.
        It only shows status: the job is recorded on the pod by the leader, which submitted
        it (placement/release.py)."""
        told = self._told(pod.uid)
        told.gated = told.gated or pod.gated
        if pod.part is not None:
            told.part = pod.part
        self._update(pod, job)

    async def job_changed(self, before: SlurmJob, after: SlurmJob) -> None:
        """Called by the poller on any change: new reason, or nodes allocated (requeue now)."""
        if after.owner is None:
            return
        for key in self._pods.pods_of(after.owner):
            self._update(key, after)

    def _update(self, key: PodView, job: SlurmJob) -> None:
        told = self._told(key.uid)
        status = _status(job, told.part)
        if _same(told.status, status, self._moves):
            return
        first = told.status is None
        told.status = status
        if first:
            self._spawn(self._after_quiet(key), writes=False)
        if told.latest is not None or first:
            told.latest = job
        shown = told.shown is not None
        if not _allocated(job):
            if shown or (told.unread and job.reason != NO_REASON):
                told.unread = False
                self._spawn(self._show(key, job))
        elif _events_only(told):
            return  # its release lifts the gate; kube-scheduler's "Scheduled" follows
        elif shown or self.parked.parked(key.uid):
            # The condition alone: kube-scheduler's "Scheduled" event follows at once.
            if shown:
                told.shown = status
            self._spawn(self._nudge(key, job))

    async def _after_quiet(self, key: PodView) -> None:
        await asyncio.sleep(self._quiet)
        told = self._seen.get(key.uid)
        if told is None:
            return
        job, told.latest = told.latest, None
        if job is None or told.shown is not None:
            return
        if _allocated(job):
            return  # kube-scheduler has the pod queued (or bound it, or was nudged)
        if job.reason == NO_REASON and not job.unreadable:  # shown once its reason is read
            told.unread = True
            return
        self._spawn(self._show(key, job))

    def prune(self) -> None:
        """Drop what is remembered about pods ``seen`` has forgotten."""
        known = self._pods.get
        self._seen = {u: t for u, t in self._seen.items() if known(u) is not None}
        self.parked.keep(known)

    async def slurm_recovered(self) -> None:
        """slurmrestd answers again: nudge the pods it turned away, instead of their backoff."""
        for key in self.trouble.take():
            self._spawn(writes.set_slurm_condition(
                self._kube, key.namespace, key.name, allocated=False,
                reason=keys.REASON_SLURM_REACHABLE, message="slurmrestd answers again: retrying",
            ))

    async def submit_refused(self, pod: Pod, reason: str, message: str) -> None:
        """Slurm refused the pod's job: event and condition, once per distinct refusal."""
        key = view_of(pod)
        told = self._told(key.uid)
        if told.refusal == message:
            return
        told.refusal = message
        self._spawn(self._refused(key, keys.EventReason.SUBMIT_REFUSED, reason, message))

    async def claims_unallocated(self, pod: Pod, message: str) -> None:
        """Slurm runs the pod's job but its claims cannot name the GPUs: it stays gated."""
        key = view_of(pod)
        self._spawn(self._refused(key, keys.EventReason.CLAIMS_UNALLOCATED,
                                  keys.REASON_CLAIMS_UNALLOCATED, message))

    async def release_refused(self, pod: Pod, reason: str, message: str) -> None:
        """A group member is not released (its seat, its group's asks): it stays gated."""
        self._spawn(self._refused(view_of(pod), keys.EventReason.RELEASE_REFUSED, reason, message))

    async def _refused(
        self, key: PodView, event: keys.EventReason, reason: str, message: str
    ) -> None:
        await writes.record_event(self._kube, key, event, message, warning=True)
        await writes.set_slurm_condition(
            self._kube, key.namespace, key.name, allocated=False, reason=reason, message=message,
        )

    async def drain(self) -> None:
        """Wait for pending writes (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _show(self, key: PodView, job: SlurmJob) -> None:
        """Event and condition: the pod's owner follows the job from here on."""
        told = self._told(key.uid)
        told.shown = _status(job, told.part)
        await writes.record_event(
            self._kube, key,
            keys.EventReason.PENDING if job.state is JobState.PENDING
            else keys.EventReason.ALLOCATED,
            describe(job, told.part),
        )
        if not _events_only(told):
            await self._nudge(key, job)

    async def _nudge(self, key: PodView, job: SlurmJob) -> None:
        """The condition alone; its change makes kube-scheduler requeue a parked pod."""
        told = self._told(key.uid)
        allocated, part = _allocated(job), told.part
        if allocated:
            self.parked.unpark(key.uid)
        told.refusal = None  # the condition no longer says it
        await writes.set_slurm_condition(
            self._kube, key.namespace, key.name,
            allocated=allocated,
            reason=keys.REASON_ALLOCATED if allocated else component_view(job, part).reason,
            message=describe(job, part),
        )

    def _spawn(self, work: Coroutine[Any, Any, None], *, writes: bool = True) -> None:
        """``writes``: the work writes at once, so it waits for one of the bounded slots (a
        quiet period's wait must not hold one)."""
        task = asyncio.create_task(self._guard(work, writes))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, work: Coroutine[Any, Any, None], writes: bool) -> None:
        try:
            async with self._slots if writes else contextlib.nullcontext():
                await work
        except ApiError as exc:  # the pod may be gone; the next change writes again
            log.info("notify.skipped", status=exc.status.code, error=exc.status.message)
        except Exception as exc:  # apiserver away: the condition is rewritten on the next change
            log.warning("notify.failed", error=repr(exc))
