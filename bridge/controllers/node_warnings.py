"""What the bridge will not read on Nodes, told on them: several Nodes claiming one Slurm
node (none of them is used for it, bridge/kube/nodecache.py), and the kubelet-writable labels
an older bridge read that now say otherwise than the admin's.

Each new state is told once, as a Warning event on each Node concerned and a structured log
(again after a restart): node sync calls this every round with each Slurm node's claimants.
"""

import structlog

from bridge import keys
from bridge.kube import writes
from bridge.kube.nodecache import NodeView, contest_message
from bridge.ports import KubeCreateEvent

log = structlog.get_logger(__name__)

Labels = tuple[tuple[str, str], ...]


def ignored_message(labels: Labels) -> str:
    said = ", ".join(f"{key}={value}" for key, value in labels)
    return (f"label {said} ignored: a Node's kubelet may set it on its own Node; the bridge "
            f"reads only {keys.NODE_SLURM_NODE} and {keys.EXTERNAL_NODE}, which only an admin "
            "can set (docs/install.md, Managed nodes)")


class NodeWarnings:
    def __init__(self, kube: KubeCreateEvent) -> None:
        self._kube = kube
        self._contests: dict[str, tuple[str, ...]] = {}  # Slurm node → the Nodes told
        self._ignored: dict[str, Labels] = {}  # Node → its ignored labels told

    async def tell(self, claimants: dict[str, list[NodeView]]) -> None:
        """``claimants``: Slurm node → the Nodes claiming it (nodecache.claimants)."""
        contests = {slurm: tuple(v.name for v in views)
                    for slurm, views in claimants.items() if len(views) > 1}
        for slurm, nodes in contests.items():
            if self._contests.get(slurm) != nodes:
                await self._contested(slurm, nodes)
        for slurm in self._contests.keys() - contests.keys():
            log.info("nodesync.slurm_node_uncontested", slurm_node=slurm,
                     nodes=[v.name for v in claimants.get(slurm, [])])
        self._contests = contests
        ignored = {v.name: v.ignored_labels for views in claimants.values() for v in views
                   if v.ignored_labels}
        for node, labels in ignored.items():
            if self._ignored.get(node) != labels:
                message = ignored_message(labels)
                log.warning("nodesync.node_label_ignored", node=node, labels=dict(labels),
                            error=message)
                await writes.record_node_event(
                    self._kube, node, keys.EventReason.NODE_LABEL_IGNORED, message)
        self._ignored = ignored

    async def _contested(self, slurm_node: str, nodes: tuple[str, ...]) -> None:
        message = contest_message(slurm_node, nodes)
        log.error("nodesync.slurm_node_contested", slurm_node=slurm_node, nodes=list(nodes),
                  error=message)
        for node in nodes:
            await writes.record_node_event(
                self._kube, node, keys.EventReason.NODE_CONTESTED, message)
