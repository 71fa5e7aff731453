"""Kubernetes node name ↔ Slurm node name.

A Node labelled ``slurmbridge.io/slurm-node=<name>`` maps to that Slurm node;
any other Node maps to the Slurm node of the same name.
"""

from collections.abc import Iterable

from lightkube.resources.core_v1 import Node

from bridge import keys


class NodeMap:
    def __init__(self) -> None:
        self._to_slurm: dict[str, str] = {}
        self._to_kube: dict[str, str] = {}

    def update(self, nodes: Iterable[Node]) -> None:
        to_slurm = {}
        for node in nodes:
            meta = node.metadata
            if meta is None or meta.name is None:
                continue
            label = (meta.labels or {}).get(keys.SLURM_NODE)
            if label:
                to_slurm[meta.name] = label
        self._to_slurm = to_slurm
        self._to_kube = {v: k for k, v in to_slurm.items()}

    def slurm_name(self, kube_node: str) -> str:
        return self._to_slurm.get(kube_node, kube_node)

    def kube_name(self, slurm_node: str) -> str:
        return self._to_kube.get(slurm_node, slurm_node)
