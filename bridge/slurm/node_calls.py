"""Slurm's nodes through slurmrestd: the table read (whole, or only if changed), drains and
resumes, dynamic nodes added and deleted.  Part of ``SlurmClient`` (client.py)."""

import structlog

from bridge.slurm import convert, negotiate
from bridge.slurm.errors import SlurmRejected, SlurmUnsupported
from bridge.slurm.rest import SlurmRest, Unchanged
from bridge.slurm.types import NodeTable, SlurmNode
from bridge.slurm.wire.base import Envelope, NodesResponse, NodeUpdate

log = structlog.get_logger(__name__)

NEW_NODE_SINCE = "v0.0.44"  # POST /new/node/: Slurm 25.11


class NodeCalls:
    rest: SlurmRest
    _node_changes = True  # slurmrestd answers "changed since?" of nodes (until it does not)

    async def list_nodes(self) -> list[SlurmNode]:
        return list((await self.node_table()).nodes)

    async def node_table(self) -> NodeTable:
        return convert.node_table(
            await self.rest.call("GET", "/nodes/", "list_nodes", NodesResponse))

    async def node_table_since(self, read_at: int) -> NodeTable | None:
        """None if no node changed since the table read at ``read_at`` (slurmctld's clock);
        else the table now.  Asked from the second before: a change in the same second as
        that answer may have come after it.  A slurmrestd that cannot answer the question
        (24.11: HTTP 500 "Unable to query partitions" while partitions are unchanged; v0.0.41:
        the time refused) is asked in full then, and from then on; so is one that answers
        with no node at all where the full listing has some (an "unchanged" said that way
        would read as every node gone)."""
        if not self._node_changes:
            return await self.node_table()
        try:
            resp = await self.rest.call("GET", "/nodes/", "list_nodes", NodesResponse,
                                        query=(("update_time", str(read_at - 1)),))
        except Unchanged:
            return None
        except SlurmRejected as exc:
            return await self._unanswered(str(exc))
        if not resp.nodes:
            return await self._unanswered("an empty answer")  # empty indeed: the same table
        return convert.node_table(resp)

    async def _unanswered(self, why: str) -> NodeTable:
        """The table in full; "changed since?" is asked no more if it has nodes (an outage
        raises here, and the question is asked again next time)."""
        table = await self.node_table()
        if table.nodes:
            self._node_changes = False
            log.info("slurm.node_changes_unanswered", answer=why,
                     hint="every node sync round lists Slurm's nodes in full")
        return table

    async def drain(self, node: str, reason: str) -> None:
        await self._update_node(node, NodeUpdate(state=["DRAIN"], reason=reason))

    async def resume(self, node: str) -> None:
        await self._update_node(node, NodeUpdate(state=["RESUME"]))

    async def add_node(self, node_conf: str) -> None:
        """Create a dynamic node from a slurm.conf ``NodeName=`` line (needs MaxNodeCount)."""
        version = await self.rest.connect()
        if not negotiate.at_least(version, NEW_NODE_SINCE):
            raise SlurmUnsupported(
                f"slurmrestd speaks data parser {version} at most, without POST /new/node/: "
                f"registering a node needs Slurm 25.11+ ({NEW_NODE_SINCE}); an admin runs "
                f"`scontrol create {node_conf}` instead"
            )
        await self.rest.call("POST", "/new/node/", "add_node", Envelope,
                             body={"node_conf": node_conf}, idempotent=False)
        log.info("slurm.node_added", node_conf=node_conf)

    async def delete_node(self, node: str) -> None:
        await self.rest.call("DELETE", f"/node/{node}", "delete_node", Envelope)
        log.info("slurm.node_deleted", node=node)

    async def _update_node(self, node: str, update: NodeUpdate) -> None:
        await self.rest.call(
            "POST", f"/node/{node}", "update_node", Envelope,
            body=update.model_dump(exclude_none=True),
        )
        log.info("slurm.node_updated", node=node, state=update.state, reason=update.reason)
