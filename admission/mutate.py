"""The mutating webhook's pure core: an in-scope pod → the JSON Patch that hands it to Slurm.

Every operation is computed against the pod as it is, and none is emitted when
the pod already has the wanted value, so the patch of a patched pod is empty
(the API server may call a mutating webhook again: mutations must be idempotent).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission.membership import Membership
from admission.pod import Container, PodShape
from bridge import keys
from bridge.config import DeviceClassGres
from bridge.devices.asks import GpuTotal

PatchOp = dict[str, Any]

WHOLE_GPU = DeviceClassGres()  # what nvidia.com/gpu asks Slurm for


@dataclass(frozen=True, slots=True)
class Shards:
    """``shards`` of Slurm's ``gres/shard``, asked through the extended resource ``resource``."""

    shards: int
    resource: str

TOLERATION: dict[str, str] = {
    "key": keys.MANAGED_TAINT,
    "operator": "Exists",
    "effect": "NoSchedule",
}
# apiVersion included: it is what the API server defaults, so a stored pod compares equal.
# Each variable from its own annotation: CUDA's numbering inside the container is not Slurm's.
GPU_ENV: list[dict[str, Any]] = [
    {
        "name": name,
        "valueFrom": {
            "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{source}']"}
        },
    }
    for name, source in keys.GPU_ENV_SOURCES.items()
]
_WHOLE_NUMBER = re.compile(r"[0-9]+")


class InvalidGpuRequest(ValueError):
    """A GPU quantity that is not a whole number of GPUs: the pod cannot be admitted."""


def pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON Pointer: ``~`` and ``/`` in keys escaped (``slurmbridge.io~1gpus``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def patch_for(
    pod: PodShape, defaults: Mapping[str, str] | None = None, group: Membership | None = None,
    claimed: GpuTotal | None = None, gpu_resources: Mapping[str, DeviceClassGres] | None = None,
) -> list[PatchOp]:
    """The JSON Patch that makes ``pod`` a slurmbridge pod; raises ``InvalidGpuRequest``.

    ``defaults``: annotations the namespace's tenancy fills in (account, user, partition,
    QOS), only those the pod does not set itself (``TenancyMap.defaults``).
    ``group``: the pod's group as its workload says (admission/workloads.py), written as the
    bridge's group labels over any the pod carried.
    ``claimed``: what the pod's DRA claims ask Slurm for (admission/dra.py).
    ``gpu_resources``: extended resources Slurm allocates besides ``nvidia.com/gpu`` (those a
    DeviceClass mapped to Slurm stands for), each with what Slurm allocates for it.
    """
    ops: list[PatchOp] = []
    if "metadata" not in pod.model_fields_set:
        ops.append({"op": "add", "path": "/metadata", "value": {}})
    if pod.spec.scheduler_name != keys.SCHEDULER_NAME:
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": keys.SCHEDULER_NAME})
    ops += _toleration_ops(pod)
    ops += _gate_ops(pod)
    gpu_ops, moved = _gpu_ops(pod, {keys.GPU_RESOURCE: WHOLE_GPU, **(gpu_resources or {})})
    ops += gpu_ops
    implied = {k: v for k, v in group.asks.items() if k not in pod.annotations} if group else {}
    annotations = {**(defaults or {}), **implied, **(group.annotations() if group else {})}
    if claimed is not None:
        annotations |= _claimed_annotations(pod, claimed, moved)
    elif isinstance(moved, Shards):
        annotations |= _shard_annotations(pod, moved)
    elif moved is not None:
        annotations |= _gpu_annotations(pod, moved, "its extended resources' device classes")
    ops += _metadata_ops(pod, "annotations", annotations)
    if group is not None:
        ops += _group_ops(pod, group)
    for field, containers in _container_lists(pod):
        for index, container in enumerate(containers):
            ops += _env_ops(pointer("spec", field, index), container)
    return ops


def _container_lists(pod: PodShape) -> list[tuple[str, list[Container]]]:
    return [("containers", pod.spec.containers), ("initContainers", pod.spec.init_containers or [])]


def _toleration_ops(pod: PodShape) -> list[PatchOp]:
    tolerations = pod.spec.tolerations
    if tolerations is None:
        return [{"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]}]
    tolerated = any(
        t.operator == "Exists"
        and t.key in (keys.MANAGED_TAINT, None, "")
        and t.effect in ("NoSchedule", None, "")
        for t in tolerations
    )
    return [] if tolerated else [{"op": "add", "path": "/spec/tolerations/-", "value": TOLERATION}]


def _gate_ops(pod: PodShape) -> list[PatchOp]:
    """The bridge's scheduling gate: kube-scheduler first sees the pod once Slurm placed it.

    Gates can only be set when a pod is created (this webhook mutates creations only); a pod
    with ``nodeName`` skips scheduling, and the validating webhook refuses it anyway."""
    if pod.is_bound or keys.SLURM_GATE in pod.gate_names():
        return []
    gate = {"name": keys.SLURM_GATE}
    if pod.spec.scheduling_gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]


def _claimed_annotations(
    pod: PodShape, claimed: GpuTotal, moved: GpuTotal | Shards | None
) -> dict[str, str]:
    """The claims' GPUs as the pod's GPU annotations: one GPU form per pod."""
    if moved is not None or keys.GPU_SHARDS in pod.annotations:
        other = "GPUs in its resources" if moved is not None else keys.GPU_SHARDS
        raise InvalidGpuRequest(
            f"the pod asks for GPUs both through spec.resourceClaims and {other}: Slurm "
            "allocates a pod's GPUs once; keep one of the two"
        )
    if claimed.gpu_type is None and keys.GPU_TYPE in pod.annotations:
        raise InvalidGpuRequest(
            f"annotation {keys.GPU_TYPE}={pod.annotations[keys.GPU_TYPE]!r} but the pod's "
            "claims are of GPU type any (their device classes say): drop the annotation"
        )
    return _gpu_annotations(pod, claimed, "the pod's claims' device classes")


def _gpu_annotations(pod: PodShape, asked: GpuTotal, typed_by: str) -> dict[str, str]:
    """``gpus`` (and ``gpu-type`` when what asked has one, which a user's may not contradict)."""
    user_type = pod.annotations.get(keys.GPU_TYPE)
    if asked.gpu_type is not None and user_type not in (None, asked.gpu_type):
        raise InvalidGpuRequest(
            f"annotation {keys.GPU_TYPE}={user_type!r} but {typed_by} say GPU type "
            f"{asked.gpu_type!r}: drop the annotation"
        )
    found = {keys.GPUS: str(asked.gpus)}
    return found | ({keys.GPU_TYPE: asked.gpu_type} if asked.gpu_type else {})


def _shard_annotations(pod: PodShape, moved: Shards) -> dict[str, str]:
    asked = pod.annotations.get(keys.GPU_SHARDS)
    if asked not in (None, str(moved.shards)) or keys.GPU_TYPE in pod.annotations:
        key = keys.GPU_SHARDS if asked not in (None, str(moved.shards)) else keys.GPU_TYPE
        raise InvalidGpuRequest(
            f"annotation {key}={pod.annotations[key]!r} but the pod asks for {moved.shards} "
            f"shards through {moved.resource}: drop the annotation"
        )
    return {keys.GPU_SHARDS: str(moved.shards)}


def _gpu_ops(
    pod: PodShape, resources: Mapping[str, DeviceClassGres]
) -> tuple[list[PatchOp], GpuTotal | Shards | None]:
    """Move GPU requests and limits (``resources``: name → what Slurm allocates for it) out
    of every container; the GPUs, or shards, they asked for (None: none found).

    The device plugin or kube-scheduler's DRA plugin must not pick devices on its own: Slurm
    is the only GPU allocator.  With no GPU resource left (e.g. an already patched pod) the
    annotation is left alone.
    """
    ops: list[PatchOp] = []
    counts: dict[str, list[tuple[int, bool]]] = {}
    kinds: dict[tuple[str, str | None], str] = {}  # (Slurm GRES, GPU type) → a resource
    for field, containers in _container_lists(pod):
        counts[field] = []
        for index, container in enumerate(containers):
            found: list[int] = []
            for kind in ("requests", "limits"):
                amounts = getattr(container.resources, kind, None) or {}
                for name in [n for n in amounts if n in resources]:
                    found.append(_gpu_count(container.name, name, amounts[name]))
                    kinds[resources[name].gres, resources[name].type] = name
                    path = pointer("spec", field, index, "resources", kind, name)
                    ops.append({"op": "remove", "path": path})
            counts[field].append((max(found, default=0), container.restart_policy == "Always"))
    if not ops:
        return [], None
    if len(kinds) > 1:
        raise InvalidGpuRequest(
            f"the pod asks for {', '.join(sorted(kinds.values()))}, GPUs of different Slurm "
            "kinds (whole or shards, any type or their device classes' types): Slurm gives a "
            "job one GPU type, and a GPU whole or as shards"
        )
    app = sum(n for n, _ in counts["containers"])
    total = effective_gpus(app, counts["initContainers"])
    [((gres, gpu_type), resource)] = kinds.items()
    if gres == "shard":
        return ops, Shards(shards=total, resource=resource)
    return ops, GpuTotal(gpus=total, gpu_type=gpu_type)


def effective_gpus(app_total: int, init: list[tuple[int, bool]]) -> int:
    """GPUs the pod holds at its peak, by Kubernetes' effective-request rule.

    ``init`` lists (count, is_sidecar) in order: an init container runs alone
    except for the sidecars started before it, which then run next to the app.
    """
    sidecars = peak = 0
    for count, is_sidecar in init:
        if is_sidecar:
            sidecars += count
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + count)
    return max(app_total + sidecars, peak)


def _gpu_count(container: str, resource: str, quantity: Any) -> int:
    # The API server sends quantities as strings; bool is excluded because it is an int.
    is_text = isinstance(quantity, int | str) and not isinstance(quantity, bool)
    text = str(quantity) if is_text else ""
    if not _WHOLE_NUMBER.fullmatch(text):
        raise InvalidGpuRequest(
            f"container {container!r}: {resource} must be a whole number of GPUs, "
            f"got {quantity!r}"
        )
    return int(text)


def _metadata_ops(pod: PodShape, field: str, values: Mapping[str, str]) -> list[PatchOp]:
    """Set these annotations or labels (``field``); one op where the pod has none yet: ops
    on one path do not add up."""
    if not values:
        return []
    current: dict[str, str] | None = getattr(pod.metadata, field)
    if current is None:
        return [{"op": "add", "path": pointer("metadata", field), "value": dict(values)}]
    return [
        {"op": "add", "path": pointer("metadata", field, key), "value": value}
        for key, value in values.items() if current.get(key) != value
    ]


def _group_ops(pod: PodShape, group: Membership) -> list[PatchOp]:
    """The group labels as the workload says; a rank or component the workload does not
    give goes."""
    ops = _metadata_ops(pod, "labels", group.labels())
    stale = [("labels", keys.GROUP_RANK, group.rank is None),
             ("labels", keys.GROUP_COMPONENT, group.component is None),
             ("annotations", keys.GROUP_COMPONENTS, group.component is None)]
    for field, key, gone in stale:
        if gone and key in (getattr(pod.metadata, field) or {}):
            ops.append({"op": "remove", "path": pointer("metadata", field, key)})
    return ops


def _env_ops(path: str, container: Container) -> list[PatchOp]:
    """Put the downward-API GPU variables first, replacing any the user set.

    First, so the user's own variables can reference them with ``$(VAR)``;
    replacing, because a user must never choose GPUs Slurm did not grant.
    """
    current = [e.model_dump(by_alias=True, exclude_unset=True) for e in container.env or []]
    wanted = GPU_ENV + [e for e in current if e["name"] not in keys.GPU_ENV_VARS]
    return [] if current == wanted else [{"op": "add", "path": path + "/env", "value": wanted}]
