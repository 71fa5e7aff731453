"""Node health both ways, each side told the other's reason.

Slurm DRAIN/DOWN/FAIL → taint ``slurmbridge.io/slurm-unavailable:NoSchedule`` and
condition ``SlurmNodeAvailable=False`` carrying Slurm's reason.  A cordoned or
NotReady Kubernetes node → Slurm drain with reason ``slurmbridge: <why>`` (drains.py: a
NotReady node's names the pods that may still run there); a deleted Node's drain stays,
saying so.  The bridge only ever resumes drains whose reason carries its prefix, and only
on a Node that is back: an admin's own drain is never undone.  Nodes mapped to Slurm carry
``slurmbridge.io/managed``, and one ``slurmbridge.io/topology-<topology>=<unit>`` label per
topology unit Slurm gives their node (Slurm 25.05+); no other label is touched.  Nodes
claiming one Slurm node together are none of them managed as it, and told (node_warnings.py).
"""

import re
from typing import Any, Protocol

import structlog
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from bridge import keys, metrics
from bridge.controllers import drains
from bridge.controllers.drains import ours
from bridge.controllers.node_warnings import NodeWarnings
from bridge.kube import writes
from bridge.kube.nodecache import NodeCache, NodeView, Taint, claimants
from bridge.link.podcache import PodCache
from bridge.ports import KubeCreateEvent, KubePatch, SlurmNodes
from bridge.slurm.node_listing import NodeTables, SlurmNodeListing
from bridge.slurm.types import SlurmNode

log = structlog.get_logger(__name__)

_LABEL_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def kube_trouble(node: NodeView, running: dict[str, int], before: str) -> str | None:
    """Why Slurm should stop placing work here, or None when the node is fine.  ``running``:
    the bridge's pods on the node that may still run (pod → job id)."""
    if not node.ready:
        return drains.not_ready(running, before)
    if node.unschedulable:
        return drains.CORDONED
    return None


class NodeSyncSlurm(SlurmNodes, NodeTables, Protocol):
    async def resume(self, node: str) -> None: ...


class NodeSyncKube(KubePatch, KubeCreateEvent, Protocol):
    """Taints, labels and conditions patched; events on Nodes created."""


class NodeSync:
    def __init__(self, kube: NodeSyncKube, slurm: NodeSyncSlurm, nodes: NodeCache,
                 pods: PodCache, listing: SlurmNodeListing | None = None) -> None:
        """``listing``: Slurm's nodes as last read, shared with others (the submit's check of
        a heterogeneous job: placement/hetfit.py); read again each round."""
        self._kube = kube
        self._slurm = slurm
        self._nodes = nodes
        self._pods = pods
        self._warnings = NodeWarnings(kube)
        self._listing = listing or SlurmNodeListing(slurm)

    async def reconcile_once(self) -> None:
        slurm_nodes = {n.name: n for n in await self._listing.refresh()}
        kube_nodes = await self._nodes.current()
        claimed = claimants(kube_nodes)
        await self._warnings.tell(claimed)
        # Only a NotReady node's drain names pods: no walk over every pod on a healthy round.
        running = await self._running() if any(not n.ready for n in kube_nodes) else {}
        for name, nodes in claimed.items():
            slurm_node = slurm_nodes.get(name)
            if slurm_node is None or len(nodes) > 1:
                continue  # not a Slurm node (not ours to manage), or no one Node is it
            node = nodes[0]
            slurm_node = await self._kube_to_slurm(node, slurm_node, running.get(node.name, {}))
            await self._slurm_to_kube(node, slurm_node)
        for sn in slurm_nodes.values():  # no Node (any more): only the bridge's drains
            if sn.name not in claimed and "DRAIN" in sn.states and ours(sn.reason):
                await self._redrain(sn, drains.node_deleted(sn.reason))

    async def _running(self) -> dict[str, dict[str, int]]:
        """Kubernetes node → {pod → job id} of the bridge's pods that may still run there."""
        out: dict[str, dict[str, int]] = {}
        for pod in await self._pods.current():
            if pod.node_name and pod.job_id is not None and not pod.containers_stopped:
                out.setdefault(pod.node_name, {})[str(pod)] = pod.job_id
        return out

    async def _redrain(self, sn: SlurmNode, reason: str) -> None:
        if reason != sn.reason:
            await self._slurm.drain(sn.name, reason)
            metrics.CONTROLLER_ACTIONS.labels("drain").inc()
            log.info("nodesync.drain", node=sn.name, reason=reason)

    async def _kube_to_slurm(self, node: NodeView, sn: SlurmNode,
                             running: dict[str, int]) -> SlurmNode:
        trouble = kube_trouble(node, running, sn.reason)
        drained = "DRAIN" in sn.states
        if trouble and (not drained or (ours(sn.reason) and trouble != sn.reason)):
            await self._redrain(sn, trouble)
        elif trouble is None and drained and ours(sn.reason):
            await self._slurm.resume(sn.name)
            metrics.CONTROLLER_ACTIONS.labels("resume").inc()
        else:
            return sn
        refreshed = {n.name: n for n in await self._listing.refresh()}
        return refreshed.get(sn.name, sn)

    async def _slurm_to_kube(self, node: NodeView, sn: SlurmNode) -> None:
        unavailable = sn.unavailable
        taints = [_taint(t) for t in node.taints]
        wanted = [t for t in taints if t["key"] != keys.UNAVAILABLE_TAINT]
        if not any(t["key"] == keys.MANAGED_TAINT for t in wanted):
            wanted.append({"key": keys.MANAGED_TAINT, "effect": "NoSchedule"})
        if unavailable:
            wanted.append({"key": keys.UNAVAILABLE_TAINT, "effect": "NoSchedule",
                           "value": _taint_value(sn)})
        patch: dict[str, Any] = {"metadata": {}}
        if _taint_set(wanted) != _taint_set(taints):
            patch["spec"] = {"taints": wanted}
            metrics.CONTROLLER_ACTIONS.labels("taint").inc()
            log.info("nodesync.taints", node=node.name, unavailable=unavailable,
                     reason=sn.reason)
        if labels := topology_labels(node, sn):
            patch["metadata"]["labels"] = labels
            metrics.CONTROLLER_ACTIONS.labels("label").inc()
            log.info("nodesync.topology_labels", node=node.name, labels=labels)
        if "spec" in patch or labels:
            patch["metadata"]["resourceVersion"] = str(node.resource_version)
            await self._kube.patch(Node, node.name, patch, patch_type=PatchType.MERGE)
        await self._condition(node, sn)

    async def _condition(self, node: NodeView, sn: SlurmNode) -> None:
        status = "False" if sn.unavailable else "True"
        message = (f"Slurm node {sn.name} is {'+'.join(sorted(sn.states))}"
                   + (f": {sn.reason}" if sn.reason else ""))
        if node.slurm_condition == (status, message):
            return
        reason = keys.REASON_NODE_UNAVAILABLE if sn.unavailable else keys.REASON_NODE_AVAILABLE
        await writes.set_node_condition(self._kube, node.name, available=not sn.unavailable,
                                        reason=reason, message=message)


def topology_labels(node: NodeView, sn: SlurmNode) -> dict[str, str | None]:
    """The merge patch that makes the Node's ``slurmbridge.io/topology-*`` labels Slurm's
    units ({} when they are); a unit no label can carry is left out (logged)."""
    wanted: dict[str, str | None] = {}
    for topology, unit in sn.topology:
        key = keys.TOPOLOGY_LABEL_PREFIX + topology
        if _LABEL_PART.fullmatch(key.split("/", 1)[1]) and _LABEL_PART.fullmatch(unit):
            wanted[key] = unit
        else:
            log.warning("nodesync.topology_unlabelable", node=node.name, topology=topology,
                        unit=unit, hint="a label name and value: 63 characters of [-_.a-zA-Z0-9]")
    if sorted(wanted.items()) == sorted(node.topology):
        return {}
    return wanted | {key: None for key, _ in node.topology if key not in wanted}


def _taint(taint: Taint) -> dict[str, Any]:
    key, value, effect, added = taint
    return {"key": key, "effect": effect} | ({"value": value} if value else {}) | (
        {"timeAdded": added} if added else {})


def _taint_value(sn: SlurmNode) -> str:
    """Taint values are label-like (63 chars, alnum -_.): the gist of Slurm's state."""
    state = next((s for s in ("DOWN", "FAIL", "DRAIN") if s in sn.states), "UNAVAILABLE")
    return state.lower()


def _taint_set(taints: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(t["key"], t.get("value") or "", t["effect"]) for t in taints}
