"""Submitting an owner's job once: one attempt per owner in this process (intake and filter
share it), one claim across replicas (link/claims.py) for a pod that came without the
bridge's gate (a gated one is submitted by the leader alone), and a refusal remembered for a
while (an account removed from slurmdbd must not turn into a submission per filter)."""

import asyncio
import dataclasses
import time
from collections.abc import Callable

import structlog
from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import GroupOwner, Owner
from bridge.jobs.request import JobRequest
from bridge.jobs.translate import job_request_for_pod
from bridge.link.claims import AlreadySubmitted, ClaimLost, Claims
from bridge.link.gate import gated
from bridge.link.records import OwnerChanged
from bridge.placement.index import JobIndex
from bridge.placement.job_events import NO_LISTENER, JobEvents
from bridge.placement.outcomes import ClaimedElsewhere, Pending, Refused
from bridge.placement.reasons import refusal
from bridge.placement.seats import members_differ, members_of
from bridge.ports import KubeList
from bridge.slurm.errors import SlurmRejected
from bridge.slurm.types import SlurmJob

log = structlog.get_logger(__name__)

# The pod as its job is submitted (the namespace's tenancy filled in); raises Refused
# when it must not be (namespace not covered or not mapped, outside tenancy or policy).
SubmitCheck = Callable[[Pod], Pod]
REFUSED_RETRY_SECONDS = 30.0


class Submitter:
    def __init__(
        self, index: JobIndex, claims: Claims | None, *, admit: SubmitCheck | None = None,
        events: JobEvents = NO_LISTENER, members: KubeList | None = None,
    ) -> None:
        """``admit``: the policy check before a submit; ``events`` hears of Slurm's answer
        (its refusal told to the pod's owner, the grace-period check: placement/grace.py);
        ``members``: where a group's members are listed, so that its job is never built
        from one member while the others ask for something else."""
        self._index = index
        self._claims = claims
        self._admit = admit
        self._members = members
        self._events = events
        # owner → (monotonic time until which it is not resubmitted, Slurm's refusal in words)
        self._refused: dict[Owner, tuple[float, str]] = {}
        self._attempts: dict[Owner, asyncio.Future[SlurmJob]] = {}

    async def submit(self, pod: Pod, owner: Owner, replacing: int | None) -> SlurmJob:
        """Claim and submit; callers racing on one owner (intake, filter) share one attempt.
        ``replacing``: the owner's ended job that the new one follows (a group's next run)."""
        attempt = self._attempts.get(owner)
        if attempt is None:
            attempt = asyncio.ensure_future(self._claim_and_submit(pod, owner, replacing))
            self._attempts[owner] = attempt
            attempt.add_done_callback(lambda done: self._done(owner, done))
        return await asyncio.shield(attempt)

    def _done(self, owner: Owner, attempt: "asyncio.Future[SlurmJob]") -> None:
        del self._attempts[owner]
        if not attempt.cancelled():
            attempt.exception()  # retrieved: every waiter has seen it, or none is left

    async def _claim_and_submit(self, pod: Pod, owner: Owner, replacing: int | None) -> SlurmJob:
        refused = self._refused.get(owner)
        if refused is not None and refused[0] > time.monotonic():
            raise Refused(refused[1])  # Slurm said no moments ago: no retry storm
        if self._admit is not None:  # checked here too: the bridge trusts no admission
            pod = self._admit(pod)
        request = dataclasses.replace(job_request_for_pod(pod), owner=owner)
        if isinstance(owner, GroupOwner) and self._members is not None:
            differ = members_differ(owner, await members_of(self._members, owner))
            if differ is not None:
                raise Refused(differ)
        if self._claims is None or gated(pod):
            # A gated pod's job is submitted by the leader alone (intake) and becomes the
            # pod's in the release write, whose precondition admits one: no claim needed.
            return await self._ensure(pod, request)
        try:
            took_over = await self._claims.claim(pod, owner, replacing=replacing)
        except AlreadySubmitted as exc:
            return await self._index.adopt(exc.job_id)
        except ClaimLost as exc:
            raise ClaimedElsewhere(f"waiting: {exc}", exc.retry_in) from exc
        except OwnerChanged as exc:
            raise Pending(f"waiting: {exc}; deciding again") from exc
        except Exception as exc:  # apiserver unreachable: submit nothing unclaimed
            raise Pending(f"waiting: cannot claim the pod's job: {exc!r}") from exc
        # A taken-over claim's holder may have submitted, then died before recording it.
        job = (await self._index.find_live(owner) if took_over else None) or (
            await self._ensure(pod, request)
        )
        try:
            await self._claims.submitted(pod, owner, job.job_id)
        except Exception as exc:  # the claim goes stale; its taker finds the job in Slurm
            log.warning(
                "placement.record_failed", owner=str(owner), job_id=job.job_id, error=repr(exc)
            )
        return job

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
