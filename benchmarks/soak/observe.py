"""One snapshot, read from outside the bridge: Slurm's own ``scontrol`` (parsed by the dev
kit, not the product) first, then the apiserver (pods, and the SlurmPending events).

Slurm first: a placeholder always has its pod before it, so a pod listed after the jobs is
never missed by the orphan check; the second snapshot settles the rest (tracker).
"""

from __future__ import annotations

import asyncio
import time

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Pod

from benchmarks.soak.invariants import JobObs, PodObs, Snapshot
from bridge import keys
from slurmbridge_devkit.scontrol import JobView, index_list, show_jobs
from slurmbridge_devkit.slurm import SlurmTarget


def job_obs(view: JobView) -> JobObs:
    comment = view.fields.get("Comment", "")
    owner = comment.removeprefix(keys.COMMENT_OWNER) if comment.startswith(
        keys.COMMENT_OWNER) else ""
    user = view.fields.get("UserId", "").split("(", 1)[0]
    return JobObs(str(view.job_id), view.name, view.state, user, owner, view.nodes,
                  dict(view.gpus), dict(view.shards))


def pod_obs(pod: Pod, told: set[str], slurm_node_of: dict[str, str]) -> PodObs:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    assert meta is not None and spec is not None
    notes = meta.annotations or {}
    conditions = (status.conditions if status else None) or []
    node = spec.nodeName or ""
    created = meta.creationTimestamp.timestamp() if meta.creationTimestamp else time.time()
    return PodObs(
        name=meta.name or "", uid=meta.uid or "", created=created,
        phase=(status.phase if status else None) or "Pending", node=node,
        slurm_node=notes.get(keys.SLURM_NODE) or slurm_node_of.get(node, ""),
        job_id=notes.get(keys.JOB_ID, ""), gpu_ids=index_list(notes.get(keys.GPU_IDS, "")),
        shards=int(shards) if (shards := notes.get(keys.GPU_SHARDS, "").strip()).isdigit() else 0,
        group=(meta.labels or {}).get(keys.GROUP, ""), deleting=meta.deletionTimestamp is not None,
        told_why=(meta.uid in told) or any(c.type == keys.POD_CONDITION_SLURM for c in conditions),
    )


async def snapshot(
    slurm: SlurmTarget, kube: AsyncClient, namespace: str, slurm_node_of: dict[str, str],
    timeout: float = 30,  # noqa: ASYNC109 - one bound for both reads
) -> Snapshot:
    """Raises (OSError, AssertionError from a failing scontrol, ApiError, TimeoutError) when
    either side cannot be read: the caller counts the snapshot as skipped."""
    async with asyncio.timeout(timeout):
        views = await asyncio.to_thread(show_jobs, slurm)
        jobs = tuple(job_obs(v) for v in views)
        told = {
            e.involvedObject.uid or "" async for e in kube.list(
                Event, namespace=namespace, fields={"reason": keys.EventReason.PENDING.value})
        }
        pods = tuple([pod_obs(p, told, slurm_node_of)
                      async for p in kube.list(Pod, namespace=namespace)])
    return Snapshot(time.time(), namespace, pods, jobs)
