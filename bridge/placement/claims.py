"""One replica submits a pod's job: a claim written on the pod with a precondition.

Before submitting, a replica writes ``slurmbridge.io/submitting=<identity>@<time>``
with the pod's resourceVersion as precondition: of two replicas racing on
the same pod version, exactly one write succeeds.  The loser answers
"waiting" and adopts the job once its id is on the pod.  A claim whose
holder died is taken over after ``stale_after`` seconds, and the taker first
looks in Slurm for a job the holder may have submitted before dying;
anything a crash still leaves twice is cancelled by the next resync (index.py).
"""

import time

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource
from lightkube.types import PatchType

from bridge import keys


class ClaimLost(Exception):
    """Another replica submits this pod's job: answer "waiting".

    ``retry_in`` is how long until that claim is stale and may be taken over (its
    holder may have died between claiming and recording the job id).
    """

    def __init__(self, message: str, retry_in: float) -> None:
        super().__init__(message)
        self.retry_in = retry_in


class AlreadySubmitted(Exception):
    """The pod already names its job (another replica recorded it): adopt, don't submit."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} is recorded on the pod")
        self.job_id = job_id


class _Outdated(Exception):
    """The pod's resourceVersion moved on: read it again before deciding."""


class PodClaims:
    def __init__(self, kube: AsyncClient, identity: str, *, stale_after: float = 30.0) -> None:
        self._kube = kube
        self.identity = identity
        self._stale_after = stale_after

    async def claim(self, pod: Pod) -> bool:
        """Claim the pod, re-reading it once if the copy we were given is out of date.

        True when the claim was taken over from another replica (stale): that replica may
        have submitted before it died, so the caller looks in Slurm before submitting.
        """
        try:
            return await self._claim(pod)
        except _Outdated:
            meta = pod.metadata
            assert meta is not None and meta.name and meta.namespace
            fresh = await self._kube.get(PodResource, meta.name, namespace=meta.namespace)
            return await self._claim(fresh)

    async def _claim(self, pod: Pod) -> bool:
        meta = pod.metadata
        assert meta is not None and meta.name and meta.namespace
        annotations = meta.annotations or {}
        recorded = annotations.get(keys.JOB_ID, "")
        if recorded.isdigit():
            raise AlreadySubmitted(int(recorded))
        held = annotations.get(keys.SUBMITTING, "")
        mine = not held or held.startswith(f"{self.identity}@")
        if not mine and not self._stale(held):
            raise ClaimLost(
                f"bridge replica {held.split('@')[0]} is submitting this pod's job",
                retry_in=self._stale_after - self._age(held),
            )
        patch = {"metadata": {
            "resourceVersion": meta.resourceVersion,
            "annotations": {keys.SUBMITTING: f"{self.identity}@{int(time.time())}"},
        }}
        try:
            await self._kube.patch(
                PodResource, meta.name, patch, namespace=meta.namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as exc:
            if exc.status.code == 409:
                raise _Outdated from exc
            raise
        return not mine

    def _stale(self, held: str) -> bool:
        return self._age(held) > self._stale_after

    @staticmethod
    def _age(held: str) -> float:
        _, _, stamp = held.rpartition("@")
        return time.time() - int(stamp) if stamp.isdigit() else float("inf")
