"""Every Kubernetes Node, kept current by one watch per replica, and the Slurm node of each.

Which Slurm node a Node is rests only on what its own kubelet cannot write (NodeRestriction):
the label ``node-restriction.kubernetes.io/slurmbridge-slurm-node=<name>`` an admin sets,
else the Node's name (a kubelet's credentials name its one Node).  The ``slurmbridge.io/``
labels an older bridge read there are not (node sync tells the Node).  Two Nodes claiming
one Slurm node are a contest: neither is that node until one claim is left, so no Node
takes another's pods by writing last.  Placement reads the names, node sync the health and
taints, from a ``NodeView`` of each Node: no listing per round.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lightkube.resources.core_v1 import Node

from bridge import keys
from bridge.jobs.quantity import parse_quantity
from bridge.kube.watchcache import WatchCache, resource_version

# A taint as the apiserver holds it: key, value ("" when none), effect, timeAdded or None.
Taint = tuple[str, str, str, str | None]


@dataclass(frozen=True, slots=True)
class Allocatable:
    """What a Node offers pods (``status.allocatable``), as Slurm counts it."""

    cpus: int
    memory_mb: int
    gpus: int


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    resource_version: int
    slurm_label: str  # node-restriction.kubernetes.io/slurmbridge-slurm-node ("" when absent)
    unschedulable: bool  # cordoned
    ready: bool  # its Ready condition is True
    taints: tuple[Taint, ...]
    slurm_condition: tuple[str, str] | None  # SlurmNodeAvailable's (status, message)
    topology: tuple[tuple[str, str], ...] = ()  # its slurmbridge.io/topology-* labels, sorted
    external: Allocatable | None = None  # labelled keys.EXTERNAL_NODE=true: its size
    # The kubelet-writable labels it carries that would say otherwise, (key, value): not read.
    ignored_labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return self.name

    @property
    def slurm_name(self) -> str:
        return self.slurm_label or self.name


def node_view(node: Node) -> NodeView | None:
    meta, spec, status = node.metadata, node.spec, node.status
    if meta is None or not meta.name:
        return None
    conditions = {c.type: c for c in (status.conditions if status else None) or []}
    ready = conditions.get("Ready")
    slurm = conditions.get(keys.NODE_CONDITION_SLURM)
    labels = meta.labels or {}
    slurm_label = labels.get(keys.NODE_SLURM_NODE, "")
    external = labels.get(keys.EXTERNAL_NODE, "").lower() == "true"
    return NodeView(
        name=meta.name,
        resource_version=resource_version(node),
        slurm_label=slurm_label,
        unschedulable=bool(spec and spec.unschedulable),
        ready=ready is not None and ready.status == "True",
        taints=tuple(
            (t.key, t.value or "", t.effect,
             t.timeAdded.strftime("%Y-%m-%dT%H:%M:%SZ") if t.timeAdded else None)
            for t in (spec.taints if spec else None) or []
        ),
        slurm_condition=(slurm.status, slurm.message or "") if slurm else None,
        topology=tuple(sorted((k, v) for k, v in labels.items()
                              if k.startswith(keys.TOPOLOGY_LABEL_PREFIX))),
        external=allocatable(status.allocatable if status else None) if external else None,
        ignored_labels=_ignored(labels, slurm_label or meta.name, external),
    )


def _ignored(labels: dict[str, str], slurm_name: str,
             external: bool) -> tuple[tuple[str, str], ...]:
    """The kubelet-writable labels saying otherwise than the ones the bridge reads."""
    legacy_node, legacy_external = keys.KUBELET_WRITABLE_NODE_LABELS
    differs = {
        legacy_node: labels.get(legacy_node, slurm_name) != slurm_name,
        legacy_external: (labels.get(legacy_external, "").lower() == "true") != external,
    }
    return tuple((key, labels[key]) for key, other in differs.items() if other and key in labels)


def allocatable(values: dict[str, str] | None) -> Allocatable:
    """Whole CPUs and MiB rounded down (Slurm must not promise more than the Node has); a
    quantity that does not parse counts as none."""
    def amount(key: str, unit: int) -> int:
        try:
            return int(parse_quantity((values or {}).get(key, "0")) // unit)
        except ValueError:
            return 0

    return Allocatable(amount("cpu", 1), amount("memory", 2**20), amount(keys.GPU_RESOURCE, 1))


class ContestedSlurmNode(Exception):
    """Several Nodes claim one Slurm node: none of them is it until one claim is left."""


def claimants(views: Iterable[NodeView]) -> dict[str, list[NodeView]]:
    """Slurm node → the Nodes claiming it (by label or by name), in name order; more than
    one is a contest."""
    out: dict[str, list[NodeView]] = {}
    for view in sorted(views, key=lambda v: v.name):
        out.setdefault(view.slurm_name, []).append(view)
    return out


def contest_message(slurm_node: str, nodes: Iterable[str]) -> str:
    return (f"Slurm node {slurm_node} is claimed by Nodes {', '.join(sorted(nodes))} (the "
            f"label {keys.NODE_SLURM_NODE}, or a Node's own name): the bridge uses none of "
            "them for it until an admin removes the label from all but the right one")


class NodeCache(WatchCache[NodeView]):
    resource = Node
    namespaced = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._claimants: dict[str, set[str]] = {}  # Slurm node → the Nodes claiming it

    def view(self, obj: Any) -> NodeView | None:
        return node_view(obj)

    def slurm_name(self, kube_node: str) -> str:
        view = self.get(kube_node)
        return view.slurm_name if view else kube_node

    def kube_name(self, slurm_node: str) -> str:
        """The Node that is ``slurm_node`` (the same name when none claims it); raises
        ContestedSlurmNode when several do."""
        nodes = self._claimants.get(slurm_node)
        if not nodes:
            return slurm_node
        if len(nodes) > 1:
            raise ContestedSlurmNode(contest_message(slurm_node, nodes))
        return next(iter(nodes))

    def replaced(self, items: dict[str, NodeView]) -> None:
        super().replaced(items)
        self._claimants = {name: {v.name for v in views}
                        for name, views in claimants(items.values()).items()}

    def stored(self, view: NodeView) -> None:
        self.removed(view)
        super().stored(view)
        self._claimants.setdefault(view.slurm_name, set()).add(view.name)

    def removed(self, view: NodeView) -> None:
        old = self.get(view.name)
        super().removed(view)
        if old is not None:
            nodes = self._claimants.get(old.slurm_name, set())
            nodes.discard(old.name)
            if not nodes:
                self._claimants.pop(old.slurm_name, None)
