"""Every Kubernetes Node, kept current by one watch per replica, and the Slurm node of each.

A Node labelled ``slurmbridge.io/slurm-node=<name>`` maps to that Slurm node; any other
Node maps to the Slurm node of the same name.  Placement reads the names, node sync the
health and taints, from a ``NodeView`` of each Node: no listing per round.
"""

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
    slurm_label: str  # slurmbridge.io/slurm-node ("" when absent)
    unschedulable: bool  # cordoned
    ready: bool  # its Ready condition is True
    taints: tuple[Taint, ...]
    slurm_condition: tuple[str, str] | None  # SlurmNodeAvailable's (status, message)
    topology: tuple[tuple[str, str], ...] = ()  # its slurmbridge.io/topology-* labels, sorted
    external: Allocatable | None = None  # labelled slurmbridge.io/external-node=true: its size

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
    return NodeView(
        name=meta.name,
        resource_version=resource_version(node),
        slurm_label=(meta.labels or {}).get(keys.SLURM_NODE, ""),
        unschedulable=bool(spec and spec.unschedulable),
        ready=ready is not None and ready.status == "True",
        taints=tuple(
            (t.key, t.value or "", t.effect,
             t.timeAdded.strftime("%Y-%m-%dT%H:%M:%SZ") if t.timeAdded else None)
            for t in (spec.taints if spec else None) or []
        ),
        slurm_condition=(slurm.status, slurm.message or "") if slurm else None,
        topology=tuple(sorted((k, v) for k, v in (meta.labels or {}).items()
                              if k.startswith(keys.TOPOLOGY_LABEL_PREFIX))),
        external=(
            allocatable(status.allocatable if status else None)
            if (meta.labels or {}).get(keys.EXTERNAL_NODE, "").lower() == "true" else None
        ),
    )


def allocatable(values: dict[str, str] | None) -> Allocatable:
    """Whole CPUs and MiB rounded down (Slurm must not promise more than the Node has); a
    quantity that does not parse counts as none."""
    def amount(key: str, unit: int) -> int:
        try:
            return int(parse_quantity((values or {}).get(key, "0")) // unit)
        except ValueError:
            return 0

    return Allocatable(amount("cpu", 1), amount("memory", 2**20), amount(keys.GPU_RESOURCE, 1))


class NodeCache(WatchCache[NodeView]):
    resource = Node
    namespaced = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._to_kube: dict[str, str] = {}  # Slurm node → the Node labelled with it

    def view(self, obj: Any) -> NodeView | None:
        return node_view(obj)

    def slurm_name(self, kube_node: str) -> str:
        view = self.get(kube_node)
        return view.slurm_name if view else kube_node

    def kube_name(self, slurm_node: str) -> str:
        return self._to_kube.get(slurm_node, slurm_node)

    def replaced(self, items: dict[str, NodeView]) -> None:
        super().replaced(items)
        self._to_kube = {v.slurm_label: v.name for v in items.values() if v.slurm_label}

    def stored(self, view: NodeView) -> None:
        self.removed(view)
        super().stored(view)
        if view.slurm_label:
            self._to_kube[view.slurm_label] = view.name

    def removed(self, view: NodeView) -> None:
        old = self.get(view.name)
        super().removed(view)
        if old is not None and self._to_kube.get(old.slurm_label) == old.name:
            del self._to_kube[old.slurm_label]
