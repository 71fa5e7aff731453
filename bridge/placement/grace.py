"""A pod's grace period against the GraceTime Slurm gives a preempted job.

When a QOS is preempted, Slurm signals the job, waits the QOS's GraceTime, then ends it and
hands its GPUs to the preemptor.  The bridge evicts the pod at the signal; a pod whose
``terminationGracePeriodSeconds`` is longer than the GraceTime may still be stopping when
another job already runs on its GPUs.  The bridge says so once per pod, as a warning event
when it submits the job, and ``slurmbridge doctor`` lists such pods.
"""

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Protocol

import structlog
from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.kube import writes
from bridge.link.views import grace_seconds, view_of
from bridge.placement.job_events import JobListener
from bridge.ports import KubeCreateEvent
from bridge.slurm.errors import SlurmError
from bridge.slurm.types import Accounting

log = structlog.get_logger(__name__)

def grace_warning(pod: Pod, known: Accounting) -> str | None:
    """Why the pod's grace period outlasts what Slurm waits for its QOS (None: it does not)."""
    qos = ((pod.metadata and pod.metadata.annotations) or {}).get(keys.QOS, "").strip()
    info = known.qos.get(qos)
    if info is None or not known.preemptable(qos):
        return None
    grace = grace_seconds(pod)
    if grace <= info.grace_seconds:
        return None
    return (
        f"terminationGracePeriodSeconds={grace} is longer than the GraceTime "
        f"({info.grace_seconds}s) of QOS {qos!r}, which other QOS preempt: when preempted, "
        f"Slurm hands the pod's GPUs on up to {grace - info.grace_seconds}s before it must "
        "have stopped"
    )


class GraceSlurm(Protocol):
    async def accounting(self) -> Accounting: ...


class GraceWarnings(JobListener):
    """Warns on a pod at submit time; slurmdbd's QOS are read at most every ``refresh``."""

    def __init__(self, kube: KubeCreateEvent, slurm: GraceSlurm, *, refresh: float = 60.0) -> None:
        self._kube = kube
        self._slurm = slurm
        self._refresh = refresh
        self._known: Accounting | None = None
        self._read_at = -refresh
        self._warned: set[str] = set()
        self._tasks: set[asyncio.Future[object]] = set()

    def preemptable(self, qos: str) -> bool:
        """Some QOS may preempt jobs of ``qos`` (as slurmdbd said at the last read; a stale
        view is refreshed in the background)."""
        if time.monotonic() - self._read_at >= self._refresh:
            self._spawn(self._accounting())
        return self._known is not None and bool(qos) and self._known.preemptable(qos)

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def job_submitted(self, pod: Pod) -> None:
        """Check in the background: the submit path does not wait for slurmdbd."""
        uid = pod.metadata.uid if pod.metadata else None
        if uid and uid not in self._warned:
            self._spawn(self._check(pod))

    async def _accounting(self) -> Accounting | None:
        if time.monotonic() - self._read_at >= self._refresh:
            self._read_at = time.monotonic()
            try:
                self._known = await self._slurm.accounting()
            except SlurmError as exc:  # no slurmdbd: nothing to compare with
                log.info("grace.qos_unreadable", error=str(exc))
        return self._known

    async def _check(self, pod: Pod) -> None:
        known = await self._accounting()
        warning = grace_warning(pod, known) if known is not None else None
        meta = pod.metadata
        if warning is None or meta is None or not (meta.uid and meta.name and meta.namespace):
            return
        self._warned.add(meta.uid)
        log.warning("grace.too_long", pod=f"{meta.namespace}/{meta.name}", why=warning)
        await writes.record_event(
            self._kube, view_of(pod),
            keys.EventReason.GRACE_TOO_LONG, warning, warning=True,
        )
