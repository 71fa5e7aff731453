"""Freeing the DRA claims the bridge allocated from Slurm's GPUs.

kube-scheduler's claims are freed by the resource claim controller when their last pod
goes; the bridge's are not (they carry no ``resource.kubernetes.io/delete-protection``
finalizer, which is what that controller frees by): the device is Slurm's until the job
let it go, which can be after the pod went (a job still completing).  So a claim is freed
here once its job no longer holds GPUs and no pod that may still run uses it, and at once
when Slurm gives one of its devices to another job (Slurm never gives a GPU twice, so the
old job has let it go: a requeued or preempted job never leaves a second claim on a device).
Only a claim whose allocation the bridge wrote is freed, as its record proves (``marks.py``):
a label anyone can set never clears an allocation kube-scheduler made.  Freeing clears the
allocation and reservations, then lifts the marks, so a generated claim whose pod is gone is
deleted then.
"""

import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import NamedTuple, Protocol, cast

import structlog
from lightkube import operators
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.resources.resource_v1 import ResourceClaimStatus as ClaimStatus
from lightkube.types import PatchType

from bridge import keys
from bridge.devices.marks import DeviceId, PinRecord, holds_recorded, record_of, unmarks, version
from bridge.kube.apierrors import is_not_found
from bridge.ports import KubeList, KubePatch

log = structlog.get_logger(__name__)


class Pinned(NamedTuple):
    claim: ResourceClaim
    record: PinRecord


class FreeingKube(KubeList, KubePatch, Protocol):
    """The bridge's claims listed, each one's allocation and mark patched away."""


class ClaimReleaser:
    """Shared by the pinner and the lifecycle loop (both the leader's): the loop lists the
    bridge's claims only while some may exist, not every round of a cluster without any."""

    def __init__(self, kube: FreeingKube) -> None:
        self._kube = kube
        self._pins = 0  # claim writes done (landed or failed), counted
        # The count when a listing last found none: None until one does (another leader's
        # may exist).  A round lists again once a write ended after that listing began:
        # a count, not a flag, so a listing's late "none" never hides a claim written
        # meanwhile.
        self._none_since: int | None = None
        self._told: set[str] = set()  # UIDs of labelled claims without the bridge's record

    @contextlib.contextmanager
    def pinning(self) -> Iterator[None]:
        """Around a claim's write: counted once it landed (or failed), so a listing begun
        before then, which may have missed the claim, does not stop the rounds after it."""
        try:
            yield
        finally:
            self._pins += 1

    async def pinned(self) -> list[Pinned]:
        """Every claim the bridge allocated and has not freed: one list, by the job label,
        kept where the bridge's record is (a label alone is anyone's)."""
        found, unproven = [], set()
        async for claim in self._kube.list(
                ResourceClaim, namespace="*", labels={keys.CLAIM_JOB_LABEL: operators.exists()}):
            if (record := record_of(claim)) is not None:
                found.append(Pinned(claim, record))
            elif claim.metadata and claim.metadata.uid:
                unproven.add(claim.metadata.uid)
                if claim.metadata.uid not in self._told:
                    log.info("claim.not_pinned", claim=_ref(claim), why=(
                        f"labelled {keys.CLAIM_JOB_LABEL} without the bridge's finalizer and "
                        f"record ({keys.CLAIM_PINNED}): not the bridge's, never freed by it"))
        self._told = unproven
        return found

    async def free_stale(self, devices: Collection[DeviceId], job_id: int) -> None:
        """Free the claims of other jobs on ``devices``, which Slurm now gave ``job_id``."""
        for claim, record in await self.pinned():
            if record.job != job_id and record.devices & set(devices):
                log.warning("claim.stale", claim=_ref(claim), job_id=record.job,
                            now_job_id=job_id, why="Slurm gave its devices to another job")
                await self.free(claim, record)

    async def free_finished(
        self, job_holds: Callable[[int], Awaitable[bool]], pod_runs: Callable[[str], bool]
    ) -> None:
        """Free every claim whose job holds no GPUs and whose pods may no longer run."""
        if self._none_since == self._pins:
            return
        pins = self._pins
        pinned = await self.pinned()
        self._none_since = None if pinned else pins
        for claim, record in pinned:
            users = [r.uid for r in (claim.status.reservedFor if claim.status else None) or []]
            if any(pod_runs(uid) for uid in users) or await job_holds(record.job):
                continue
            await self.free(claim, record)

    async def free(self, claim: ResourceClaim, record: PinRecord) -> None:
        """Clear the allocation if it is still the one recorded, then lift the bridge's marks
        (each under the resourceVersion it read: a claim changed meanwhile is looked at next
        round)."""
        meta = claim.metadata
        assert meta is not None and meta.name and meta.namespace
        try:
            if holds_recorded(claim, record):
                cleared = await self._kube.patch(ClaimStatus, meta.name, [
                    version(claim), {"op": "add", "path": "/status", "value": {}},
                ], namespace=meta.namespace, patch_type=PatchType.JSON)
                claim = cast(ResourceClaim, cleared)  # the status subresource: the whole claim
            elif claim.status and claim.status.allocation:
                log.warning("claim.allocated_by_another", claim=_ref(claim), job_id=record.job,
                            why="its allocation is not the one the bridge wrote: left as is")
            await self._kube.patch(ResourceClaim, meta.name, unmarks(claim),
                                   namespace=meta.namespace, patch_type=PatchType.JSON)
        except ApiError as err:
            if is_not_found(err):
                return
            raise
        log.info("claim.freed", claim=_ref(claim))


def _ref(claim: ResourceClaim) -> str:
    meta = claim.metadata
    return f"{meta.namespace}/{meta.name}" if meta else "?"
