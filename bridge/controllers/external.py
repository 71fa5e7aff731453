"""Kubernetes Nodes without slurmd that Slurm schedules all the same: EXTERNAL Slurm nodes.

A Node labelled ``node-restriction.kubernetes.io/slurmbridge-external-node=true`` (a label its
kubelet cannot set on itself) is registered in Slurm (``POST /new/node/``, Slurm 25.11+,
slurm.conf ``MaxNodeCount``) under its Slurm name, with its allocatable CPUs, memory and GPUs
and the feature ``controllers.external_node_feature`` (a NodeSet by that feature puts such
nodes in partitions), ``State=EXTERNAL``: slurmctld expects no slurmd there, and the bridge's
placeholders (EXTERNAL_JOB since v0.0.43) run nothing. From then on node sync treats it as any
other node (drained on cordon or NotReady, tainted when Slurm takes it out). A Node whose size
changed is registered again once no job holds it. When the Node is deleted, its Slurm node is
drained and then deleted once its jobs are gone. Only nodes carrying the feature are ever
deleted: an admin's own dynamic nodes are left alone. What Slurm will not take (a Slurm before
25.11, GPUs without a gres.conf line) is said on the Node's ``SlurmNodeAvailable`` condition,
naming what to do. A Slurm name several Nodes claim is registered for none of them (node sync
tells them).
"""

import re
from typing import Protocol

import structlog

from bridge import keys, metrics
from bridge.controllers import drains
from bridge.kube import writes
from bridge.kube.nodecache import Allocatable, NodeCache, NodeView, claimants
from bridge.ports import KubePatch, SlurmNodes
from bridge.slurm.errors import SlurmRejected, SlurmUnsupported
from bridge.slurm.node_listing import NodeTables, SlurmNodeListing
from bridge.slurm.types import SlurmNode

log = structlog.get_logger(__name__)

_BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
_GPUS = re.compile(r"(?:^|,)gpu(?::[^:,]+)?:(\d+)")


def node_conf(name: str, size: Allocatable, feature: str) -> str:
    """The slurm.conf line Slurm creates the node from."""
    gres = f" Gres=gpu:{size.gpus}" if size.gpus else ""
    return (f"NodeName={name} CPUs={max(size.cpus, 1)} RealMemory={size.memory_mb}{gres} "
            f"Features={feature} State=EXTERNAL")


def slurm_size(node: SlurmNode) -> Allocatable:
    return Allocatable(node.cpus, node.memory_mb, sum(int(n) for n in _GPUS.findall(node.gres)))


def _refusal_hint(name: str, size: Allocatable, error: str) -> str:
    low = error.lower()
    if size.gpus and ("file" in low or "invalid argument" in low):
        return (f"{error}; Slurm takes GPUs only with a gres.conf line naming the node's "
                f"device files, e.g. NodeName={name} Name=gpu "
                f"File=/dev/nvidia[0-{size.gpus - 1}], then scontrol reconfigure")
    return f"{error}; slurm.conf needs MaxNodeCount for dynamic nodes"


class ExternalSlurm(SlurmNodes, NodeTables, Protocol):
    async def add_node(self, node_conf: str) -> None: ...
    async def delete_node(self, node: str) -> None: ...


class ExternalNodes:
    def __init__(self, kube: KubePatch, slurm: ExternalSlurm, nodes: NodeCache,
                 feature: str, listing: SlurmNodeListing | None = None) -> None:
        """``listing``: Slurm's nodes as last read, which node sync shares."""
        self._kube = kube
        self._slurm = slurm
        self._listing = listing or SlurmNodeListing(slurm)
        self._nodes = nodes
        self._feature = feature
        self._said: dict[str, str] = {}  # Node → the refusal last written on it
        self._known: set[str] | None = None  # Slurm nodes of ours last seen; None: not looked

    async def reconcile_once(self) -> None:
        kube_nodes = await self._nodes.current()
        claimed = claimants(kube_nodes)
        external = {name: nodes[0] for name, nodes in claimed.items()
                    if len(nodes) == 1 and nodes[0].external is not None}
        if self._known is not None and not self._known and not external:
            return  # nothing registered, nothing to register: no listing per round
        slurm_nodes = {n.name: n for n in await self._listing.refresh()}
        self._known = {name for name, sn in slurm_nodes.items() if self._ours(sn)}
        for name, node in external.items():
            await self._register(name, node, slurm_nodes.get(name))
        for sn in slurm_nodes.values():
            if sn.name not in claimed and self._ours(sn):
                await self._retire(sn)
        self._said = {k: v for k, v in self._said.items() if k in {n.name for n in kube_nodes}}

    def _ours(self, sn: SlurmNode) -> bool:
        return "EXTERNAL" in sn.states and self._feature in sn.features

    async def _register(self, name: str, node: NodeView, sn: SlurmNode | None) -> None:
        size = node.external
        assert size is not None
        if sn is not None:
            if not self._ours(sn) or slurm_size(sn) == size or sn.states & _BUSY:
                return  # registered (or an admin's node of that name): node sync's from here
            await self._slurm.delete_node(name)  # resized: registered again below
            log.info("external.resized", node=node.name, slurm=slurm_size(sn), kube=size)
        conf = node_conf(name, size, self._feature)
        try:
            await self._slurm.add_node(conf)
        except SlurmUnsupported as exc:
            await self._say(node, str(exc))
            return
        except SlurmRejected as exc:
            await self._say(node, _refusal_hint(name, size, str(exc)))
            return
        self._said.pop(node.name, None)
        if self._known is not None:
            self._known.add(name)
        metrics.CONTROLLER_ACTIONS.labels("register").inc()
        log.info("external.registered", node=node.name, slurm_node=name, node_conf=conf)

    async def _retire(self, sn: SlurmNode) -> None:
        """The Node is gone: no new job there, and the node itself once its jobs are."""
        if sn.states & _BUSY:
            reason = drains.node_deleted(sn.reason)
            if "DRAIN" not in sn.states or (drains.ours(sn.reason) and reason != sn.reason):
                await self._slurm.drain(sn.name, reason)
                log.info("external.drained", slurm_node=sn.name, reason=reason)
            return
        await self._slurm.delete_node(sn.name)
        metrics.CONTROLLER_ACTIONS.labels("deregister").inc()
        log.info("external.deleted", slurm_node=sn.name)

    async def _say(self, node: NodeView, message: str) -> None:
        """Why Slurm has no node for this Node, on the Node (once per new message)."""
        if self._said.get(node.name) == message:
            return
        self._said[node.name] = message
        log.error("external.not_registered", node=node.name, error=message)
        await writes.set_node_condition(
            self._kube, node.name, available=False, reason=keys.REASON_EXTERNAL_NOT_REGISTERED,
            message=f"not registered in Slurm as an external node: {message}")
