"""The extender's decisions: which of the candidate nodes a pod may use, and where it binds.

Slurm decides; this module only translates its answer.  No Slurm listing
happens here: known jobs come from the index; a new one is submitted by the leader's intake
alone (``prepare``, submit.py), and filter and bind only read.  Where a pod goes is decided
by ``resolve`` alone, from the job the leader recorded on the pod (its release, or the same
record on a pod that came without the gate) and, for a group member, its seat (seats.py), so
every replica answers alike.  What a decision came to is a type (outcomes.py).
"""

from collections.abc import Callable
from datetime import datetime

import structlog
from lightkube.models.core_v1 import Pod

from bridge import metrics
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.owner import GroupOwner, Owner
from bridge.kube.nodecache import ContestedSlurmNode, NodeCache
from bridge.link.views import PodView, tied_to, view_of
from bridge.placement.index import JobIndex
from bridge.placement.job_events import NO_LISTENER, JobEvents
from bridge.placement.outcomes import (
    Outcome,
    Pending,
    Placement,
    PlacementError,
    Refused,
    Verdict,
)
from bridge.placement.reasons import waiting_message
from bridge.placement.registry import ParkedPods, SeenPods, SlurmTrouble
from bridge.placement.seats import SeatTable
from bridge.placement.submit import SubmitCheck, Submitter
from bridge.ports import KubeList
from bridge.slurm.allocation import format_gpu_ids
from bridge.slurm.errors import SlurmError, SlurmJobNotFound
from bridge.slurm.node_listing import SlurmNodeListing
from bridge.slurm.types import JobState, SlurmJob

log = structlog.get_logger(__name__)


class Placer:
    def __init__(
        self,
        index: JobIndex,
        nodes: NodeCache,
        seen: SeenPods,
        events: JobEvents = NO_LISTENER,
        *,
        parked: ParkedPods | None = None,
        trouble: SlurmTrouble | None = None,
        admit: SubmitCheck | None = None,
        members: KubeList | None = None,
        views: Callable[[str], PodView | None] = lambda uid: None,
        slurm_nodes: SlurmNodeListing | None = None,
    ) -> None:
        """``events``: told of each pod's job met and of each submit; ``admit``: the policy
        check before a submit, ``members``: where a group's members are listed before its
        job is submitted, ``slurm_nodes``: Slurm's nodes (placement/submit.py); ``views``: a
        pod's view by uid, from the pod cache (bind and prioritize read the job recorded on
        the pod there); ``parked`` and ``trouble``: where it notes the pods owed a nudge (the
        notifier gives it)."""
        self._index = index
        self._views = views
        self._nodes = nodes
        self._seen = seen
        self._parked = parked if parked is not None else ParkedPods()
        self._trouble = trouble if trouble is not None else SlurmTrouble()
        self.seats = SeatTable()  # each group's: the release gives, filter and bind read
        self._events = events
        self._submitter = Submitter(index, admit=admit, events=events, members=members,
                                    slurm_nodes=slurm_nodes)

    async def filter(self, pod: Pod, candidates: list[str]) -> Verdict:
        view = view_of(pod)
        try:
            job = await self._job_for(pod, view)
            if job is None:
                self._submitter.checked(pod, view.owner)  # refused: say why, as intake does
                raise Pending(
                    f"waiting: no Slurm job for pod {view} yet: the bridge's leader submits "
                    "it (if it cannot, the pod's events say why)"
                )
            placement = self._resolve_view(view, job)
        except (PlacementError, InvalidPodRequest, SlurmError) as exc:
            return self._not_placed(view, candidates, exc)
        return _verdict(placement, job, candidates)

    def filter_known(self, pod: PodView, candidates: list[str]) -> Verdict | None:
        """The verdict from memory alone, for a pod the cache holds whose job is recorded on
        it (by its release or the leader's record); None: read the pod."""
        job_id = pod.job_id
        if pod.gated or pod.held or pod.node_name or pod.deleting or job_id is None:
            return None
        job = self._index.by_id(job_id)
        if job is None:
            return None
        try:
            placement = self._resolve_view(pod, job)
        except PlacementError:
            return None  # filter says why
        self._seen.remember(pod)
        return _verdict(placement, job, candidates)

    def _not_placed(self, pod: PodView, candidates: list[str], exc: Exception) -> Verdict:
        """Every candidate fails with the reason; kube-scheduler parks the pod meanwhile."""
        self._parked.park(pod.uid)
        if isinstance(exc, PlacementError):
            outcome = exc.outcome
        elif isinstance(exc, SlurmError):
            outcome = Outcome.SLURM_UNAVAILABLE
            self._trouble.note(pod)
        else:
            outcome = Outcome.REFUSED
        metrics.FILTER_DECISIONS.labels(outcome.metric_label).inc()
        message = str(exc)
        return Verdict(outcome, candidates=candidates, reason=message, message=message)

    async def placement_for(self, pod: Pod) -> Placement:
        """Where a pod that passed filter must bind (raises PlacementError otherwise)."""
        view = view_of(pod)
        job = await self._job_for(pod, view)
        if job is None:
            raise Refused(f"no Slurm job for pod {view}")
        return self._resolve_view(view, job)

    def created_at(self, pod_uid: str) -> datetime | None:
        seen = self._seen.get(pod_uid)
        return seen.created if seen is not None else None

    def bound(self, pod_uid: str) -> None:
        """The pod is on its node: no requeue nudge is owed to it any more."""
        self._parked.unpark(pod_uid)

    async def prepare(self, pod: Pod) -> SlurmJob:
        """The pod's job, submitted if it has none (the leader's intake alone calls this)."""
        view = view_of(pod)
        job = await self._job_for(pod, view)
        recorded = view.job_id
        if job is None and recorded is not None:
            raise Refused(
                f"Slurm job {recorded} recorded on this pod is gone; the bridge will not "
                "resubmit it: recreate the pod"
            )
        if job is None:
            job = await self._submitter.submit(pod, view.owner)
            await self._events.job_known(view, job)
        return job

    async def _job_for(self, pod: Pod, view: PodView) -> SlurmJob | None:
        """The pod's live job as far as is known (None: none yet); ``view``: ``pod`` read
        once (the pod itself still gives the job's request)."""
        owner = view.owner
        self._seen.remember(view)
        job = (
            self._recorded_live(view)
            or self._index.by_owner(owner)
            or await self._adopt_recorded(view)
        )
        if job is None:
            return None
        if not job.state.is_live:
            if tied_to(view, job):
                raise Refused(
                    f"Slurm job {job.job_id} for this pod ended ({job.state_text}, reason "
                    f"{job.reason}); the bridge will not resubmit it: recreate the pod"
                )
            return None  # the group's next run (e.g. a resumed Job)
        await self._events.job_known(view, job)
        return job

    def _recorded_live(self, view: PodView) -> SlurmJob | None:
        """The live job the pod's release or Binding recorded, when the index holds it: the
        pod's job, though the owner may have another live one (a submit that timed out but
        landed) until the resync cancels the extra."""
        job_id = view.job_id
        job = self._index.by_id(job_id) if job_id is not None else None
        if job is None or job.owner != view.owner or not job.state.is_live:
            return None
        return job

    async def _adopt_recorded(self, view: PodView) -> SlurmJob | None:
        """A job another replica (or this one before a restart) recorded on the pod."""
        if view.job_id is None:
            return None
        try:
            job = await self._index.adopt(view.job_id)
        except SlurmJobNotFound:
            return None
        return job if job.owner == view.owner else None

    def known_placement(self, pod_uid: str) -> Placement | None:
        """Where a pod filter has seen must bind, from memory alone (None: ask the apiserver):
        the pod cache's view of it when that shows its job recorded; else the job filter read
        recorded on it; else (neither knows one) its owner's job is taken for it."""
        seen = self._seen.get(pod_uid)
        if seen is None:
            return None
        view = self._views(pod_uid)
        if view is None or view.job_id is None:
            view = seen
        recorded = view.job_id
        job = self._index.by_owner(view.owner) if recorded is None else self._index.by_id(recorded)
        if job is None:
            return None
        try:
            if recorded is not None:
                return self._resolve_view(view, job)
            return self.resolve(view.owner, pod_uid, job, recorded=job.job_id, node=None)
        except PlacementError:  # not running, not its, or no one Node is Slurm's node
            return None  # a read says why

    def _resolve_view(self, view: PodView, job: SlurmJob) -> Placement:
        """``resolve`` for a pod as its view shows it: the job and node recorded on it."""
        return self.resolve(view.owner, view.uid, job, recorded=view.job_id,
                            node=view.recorded_node or None)

    def resolve(
        self, owner: Owner, uid: str, job: SlurmJob, *, recorded: int | None, node: str | None
    ) -> Placement:
        """Where the pod ``uid`` of ``owner`` goes for ``job``: the one answer of filter, bind
        and the release, which differ only in how they know the pod (``recorded``: the job id
        recorded on it, ``node``: the Slurm node recorded with it) and find its job.  Raises
        Pending (it waits: the message says for what) or Refused.  In this order:

        1. ``job`` is ``owner``'s (else Refused) and runs (else it waits for Slurm);
        2. it is the job recorded on the pod (else it waits for the leader's record: another
           live job of its owner, such as a late duplicate, is never the pod's);
        3. the Slurm node: a lone pod's is its job's one node; a group member's is its seat,
           ``node`` when recorded (the group's seats hold it there from now on), else the seat
           the group's seats hold for it (none, or not one of the job's nodes: it waits);
        4. the Kubernetes Node that is that Slurm node (none for now: it waits).
        """
        if job.owner != owner:
            raise Refused(f"Slurm job {job.job_id} recorded on this pod is {job.owner}'s, not "
                          f"its owner {owner}'s: recreate the pod")
        allocated = allocated_nodes(job)
        slurm_node = None
        if recorded == job.job_id:
            slurm_node = (self._seat(owner, job, uid, node) if isinstance(owner, GroupOwner)
                          else allocated[0])
        if slurm_node is None or slurm_node not in allocated:
            raise Pending(
                f"waiting: Slurm job {job.job_id} runs on {','.join(allocated)}; the bridge "
                "records which of its nodes is this pod's"
            )
        return self._placement_on(owner, job, slurm_node)

    def _seat(self, owner: GroupOwner, job: SlurmJob, uid: str, node: str | None) -> str | None:
        """A member's seat: ``node`` recorded on it (held from now on), else the table's."""
        if node is None:
            return self.seats.seat_of(owner, job.job_id, uid)
        self.seats.hold(owner, job, uid, node)
        return node

    def _placement_on(self, owner: Owner, job: SlurmJob, slurm_node: str) -> Placement:
        """Where ``job`` puts its owner's pod on ``slurm_node`` (one of its nodes)."""
        assert job.allocation is not None
        try:
            kube_node = self._nodes.kube_name(slurm_node)
        except ContestedSlurmNode as exc:  # no Node is that node for now: the pod waits
            raise Pending(f"waiting: {exc}") from exc
        return Placement(
            job_id=job.job_id,
            owner=owner,
            kube_node=kube_node,
            slurm_node=slurm_node,
            gpu_ids=format_gpu_ids(job.allocation.gpu_ids.get(slurm_node, ())),
        )


def _verdict(placement: Placement, job: SlurmJob, candidates: list[str]) -> Verdict:
    """Slurm's node if Kubernetes still offers it, refused with the reason otherwise."""
    if placement.kube_node not in candidates:
        message = (
            f"Slurm job {job.job_id} holds node {placement.kube_node} for this pod, but "
            "Kubernetes ruled that node out (taint, cordon, missing Node object or "
            "resources): fix the node or cancel the job to let Slurm choose again"
        )
        return Verdict(Outcome.REFUSED, candidates=candidates, reason=message,
                       message=message)
    metrics.FILTER_DECISIONS.labels(Outcome.ALLOCATED.metric_label).inc()
    # One reason for every other candidate, and no per-candidate work here: filter is on
    # kube-scheduler's hot path with thousands of candidates (B3).
    return Verdict(Outcome.ALLOCATED, keep=[placement.kube_node], candidates=candidates,
                   reason=f"Slurm placed this pod on {placement.kube_node}")


def allocated_nodes(job: SlurmJob) -> tuple[str, ...]:
    """The nodes of a running job (Pending, "waiting for Slurm job ...", until it runs)."""
    if job.state is not JobState.RUNNING or job.allocation is None or not job.allocation.nodes:
        raise Pending(waiting_message(job))
    return job.allocation.nodes
