"""Pods and their placeholder jobs live and die together.

Pod → job: a finished pod, or a deleted one whose containers have stopped,
releases its job; a pod deleted while pending releases it at once; a job
whose pod was never seen (by a listing here, or by this process's filter) is
cancelled after a grace period.
Job → pod: a bound pod whose job no longer runs on the node and GPUs it was
bound to — the job ended (scancel, time limit, preemption, node failure), was
requeued or suspended, or runs elsewhere now — is evicted, with an Event
saying why, but only after re-reading the job from Slurm: one observation is
never enough.  A waiting pod whose job ended is evicted too.
A former leader's jobs: the leader adopts the job id recorded on any of the bridge's pods
its index does not hold (each id read once), so it releases them as it does its own; the
poller does not scan Slurm's queue for them.  A job whose pod was deleted before any
listing here saw its id waits for the next full resync, then the orphan grace.
"""

import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

import structlog
from lightkube.core.exceptions import ApiError

from bridge import keys, metrics
from bridge.devices.freeing import ClaimReleaser
from bridge.jobs.owner import Owner
from bridge.kube import writes
from bridge.kube.apierrors import is_not_found, is_too_many_requests
from bridge.link.bound import holds
from bridge.link.podcache import PodCache
from bridge.link.views import PodView, tied_to
from bridge.placement.index import JobIndex
from bridge.placement.registry import SeenPods
from bridge.ports import KubeCreate, KubeCreateEvent, KubePatch
from bridge.slurm.errors import SlurmJobNotFound, SlurmProtocolError
from bridge.slurm.types import JobState, SlurmJob

log = structlog.get_logger(__name__)

# Recorded jobs read per reconcile: a new leader catching up on many pods is spread over rounds.
_ADOPT_PER_RECONCILE = 50


def preempted(job: SlurmJob) -> bool:
    """Slurm took the job's resources for another job (ended PREEMPTED, completing or not, or
    one of its components did; in its GraceTime; or requeued by preemption)."""
    return (
        job.end_state is JobState.PREEMPTED or job.preempting
        or (job.state is JobState.PENDING and "preempt" in job.reason.lower())
    )


def _what_happened(job: SlurmJob) -> str:
    if job.state is JobState.RUNNING:
        where = ",".join(job.allocation.nodes) if job.allocation else "?"
        return f"Slurm job {job.job_id} was restarted on other resources ({where})"
    verb = "no longer runs" if job.state.is_live else "ended"
    return f"Slurm job {job.job_id} {verb} ({job.state_text}, reason {job.reason})"


class LifecycleSlurm(Protocol):
    async def get_job(self, job_id: int) -> SlurmJob: ...
    async def cancel(self, job_id: int) -> None: ...


class LifecycleKube(KubeCreate, KubeCreateEvent, KubePatch, Protocol):
    """Evictions and events (created), the pod's Slurm condition (patched)."""


class Lifecycle:
    def __init__(
        self,
        kube: LifecycleKube,
        slurm: LifecycleSlurm,
        index: JobIndex,
        seen: SeenPods,
        pods: PodCache,
        *,
        orphan_grace: float = 30.0,
        device_claims: ClaimReleaser | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._slurm = slurm
        self._index = index
        self._seen = seen
        self._pods = pods
        self._orphan_grace = orphan_grace
        self._clock = clock
        self._seen_owners: set[Owner] = set()
        self._orphan_since: dict[int, float] = {}
        self._evicted: set[str] = set()
        self._claim_releaser = device_claims
        self._adopted: set[int] = set()  # recorded job ids read once (while their pods exist)

    async def reconcile_once(self) -> None:
        by_owner: dict[Owner, list[PodView]] = {}
        for pod in await self._pods.current():
            by_owner.setdefault(pod.owner, []).append(pod)
        await self._adopt_recorded([p for pods in by_owner.values() for p in pods])
        for job in self._index.jobs():
            if job.owner is None:
                continue
            members = by_owner.get(job.owner, [])
            await self._evict_stranded(job, members)
            if job.state.is_live:
                await self._release_if_done(job, members)
        self._seen_owners = set(by_owner)
        if self._claim_releaser is not None:
            may_run = {p.uid for pods in by_owner.values() for p in pods
                       if not p.containers_stopped}
            try:
                await self._claim_releaser.free_finished(self._holds_gpus, may_run.__contains__)
            except Exception as exc:  # the apiserver away: next round
                log.warning("lifecycle.claims_not_freed", error=repr(exc))
        log.debug("lifecycle.reconciled", owners=len(by_owner), jobs=len(self._index.jobs()))

    async def _adopt_recorded(self, pods: list[PodView]) -> None:
        """Track the jobs recorded on the bridge's pods that the index does not hold (another
        replica submitted them): one read per job id, a cost that follows the bridge's pods.
        A recorded job is its owner's for good: the one a resync keeps of duplicates."""
        recorded = set()
        for pod in pods:
            if (job_id := pod.job_id) is not None:
                recorded.add(job_id)
                self._index.pin(pod.owner, job_id)
        self._adopted &= recorded
        unknown = sorted(i for i in recorded - self._adopted if self._index.by_id(i) is None)
        self._adopted |= recorded - set(unknown)
        for job_id in unknown[:_ADOPT_PER_RECONCILE]:
            try:
                job = await self._index.adopt(job_id)
                log.info("lifecycle.adopted", job_id=job_id, owner=str(job.owner))
            except (SlurmJobNotFound, SlurmProtocolError) as exc:
                log.info("lifecycle.recorded_job_unreadable", job_id=job_id, error=str(exc))
            self._adopted.add(job_id)

    async def _holds_gpus(self, job_id: int) -> bool:
        """The job holds its allocation now (a requeued one waits without it)."""
        known = self._index.by_id(job_id)
        try:
            job = known or await self._slurm.get_job(job_id)
        except SlurmJobNotFound:
            return False
        return job.state.holds_allocation

    async def _release_if_done(self, job: SlurmJob, members: list[PodView]) -> None:
        assert job.owner is not None
        if members:
            self._orphan_since.pop(job.job_id, None)
            if all(p.releases_job for p in members):
                await self._cancel(job, f"pod {members[0]} finished or was deleted")
            return
        # Seen in an earlier round and gone now, or a pod this process placed whose deletion
        # the watch reported (not merely absent: the watch may lag a pod intake just saw).
        if job.owner in self._seen_owners or any(
            self._pods.deleted(p.uid) for p in self._seen.pods_of(job.owner)
        ):
            await self._cancel(job, "its pod was deleted")
            return
        since = self._orphan_since.setdefault(job.job_id, self._clock())
        if self._clock() - since >= self._orphan_grace:
            why = f"no pod with owner {job.owner} for {self._orphan_grace:.0f}s"
            await self._cancel(job, why)

    async def _cancel(self, job: SlurmJob, why: str) -> None:
        log.info("lifecycle.cancel", job_id=job.job_id, owner=str(job.owner), why=why)
        metrics.CONTROLLER_ACTIONS.labels("cancel").inc()
        await self._slurm.cancel(job.job_id)
        self._orphan_since.pop(job.job_id, None)
        if job.owner:
            self._seen.forget_owner(job.owner)
        # Slurm accepted the cancel: the job is over for the bridge, which knows why.  Not
        # read back (nor re-read by the poller, which follows live jobs only): a burst of
        # deleted pods would otherwise cost two full job reads each.
        self._index.record(dataclasses.replace(
            job, state=JobState.CANCELLED, reason=f"cancelled by slurmbridge: {why}"))

    async def _evict_stranded(self, job: SlurmJob, members: list[PodView]) -> None:
        """``members``: the pods owned by ``job``'s owner (read once, in the listing)."""
        owner = job.owner
        assert owner is not None
        if not any(self._stranded(p, job, owner) for p in members):
            return
        try:  # confirm with a fresh read before acting
            fresh = await self._slurm.get_job(job.job_id)
            self._index.record(fresh)
        except SlurmJobNotFound:
            fresh = job
        for pod in members:
            if self._stranded(pod, fresh, owner):
                await self._evict(pod, fresh)

    def _stranded(self, pod: PodView, job: SlurmJob, owner: Owner) -> bool:
        """The pod was bound to this job's allocation and the job no longer holds it for the
        pod, or the pod waits on this job and it ended with no live successor."""
        if pod.uid in self._evicted or pod.deleting or pod.finished:
            return False
        annotations = pod.recorded
        if pod.node_name or keys.SLURM_NODE in annotations:
            # bound, or released to a node: only that node and those GPUs will do
            return pod.job_id == job.job_id and not holds(annotations, job)
        if job.state.is_live or not tied_to(pod, job):  # untied: the group's next run
            return False
        current = self._index.by_owner(owner)
        return current is None or current.job_id == job.job_id

    async def _evict(self, pod: PodView, job: SlurmJob) -> None:
        was_preempted = preempted(job)
        if was_preempted:
            qos = f" (QOS {job.qos})" if job.qos else ""
            message = (
                f"preempted by Slurm: job {job.job_id}{qos} gave its resources to a "
                f"higher-priority job ({job.state_text}, reason {job.reason}); evicting the pod, "
                f"which has its terminationGracePeriodSeconds={pod.grace_seconds} to stop"
            )
        else:
            message = f"{_what_happened(job)} while the pod still needed it: evicting the pod"
        try:
            await writes.evict(self._kube, pod.namespace, pod.name)
        except ApiError as exc:
            if is_too_many_requests(exc):  # a PodDisruptionBudget says not now: retry next round
                log.info("lifecycle.eviction_blocked", pod=str(pod), job_id=job.job_id)
                return
            if not is_not_found(exc):
                raise
        self._evicted.add(pod.uid)
        metrics.CONTROLLER_ACTIONS.labels("evict").inc()
        reason = keys.EventReason.PREEMPTED if was_preempted else keys.EventReason.JOB_ENDED
        await writes.record_event(self._kube, pod, reason, message, warning=True)
        if was_preempted:
            await writes.set_slurm_condition(
                self._kube, pod.namespace, pod.name, allocated=False,
                reason=keys.REASON_PREEMPTED, message=message,
            )
        log.warning("lifecycle.evicted", pod=str(pod), job_id=job.job_id, state=job.state)
