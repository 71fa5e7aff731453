"""Submit a pod's job as soon as the pod exists, not when kube-scheduler first asks.

kube-scheduler tries pods one at a time, and a pod whose job Slurm has not
started yet fails its cycle (a status write and an event, paced by the
scheduler's client rate limit) and waits to be requeued.  Watching unbound
pods and submitting their jobs in parallel lets Slurm allocate while the pods
still queue in kube-scheduler, so most pass filter on their first attempt; the
researcher also sees the job in ``squeue`` at once.  Only the leader runs
this; filter still submits anything it misses (same code path, so a pod's job
is submitted once either way).
"""

import asyncio

import structlog
from lightkube.models.core_v1 import Pod
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.jobs.errors import InvalidPodRequest
from bridge.link.owner import pod_ref
from bridge.placement.outcomes import ClaimedElsewhere, PlacementError
from bridge.placement.placer import Placer
from bridge.ports import KubePort
from bridge.slurm.errors import SlurmError

log = structlog.get_logger(__name__)

RETRY_SECONDS = 2.0
# Field selector: the bridge's pods that no node holds yet.
UNBOUND: dict[str, str | BinaryOperator | SequenceOperator] = {
    "spec.schedulerName": keys.SCHEDULER_NAME, "spec.nodeName": "",
}


def ready_to_submit(pod: Pod) -> bool:
    """Unbound, pending, not being deleted, no scheduling gates, no job recorded yet."""
    meta, spec = pod.metadata, pod.spec
    if meta is None or spec is None or not (meta.uid and meta.name and meta.namespace):
        return False
    phase = pod.status.phase if pod.status else None
    return (
        not spec.nodeName
        and not meta.deletionTimestamp
        and not spec.schedulingGates
        and phase in (None, "Pending")
        and keys.JOB_ID not in (meta.annotations or {})
    )


class Intake:
    def __init__(self, kube: KubePort, placer: Placer, *, workers: int) -> None:
        self._kube = kube
        self._placer = placer
        self._workers = workers
        self._queue: asyncio.Queue[Pod] = asyncio.Queue()
        self._handled: set[str] = set()  # pod UIDs queued once; dropped when they leave the watch
        self._retries: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Watch forever (restarting after errors); submit with ``workers`` in parallel."""
        async with asyncio.TaskGroup() as tasks:
            for _ in range(self._workers):
                tasks.create_task(self._work())
            while True:
                try:
                    await self._watch()
                except Exception as exc:  # apiserver away or watch expired: start over
                    log.warning("intake.watch_failed", error=repr(exc), retry_in=RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)

    async def _watch(self) -> None:
        async for event, pod in self._kube.watch(
            PodResource, namespace="*", fields=UNBOUND
        ):
            uid = pod.metadata.uid if pod.metadata else None
            if uid is None:
                continue
            if event == "DELETED":  # deleted, or bound (it left the field selector)
                self._handled.discard(uid)
            elif uid not in self._handled and ready_to_submit(pod):
                self._handled.add(uid)
                self._queue.put_nowait(pod)

    async def _again(self, pod: Pod, delay: float) -> None:
        """Queue a fresh copy of the pod after ``delay`` if it still has no job."""
        try:
            await asyncio.sleep(delay)
            meta = pod.metadata
            assert meta is not None and meta.name and meta.namespace
            fresh = await self._kube.get(PodResource, meta.name, namespace=meta.namespace)
            if ready_to_submit(fresh):
                self._queue.put_nowait(fresh)
        except Exception as exc:  # gone, or the apiserver away: filter covers it
            log.info("intake.retry_skipped", pod=pod_ref(pod), error=repr(exc))

    async def _work(self) -> None:
        while True:
            pod = await self._queue.get()
            try:
                await self._placer.prepare(pod)
            except ClaimedElsewhere as exc:
                # Its holder may have died between claim and job id: look again once the
                # claim may be taken over (kube-scheduler would wait minutes for the pod).
                log.info("intake.claimed_elsewhere", pod=pod_ref(pod), retry_in=exc.retry_in)
                retry = asyncio.create_task(self._again(pod, exc.retry_in + 1))
                self._retries.add(retry)
                retry.add_done_callback(self._retries.discard)
            except (PlacementError, InvalidPodRequest, SlurmError) as exc:
                # filter meets the same problem and tells the pod's owner
                log.info("intake.deferred", pod=pod_ref(pod), why=str(exc))
            except Exception:
                log.exception("intake.failed", pod=pod_ref(pod))
