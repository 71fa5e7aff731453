"""Freeing the DRA claims the bridge allocated from Slurm's GPUs.

kube-scheduler's claims are freed by the resource claim controller when their last pod
goes; the bridge's are not (they carry no ``resource.kubernetes.io/delete-protection``
finalizer, which is what that controller frees by): the device is Slurm's until the job
let it go, which can be after the pod went (a job still completing).  So a claim is freed
here once its job no longer holds GPUs and no pod that may still run uses it, and at once
when Slurm gives one of its devices to another job (Slurm never gives a GPU twice, so the
old job has let it go: a requeued or preempted job never leaves a second claim on a device).
Freeing clears the allocation and reservations, then lifts the finalizer and label, so a
generated claim whose pod is gone is deleted then.
"""

from collections.abc import Awaitable, Callable, Collection
from typing import Any, NamedTuple, Protocol, cast

import structlog
from lightkube import operators
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.resources.resource_v1 import ResourceClaimStatus as ClaimStatus
from lightkube.types import PatchType

from bridge import keys
from bridge.kube.apierrors import is_not_found
from bridge.ports import KubeList, KubePatch

log = structlog.get_logger(__name__)


class DeviceId(NamedTuple):
    driver: str
    pool: str
    device: str


def allocated_devices(claim: ResourceClaim) -> set[DeviceId]:
    allocation = claim.status.allocation if claim.status else None
    results = (allocation.devices.results if allocation and allocation.devices else None) or []
    return {DeviceId(r.driver, r.pool, r.device) for r in results}


def _job_of(claim: ResourceClaim) -> int | None:
    text = ((claim.metadata.labels if claim.metadata else None) or {}).get(keys.CLAIM_JOB_LABEL)
    return int(text) if text and text.isdigit() else None


class FreeingKube(KubeList, KubePatch, Protocol):
    """The bridge's claims listed, each one's allocation and mark patched away."""


class ClaimReleaser:
    """Shared by the pinner and the lifecycle loop (both the leader's): the loop lists the
    bridge's claims only while some may exist, not every round of a cluster without any."""

    def __init__(self, kube: FreeingKube) -> None:
        self._kube = kube
        self._maybe_pinned = True  # until a listing finds none (another leader's may exist)

    def pinning(self) -> None:
        """A claim is about to be written: the loop looks again."""
        self._maybe_pinned = True

    async def pinned(self) -> list[ResourceClaim]:
        """Every claim the bridge allocated and has not freed (one list, by its label)."""
        return [c async for c in self._kube.list(
            ResourceClaim, namespace="*", labels={keys.CLAIM_JOB_LABEL: operators.exists()})]

    async def free_stale(self, devices: Collection[DeviceId], job_id: int) -> None:
        """Free the claims of other jobs on ``devices``, which Slurm now gave ``job_id``."""
        for claim in await self.pinned():
            if _job_of(claim) != job_id and allocated_devices(claim) & set(devices):
                log.warning("claim.stale", claim=_ref(claim), job_id=_job_of(claim),
                            now_job_id=job_id, why="Slurm gave its devices to another job")
                await self.free(claim)

    async def free_finished(
        self, job_holds: Callable[[int], Awaitable[bool]], pod_runs: Callable[[str], bool]
    ) -> None:
        """Free every claim whose job holds no GPUs and whose pods may no longer run."""
        if not self._maybe_pinned:
            return
        pinned = await self.pinned()
        self._maybe_pinned = bool(pinned)
        for claim in pinned:
            job_id = _job_of(claim)
            users = [r.uid for r in (claim.status.reservedFor if claim.status else None) or []]
            if any(pod_runs(uid) for uid in users):
                continue
            if job_id is not None and await job_holds(job_id):
                continue
            await self.free(claim)

    async def free(self, claim: ResourceClaim) -> None:
        """Clear the allocation, then the bridge's finalizer and label (each under the
        resourceVersion it read: a claim changed meanwhile is looked at next round)."""
        meta = claim.metadata
        assert meta is not None and meta.name and meta.namespace
        try:
            if claim.status and (claim.status.allocation or claim.status.reservedFor):
                cleared = await self._kube.patch(ClaimStatus, meta.name, [
                    _version(claim), {"op": "add", "path": "/status", "value": {}},
                ], namespace=meta.namespace, patch_type=PatchType.JSON)
                claim = cast(ResourceClaim, cleared)  # the status subresource: the whole claim
            await self._kube.patch(ResourceClaim, meta.name, _unmarks(claim),
                                   namespace=meta.namespace, patch_type=PatchType.JSON)
        except ApiError as err:
            if is_not_found(err):
                return
            raise
        log.info("claim.freed", claim=_ref(claim))


def _version(claim: ResourceClaim) -> dict[str, Any]:
    assert claim.metadata is not None
    return {"op": "test", "path": "/metadata/resourceVersion",
            "value": claim.metadata.resourceVersion}


def _unmarks(claim: ResourceClaim) -> list[dict[str, Any]]:
    meta = claim.metadata
    assert meta is not None
    finalizers = [f for f in meta.finalizers or [] if f != keys.CLAIM_FINALIZER]
    labels = {k: v for k, v in (meta.labels or {}).items() if k != keys.CLAIM_JOB_LABEL}
    return [_version(claim),
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "add", "path": "/metadata/labels", "value": labels}]


def _ref(claim: ResourceClaim) -> str:
    meta = claim.metadata
    return f"{meta.namespace}/{meta.name}" if meta else "?"
