"""kube-scheduler extender protocol (k8s.io/kube-scheduler/extender/v1).

Go structs without json tags: the keys are PascalCase.  The Pod inside is a
normal Kubernetes object (camelCase) and stays a dict here; the core reads it
through lightkube's model.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class NodeList(_Wire):
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    pod: dict[str, Any] = Field(alias="Pod")
    nodes: NodeList | None = Field(None, alias="Nodes")
    node_names: list[str] | None = Field(None, alias="NodeNames")

    def candidates(self) -> list[str]:
        """Node names whichever way they came (nodeCacheCapable sends names only)."""
        if self.node_names is not None:
            return list(self.node_names)
        items = self.nodes.items if self.nodes else []
        return [str((n.get("metadata") or {}).get("name", "")) for n in items]


class ExtenderFilterResult(_Wire):
    node_names: list[str] | None = Field(None, alias="NodeNames")
    nodes: NodeList | None = Field(None, alias="Nodes")
    failed_nodes: dict[str, str] = Field(default_factory=dict, alias="FailedNodes")
    failed_and_unresolvable: dict[str, str] = Field(
        default_factory=dict, alias="FailedAndUnresolvableNodes"
    )
    error: str = Field("", alias="Error")


class HostPriority(_Wire):
    host: str = Field(alias="Host")
    score: int = Field(alias="Score")


class ExtenderBindingArgs(_Wire):
    pod_name: str = Field(alias="PodName")
    pod_namespace: str = Field(alias="PodNamespace")
    pod_uid: str = Field(alias="PodUID")
    node: str = Field(alias="Node")


class ExtenderBindingResult(_Wire):
    error: str = Field("", alias="Error")
