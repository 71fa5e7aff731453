"""Leader election through a coordination.k8s.io Lease.

Only the holder of the lease runs the controllers (anything that acts on its
own: cancelling, evicting, draining).  Extender replicas serve filter and bind
without it.  Takeover uses the Lease's resourceVersion, so two candidates
can never both believe they lead for longer than one renew period.
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
        self._expires = None
        if not (mine or expires is None or expires < now or not spec.holderIdentity):
            self._expires = expires
            return False
        spec.renewTime = now
        spec.leaseDurationSeconds = self._lease_seconds
        if not mine:
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
        return await _won(self._kube.create(lease))

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Forever: while we hold the lease, ``lead()`` runs; it is cancelled when we lose it.
        Cancelled (the process stops), it stops ``lead()`` first, then hands the lease over."""
        task: asyncio.Task[None] | None = None
        renew = self._lease_seconds / 3
        loop = asyncio.get_running_loop()
        last_renewed = -float("inf")
        try:
            while True:
                try:
                    leading = await self.try_acquire()
                    if leading:
                        last_renewed = loop.time()
                except Exception as exc:  # apiserver away: lead on only while our lease holds
                    leading = loop.time() - last_renewed < self._lease_seconds - renew
                    log.warning("leader.renew_failed", error=repr(exc), still_leading=leading)
                metrics.LEADER.set(1 if leading else 0)
                if task is not None and task.done():  # they must never stop while we lead
                    log.error("leader.controllers_failed", identity=self.identity,
                              error=repr(task.exception()) if not task.cancelled() else None)
                    task = None
                if leading and task is None:
                    log.info("leader.acquired", identity=self.identity, lease=self._name)
                    task = asyncio.create_task(lead(), name="controllers")
                elif not leading and task is not None:
                    log.warning("leader.lost", identity=self.identity, lease=self._name)
                    await cancel_and_wait([task])  # ended before anything else is done
                    task = None
                await asyncio.sleep(self._next_try(renew))
        finally:
            metrics.LEADER.set(0)
            if task is not None:
                await cancel_and_wait([task])
                await self._release()

    def _next_try(self, renew: float) -> float:
        """A renew period, or less for a standby whose holder's lease runs out sooner: a dead
        leader's lease is taken as it expires, not up to a renew period later."""
        if self._expires is None:
            return renew
        left = (self._expires - datetime.now(UTC)).total_seconds()
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


async def _won(write: Awaitable[object]) -> bool:
    """Whether our write of the lease went through; False when another candidate's did (409)."""
    try:
        await write
    except ApiError as exc:
        if is_conflict(exc):
            return False
        raise
    return True
