"""The leader's controllers, a round every interval, acting only on a fresh view of Slurm."""

import asyncio
from collections.abc import Sequence
from typing import Protocol

import structlog

from bridge import metrics
from bridge.controllers.poller import Poller

log = structlog.get_logger(__name__)


class Controller(Protocol):
    async def reconcile_once(self) -> None: ...


async def reconcile_forever(
    poller: Poller, controllers: Sequence[tuple[str, Controller]], interval_seconds: float
) -> None:
    """Run each named controller once a round; one's failure is counted, not the others' end."""
    while True:
        if poller.healthy:  # act on nothing uncertain: Slurm's view must be fresh
            for name, step in controllers:
                try:
                    await step.reconcile_once()
                    metrics.RECONCILES.labels(name, "ok").inc()
                except Exception as exc:
                    metrics.RECONCILES.labels(name, "error").inc()
                    log.warning("controller.failed", controller=name, error=repr(exc))
        await asyncio.sleep(interval_seconds)
