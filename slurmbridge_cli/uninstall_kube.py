"""What ``slurmbridge uninstall`` removes from Kubernetes: only what the bridge itself put there.

- its pods that have not finished: gated or waiting for its scheduler (nothing would place
  them once it is gone) and running ones (their jobs are cancelled next, which gives their
  GPUs back to Slurm), each evicted (its PodDisruptionBudget and grace period honoured) with
  an event saying why, or left when the admin says so;
- the DRA claims it allocated (its finalizer and record, ``bridge/devices/marks.py``): freed;
- on Nodes, what node sync writes: the taint ``slurmbridge.io/slurm-unavailable``, the taint
  ``slurmbridge.io/managed`` as it adds it (no value), the ``slurmbridge.io/topology-*`` labels
  and the ``SlurmNodeAvailable`` condition; what an admin sets stays, listed: the labels
  ``node-restriction.kubernetes.io/slurmbridge-*`` and the managed taint with a value
  (``slurmbridge.io/managed=true``, docs/install.md);
- the Leases of its groups' claims in its namespace.
"""

from typing import Any, Protocol

from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Taint
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from bridge import keys
from bridge.devices.freeing import ClaimReleaser
from bridge.kube.apierrors import (
    is_conflict,
    is_not_found,
    is_too_many_requests,
    is_unprocessable,
)
from bridge.kube.writes import evict, record_event
from bridge.link.views import PodView, view_of
from bridge.ports import (
    KubeCreate,
    KubeCreateEvent,
    KubeDelete,
    KubeGet,
    KubeList,
    KubePatch,
    KubeReplace,
)
from slurmbridge_cli.uninstall_report import Report

ADMIN_NODE_LABELS = (keys.NODE_SLURM_NODE, keys.EXTERNAL_NODE, keys.MANAGED_NODE_LABEL)
NODE_TRIES = 3


class UninstallKube(
    KubeGet, KubeList, KubePatch, KubeCreate, KubeCreateEvent, KubeReplace, KubeDelete, Protocol
):
    """Pods listed and deleted, events created, Nodes and claims patched, Leases removed."""


async def bridge_pods(kube: UninstallKube) -> dict[str, PodView]:
    """The bridge's pods by UID (those naming its scheduler), finished ones included."""
    views = {}
    async for pod in kube.list(Pod, namespace="*",
                               fields={"spec.schedulerName": keys.SCHEDULER_NAME}):
        view = view_of(pod)
        views[view.uid] = view
    return views


async def remove_pods(kube: UninstallKube, pods: dict[str, PodView], report: Report, *,
                      keep_gated: bool, keep_running: bool) -> list[PodView]:
    """Delete the bridge's live pods (or leave them); the running pods left."""
    kept: list[PodView] = []
    for pod in sorted(pods.values(), key=str):
        if pod.finished or pod.deleting:
            continue
        if pod.node_name:
            why, keep, flag = (f"runs on {pod.node_name}" + (
                f" in Slurm job {pod.job_id}, cancelled next" if pod.job_id else ""),
                keep_running, "--keep-running-pods")
        else:
            why, keep, flag = ("gated: nothing would release it" if pod.gated else
                               "waits for the bridge's scheduler", keep_gated, "--keep-gated-pods")
        if keep:
            if pod.node_name:
                kept.append(pod)
            report.leave(f"pod {pod}", f"{why} ({flag})")
            continue
        if report.acting and not await _evict(kube, pod, why):
            report.leave(f"pod {pod}", f"{why}; a PodDisruptionBudget refuses its eviction "
                         "now: run `slurmbridge uninstall` again, or delete it yourself")
            continue
        report.did("delete", f"pod {pod}", why)
    return kept


async def _evict(kube: UninstallKube, pod: PodView, why: str) -> bool:
    """Evict the pod (an eviction honours its PodDisruptionBudget and grace period), an event
    saying why first; False when its budget says not now."""
    await record_event(kube, pod, keys.EventReason.UNINSTALLED,
                       f"deleted by `slurmbridge uninstall`, the bridge is being removed: {why}")
    try:
        await evict(kube, pod.namespace, pod.name)
    except ApiError as exc:
        if is_too_many_requests(exc):
            return False
        if not is_not_found(exc):
            raise
    return True


async def free_claims(kube: UninstallKube, report: Report, kept_jobs: set[int]) -> None:
    """Free the claims the bridge allocated, but those of running pods left with their jobs."""
    releaser = ClaimReleaser(kube)
    for claim, record in await releaser.pinned():
        meta = claim.metadata
        assert meta is not None
        what = f"resourceclaim {meta.namespace}/{meta.name}"
        if record.job in kept_jobs:
            report.leave(what, f"its pod runs on, with Slurm job {record.job}")
            continue
        if report.acting:
            await releaser.free(claim, record)
        report.did("free", what, f"allocation of Slurm job {record.job} cleared, finalizer "
                   f"{keys.CLAIM_FINALIZER} and record removed")


async def clean_nodes(kube: UninstallKube, report: Report) -> None:
    """Take the bridge's taints, topology labels and condition off every Node."""
    async for listed in kube.list(Node):
        meta, node = listed.metadata, listed
        assert meta is not None and meta.name
        for attempt in range(NODE_TRIES):
            try:
                await _clean_node(kube, node, report)
                break
            except ApiError as exc:  # the Node changed since read (its kubelet writes too)
                if attempt == NODE_TRIES - 1 or not (is_conflict(exc) or is_unprocessable(exc)):
                    raise
                node = await kube.get(Node, meta.name)
        for taint in (listed.spec.taints if listed.spec else None) or []:
            if taint.key == keys.MANAGED_TAINT and taint.value:
                report.leave(f"node {meta.name}", f"taint {taint.key}={taint.value}:"
                             f"{taint.effect}, an admin's (kubectl taint node {meta.name} "
                             f"{taint.key}-)")
        labels = meta.labels or {}
        for key in ADMIN_NODE_LABELS:
            if key in labels:
                report.leave(f"node {meta.name}", f"label {key}={labels[key]}, an admin's "
                             f"(kubectl label node {meta.name} {key}-)")


def bridge_taint(taint: Taint) -> bool:
    """Node sync's: the unavailable taint, and the managed one as it adds it (no value)."""
    return taint.key == keys.UNAVAILABLE_TAINT or (
        taint.key == keys.MANAGED_TAINT and not taint.value)


async def _clean_node(kube: UninstallKube, node: Node, report: Report) -> None:
    """Each write under the Node as read (its resourceVersion, the condition's place)."""
    meta = node.metadata
    assert meta is not None and meta.name
    taints = (node.spec.taints if node.spec else None) or []
    ours = sorted({t.key for t in taints if bridge_taint(t)})
    labels = sorted(k for k in meta.labels or {} if k.startswith(keys.TOPOLOGY_LABEL_PREFIX))
    if ours or labels:
        patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.resourceVersion}}
        if ours:
            patch["spec"] = {"taints": [t.to_dict() for t in taints if t.key not in ours]}
        if labels:
            patch["metadata"]["labels"] = dict.fromkeys(labels)
        if report.acting:
            await kube.patch(Node, meta.name, patch, patch_type=PatchType.MERGE)
        if ours:
            report.did("untaint", f"node {meta.name}", ", ".join(ours))
        if labels:
            report.did("unlabel", f"node {meta.name}", ", ".join(labels))
    conditions = (node.status.conditions if node.status else None) or []
    at = next((i for i, c in enumerate(conditions) if c.type == keys.NODE_CONDITION_SLURM), None)
    if at is None:
        return
    if report.acting:
        await kube.patch(Node.Status, meta.name, [
            {"op": "test", "path": f"/status/conditions/{at}/type",
             "value": keys.NODE_CONDITION_SLURM},
            {"op": "remove", "path": f"/status/conditions/{at}"},
        ], patch_type=PatchType.JSON)
    report.did("clear", f"node {meta.name}", f"condition {keys.NODE_CONDITION_SLURM}")


async def delete_lease(kube: UninstallKube, namespace: str, name: str, report: Report,
                       why: str, *, said: bool = True) -> None:
    if report.acting:
        try:
            await kube.delete(Lease, name, namespace=namespace)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
    if said:
        report.did("delete", f"lease {namespace}/{name}", why)


async def lease_exists(kube: UninstallKube, namespace: str, name: str) -> bool:
    try:
        await kube.get(Lease, name, namespace=namespace)
    except ApiError as exc:
        if is_not_found(exc):
            return False
        raise
    return True

