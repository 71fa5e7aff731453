"""Kubernetes nodes and the Slurm nodes behind them, as the bridge's node sync left them:
Slurm's state and drain reason (condition ``SlurmNodeAvailable``), who drained, cordons and
taints and who set them."""

import re
from dataclasses import dataclass

from lightkube.models.core_v1 import NodeCondition
from lightkube.resources.core_v1 import Node

from bridge import keys
from bridge.ports import KubePort

# The node condition's message (bridge/controllers/nodesync.py _condition).
_NODE_STATUS = re.compile(
    r"^Slurm node (?P<node>\S+) is (?P<states>[A-Z_+]+)(?:: (?P<reason>.*))?$"
)


@dataclass(frozen=True, slots=True)
class TaintView:
    key: str
    value: str
    effect: str
    set_by: str  # slurmbridge, kubernetes, or other (an admin, another controller)


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    slurm_node: str  # empty: not a node the bridge maps to Slurm
    slurm_state: str  # Slurm's states joined by "+", as the bridge last wrote them
    slurm_reason: str
    drained_by: str  # slurmbridge (its own reason prefix), slurm-admin, slurm, or empty
    slurm_available: str  # the SlurmNodeAvailable condition: True, False, or empty
    cordoned: bool  # spec.unschedulable: a Kubernetes admin (the bridge never cordons)
    taints: list[TaintView]


def _node_condition(node: Node) -> NodeCondition | None:
    conditions = (node.status.conditions if node.status else None) or []
    return next((c for c in conditions if c.type == keys.NODE_CONDITION_SLURM), None)


def _taint_setter(key: str) -> str:
    if key.startswith(keys.PREFIX):
        return "slurmbridge"
    return "kubernetes" if key.startswith("node.kubernetes.io/") else "other"


def drained_by(states: str, reason: str) -> str:
    """Who took a Slurm node out: the bridge (its reason prefix), an admin (any other drain
    reason), Slurm itself (DOWN/FAIL without a drain); empty when it is not out."""
    if reason.startswith(keys.DRAIN_REASON_PREFIX):
        return "slurmbridge"
    names = set(states.split("+"))
    if "DRAIN" in names:
        return "slurm-admin"
    return "slurm" if names & {"DOWN", "FAIL"} else ""


def node_row(node: Node) -> NodeRow:
    meta = node.metadata
    assert meta is not None and meta.name is not None
    condition = _node_condition(node)
    found = _NODE_STATUS.match(condition.message or "") if condition else None
    taints = [
        TaintView(t.key, t.value or "", t.effect, _taint_setter(t.key))
        for t in (node.spec.taints if node.spec else None) or []
    ]
    label = (meta.labels or {}).get(keys.NODE_SLURM_NODE, "")
    managed = bool(label or found or any(t.key == keys.MANAGED_TAINT for t in taints))
    states = found["states"] if found else ""
    reason = (found["reason"] or "") if found else ""
    return NodeRow(
        node=meta.name,
        slurm_node=label or (found["node"] if found else "") or (meta.name if managed else ""),
        slurm_state=states,
        slurm_reason=reason,
        drained_by=drained_by(states, reason),
        slurm_available=condition.status if condition else "",
        cordoned=bool(node.spec and node.spec.unschedulable),
        taints=taints,
    )


async def read_nodes(kube: KubePort) -> list[NodeRow]:
    return sorted([node_row(n) async for n in kube.list(Node)], key=lambda r: r.node)


