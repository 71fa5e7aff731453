"""The write that hands a gated pod to kube-scheduler once Slurm has placed it.

The webhook gives every pod it enrols the gate ``slurmbridge.io/slurm``, so kube-scheduler
first sees the pod when it can already be bound.  One merge patch, with the pod's
resourceVersion as precondition, lifts the gate, records the job (id, owner, Slurm node,
GPU indices: the same annotations the Binding carries) and narrows the pod to Slurm's node
with a required node affinity (``matchFields metadata.name``, added to every term the pod
has: the API server lets a gated pod's node affinity narrow, KEP-3838).  Of two writers
holding one version only one succeeds, so exactly one job is ever recorded for the pod.
"""

from collections.abc import Mapping
from typing import Any

from lightkube.models.core_v1 import Pod

from bridge import keys


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
    if annotations.get(keys.JOB_ID) != str(job_id):
        return None
    return annotations.get(keys.SLURM_NODE) or None


def release_patch(pod: Pod, kube_node: str, recorded: Mapping[str, str]) -> dict[str, Any]:
    """The merge patch releasing ``pod`` to ``kube_node`` with the ``recorded`` annotations
    (``annotations.bound``), under the resourceVersion of this copy of the pod."""
    meta = pod.metadata
    assert meta is not None and meta.resourceVersion
    remaining = [{"name": g} for g in other_gates(pod)]
    return {
        "metadata": {"resourceVersion": meta.resourceVersion, "annotations": dict(recorded)},
        "spec": {
            "schedulingGates": remaining or None,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": _narrowed_terms(pod, kube_node),
            }}},
        },
    }


def _narrowed_terms(pod: Pod, kube_node: str) -> list[dict[str, Any]]:
    """The pod's required node selector terms, each also asking for ``kube_node`` (a pod
    without any gets the one term): terms are ORed, so every one must name the node."""
    on_node = {"key": "metadata.name", "operator": "In", "values": [kube_node]}
    affinity = pod.spec.affinity if pod.spec else None
    node_affinity = affinity.nodeAffinity if affinity else None
    required = node_affinity.requiredDuringSchedulingIgnoredDuringExecution if node_affinity \
        else None
    terms = [t.to_dict() for t in (required.nodeSelectorTerms if required else [])]
    if not terms:
        return [{"matchFields": [on_node]}]
    return [{**t, "matchFields": [*(t.get("matchFields") or []), on_node]} for t in terms]
