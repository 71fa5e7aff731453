"""Leader election through a coordination.k8s.io Lease.

Only the holder of the lease runs the controllers (anything that acts on its
own: submitting, cancelling, evicting, draining).  Extender replicas serve filter and bind
without it.  Takeover uses the Lease's resourceVersion, so two candidates never both win
one version.  A holder stops acting a renew period before its lease could expire, counted
from the start of its last renew that went through, however long a renew hangs: from then
on (its *quiet* moment, plus ``QUIET_SLACK_SECONDS``) nothing it sent reaches Slurm, so a
listing of Slurm begun after it holds every job it submitted.  A standby asks for that
listing as the moment passes, before the lease expires: a new leader starts with it done.
"""

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from bridge import metrics
from bridge.cancelling import cancel_and_wait
from bridge.kube.apierrors import is_conflict, is_not_found
from bridge.ports import KubeCreate, KubeGet, KubeReplace

log = structlog.get_logger(__name__)

EXPIRY_SLACK_SECONDS = 0.05  # a standby tries this long after the holder's lease runs out
# After its stop, a submit the holder had sent may still land, and the replicas' clocks may
# differ: a takeover's listing begins this long after the holder's last moment of leading.
QUIET_SLACK_SECONDS = 2.0


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class LeaderKube(KubeCreate, KubeGet, KubeReplace, Protocol):
    """The Lease read, created once, replaced under its resourceVersion."""


class LeaderElector:
    def __init__(
        self,
        kube: LeaderKube,
        *,
        namespace: str,
        name: str = "slurmbridge-controllers",
        identity: str | None = None,
        lease_seconds: int = 15,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self.identity = identity or default_identity()
        self._lease_seconds = lease_seconds
        self._expires: datetime | None = None  # another holder's lease, as last read
        self._quiet: datetime | None = None  # when that holder stops acting, if it renews no more
        self.quiet_since = datetime.now(UTC)  # the lease as we took it: nobody else acts since

    async def try_acquire(self) -> bool:
        """One attempt to take or renew the lease; returns whether we lead now."""
        now = datetime.now(UTC)
        try:
            lease = await self._kube.get(Lease, self._name, namespace=self._namespace)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            return await self._create(now)
        spec = lease.spec or LeaseSpec()
        mine = spec.holderIdentity == self.identity
        expires = None if spec.renewTime is None else spec.renewTime + timedelta(
            seconds=spec.leaseDurationSeconds or self._lease_seconds
        )
        watched = self._quiet  # the holder's quiet moment as last read, its lease still on
        self._expires = self._quiet = None
        quiet = None if spec.renewTime is None or expires is None else min(
            expires, _quiet(spec.renewTime, expires))
        if not (mine or expires is None or expires < now or not spec.holderIdentity):
            self._expires, self._quiet = expires, quiet
            return False
        spec.renewTime = now
        spec.leaseDurationSeconds = self._lease_seconds
        if not mine:
            # A holder we watched go quiet (the same renew read before, unexpired) acts no
            # more since; any other (a released lease, one found expired, say with a renew
            # time someone set far back): count from now, the listing begins after the takeover
            self.quiet_since = quiet if quiet is not None and quiet == watched else now
            spec.holderIdentity = self.identity
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        lease.spec = spec
        # replace carries resourceVersion: a concurrent taker gets 409
        return await _won(self._kube.replace(lease))

    async def _create(self, now: datetime) -> bool:
        lease = Lease(
            metadata=ObjectMeta(name=self._name, namespace=self._namespace),
            spec=LeaseSpec(
                holderIdentity=self.identity, leaseDurationSeconds=self._lease_seconds,
                acquireTime=now, renewTime=now, leaseTransitions=0,
            ),
        )
        self.quiet_since = now
        return await _won(self._kube.create(lease))

    async def run(self, lead: Callable[[datetime], Coroutine[Any, Any, None]],
                  quiet: Callable[[], None] = lambda: None) -> None:
        """Forever: while we hold the lease, ``lead(quiet_since)`` runs; it is cancelled when
        we lose it.  ``quiet()``: told once when a holder that renews no more has gone quiet.
        Cancelled (the process stops), it stops ``lead()`` first, then hands the lease over."""
        task: asyncio.Task[None] | None = None
        renew = self._lease_seconds / 3
        loop = asyncio.get_running_loop()
        last_renewed = -float("inf")  # loop time at which the last renew that went through began
        told: datetime | None = None  # the holder's quiet moment ``quiet()`` was told of
        try:
            while True:
                began = loop.time()
                # leading, an attempt ends by our own quiet moment, answered or not
                budget = last_renewed + self._lease_seconds - renew - began if task else renew
                failed = False
                try:
                    async with asyncio.timeout(budget):
                        leading = await self.try_acquire()
                    if leading:
                        last_renewed = began
                except Exception as exc:  # apiserver away: lead on only while our lease holds
                    leading = loop.time() - last_renewed < self._lease_seconds - renew
                    failed = True
                    log.warning("leader.renew_failed", error=repr(exc), still_leading=leading)
                metrics.LEADER.set(1 if leading else 0)
                if self._quiet is not None and self._quiet != told and self._quiet <= _now():
                    told = self._quiet
                    log.info("leader.holder_quiet", quiet_since=told.isoformat())
                    quiet()
                if task is not None and task.done():  # they must never stop while we lead
                    log.error("leader.controllers_failed", identity=self.identity,
                              error=repr(task.exception()) if not task.cancelled() else None)
                    task = None
                if leading and task is None:
                    log.info("leader.acquired", identity=self.identity, lease=self._name)
                    task = asyncio.create_task(lead(self.quiet_since), name="controllers")
                elif not leading and task is not None:
                    log.warning("leader.lost", identity=self.identity, lease=self._name)
                    await cancel_and_wait([task])  # ended before anything else is done
                    task = None
                await asyncio.sleep(self._next_try(renew, leading, failed, told))
        finally:
            metrics.LEADER.set(0)
            if task is not None:
                await cancel_and_wait([task])
                await self._release()

    def _next_try(self, renew: float, leading: bool, failed: bool,
                  told: datetime | None) -> float:
        """A renew period; less for a leader whose renew failed (it retries while its lease
        holds), and for a standby whose holder goes quiet or whose lease runs out sooner: a
        dead leader's lease is taken as it expires, not up to a renew period later."""
        if leading:
            return renew / 5 if failed else renew
        wakes = [self._expires] if self._expires is not None else []
        if self._quiet is not None and self._quiet != told:
            wakes.append(self._quiet)
        left = min(((w - _now()).total_seconds() for w in wakes), default=renew)
        return min(renew, max(left, 0.0) + EXPIRY_SLACK_SECONDS)

    async def _release(self) -> None:
        """Hand the lease over as client-go's ReleaseOnCancel does (no holder, a 1 s lease),
        so a rolling restart has no leaderless lease duration. Best effort: the lease then
        expires as usual."""
        try:
            async with asyncio.timeout(self._lease_seconds / 3):
                lease = await self._kube.get(Lease, self._name, namespace=self._namespace)
                spec = lease.spec or LeaseSpec()
                if spec.holderIdentity != self.identity:
                    return
                spec.holderIdentity = None
                spec.leaseDurationSeconds = 1
                spec.renewTime = datetime.now(UTC)
                await self._kube.replace(lease)  # resourceVersion: never over a new holder's
            log.info("leader.released", identity=self.identity, lease=self._name)
        except Exception as exc:
            log.warning("leader.release_failed", identity=self.identity, error=repr(exc))


def _now() -> datetime:
    return datetime.now(UTC)


def _quiet(renewed: datetime, expires: datetime) -> datetime:
    """When a holder last renewed at ``renewed`` stops acting, if it renews no more: a renew
    period (a third of its lease) before ``expires``, plus the slack."""
    return expires - (expires - renewed) / 3 + timedelta(seconds=QUIET_SLACK_SECONDS)


async def _won(write: Awaitable[object]) -> bool:
    """Whether our write of the lease went through; False when another candidate's did (409)."""
    try:
        await write
    except ApiError as exc:
        if is_conflict(exc):
            return False
        raise
    return True
