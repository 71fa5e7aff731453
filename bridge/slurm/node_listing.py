"""Slurm's nodes as last read: one copy that node sync reads again every round and the
submit's check of a heterogeneous job reads (placement/hetfit.py).

Listing every node is the bridge's costliest steady call at a site (1,024 nodes: 0.4-0.5 s of
slurmrestd per listing, B6), while nodes change rarely.  So a round asks slurmctld whether any
node changed since the table held was read; where slurmrestd answers that (26.05: HTTP 304
when none did) an unchanged table costs a short answer.  A listing in full at least every
``max_age`` seconds bounds what a clock stepped back on slurmctld's host could hide.
"""

import time
from typing import Protocol

from bridge.slurm.types import NodeTable, SlurmNode

LISTING_MAX_AGE_SECONDS = 60.0


class NodeTables(Protocol):
    async def node_table(self) -> NodeTable: ...
    async def node_table_since(self, read_at: int) -> NodeTable | None: ...


class SlurmNodeListing:
    def __init__(self, slurm: NodeTables, *, max_age: float = LISTING_MAX_AGE_SECONDS) -> None:
        self._slurm = slurm
        self._max_age = max_age
        self._table: NodeTable | None = None
        self._checked_at = 0.0  # monotonic: when the table was last found current
        self._full_at = 0.0  # monotonic: when it was last read in full

    async def refresh(self) -> tuple[SlurmNode, ...]:
        """Slurm's nodes now: the table held if slurmctld says no node changed since it was
        read, else read again in full."""
        now = time.monotonic()
        table = self._table
        if table is None or table.read_at is None or now - self._full_at > self._max_age:
            fresh: NodeTable | None = await self._slurm.node_table()
        else:
            fresh = await self._slurm.node_table_since(table.read_at)
        if fresh is not None:
            self._table, self._full_at = fresh, now
        self._checked_at = now
        assert self._table is not None
        return self._table.nodes

    async def nodes(self) -> tuple[SlurmNode, ...]:
        """The table held, read again only when older than ``max_age`` (node sync keeps it
        current while the leader runs)."""
        if self._table is None or time.monotonic() - self._checked_at > self._max_age:
            return await self.refresh()
        return self._table.nodes
