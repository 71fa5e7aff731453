"""One replica submits a pod's job: a claim written on the pod with a precondition.

Before submitting, a replica writes ``slurmbridge.io/submitting=<identity>@<time>``
with the pod's resourceVersion as precondition: of two replicas racing on
the same pod version, exactly one write succeeds.  The loser answers
"waiting" and adopts the job once its id is on the pod.  A claim whose
holder died is taken over after ``stale_after`` seconds; anything a crash
still leaves twice is cancelled by the next resync (index.py).
"""

import time

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource
from lightkube.types import PatchType

from bridge import keys


class ClaimLost(Exception):
    """Another replica submits this pod's job (or the pod changed): answer "waiting"."""


class _Outdated(Exception):
    """The pod's resourceVersion moved on: read it again before deciding."""


class PodClaims:
    def __init__(self, kube: AsyncClient, identity: str, *, stale_after: float = 30.0) -> None:
        self._kube = kube
        self.identity = identity
        self._stale_after = stale_after

    async def claim(self, pod: Pod) -> None:
        """Claim the pod, re-reading it once if the copy we were given is out of date."""
        try:
            await self._claim(pod)
        except _Outdated:
            meta = pod.metadata
            assert meta is not None and meta.name and meta.namespace
            fresh = await self._kube.get(PodResource, meta.name, namespace=meta.namespace)
            await self._claim(fresh)

    async def _claim(self, pod: Pod) -> None:
        meta = pod.metadata
        assert meta is not None and meta.name and meta.namespace
        held = (meta.annotations or {}).get(keys.SUBMITTING)
        if held and not held.startswith(f"{self.identity}@") and not self._stale(held):
            raise ClaimLost(f"bridge replica {held.split('@')[0]} is submitting this pod's job")
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

    def _stale(self, held: str) -> bool:
        _, _, stamp = held.rpartition("@")
        return not stamp.isdigit() or time.time() - int(stamp) > self._stale_after
