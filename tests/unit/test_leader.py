"""Leader election over a Lease (LeaderElector), against the in-memory fake apiserver."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from bridge.controllers.leader import LeaderElector
from slurmbridge_devkit.fake_kube import FakeKube

NS = "slurmbridge"


def _elector(kube: FakeKube, identity: str, lease_seconds: int = 15) -> LeaderElector:
    return LeaderElector(kube, namespace=NS, identity=identity, lease_seconds=lease_seconds)


async def _hold(kube: FakeKube, holder: str, *, renewed: datetime, seconds: int = 60) -> None:
    """Another replica's lease, as it would have written it."""
    lease = await kube.get(Lease, "slurmbridge-controllers", namespace=NS)
    lease.spec = LeaseSpec(holderIdentity=holder, renewTime=renewed, acquireTime=renewed,
                           leaseDurationSeconds=seconds)
    await kube.replace(lease)


class Controllers:
    """What the elector runs while it leads; records when it starts and stops."""

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.stopped = asyncio.Event()

    async def __call__(self, quiet_since: datetime) -> None:
        self.quiet_since = quiet_since
        self.running.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped.set()


async def test_of_two_replicas_exactly_one_leads_and_keeps_leading() -> None:
    kube = FakeKube()
    a, b = _elector(kube, "a"), _elector(kube, "b")
    assert await a.try_acquire()
    assert not await b.try_acquire()
    assert await a.try_acquire()  # renewing
    assert not await b.try_acquire()


async def test_a_lease_its_holder_stopped_renewing_is_taken_over() -> None:
    kube = FakeKube()
    a, b = _elector(kube, "a"), _elector(kube, "b")
    assert await a.try_acquire()
    await _hold(kube, "a", renewed=datetime.now(UTC) - timedelta(seconds=61))  # a died
    assert await b.try_acquire()
    assert not await a.try_acquire()  # back, too late: b leads


async def test_racing_takers_of_one_lease_version_cannot_both_win() -> None:
    kube = FakeKube()
    kube.add(Lease(metadata=ObjectMeta(name="slurmbridge-controllers", namespace=NS),
                   spec=LeaseSpec()))
    outcomes = await asyncio.gather(*(_elector(kube, f"r{i}").try_acquire() for i in range(5)))
    assert outcomes.count(True) == 1


@contextlib.asynccontextmanager
async def leading(kube: FakeKube, lease_seconds: int) -> AsyncIterator[Controllers]:
    """Replica a's elector running (stopped on exit), once its controllers have started."""
    controllers = Controllers()
    running = asyncio.create_task(_elector(kube, "a", lease_seconds).run(controllers))
    try:
        await asyncio.wait_for(controllers.running.wait(), 2)
        yield controllers
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_a_lost_lease_stops_the_controllers() -> None:
    kube = FakeKube()
    async with leading(kube, lease_seconds=1) as controllers:
        await _hold(kube, "b", renewed=datetime.now(UTC))  # b took it (e.g. a was paused)
        await asyncio.wait_for(controllers.stopped.wait(), 2)
    assert not await _elector(kube, "a").try_acquire()


async def test_a_standby_takes_a_dead_leaders_lease_as_it_expires_not_a_renew_later() -> None:
    """B6's failover (issue 42): a standby tried every lease/3 (5 s), so it took a SIGKILLed
    leader's lease up to 5 s after it expired. It tries again when the lease runs out."""
    kube = FakeKube()
    await _elector(kube, "a").try_acquire()
    await _hold(kube, "a", renewed=datetime.now(UTC) - timedelta(seconds=14.4), seconds=15)
    controllers = Controllers()
    loop = asyncio.get_running_loop()
    started = loop.time()
    standby = asyncio.create_task(_elector(kube, "b", lease_seconds=15).run(controllers))
    try:
        await asyncio.wait_for(controllers.running.wait(), 2)  # renew period: 5 s
        assert 0.5 <= loop.time() - started < 1.5
    finally:
        standby.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await standby


class CountingKube(FakeKube):
    """Counts the Lease reads."""

    reads = 0

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Any:
        self.reads += 1
        return await super().get(res, name, namespace=namespace)


async def test_a_standby_beside_a_live_leader_reads_the_lease_once_a_renew_period() -> None:
    kube = CountingKube()
    async with leading(kube, lease_seconds=3):  # renewed every second
        standby = asyncio.create_task(_elector(kube, "b", lease_seconds=3).run(Controllers()))
        await asyncio.sleep(2.5)
        standby.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await standby
    assert kube.reads <= 2 * 4  # each at 0, 1, 2 s (and the leader's release)


async def test_controllers_stop_within_the_lease_when_the_apiserver_is_away() -> None:
    """Cut off, the leader cannot see a taker: it stops before its lease could expire."""
    kube = FakeKube()
    async with leading(kube, lease_seconds=3) as controllers:
        kube.down = True
        loop = asyncio.get_running_loop()
        away = loop.time()
        await asyncio.wait_for(controllers.stopped.wait(), 5)
        assert loop.time() - away < 3  # before anyone may take the lease over


async def test_a_leader_that_stops_hands_the_lease_over_at_once() -> None:
    """A rolling restart (SIGTERM) used to leave the lease held for its full duration: for
    15 s nobody ran the controllers, and jobs submitted then were not cancelled with their
    pods (CI's kind stage). A leader that stops stops its controllers, then releases."""
    kube = FakeKube()
    async with leading(kube, lease_seconds=15) as controllers:
        pass
    assert controllers.stopped.is_set()
    assert await _elector(kube, "b").try_acquire()


async def test_a_stopping_replica_leaves_a_lease_it_does_not_hold_alone() -> None:
    kube = FakeKube()
    async with leading(kube, lease_seconds=1) as controllers:
        await _hold(kube, "b", renewed=datetime.now(UTC))
        await asyncio.wait_for(controllers.stopped.wait(), 2)
    assert not await _elector(kube, "c").try_acquire()  # still b's


async def test_controllers_that_fail_are_started_again_while_the_lease_is_held() -> None:
    """A leader whose controllers died kept the lease and ran nothing (no cancels, no
    evictions) until it lost it: they are logged and started again at the next renew."""
    kube = FakeKube()
    starts = 0
    again = asyncio.Event()

    async def controllers(_: datetime) -> None:
        nonlocal starts
        starts += 1
        if starts == 1:
            raise RuntimeError("a bug in a controller")
        again.set()
        await asyncio.Event().wait()

    running = asyncio.create_task(_elector(kube, "a", lease_seconds=1).run(controllers))
    try:
        await asyncio.wait_for(again.wait(), 3)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert starts == 2


async def test_a_leader_whose_controllers_swallow_a_cancellation_still_stops_and_hands_over(
) -> None:
    """A library in the controllers' path that turns the cancellation into an error their
    retry loop absorbs kept a stopped extender leading for ever (its SIGTERM done, nodesync
    still calling a slurmrestd long gone): cancelled until they end, then the Lease goes."""
    kube = FakeKube()
    swallowed = asyncio.Event()

    async def controllers(_: datetime) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        swallowed.set()
        while True:  # carries on, as a retry loop would
            await asyncio.sleep(0.05)

    elector = asyncio.create_task(_elector(kube, "a").run(controllers))
    await asyncio.sleep(0.2)
    elector.cancel()
    await asyncio.wait_for(asyncio.gather(elector, return_exceptions=True), 10)
    assert swallowed.is_set()
    assert await _elector(kube, "b").try_acquire(), "the Lease was not handed over"


class HangingKube(FakeKube):
    """An apiserver that accepts the connection and never answers (``hang = True``)."""

    hang = False

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Any:
        if self.hang:
            await asyncio.Event().wait()
        return await super().get(res, name, namespace=namespace)


async def test_a_leader_whose_renew_hangs_stops_before_its_lease_could_expire() -> None:
    """A renew that never answered kept the leader leading while it waited: its Lease expired
    and a standby took it, two leaders submitting side by side. The leader stops by its lease
    minus a renew period, counted from the start of the last renew that went through."""
    kube = HangingKube()
    async with leading(kube, lease_seconds=3) as controllers:
        kube.hang = True
        loop = asyncio.get_running_loop()
        away = loop.time()
        await asyncio.wait_for(controllers.stopped.wait(), 5)
        assert loop.time() - away < 3  # before anyone may take the lease over


async def test_a_standby_asks_for_its_listing_when_a_silent_holder_goes_quiet_not_at_expiry(
) -> None:
    """B6's failover (issue 42): the new leader's listing of Slurm (3 s at 20,000 jobs) began
    only once it held the lease. A holder that renews no more stops acting a renew period
    before its lease expires: the standby is told then, once, and leads from that moment."""
    kube = FakeKube()
    await _elector(kube, "a").try_acquire()
    renewed = datetime.now(UTC) - timedelta(seconds=11.5)  # quiet at +12 s, expiring at +15 s
    await _hold(kube, "a", renewed=renewed, seconds=15)
    controllers, told = Controllers(), []
    loop = asyncio.get_running_loop()
    started = loop.time()
    standby = asyncio.create_task(_elector(kube, "b", lease_seconds=15).run(
        controllers, quiet=lambda: told.append(loop.time() - started)))
    try:
        await asyncio.wait_for(controllers.running.wait(), 6)
        assert len(told) == 1 and 0.4 <= told[0] < 1.5  # at the holder's quiet moment
        assert 3.4 <= loop.time() - started < 4.5  # the lease taken as it expired
        assert controllers.quiet_since == renewed + timedelta(seconds=12)
    finally:
        standby.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await standby


async def test_a_standby_beside_a_renewing_leader_is_never_told_it_went_quiet() -> None:
    kube = FakeKube()
    told = []
    async with leading(kube, lease_seconds=3):  # renewed every second
        standby = asyncio.create_task(_elector(kube, "b", lease_seconds=3).run(
            Controllers(), quiet=lambda: told.append(1)))
        await asyncio.sleep(3.5)
        standby.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await standby
    assert told == []


async def test_a_lease_found_expired_is_led_from_the_takeover_not_its_renew_time() -> None:
    """A Lease whose renew time was set far back (by hand, or a holder that died long ago)
    must not let a new leader count an old listing of Slurm as fresh: only a holder it
    watched go quiet is trusted, any other term counts from the takeover."""
    kube = FakeKube()
    await _elector(kube, "a").try_acquire()
    await _hold(kube, "a", renewed=datetime.now(UTC) - timedelta(hours=1), seconds=15)
    before = datetime.now(UTC)
    b = _elector(kube, "b")
    assert await b.try_acquire()
    assert b.quiet_since >= before
