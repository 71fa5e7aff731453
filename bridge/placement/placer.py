"""The extender's decisions: which of the candidate nodes a pod may use, and where it binds.

Slurm decides; this module only translates its answer.  No Slurm listing
happens here: known jobs come from the index, new ones are submitted once.
"""

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from lightkube.models.core_v1 import Pod

from bridge import keys, metrics
from bridge.jobs.annotations import pod_group
from bridge.jobs.errors import InvalidPodRequest
from bridge.jobs.request import JobRequest
from bridge.jobs.translate import job_request_for_pod
from bridge.placement.claims import (
    AlreadySubmitted,
    ClaimLost,
    Claims,
    OwnerChanged,
    member_slot,
)
from bridge.placement.index import JobIndex
from bridge.placement.nodes import NodeMap
from bridge.placement.owner import GROUP_PREFIX, owner_key, pod_ref, tied_to
from bridge.placement.pods import PodRegistry
from bridge.placement.reasons import refusal, waiting_message
from bridge.slurm.allocation import format_gpu_ids
from bridge.slurm.errors import SlurmError, SlurmJobNotFound, SlurmRejected
from bridge.slurm.types import JobState, SlurmJob

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Filter outcome: nodes kept; the rest failed with a message the user will read."""

    keep: list[str] = field(default_factory=list)
    unresolvable: dict[str, str] = field(default_factory=dict)
    job: SlurmJob | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: Kubernetes node, Slurm node, job and GPU indices."""

    job_id: int
    owner: str
    kube_node: str
    slurm_node: str
    gpu_ids: str

    def annotations(self) -> dict[str, str]:
        return {
            keys.JOB_ID: str(self.job_id),
            keys.OWNER: self.owner,
            keys.SLURM_NODE: self.slurm_node,
            keys.GPU_IDS: self.gpu_ids,
        }


class PlacementError(Exception):
    """The pod cannot be placed (yet); the message is meant for the pod's owner."""


class ClaimedElsewhere(PlacementError):
    """Another replica's claim holds the pod; it may be taken over in ``retry_in`` seconds."""

    def __init__(self, message: str, retry_in: float) -> None:
        super().__init__(message)
        self.retry_in = retry_in


OnJobKnown = Callable[[Pod, SlurmJob], Awaitable[None]]
# The pod as its job is submitted (the namespace's tenancy filled in); raises PlacementError
# when it must not be (namespace not covered or not mapped, outside tenancy or policy).
SubmitCheck = Callable[[Pod], Pod]
# Slurm refused to submit the pod's job: (pod, condition reason, message for its owner).
OnRefused = Callable[[Pod, str, str], Awaitable[None]]
REFUSED_RETRY_SECONDS = 30.0


class Placer:
    def __init__(
        self,
        index: JobIndex,
        nodes: NodeMap,
        pods: PodRegistry,
        on_job_known: OnJobKnown | None = None,
        *,
        claims: Claims | None = None,
        admit: SubmitCheck | None = None,
        on_refused: OnRefused | None = None,
        on_submitted: Callable[[Pod], None] | None = None,
    ) -> None:
        self._index = index
        self._on_refused = on_refused
        self._on_submitted = on_submitted
        # owner → (monotonic time until which it is not resubmitted, Slurm's refusal in words)
        self._refused: dict[str, tuple[float, str]] = {}
        self._admit = admit
        self._nodes = nodes
        self._pods = pods
        self._on_job_known = on_job_known
        self._claims = claims
        self._submitting: dict[str, asyncio.Future[SlurmJob]] = {}

    async def filter(self, pod: Pod, candidates: list[str]) -> Verdict:
        try:
            job = await self._job_for(pod)
            placement = await self._placement(pod, job)
        except (PlacementError, InvalidPodRequest, SlurmError) as exc:
            assert pod.metadata is not None and pod.metadata.uid
            self._pods.park(pod.metadata.uid)
            if isinstance(exc, SlurmError):
                self._pods.note_slurm_trouble(pod)
            waiting = isinstance(exc, PlacementError) and str(exc).startswith("waiting")
            metrics.FILTER_DECISIONS.labels("waiting" if waiting else "refused").inc()
            message = str(exc)
            return Verdict(unresolvable=dict.fromkeys(candidates, message), message=message)
        if placement.kube_node not in candidates:
            message = (
                f"Slurm job {job.job_id} holds node {placement.kube_node} for this pod, but "
                "Kubernetes ruled that node out (taint, cordon, missing Node object or "
                "resources): fix the node or cancel the job to let Slurm choose again"
            )
            failed = dict.fromkeys(candidates, message)
            return Verdict(unresolvable=failed, job=job, message=message)
        metrics.FILTER_DECISIONS.labels("allocated").inc()
        failed = {n: f"Slurm placed this pod on {placement.kube_node}" for n in candidates}
        del failed[placement.kube_node]
        return Verdict(keep=[placement.kube_node], unresolvable=failed, job=job)

    async def placement_for(self, pod: Pod) -> Placement:
        """Where a pod that passed filter must bind (raises PlacementError otherwise)."""
        return await self._placement(pod, await self._job_for(pod, submit=False))

    def created_at(self, pod_uid: str) -> datetime | None:
        return self._pods.created_at(pod_uid)

    def bound(self, pod_uid: str) -> None:
        """The pod is on its node: no requeue nudge is owed to it any more."""
        self._pods.unpark(pod_uid)

    async def prepare(self, pod: Pod) -> SlurmJob:
        """Submit (or adopt) the pod's job ahead of kube-scheduler's first filter."""
        return await self._job_for(pod)

    async def _job_for(self, pod: Pod, *, submit: bool = True) -> SlurmJob:
        owner = self._pods.remember(pod)
        job = self._index.by_owner(owner) or await self._adopt_annotated(pod)
        replacing = None
        if job is not None and not job.state.is_live:
            if tied_to(pod, job):
                raise PlacementError(
                    f"Slurm job {job.job_id} for this pod ended ({job.state}, reason "
                    f"{job.reason}); the bridge will not resubmit it: recreate the pod"
                )
            replacing, job = job.job_id, None  # the group's next run (e.g. a resumed Job)
        if job is None:
            if not submit:
                raise PlacementError(f"no Slurm job for pod {pod_ref(pod)}")
            job = await self._submit_once(pod, owner, replacing)
        if self._on_job_known is not None:
            await self._on_job_known(pod, job)
        return job

    async def _submit_once(self, pod: Pod, owner: str, replacing: int | None) -> SlurmJob:
        """Claim and submit; callers racing on one owner (intake, filter) share one attempt."""
        attempt = self._submitting.get(owner)
        if attempt is None:
            attempt = asyncio.ensure_future(self._claim_and_submit(pod, owner, replacing))
            self._submitting[owner] = attempt
            attempt.add_done_callback(lambda done: self._submitted(owner, done))
        return await asyncio.shield(attempt)

    def _submitted(self, owner: str, attempt: "asyncio.Future[SlurmJob]") -> None:
        del self._submitting[owner]
        if not attempt.cancelled():
            attempt.exception()  # retrieved: every waiter has seen it, or none is left

    async def _claim_and_submit(self, pod: Pod, owner: str, replacing: int | None) -> SlurmJob:
        refused = self._refused.get(owner)
        if refused is not None and refused[0] > time.monotonic():
            raise PlacementError(refused[1])  # Slurm said no moments ago: no retry storm
        if self._admit is not None:  # checked here too: the bridge does not trust admission
            pod = self._admit(pod)
        request = dataclasses.replace(job_request_for_pod(pod), owner=owner)
        if self._claims is None:
            return await self._ensure(pod, request)
        try:
            took_over = await self._claims.claim(pod, owner, replacing=replacing)
        except AlreadySubmitted as exc:
            return await self._index.adopt(exc.job_id)
        except ClaimLost as exc:
            raise ClaimedElsewhere(f"waiting: {exc}", exc.retry_in) from exc
        except OwnerChanged as exc:
            raise PlacementError(f"waiting: {exc}; deciding again") from exc
        except Exception as exc:  # apiserver unreachable: submit nothing unclaimed
            raise PlacementError(f"waiting: cannot claim the pod's job: {exc!r}") from exc
        # A taken-over claim's holder may have submitted, then died before recording it.
        job = (await self._index.find_live(owner) if took_over else None) or (
            await self._ensure(pod, request)
        )
        try:
            await self._claims.submitted(pod, owner, job.job_id)
        except Exception as exc:  # the claim goes stale; its taker finds the job in Slurm
            log.warning("placement.record_failed", owner=owner, job_id=job.job_id, error=repr(exc))
        return job

    async def _ensure(self, pod: Pod, request: JobRequest) -> SlurmJob:
        """Submit; a refusal is told to the pod's owner in words, and not retried for a while
        (an account removed from slurmdbd must not turn into a submission per filter)."""
        try:
            job = await self._index.ensure(request)
        except SlurmRejected as exc:
            reason, sentence = refusal(
                "; ".join(exc.errors) or str(exc), account=request.account,
                user=request.user, qos=request.qos, partition=request.partition,
            )
            message = f"Slurm refused the pod's job: {sentence}"
            now = time.monotonic()
            self._refused = {o: r for o, r in self._refused.items() if r[0] > now}
            self._refused[request.owner] = (now + REFUSED_RETRY_SECONDS, message)
            log.warning("placement.submit_refused", owner=request.owner, reason=reason,
                        error=str(exc))
            if self._on_refused is not None:
                await self._on_refused(pod, reason, message)
            raise PlacementError(message) from exc
        if self._on_submitted is not None:
            self._on_submitted(pod)
        return job

    async def _adopt_annotated(self, pod: Pod) -> SlurmJob | None:
        """A job another replica (or this one before a restart) recorded on the pod."""
        text = ((pod.metadata and pod.metadata.annotations) or {}).get(keys.JOB_ID)
        if not text or not text.isdigit():
            return None
        try:
            job = await self._index.adopt(int(text))
        except SlurmJobNotFound:
            return None
        return job if job.owner == owner_key(pod) else None

    def known_placement(self, pod_uid: str) -> Placement | None:
        """Where a pod filter has seen must bind, from memory alone (None: ask the apiserver)."""
        owner = self._pods.owner_of(pod_uid)
        job = self._index.by_owner(owner) if owner is not None else None
        if owner is None or job is None:
            return None
        try:
            allocated = _allocated_nodes(job)
        except PlacementError:  # not running: nowhere to bind yet
            return None
        if owner.startswith(GROUP_PREFIX):  # only a node recorded on the group's claim
            node = self._pods.reserved(owner, pod_uid)
            return self._placement_at(owner, job, node) if node in allocated else None
        return self._placement_at(owner, job, allocated[0])

    async def _placement(self, pod: Pod, job: SlurmJob) -> Placement:
        assert pod.metadata is not None and pod.metadata.uid
        owner = owner_key(pod)
        allocated = _allocated_nodes(job)
        if not owner.startswith(GROUP_PREFIX):
            return self._placement_at(owner, job, allocated[0])
        node = self._pods.reserved(owner, pod.metadata.uid)
        if node not in allocated:
            node = await self._member_node(pod, owner, job, allocated)
        return self._placement_at(owner, job, node)

    async def _member_node(
        self, pod: Pod, owner: str, job: SlurmJob, allocated: tuple[str, ...]
    ) -> str:
        """This member's node of the group's job, reserved on the group's claim (shared by
        every replica) before any replica may bind it there."""
        assert pod.metadata is not None and pod.metadata.uid
        group = pod_group(pod.metadata.labels)
        rank = group.rank if group is not None else None
        if self._claims is None:  # one process alone: in memory
            node = member_slot(allocated, set(self._pods.reserved_nodes(owner)), rank)
        else:
            try:
                node = await self._claims.member_node(pod, owner, job.job_id, allocated, rank)
            except Exception as exc:  # apiserver away: reserve nothing unrecorded
                raise PlacementError(f"waiting: cannot reserve a node: {exc!r}") from exc
        if node is None:
            raise PlacementError(
                f"every node of Slurm job {job.job_id} ({','.join(allocated)}) is taken by "
                f"other members of the group: is {keys.GROUP_SIZE} too small?"
            )
        self._pods.reserve(owner, pod.metadata.uid, node)
        return node

    def _placement_at(self, owner: str, job: SlurmJob, slurm_node: str) -> Placement:
        assert job.allocation is not None
        return Placement(
            job_id=job.job_id,
            owner=owner,
            kube_node=self._nodes.kube_name(slurm_node),
            slurm_node=slurm_node,
            gpu_ids=format_gpu_ids(job.allocation.gpu_ids.get(slurm_node, ())),
        )


def _allocated_nodes(job: SlurmJob) -> tuple[str, ...]:
    """The nodes of a running job (PlacementError "waiting" until it runs)."""
    if job.state is not JobState.RUNNING or job.allocation is None or not job.allocation.nodes:
        raise PlacementError(waiting_message(job))
    return job.allocation.nodes
