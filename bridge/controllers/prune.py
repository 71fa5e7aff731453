"""Forget the pods whose jobs are long gone, so the bridge's memory stays flat."""

import asyncio

import structlog

from bridge.placement.index import JobIndex
from bridge.placement.notifier import PodNotifier
from bridge.placement.registry import PodRegistry

log = structlog.get_logger(__name__)

IDLE_OWNER_SECONDS = 600.0  # a pod not seen for this long, whose job left Slurm, is forgotten
PRUNE_SECONDS = 15.0


async def prune_forever(pods: PodRegistry, index: JobIndex, notifier: PodNotifier) -> None:
    """Every ``PRUNE_SECONDS``: the registry and the notifier drop what no job needs."""
    while True:
        await asyncio.sleep(PRUNE_SECONDS)
        forgotten = pods.prune(
            lambda owner: index.by_owner(owner) is not None, IDLE_OWNER_SECONDS
        )
        notifier.prune()
        if forgotten:
            log.info("placement.pruned", owners=forgotten)
