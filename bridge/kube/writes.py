"""Pod writes: annotations, the Slurm condition, events, the Binding and the Eviction; and
the Slurm condition and events on Nodes."""

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Protocol

import structlog
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from bridge import keys
from bridge.kube.apierrors import is_conflict
from bridge.ports import KubeBindPod, KubeCreate, KubeCreateEvent, KubePatch

log = structlog.get_logger(__name__)

COMPONENT = "slurmbridge"


class PodRef(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


class AlreadyBound(Exception):
    """The pod is bound already (HTTP 409): someone else's bind won."""


async def set_slurm_condition(
    client: KubePatch, namespace: str, name: str, *, allocated: bool, reason: str, message: str
) -> None:
    """Pod condition ``SlurmJobAllocated``; its change also requeues the pod in kube-scheduler."""
    condition = {
        "type": keys.POD_CONDITION_SLURM,
        "status": "True" if allocated else "False",
        "reason": _camel(reason),
        "message": message,
        "lastTransitionTime": _now(),
    }
    await client.patch(
        Pod.Status, name, {"status": {"conditions": [condition]}},
        namespace=namespace, patch_type=PatchType.STRATEGIC,
    )


async def set_node_condition(
    client: KubePatch, node: str, *, available: bool, reason: str, message: str
) -> None:
    """Node condition ``SlurmNodeAvailable``: what Slurm says of the node, on the Node."""
    now = _now()
    condition = {
        "type": keys.NODE_CONDITION_SLURM, "status": "True" if available else "False",
        "reason": reason, "message": message, "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    await client.patch(Node.Status, node, {"status": {"conditions": [condition]}},
                       patch_type=PatchType.STRATEGIC)


async def record_event(
    client: KubeCreateEvent, pod: PodRef, reason: keys.EventReason, message: str, *,
    warning: bool = False,
) -> None:
    """An Event on the pod, shown by ``kubectl describe pod``."""
    about = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace,
             "uid": pod.uid}
    await _record(client, pod.namespace, about, reason, message, warning=warning)


async def record_node_event(
    client: KubeCreateEvent, node: str, reason: keys.EventReason, message: str
) -> None:
    """A Warning Event on the Node, shown by ``kubectl describe node`` (which finds a Node's
    events by its name as uid too, as the kubelet writes them)."""
    about = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}
    await _record(client, "default", about, reason, message, warning=True)


async def _record(client: KubeCreateEvent, namespace: str, about: dict[str, str],
                  reason: keys.EventReason, message: str, *, warning: bool) -> None:
    now = _now()
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{about['name']}.", "namespace": namespace},
        "involvedObject": about,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": COMPONENT,
    }
    try:
        await client.create_event(namespace, event)
    except ApiError as exc:  # an event is a courtesy; never fail the caller over it
        log.warning("kube.event_failed", kind=about["kind"],
                    object=f"{about.get('namespace', '')}/{about['name']}".lstrip("/"),
                    error=str(exc))


async def bind(
    client: KubeBindPod, namespace: str, name: str, uid: str, node: str,
    *, annotations: Mapping[str, str] | None = None,
) -> None:
    """Create the Binding, with the pod UID as precondition (a recreated pod is not bound).

    The apiserver copies the Binding's annotations onto the pod in the same write, so
    the pod never runs without them.
    """
    binding = {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid,
                     "annotations": dict(annotations or {})},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    try:
        await client.bind_pod(namespace, name, binding)
    except ApiError as exc:
        if is_conflict(exc):
            raise AlreadyBound(f"pod {namespace}/{name}: {exc.status.message}") from exc
        raise


async def evict(client: KubeCreate, namespace: str, name: str) -> None:
    """Create the pod's Eviction: unlike a delete it honours PodDisruptionBudgets (HTTP 429
    while one says not now) and the pod's terminationGracePeriodSeconds."""
    await client.create(
        Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace)),
        name, namespace=namespace,
    )


def _now() -> str:
    """A ``metav1.Time``: RFC 3339 to the second, in UTC."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _camel(text: str) -> str:
    """A condition reason must be an identifier; Slurm's reason codes are (``Priority``)."""
    head = re.split(r"[,\s(]", text.strip(), maxsplit=1)[0]
    cleaned = re.sub(r"[^A-Za-z0-9_]", "", head)
    return cleaned if cleaned[:1].isalpha() else "Slurm" + cleaned
