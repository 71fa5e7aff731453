"""Forget the pods whose jobs are long gone, so the bridge's memory stays flat."""

import asyncio

import structlog

from bridge.placement.index import JobIndex
from bridge.placement.notifier import PodNotifier
from bridge.placement.registry import SeenPods
from bridge.placement.seats import SeatTable

log = structlog.get_logger(__name__)

IDLE_OWNER_SECONDS = 600.0  # a pod not seen for this long, whose job left Slurm, is forgotten
PRUNE_SECONDS = 15.0


async def prune_forever(
    seen: SeenPods, index: JobIndex, notifier: PodNotifier, seats: SeatTable
) -> None:
    """Every ``PRUNE_SECONDS``: the pods seen, the notifier and the seats drop what no job
    needs."""
    while True:
        await asyncio.sleep(PRUNE_SECONDS)
        forgotten = seen.prune(
            lambda owner: index.by_owner(owner) is not None, IDLE_OWNER_SECONDS
        )
        notifier.prune()
        seats.prune(lambda job_id: index.by_id(job_id) is not None)
        if forgotten:
            log.info("placement.pruned", owners=forgotten)
