"""Record each pod's job on it when Slurm allocates the job (leader only): for a gated pod
that write is its release to kube-scheduler.

Intake submits a pod's job and hands the pod here; when the job runs (at once, or when the
poller sees it change), each of the owner's pods still owed it gets one write
(bridge/link/gate.py): a gated pod's lifts the gate, records the job and narrows the pod to
its node; one that came without the gate gets the same record alone, which filter reads.
A lone pod gets the job's node; a group's members are listed once per release and each gets its seat
(seats.py: its rank's node, Slurm's i-th, never one a live member holds), so any leader
computes the same answer and a member released before a failover keeps its node.  A member
with no seat, or of a group whose members ask for different things (jobs/group_ask.py),
stays gated (unrecorded) and is told why; it is tried again while it waits.
A write whose precondition fails (the gates changed) reads the pod once more; one the API
server refuses for another reason is tried again after ``retry_seconds`` while it waits.
"""

import asyncio
from typing import Protocol

import structlog
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys, metrics
from bridge.devices.pinning import ClaimPinError, ClaimPinner, ClaimsNotReady
from bridge.jobs.components import member_part
from bridge.jobs.group_ask import rank_of
from bridge.jobs.owner import GroupOwner, Owner
from bridge.kube.apierrors import is_conflict, is_not_found, is_unprocessable
from bridge.link.bound import CudaNumbering, bound, cuda_visible_devices
from bridge.link.gate import gated, record_patch, release_patch, unrecorded
from bridge.link.ownership import owner_key, pod_ref
from bridge.placement.index import JobIndex
from bridge.placement.job_events import NO_LISTENER, JobEvents
from bridge.placement.outcomes import PlacementError
from bridge.placement.placer import Placer, allocated_nodes
from bridge.placement.seats import SeatRefused, members_differ, members_of
from bridge.ports import KubeGet, KubeList, KubePatchPod
from bridge.slurm.types import SlurmJob

log = structlog.get_logger(__name__)

_WRITE_ATTEMPTS = 3  # a pod changed under each write this often in a row: try again later
RELEASES_IN_FLIGHT = 32  # PATCHes at once; the apiserver client's other callers keep the rest


class ReleaserKube(KubeGet, KubeList, KubePatchPod, Protocol):
    """A group's members listed, the release patched, a changed pod read again."""


class Releaser:
    def __init__(
        self, kube: ReleaserKube, placer: Placer, index: JobIndex, *,
        cuda_numbering: CudaNumbering = "renumbered", retry_seconds: float = 2.0,
        pinner: ClaimPinner | None = None, events: JobEvents = NO_LISTENER,
    ) -> None:
        """``events``: told of a pod whose claims cannot be written (it waits no more)."""
        self._kube = kube
        self._pinner = pinner
        self._events = events
        self._placer = placer
        self._index = index
        self._cuda = cuda_numbering
        self._retry = retry_seconds
        self._waiting: dict[Owner, dict[str, Pod]] = {}  # gated pods by owner, by uid
        self._owner_of: dict[str, Owner] = {}  # uid → owner of each pod in _waiting
        self._refusals: dict[str, str] = {}  # uid → why a waiting member is not released
        self._releasing: set[Owner] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # A poll may find hundreds of jobs started: their releases queue here, not for the
        # apiserver client's connections, which kube-scheduler's bind calls also need.
        self._slots = asyncio.Semaphore(RELEASES_IN_FLIGHT)

    def track(self, pod: Pod, job: SlurmJob) -> None:
        """``pod`` (gated, or unrecorded) waits on ``job``: recorded as soon as the job runs."""
        assert pod.metadata is not None and pod.metadata.uid
        owner = owner_key(pod)
        self._waiting.setdefault(owner, {})[pod.metadata.uid] = pod
        self._owner_of[pod.metadata.uid] = owner
        self.job_changed(self._index.by_id(job.job_id) or job)  # as the poller knows it now

    def refresh(self, pod: Pod) -> None:
        """A newer copy of a tracked pod (from intake's watch): the write's precondition."""
        meta = pod.metadata
        if meta is None or not meta.uid:
            return
        pods = self._waiting.get(owner_key(pod))
        if pods is not None and meta.uid in pods:
            pods[meta.uid] = pod

    def forget(self, pod_uid: str) -> None:
        """The pod was deleted or bound (a lookup: every bound pod's watch event calls it)."""
        self._refusals.pop(pod_uid, None)
        owner = self._owner_of.pop(pod_uid, None)
        if owner is None:
            return
        pods = self._waiting.get(owner, {})
        pods.pop(pod_uid, None)
        if not pods:
            self._waiting.pop(owner, None)

    def job_changed(self, job: SlurmJob) -> None:
        owner = job.owner
        if owner is None or owner not in self._waiting or owner in self._releasing:
            return
        try:
            allocated_nodes(job)
        except PlacementError:  # not running yet
            return
        self._releasing.add(owner)
        task = asyncio.create_task(self._release_until_done(owner, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def take_unplaced(self, job: SlurmJob) -> list[Pod]:
        """A group's waiting members once ``job`` ended before it ran (a suspended Job's, or
        one cancelled before it started): no longer tracked, to be submitted again (a gated
        pod records no job, so none is its for good).  A lone pod's job is its own: the
        lifecycle controller evicts the pod instead."""
        if job.state.is_live or not isinstance(job.owner, GroupOwner):
            return []
        pods = list(self._waiting.pop(job.owner, {}).values())
        for pod in pods:
            self._owner_of.pop(_uid(pod), None)
            self._refusals.pop(_uid(pod), None)
        return pods

    def clear(self) -> None:
        """This replica no longer leads: the next leader releases what is left."""
        for task in self._tasks:
            task.cancel()
        self._waiting.clear()
        self._owner_of.clear()
        self._refusals.clear()
        self._releasing.clear()

    async def drain(self) -> None:
        """Wait for releases under way (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _release_until_done(self, owner: Owner, job: SlurmJob) -> None:
        try:
            while owner in self._waiting:
                current = self._index.by_owner(owner)
                if current is not None and current.job_id == job.job_id:
                    job = current
                try:
                    allocated_nodes(job)
                except PlacementError:  # requeued meanwhile: the poller reports it again
                    return
                try:
                    async with self._slots:
                        await self._release(owner, job)
                except Exception as exc:  # the apiserver away: the pods still wait
                    log.warning("release.failed", owner=str(owner), job_id=job.job_id,
                                error=repr(exc), retry_in=self._retry)
                if owner in self._waiting:
                    await asyncio.sleep(self._retry)
        finally:
            self._releasing.discard(owner)

    async def _release(self, owner: Owner, job: SlurmJob) -> None:
        if not isinstance(owner, GroupOwner):
            for pod in list(self._waiting.get(owner, {}).values()):
                await self._release_pod(pod, owner, job, None)
            return
        members = await members_of(self._kube, owner)
        waiting = sorted((p for p in members if unrecorded(p)), key=_rank_then_name)
        for uid in set(self._waiting.get(owner, {})) - {_uid(p) for p in waiting}:
            self.forget(uid)  # released by someone else, or gone
        seats = self._placer.seats.seated(owner, job, members)
        differ = members_differ(owner, members)
        for pod in waiting:
            try:
                if differ is not None:
                    raise SeatRefused(differ)
                node = seats.take(pod)
            except SeatRefused as refused:
                reason = keys.REASON_SEAT_TAKEN if differ is None else keys.REASON_MEMBERS_DIFFER
                await self._refuse(pod, owner, job, reason, str(refused))
                continue
            if not await self._release_pod(pod, owner, job, node):
                seats.vacate(_uid(pod))  # not recorded on it: the seat is not its

    async def _refuse(
        self, pod: Pod, owner: Owner, job: SlurmJob, reason: str, message: str
    ) -> None:
        """The member stays gated and tracked (tried again while it waits): told once per
        distinct reason."""
        uid = _uid(pod)
        if self._refusals.get(uid) == message:
            return
        self._refusals[uid] = message
        log.warning("release.refused", owner=str(owner), job_id=job.job_id, pod=pod_ref(pod),
                    reason=reason, why=message)
        await self._events.release_refused(pod, reason, message)

    async def _release_pod(
        self, pod: Pod, owner: Owner, job: SlurmJob, seat: str | None
    ) -> bool:
        """One write (a fresh read first only when the pod changed); True once released.
        ``seat``: a group member's node (a lone pod's is its job's one node)."""
        uid = _uid(pod)
        placement = self._placer.resolve(owner, uid, job, recorded=job.job_id, node=seat)
        slurm_node = placement.slurm_node
        if not await self._claims_pinned(pod, job, placement.kube_node, slurm_node):
            return False
        cuda = cuda_visible_devices(placement.gpu_ids, self._cuda)
        meta = pod.metadata
        assert meta is not None and meta.name and meta.namespace
        part = member_part(meta.labels, meta.annotations) if job.het_components else None
        recorded = bound(job.job_id, owner, slurm_node, placement.gpu_ids, cuda,
                         component=part[1] if part else None)
        was_gated = gated(pod)
        for _ in range(_WRITE_ATTEMPTS):
            patch = (release_patch(pod, placement.kube_node, recorded) if gated(pod)
                     else record_patch(pod, recorded))
            try:
                await self._kube.patch_pod(meta.namespace, meta.name, patch)
                break
            except ApiError as exc:
                if is_not_found(exc):
                    self.forget(uid)
                    return False
                if not (is_conflict(exc) or is_unprocessable(exc)):
                    raise
            pod = await self._kube.get(PodResource, meta.name, namespace=meta.namespace)
            if _uid(pod) != uid or not unrecorded(pod):  # recreated, or recorded meanwhile
                self.forget(uid)
                return False
        else:
            return False
        self.forget(uid)
        self._index.pin(owner, job.job_id)
        if was_gated:
            metrics.PODS_RELEASED.inc()
        log.info("release.done", pod=pod_ref(pod), job_id=job.job_id, node=placement.kube_node,
                 gpu_ids=placement.gpu_ids, gated=was_gated)
        return True


    async def _claims_pinned(
        self, pod: Pod, job: SlurmJob, kube_node: str, slurm_node: str
    ) -> bool:
        """The pod's DRA claims written with Slurm's GPUs (True at once without claims); a
        claim not made yet waits for the next try, one that cannot be written is told on the
        pod, which then waits no more."""
        if self._pinner is None or not (pod.spec and pod.spec.resourceClaims):
            return True
        gpu_ids = job.allocation.gpu_ids.get(slurm_node, ()) if job.allocation else ()
        try:
            await self._pinner.pin(pod, job.job_id, kube_node, gpu_ids)
            return True
        except ClaimsNotReady as exc:
            log.info("release.claims_not_ready", pod=pod_ref(pod), reason=str(exc))
        except ClaimPinError as exc:
            log.warning("release.claims_unallocated", pod=pod_ref(pod), job_id=job.job_id,
                        reason=str(exc))
            await self._events.claims_unallocated(pod, str(exc))
            self.forget(_uid(pod))
        return False


def _uid(pod: Pod) -> str:
    assert pod.metadata is not None and pod.metadata.uid
    return pod.metadata.uid


def _rank_then_name(pod: Pod) -> tuple[int, str]:
    """Ranked members first, in rank order; the others by name: the same order everywhere."""
    rank = rank_of(pod)
    return (1 << 30) if rank is None else rank, (pod.metadata.name if pod.metadata else "") or ""

