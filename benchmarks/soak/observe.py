"""One snapshot, read from outside the bridge: Slurm's own ``scontrol`` (parsed by the dev
kit, not the product) first, then the apiserver (pods, the SlurmPending events, then the
ResourceClaims).

Slurm first: a placeholder always has its pod before it, so a pod listed after the jobs is
never missed by the orphan check; claims after the pods: a running pod's claim was allocated
before it ran.  The second snapshot settles the rest (tracker).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lightkube import AsyncClient
from lightkube.models.core_v1 import EnvVar
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from benchmarks.soak.invariants import ClaimObs, JobObs, PodObs, Snapshot
from benchmarks.soak.kubelet import JOB_NAME_LABEL
from bridge import keys
from slurmbridge_devkit.scontrol import JobView, index_list, show_jobs
from slurmbridge_devkit.slurm import SlurmTarget

VISIBLE = "NVIDIA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Scope:
    """What a snapshot looks at besides the soak's namespace: other tenants' namespaces, each
    Slurm node's GPUs, and the Slurm user each namespace's tenancy maps to."""

    others: Sequence[str] = ()
    node_gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    tenants: Mapping[str, str] = field(default_factory=dict)


def job_obs(view: JobView) -> JobObs:
    comment = view.fields.get("Comment", "")
    owner = comment.removeprefix(keys.COMMENT_OWNER) if comment.startswith(
        keys.COMMENT_OWNER) else ""
    user = view.fields.get("UserId", "").split("(", 1)[0]
    return JobObs(str(view.job_id), view.name, view.state, user, owner, view.nodes,
                  dict(view.gpus), dict(view.shards))


def jobs_obs(views: Iterable[JobView]) -> tuple[JobObs, ...]:
    """Each job once: a heterogeneous job's components (one record each, ``HetJobId=`` the
    leader's id) as the one job its members record, under the leader's id, on the nodes and
    GPUs of all of them; live while any component is (Slurm frees a component on its own)."""
    jobs: dict[str, JobObs] = {}
    for view in views:
        job = job_obs(view)
        leader = view.fields.get("HetJobId", "") or job.job_id
        seen = jobs.get(leader)
        if seen is None:
            jobs[leader] = dataclasses.replace(job, job_id=leader)
            continue
        jobs[leader] = dataclasses.replace(
            seen, nodes=seen.nodes + job.nodes, gpus={**seen.gpus, **job.gpus},
            shards={**seen.shards, **job.shards},
            state=seen.state if seen.live or not job.live else job.state)
    return tuple(jobs.values())


def _visible(named: Iterable[tuple[str, list[EnvVar] | None]]) -> tuple[tuple[str, str], ...]:
    """NVIDIA_VISIBLE_DEVICES each container sets as a value of its own (the bridge's comes
    from its annotation through the downward API: not listed)."""
    return tuple((name, var.value or "") for name, env in named for var in env or []
                 if var.name == VISIBLE and var.valueFrom is None)


def _claims(pod: Pod) -> tuple[str, ...]:
    spec, status = pod.spec, pod.status
    assert spec is not None
    direct = [c.resourceClaimName for c in spec.resourceClaims or [] if c.resourceClaimName]
    made = [s.resourceClaimName for s in (status.resourceClaimStatuses if status else None) or []
            if s.resourceClaimName]
    return tuple(sorted({*direct, *made}))


def pod_obs(pod: Pod, told: set[str], slurm_node_of: dict[str, str]) -> PodObs:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    assert meta is not None and spec is not None
    notes, labels = meta.annotations or {}, meta.labels or {}
    conditions = (status.conditions if status else None) or []
    node = spec.nodeName or ""
    created = meta.creationTimestamp.timestamp() if meta.creationTimestamp else time.time()
    containers = [(c.name, c.env) for c in [*(spec.initContainers or []), *spec.containers]]
    containers += [(c.name, c.env) for c in spec.ephemeralContainers or []]
    asked = notes.get(keys.GPUS, "").strip()
    return PodObs(
        name=meta.name or "", uid=meta.uid or "", created=created,
        phase=(status.phase if status else None) or "Pending", node=node,
        slurm_node=notes.get(keys.SLURM_NODE) or slurm_node_of.get(node, ""),
        job_id=notes.get(keys.JOB_ID, ""), gpu_ids=index_list(notes.get(keys.GPU_IDS, "")),
        shards=int(shards) if (shards := notes.get(keys.GPU_SHARDS, "").strip()).isdigit() else 0,
        group=labels.get(keys.GROUP, ""), deleting=meta.deletionTimestamp is not None,
        told_why=(meta.uid in told) or any(c.type == keys.POD_CONDITION_SLURM for c in conditions),
        namespace=meta.namespace or "", visible=_visible(containers),
        gpus_asked=int(asked) if asked.isdigit() else 0, claims=_claims(pod),
        workload=labels.get(JOB_NAME_LABEL, ""),
    )


def claim_obs(claim: ResourceClaim) -> ClaimObs:
    meta, status = claim.metadata, claim.status
    assert meta is not None
    allocation = status.allocation if status else None
    results = (allocation.devices.results if allocation and allocation.devices else None) or []
    return ClaimObs(meta.namespace or "", meta.name or "",
                    tuple(sorted(f"{r.pool}/{r.device}" for r in results)),
                    (meta.labels or {}).get(keys.CLAIM_JOB_LABEL, ""))


async def snapshot(
    slurm: SlurmTarget, kube: AsyncClient, namespace: str, slurm_node_of: dict[str, str], *,
    timeout: float = 30,  # noqa: ASYNC109 - one bound for both reads
    scope: Scope | None = None,
) -> Snapshot:
    """Raises (OSError, AssertionError from a failing scontrol, ApiError, TimeoutError) when
    either side cannot be read: the caller counts the snapshot as skipped."""
    scope = scope or Scope()
    async with asyncio.timeout(timeout):
        views = await asyncio.to_thread(show_jobs, slurm)
        jobs = jobs_obs(views)
        told = {
            e.involvedObject.uid or "" async for e in kube.list(
                Event, namespace=namespace, fields={"reason": keys.EventReason.PENDING.value})
        }
        pods = tuple([pod_obs(p, told, slurm_node_of)
                      async for p in kube.list(Pod, namespace=namespace)])
        others = tuple([pod_obs(p, set(), slurm_node_of) for ns in scope.others
                        async for p in kube.list(Pod, namespace=ns)])
        claims = tuple([claim_obs(c) for ns in (namespace, *scope.others)
                        async for c in kube.list(ResourceClaim, namespace=ns)])
    return Snapshot(time.time(), namespace, pods, jobs, others, claims, scope.node_gpus,
                    scope.tenants)


def node_gpus(slurm: SlurmTarget) -> dict[str, tuple[int, ...]]:
    """Each Slurm node's GPU indices (0..n-1), from its configured Gres as ``sinfo`` shows it
    (``gpu:8``, typed ``gpu:a:4,gpu:b:4``, with ``shard:32`` beside)."""
    found = {}
    for line in slurm.admin("sinfo", "-h", "-N", "-o", "%N %G").splitlines():
        node, _, gres = line.strip().partition(" ")
        if node:
            count = sum(int(item.split("(")[0].split(":")[-1]) for item in gres.split(",")
                        if item.startswith("gpu:"))
            found[node] = tuple(range(count))
    return found

