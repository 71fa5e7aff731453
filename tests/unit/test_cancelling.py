"""A task that swallows its cancellation still ends when the process stops."""

import asyncio
import contextlib
from pathlib import Path

import pytest
from lightkube.resources.coordination_v1 import Lease
from structlog.testing import capture_logs

from bridge.cancelling import cancel_and_wait
from bridge.controllers.leader import LeaderElector
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes


async def _swallows_one(swallowed: asyncio.Event) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    swallowed.set()
    while True:  # carries on, as a retry loop around a library's error would
        await asyncio.sleep(0.01)


async def test_a_task_that_swallows_its_cancellation_is_cancelled_again_and_told() -> None:
    swallowed = asyncio.Event()
    stubborn = asyncio.create_task(_swallows_one(swallowed), name="stubborn")
    polite = asyncio.create_task(asyncio.Event().wait(), name="polite")
    await asyncio.sleep(0)
    with capture_logs() as logs:
        await asyncio.wait_for(cancel_and_wait([stubborn, polite], patience=0.1), 5)
    assert swallowed.is_set() and stubborn.cancelled() and polite.cancelled()
    [told] = [e for e in logs if e["event"] == "stop.task_outlived_cancel"]
    assert told["tasks"] == ["stubborn"]
    assert "_swallows_one" in told["stacks"]["stubborn"]


async def test_a_task_that_failed_before_is_waited_for_without_raising() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await cancel_and_wait([failed])
    with pytest.raises(ValueError):
        failed.result()


async def test_a_stop_cancelled_meanwhile_still_ends_what_it_stops_then_says_so() -> None:
    """A stop nested in a stop (the leader's term inside the bridge's): the outer one cancels
    the inner wait, which finishes its own tasks before it gives way."""
    swallowed = asyncio.Event()
    child = asyncio.create_task(_swallows_one(swallowed))
    await asyncio.sleep(0)
    inner = asyncio.create_task(cancel_and_wait([child], patience=0.2))
    await asyncio.sleep(0.05)
    inner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(inner, 5)
    assert child.done()


async def test_a_bridge_whose_controller_swallows_a_cancellation_stops_and_hands_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI: an extender told SIGTERM finished uvicorn's shutdown, yet its nodesync called a
    slurmrestd long gone for minutes and its Lease stayed held, so every later test ran
    with no leader.  Its stop now ends every task of the term it led, then hands over."""
    kube = FakeKube()
    bridge = bridge_over_fakes(tmp_path, FakeSlurm(), kube)
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        await _swallows_one(swallowed)

    monkeypatch.setattr(bridge.nodesync, "reconcile_once", stubborn)
    await bridge.start()
    lease = bridge.settings.controllers
    while bridge.elector.identity != await _holder(kube, lease.lease_name, lease.lease_namespace):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the reconcile round is in nodesync by now
    await asyncio.wait_for(bridge.stop(), 20)
    assert swallowed.is_set()
    assert await LeaderElector(kube, namespace=lease.lease_namespace, name=lease.lease_name,
                               identity="next").try_acquire(), "the Lease was not handed over"


async def _holder(kube: FakeKube, name: str, namespace: str) -> str | None:
    with contextlib.suppress(Exception):
        lease = await kube.get(Lease, name, namespace=namespace)
        return lease.spec.holderIdentity if lease.spec else None
    return None
