"""kube-scheduler extender protocol (k8s.io/kube-scheduler/extender/v1).

Go structs without json tags: the keys are PascalCase.  The Pod inside is a
normal Kubernetes object (camelCase); the extender reads only who it is (the
bridge acts on the API server's copy, never on the body), so the rest of it is
skipped by the parser, not turned into objects.
"""

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, cache_strings="keys")


class NodeList(_Wire):
    items: list[dict[str, Any]] = Field(default_factory=list)


class PodMeta(_Wire):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = Field(None, alias="resourceVersion")

    @property
    def version(self) -> int:
        """The version kube-scheduler saw (0: unknown); a cached view at least this new
        may stand in for the API's copy."""
        text = self.resource_version or ""
        return int(text) if text.isdigit() else 0


class PodIdentity(_Wire):
    """The body's pod as far as the extender reads it: its namespace, name and UID."""

    metadata: PodMeta | None = None


class ExtenderArgs(_Wire):
    pod: PodIdentity = Field(alias="Pod")
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


_ESCAPED = bytes(range(0x20)) + b'"\\'  # what JSON must escape in a string


def _plain(names: Sequence[str]) -> bool:
    """Whether every name can be written between quotes as it is (RFC 1123 node names can)."""
    joined = "".join(names)
    if not joined.isascii():
        return False
    raw = joined.encode("ascii")
    return len(raw.translate(None, _ESCAPED)) == len(raw)


def filter_result_json(keep: list[str], failed: Sequence[str], reason: str) -> bytes:
    """``ExtenderFilterResult(node_names=keep, failed_and_unresolvable={n: reason for n in
    failed})`` as JSON, written without building the map.

    kube-scheduler sends every feasible node (thousands at site scale) and an answer that
    keeps none names each one, all with one reason: the map and its serialisation were
    most of a filter's cost (B3).  Go decodes both forms the same way
    (tests/unit/test_extender_wire.py compares them); names that would need escaping take
    the model's own serialiser.
    """
    if not _plain(failed):
        result = ExtenderFilterResult(
            node_names=keep, failed_and_unresolvable=dict.fromkeys(failed, reason)
        )
        return result.model_dump_json(by_alias=True).encode()
    why = json.dumps(reason)
    head = f'{{"NodeNames":{json.dumps(keep)},"Nodes":null,"FailedNodes":{{}},' \
        '"FailedAndUnresolvableNodes":{'
    tail = '},"Error":""}'
    if not failed:
        return (head + tail).encode()
    names = list(failed)  # one join writes it all: the text is ~55 bytes per candidate
    names[0] = f'{head}"{names[0]}'
    names[-1] = f'{names[-1]}":{why}{tail}'
    return f'":{why},"'.join(names).encode()
