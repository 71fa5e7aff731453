"""Playing the kubelet (the local control plane has none): Nodes as a kubelet and the node
controller leave them, and pod status as a kubelet writes it (docs/control-plane.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from slurmbridge_devkit.namespaces import TEST_LABEL, ignore_missing

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


def _rfc3339(when: datetime | str) -> str:
    return when if isinstance(when, str) else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _rfc3339(datetime.now(UTC))


def node_status(cpu: str, memory: str, gpus: int, pods: str = "110") -> dict[str, Any]:
    """What a healthy kubelet reports: capacity = allocatable, Ready, no pressure."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "1Ti"}
    if gpus > 0:
        resources["nvidia.com/gpu"] = str(gpus)
    now = _now()

    def condition(kind: str, status: str, reason: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": "set by slurmbridge tests (no kubelet)",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("Ready", "True", "KubeletReady"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": "v1.37.2",
            "kubeProxyVersion": "",
            "containerRuntimeVersion": "none://slurmbridge-tests",
            "kernelVersion": "",
            "osImage": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


async def create_node(
    client: AsyncClient,
    name: str,
    *,
    cpu: str = "64",
    memory: str = "256Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> Node:
    """Create a Ready, schedulable Node the way kubelet + node controller leave it.

    The TaintNodesByCondition admission plugin taints every new node
    `node.kubernetes.io/not-ready`; the node lifecycle controller (absent here)
    would lift it once Ready, so we set the taints ourselves after create.
    Status goes through the status subresource, as kubelet writes it.
    """
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        TEST_LABEL: "1",
        **(labels or {}),
    }
    await client.create(Node(metadata=ObjectMeta(name=name, labels=all_labels)))
    await client.patch(
        Node.Status,
        name,
        {"status": node_status(cpu, memory, gpus)},
        patch_type=PatchType.MERGE,
    )
    return await client.patch(
        Node, name, {"spec": {"taints": taints or None}}, patch_type=PatchType.MERGE
    )


async def delete_node(client: AsyncClient, name: str) -> None:
    """Remove a test node (and nothing else: pods on it belong to their namespace)."""
    await ignore_missing(client.delete(Node, name))


NodeFactory = Callable[..., Awaitable[Node]]


# --- pods: playing the kubelet ---------------------------------------------------


def _container_status(
    name: str, image: str, phase: PodPhase, started: str, exit_code: int
) -> dict[str, Any]:
    state: dict[str, Any]
    if phase == "Running":
        state = {"running": {"startedAt": started}}
    elif phase == "Pending":
        state = {"waiting": {"reason": "ContainerCreating"}}
    else:
        reason = "Completed" if exit_code == 0 else "Error"
        finished = _now()
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": started,
                "finishedAt": finished,
            }
        }
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": phase == "Running",
        "started": phase == "Running",
        "restartCount": 0,
        "state": state,
    }


def _pod_conditions(phase: PodPhase) -> list[dict[str, str]]:
    now = _now()
    ready = "True" if phase == "Running" else "False"
    reason = {"Succeeded": "PodCompleted", "Failed": "PodFailed"}.get(phase, "")
    conditions = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "ContainersReady", "status": ready},
        {"type": "Ready", "status": ready},
    ]
    for c in conditions:
        c["lastTransitionTime"] = now
        if reason and c["type"] in ("Ready", "ContainersReady"):
            c["reason"] = reason
    return conditions


async def set_pod_phase(
    client: AsyncClient, pod: Pod, phase: PodPhase, *, exit_code: int | None = None
) -> Pod:
    """Write the status a kubelet would: phase, conditions and one status per container.

    Running: every container running and ready.  Succeeded/Failed: every
    container terminated with `exit_code` (default 0 resp. 1).  Written through
    the pod status subresource, like kubelet; the API server still enforces
    its rules (e.g. no way back from a terminal phase).
    """
    assert pod.metadata is not None and pod.metadata.name is not None
    assert pod.spec is not None
    code = exit_code if exit_code is not None else (1 if phase == "Failed" else 0)
    start_time = pod.status.startTime if pod.status is not None else None
    started = _rfc3339(start_time) if start_time is not None else _now()
    statuses = [
        _container_status(c.name, c.image or "", phase, started, code) for c in pod.spec.containers
    ]
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": _pod_conditions(phase),
        "containerStatuses": statuses,
        "startTime": started,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
    }
    return await client.patch(
        Pod.Status,  # type: ignore[arg-type]  # lightkube's overloads miss namespaced subresources
        pod.metadata.name,
        {"status": status},
        namespace=pod.metadata.namespace,
        patch_type=PatchType.MERGE,
    )
