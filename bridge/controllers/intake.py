"""Submit a pod's job as soon as the pod exists, not when kube-scheduler first asks.

kube-scheduler tries pods one at a time, and a pod whose job Slurm has not
started yet fails its cycle (a status write and an event, paced by the
scheduler's client rate limit) and waits to be requeued.  Watching unbound
pods and submitting their jobs in parallel lets Slurm allocate while the pods
still queue in kube-scheduler, so most pass filter on their first attempt; the
researcher also sees the job in ``squeue`` at once.  Only the leader runs this, fed
by the pod cache's watch (bridge/link/podcache.py), which every replica keeps anyway: no
watch of its own.  Every pod of the bridge is submitted here and nowhere else, gated or not
(the webhook skipped it, or failed open), and handed to the releaser
(bridge/placement/release.py), which records the job on it once Slurm runs it (for a gated
pod, in the write that lifts the gate); filter and bind only read that record.
"""

import asyncio
from typing import Protocol

import structlog
from lightkube.models.core_v1 import Pod
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.kube.watchcache import resource_version
from bridge.link.gate import unrecorded
from bridge.link.ownership import pod_ref
from bridge.link.podcache import PodCache
from bridge.placement.eligibility import unplaceable_reason
from bridge.placement.job_events import NO_LISTENER, JobEvents, JobListener
from bridge.placement.outcomes import PlacementError, Refused
from bridge.placement.placer import Placer
from bridge.placement.release import Releaser
from bridge.placement.submit import REFUSED_RETRY_SECONDS
from bridge.ports import KubeGet, KubeList
from bridge.slurm.errors import SlurmError
from bridge.slurm.types import SlurmJob

log = structlog.get_logger(__name__)

RETRY_SECONDS = 2.0
# Field selector: the bridge's pods that no node holds yet.
UNBOUND: dict[str, str | BinaryOperator | SequenceOperator] = {
    "spec.schedulerName": keys.SCHEDULER_NAME, "spec.nodeName": "",
}


def ready_to_submit(pod: Pod) -> bool:
    """Ours and placeable (the bridge's own gate allowed), pending, not being deleted, its
    job not recorded yet (link/gate.py)."""
    meta = pod.metadata
    if meta is None or pod.spec is None or not (meta.uid and meta.name and meta.namespace):
        return False
    phase = pod.status.phase if pod.status else None
    return (
        unplaceable_reason(pod, own_gate_allowed=True) is None
        and not meta.deletionTimestamp
        and phase in (None, "Pending")
        and unrecorded(pod)
    )


class IntakeKube(KubeGet, KubeList, Protocol):
    """The unbound pods listed once, a pod read again before a retry."""


class Intake(JobListener):
    def __init__(
        self, kube: IntakeKube, cache: PodCache, placer: Placer, releaser: Releaser, *,
        workers: int, events: JobEvents = NO_LISTENER,
    ) -> None:
        self._kube = kube
        self._cache = cache
        self._placer = placer
        self._releaser = releaser
        self._events = events  # a refusal: nobody else would say it
        self._workers = workers
        self._queue: asyncio.Queue[Pod] = asyncio.Queue()
        # uid → resourceVersion of each pod queued once, while unbound and not deleted.
        self._seen: dict[str, int] = {}
        self._retries: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Follow the pod cache, and list the unbound pods once (the cache keeps views, not
        Pods); submit with ``workers`` in parallel until cancelled.  Each term starts from
        nothing seen: the last one's releases were dropped with its lead, so its pods must be
        tracked again."""
        self._seen.clear()
        self._cache.follow(self)
        try:
            async with asyncio.TaskGroup() as tasks:
                for _ in range(self._workers):
                    tasks.create_task(self._work())
                await self._catch_up()
        finally:
            self._cache.unfollow(self)
            self._releaser.clear()

    async def _catch_up(self) -> None:
        """The pods that came before this replica led: the watch only shows changes."""
        while True:
            try:
                async for pod in self._kube.list(PodResource, namespace="*", fields=UNBOUND):
                    self.pod_changed("ADDED", pod)
                return
            except Exception as exc:  # the apiserver away: its watch restarts with a relist
                log.warning("intake.list_failed", error=repr(exc), retry_in=RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)

    def relisted(self) -> None:
        self._seen.clear()  # the relisting shows every pod again

    def pod_changed(self, event: str, pod: Pod) -> None:
        """One pod as the cache saw it; a copy older than one already seen changes nothing
        (the catch-up listing and the watch overlap)."""
        uid = pod.metadata.uid if pod.metadata else None
        if uid is None:
            return
        if event == "DELETED" or (pod.spec is not None and pod.spec.nodeName):
            self._seen.pop(uid, None)
            self._releaser.forget(uid)
            return
        version = resource_version(pod)
        seen = self._seen.get(uid)
        if seen is not None:
            if seen < version:
                self._seen[uid] = version
                self._releaser.refresh(pod)
        elif ready_to_submit(pod):
            self._seen[uid] = version
            self._queue.put_nowait(pod)

    async def job_changed(self, before: SlurmJob, after: SlurmJob) -> None:
        """The poller saw a job change: release its pods if it runs, or submit again for
        a group whose job ended before it ran."""
        self._releaser.job_changed(after)
        for pod in self._releaser.take_unplaced(after):
            self._retry(pod, 0)

    async def _failed(self, pod: Pod, exc: Exception) -> None:
        """Told on the pod (filter only says it waits) and tried again while it waits."""
        refused = isinstance(exc, Refused | InvalidPodRequest)
        if refused:
            await self._events.submit_refused(pod, keys.REASON_CANNOT_SUBMIT, str(exc))
        self._retry(pod, REFUSED_RETRY_SECONDS if refused else RETRY_SECONDS)

    def _retry(self, pod: Pod, delay: float) -> None:
        retry = asyncio.create_task(self._again(pod, delay))
        self._retries.add(retry)
        retry.add_done_callback(self._retries.discard)

    async def _again(self, pod: Pod, delay: float) -> None:
        """Queue a fresh copy of the pod after ``delay`` if it still has no job."""
        try:
            await asyncio.sleep(delay)
            meta = pod.metadata
            assert meta is not None and meta.name and meta.namespace
            fresh = await self._kube.get(PodResource, meta.name, namespace=meta.namespace)
            if ready_to_submit(fresh):
                self._queue.put_nowait(fresh)
        except Exception as exc:  # gone, or the apiserver away: the watch shows it again
            log.info("intake.retry_skipped", pod=pod_ref(pod), error=repr(exc))

    async def _work(self) -> None:
        while True:
            await self.take(await self._queue.get())

    async def take(self, pod: Pod) -> None:
        """One pod: its job submitted (or found), and recorded on it once Slurm runs it."""
        try:
            self._releaser.track(pod, await self._placer.prepare(pod))
        except (PlacementError, InvalidPodRequest, SlurmError) as exc:
            log.info("intake.deferred", pod=pod_ref(pod), why=str(exc))
            await self._failed(pod, exc)
        except Exception:
            log.exception("intake.failed", pod=pod_ref(pod))
