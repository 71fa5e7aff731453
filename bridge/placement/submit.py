"""Submitting an owner's job once: by the leader's intake alone (bridge/controllers/intake.py),
one attempt per owner at a time (the owner's pods share it), and a refusal remembered for a
while (an account removed from slurmdbd must not turn into a submission per retry).  No other
replica submits, so none needs a claim: a new leader first reads every job its predecessor
submitted (``Poller.resynced``), and the index keeps one per owner (``JobIndex.ensure``)."""

import asyncio
import dataclasses
import time
from collections.abc import Callable

import structlog
from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.jobs.components import group_components
from bridge.jobs.owner import GroupOwner, Owner
from bridge.jobs.request import JobRequest
from bridge.jobs.translate import job_request_for_pod
from bridge.placement.hetfit import never_fits
from bridge.placement.hetjob import group_request
from bridge.placement.index import JobIndex
from bridge.placement.job_events import NO_LISTENER, JobEvents
from bridge.placement.outcomes import Refused
from bridge.placement.reasons import refusal
from bridge.placement.seats import members_differ, members_of
from bridge.ports import KubeList
from bridge.slurm.errors import SlurmRejected
from bridge.slurm.node_listing import SlurmNodeListing
from bridge.slurm.types import SlurmJob

log = structlog.get_logger(__name__)

# The pod as its job is submitted (the namespace's tenancy filled in); raises Refused
# when it must not be (namespace not covered or not mapped, outside tenancy or policy).
SubmitCheck = Callable[[Pod], Pod]
REFUSED_RETRY_SECONDS = 30.0


class Submitter:
    def __init__(
        self, index: JobIndex, *, admit: SubmitCheck | None = None,
        events: JobEvents = NO_LISTENER, members: KubeList | None = None,
        slurm_nodes: SlurmNodeListing | None = None,
    ) -> None:
        """``admit``: the policy check before a submit; ``events`` hears of Slurm's answer
        (its refusal told to the pod's owner, the grace-period check: placement/grace.py);
        ``members``: where a group's members are listed, so that its job is never built
        from one member while the others ask for something else; ``slurm_nodes``: Slurm's
        nodes, so that a heterogeneous job that could never start is not submitted."""
        self._index = index
        self._admit = admit
        self._members = members
        self._slurm_nodes = slurm_nodes
        self._events = events
        # owner → (monotonic time until which it is not resubmitted, Slurm's refusal in words)
        self._refused: dict[Owner, tuple[float, str]] = {}
        self._attempts: dict[Owner, asyncio.Future[SlurmJob]] = {}

    async def submit(self, pod: Pod, owner: Owner) -> SlurmJob:
        """Submit; the owner's pods taken at once share one attempt."""
        attempt = self._attempts.get(owner)
        if attempt is None:
            attempt = asyncio.ensure_future(self._submit(pod, owner))
            self._attempts[owner] = attempt
            attempt.add_done_callback(lambda done: self._done(owner, done))
        return await asyncio.shield(attempt)

    def _done(self, owner: Owner, attempt: "asyncio.Future[SlurmJob]") -> None:
        del self._attempts[owner]
        if not attempt.cancelled():
            attempt.exception()  # retrieved: every waiter has seen it, or none is left

    def checked(self, pod: Pod, owner: Owner) -> tuple[Pod, JobRequest]:
        """The pod as its job would be submitted now (its namespace's tenancy filled in) and
        that job; raises Refused or InvalidPodRequest when it must not be.  A read: filter
        tells a pod that came without the gate why it waits."""
        refused = self._refused.get(owner)
        if refused is not None and refused[0] > time.monotonic():
            raise Refused(refused[1])  # Slurm said no moments ago: no retry storm
        if self._admit is not None:  # checked here too: the bridge trusts no admission
            pod = self._admit(pod)
        return pod, dataclasses.replace(job_request_for_pod(pod), owner=owner)

    async def _submit(self, pod: Pod, owner: Owner) -> SlurmJob:
        pod, request = self.checked(pod, owner)
        if isinstance(owner, GroupOwner) and self._members is not None:
            members = await members_of(self._members, owner)
            differ = members_differ(owner, members)
            if differ is not None:
                raise Refused(differ)
            request = group_request(pod, request, members, self._admit or (lambda p: p))
            await self._check_fit(pod, owner, request)
        return await self._ensure(pod, request)

    async def _check_fit(self, pod: Pod, owner: GroupOwner, request: JobRequest) -> None:
        """Raises Refused, told to every member as a refused submit, when ``request`` is a
        heterogeneous job Slurm could never start (placement/hetfit.py)."""
        if not request.components or self._slurm_nodes is None:
            return
        meta = pod.metadata
        found = group_components(meta.labels if meta else None,
                                 meta.annotations if meta else None)
        names = [part.name for part in found.parts] if found else []
        unfit = never_fits(owner, names, request, await self._slurm_nodes.nodes())
        if unfit is not None:
            log.warning("placement.hetjob_never_fits", owner=str(owner), why=unfit)
            raise Refused(unfit)

    async def _ensure(self, pod: Pod, request: JobRequest) -> SlurmJob:
        """Submit; a refusal is told to the pod's owner in words, and not retried for a while."""
        try:
            job = await self._index.ensure(request)
        except SlurmRejected as exc:
            where = request.placement
            reason, sentence = refusal(
                "; ".join(exc.errors) or str(exc), account=where.account,
                user=where.user, qos=where.qos, partition=where.partition,
            )
            message = f"{keys.SUBMIT_REFUSED_MESSAGE}: {sentence}"
            now = time.monotonic()
            self._refused = {o: r for o, r in self._refused.items() if r[0] > now}
            self._refused[request.owner] = (now + REFUSED_RETRY_SECONDS, message)
            log.warning("placement.submit_refused", owner=str(request.owner), reason=reason,
                        error=str(exc))
            await self._events.submit_refused(pod, reason, message)
            raise Refused(message) from exc
        await self._events.job_submitted(pod)
        return job
