"""The write that hands a gated pod to kube-scheduler once Slurm has placed it.

The webhook gives every pod it enrols the gate ``slurmbridge.io/slurm``, so kube-scheduler
first sees the pod when it can already be bound.  One JSON Patch lifts the gate, records the
job (id, owner, Slurm node, GPU indices: the same annotations the Binding carries),
narrows the pod to Slurm's node with a required node affinity (``matchFields
metadata.name``, added to every term the pod has: the API server lets a gated pod's node
affinity narrow, KEP-3838) and lets it tolerate that node's slurm-unavailable taint (a
drain after the allocation keeps the running job, so its pod must still start there).  Its
``test`` operations make the gates as read a precondition: of two writers only the first
finds the bridge's gate, so exactly one job is ever recorded.  A pod that came without the
gate (the webhook skipped it) gets the same record in one write of its annotations alone
(its node affinity can no longer change), under its resourceVersion; kube-scheduler's
filter sends it to the recorded node.
"""

from collections.abc import Mapping
from typing import Any

from lightkube.models.core_v1 import NodeSelector, Pod

from bridge import keys
from bridge.link.ownership import job_id_in

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def gate_names(pod: Pod) -> list[str]:
    return [g.name for g in (pod.spec.schedulingGates if pod.spec else None) or []]


def gated(pod: Pod) -> bool:
    """Held by the bridge's gate: Slurm has not placed it yet (or the release is on its way)."""
    return keys.SLURM_GATE in gate_names(pod)


def other_gates(pod: Pod) -> list[str]:
    """Gates someone else holds (Kueue's, a user's): nothing is submitted while one is left."""
    return [g for g in gate_names(pod) if g != keys.SLURM_GATE]


def released_node(pod: Pod, job_id: int) -> str | None:
    """The Slurm node the release (or the Binding) recorded for ``job_id``, if any."""
    annotations = (pod.metadata and pod.metadata.annotations) or {}
    if job_id_in(annotations) != job_id:
        return None
    return annotations.get(keys.SLURM_NODE) or None


def unrecorded(pod: Pod) -> bool:
    """Owed the leader's one write: held by the bridge's gate, or (came without it) unbound,
    not being deleted and with no Slurm node recorded (a job id alone: an earlier version's
    record, completed by the leader)."""
    if gated(pod):
        return True
    meta, spec = pod.metadata, pod.spec
    annotations = (meta.annotations if meta else None) or {}
    return not (spec and spec.nodeName) and not (meta and meta.deletionTimestamp) and (
        keys.SLURM_NODE not in annotations
    )


def record_patch(pod: Pod, recorded: Mapping[str, str]) -> list[dict[str, Any]]:
    """The JSON Patch recording the job on a pod that came without the gate: its
    resourceVersion as read is the precondition (of two writers one records)."""
    meta = pod.metadata
    assert meta is not None and meta.uid and meta.resourceVersion
    return [
        {"op": "test", "path": "/metadata/uid", "value": meta.uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resourceVersion},
        *_annotation_ops(pod, recorded),
    ]


def release_patch(pod: Pod, kube_node: str, recorded: Mapping[str, str]) -> list[dict[str, Any]]:
    """The JSON Patch releasing ``pod`` to ``kube_node`` with the ``recorded`` annotations
    (``annotations.bound``).  Its precondition is what must not have moved since this copy:
    the pod (uid) and its gates (another writer's release lifted ours); a status or label
    write meanwhile does not make it fail, as a resourceVersion would (B1 at 5,000 pods:
    3,300 such conflicts, each a GET and a second write)."""
    meta, spec = pod.metadata, pod.spec
    assert meta is not None and meta.uid and spec is not None
    remaining = [{"name": g} for g in other_gates(pod)]
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": meta.uid},
        {"op": "test", "path": "/spec/schedulingGates",
         "value": [{"name": g} for g in gate_names(pod)]},
        {"op": "replace", "path": "/spec/schedulingGates", "value": remaining} if remaining
        else {"op": "remove", "path": "/spec/schedulingGates"},
    ]
    return ops + _annotation_ops(pod, recorded) + _affinity_ops(pod, kube_node) + (
        _toleration_ops(pod)
    )


def _annotation_ops(pod: Pod, recorded: Mapping[str, str]) -> list[dict[str, Any]]:
    if pod.metadata is None or pod.metadata.annotations is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(recorded)}]
    return [{"op": "add", "path": f"/metadata/annotations/{escaped(k)}", "value": v}
            for k, v in recorded.items()]


def _affinity_ops(pod: Pod, kube_node: str) -> list[dict[str, Any]]:
    """Add the node affinity at the first level the pod lacks, or narrow its terms."""
    affinity = pod.spec.affinity if pod.spec else None
    node_affinity = affinity.nodeAffinity if affinity else None
    required = node_affinity.requiredDuringSchedulingIgnoredDuringExecution \
        if node_affinity else None
    terms = _narrowed_terms(required, kube_node)
    level: dict[str, Any] = {"nodeSelectorTerms": terms}
    if affinity is None:
        return [{"op": "add", "path": "/spec/affinity",
                 "value": {"nodeAffinity": {_REQUIRED: level}}}]
    if node_affinity is None:
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {_REQUIRED: level}}]
    path = f"/spec/affinity/nodeAffinity/{_REQUIRED}"
    if required is None:
        return [{"op": "add", "path": path, "value": level}]
    return [{"op": "replace", "path": f"{path}/nodeSelectorTerms", "value": terms}]


# Slurm's drain (or any state node sync taints for) came after Slurm allocated the node: the
# pod is part of a running job there, so it may still go where Slurm put it.
_ALLOCATED_DESPITE = {"key": keys.UNAVAILABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}


def _toleration_ops(pod: Pod) -> list[dict[str, Any]]:
    """Tolerate the slurm-unavailable taint (tolerations may be added to a pod, never
    changed): the node affinity already confines the pod to Slurm's node."""
    tolerations = (pod.spec.tolerations if pod.spec else None) or []
    if any(t.to_dict() == _ALLOCATED_DESPITE for t in tolerations):
        return []
    if not tolerations:
        return [{"op": "add", "path": "/spec/tolerations", "value": [_ALLOCATED_DESPITE]}]
    return [{"op": "add", "path": "/spec/tolerations/-", "value": _ALLOCATED_DESPITE}]


def escaped(key: str) -> str:
    """An RFC 6901 reference token: ``slurmbridge.io/job-id`` → ``slurmbridge.io~1job-id``."""
    return key.replace("~", "~0").replace("/", "~1")


def _narrowed_terms(required: NodeSelector | None, kube_node: str) -> list[dict[str, Any]]:
    """The pod's required node selector terms, each also asking for ``kube_node`` (a pod
    without any gets the one term): terms are ORed, so every one must name the node."""
    on_node = {"key": "metadata.name", "operator": "In", "values": [kube_node]}
    terms = [t.to_dict() for t in (required.nodeSelectorTerms if required else [])]
    if not terms:
        return [{"matchFields": [on_node]}]
    return [{**t, "matchFields": [*(t.get("matchFields") or []), on_node]} for t in terms]
