"""Every pod of the bridge, kept current by one watch per replica.

One list + watch of the pods with ``schedulerName: slurmbridge`` (bound ones included),
started again from a fresh listing whenever the watch breaks (the apiserver restarted,
or answered 410 Gone for a resourceVersion it no longer holds); a relist drops the pods
that went away meanwhile.  It holds a ``PodView`` per pod (views.py), not the Pod, and
serves the readers that used to list or fetch: the lifecycle controller (no LIST of every
pod each round) and the extender's filter (no GET per call, when the view is at least as
new as the pod the call names).  Followers (the leader's intake) get each event's whole Pod as it
passes, and a word before each relisting, so no reader needs a watch of its own.
"""

import asyncio
import time
from typing import Protocol

import structlog
from lightkube.models.core_v1 import Pod as PodModel
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.link.views import PodView, view_of
from bridge.ports import KubePort

log = structlog.get_logger(__name__)

RETRY_SECONDS = 2.0
DELETED_MEMORY_SECONDS = 600.0
OURS: dict[str, str | BinaryOperator | SequenceOperator] = {
    "spec.schedulerName": keys.SCHEDULER_NAME,
}


class PodFollower(Protocol):
    """Told every change the cache sees, with the whole Pod, while it follows."""

    def relisted(self) -> None:
        """The watch starts over: every pod comes again (as ADDED), the gone ones do not."""
        ...

    def pod_changed(self, event: str, pod: PodModel) -> None: ...


class PodCache:
    def __init__(self, kube: KubePort) -> None:
        self._kube = kube
        self._followers: list[PodFollower] = []
        self._by_uid: dict[str, PodView] = {}
        # uid → monotonic time its DELETED event came: "gone" only once the watch said so.
        self._deleted: dict[str, float] = {}
        self._synced = asyncio.Event()  # the current watch has delivered its initial listing

    def get(self, uid: str) -> PodView | None:
        return self._by_uid.get(uid)

    def deleted(self, uid: str) -> bool:
        """The watch reported this pod deleted (within the last ``DELETED_MEMORY_SECONDS``)."""
        return uid in self._deleted

    def follow(self, follower: PodFollower) -> None:
        self._followers.append(follower)

    def unfollow(self, follower: PodFollower) -> None:
        if follower in self._followers:
            self._followers.remove(follower)

    def views(self) -> list[PodView]:
        return list(self._by_uid.values())

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def current(self) -> list[PodView]:
        """The pods as of now: the watch's copy while it runs, else one fresh listing."""
        if self._synced.is_set():
            return self.views()
        return [v async for p in self._kube.list(Pod, namespace="*", fields=OURS)
                if (v := _view(p)) is not None]

    async def run(self) -> None:
        while True:
            try:
                await self._watch()
            except Exception as exc:  # apiserver away, or the watch expired: relist
                log.warning("podcache.watch_failed", error=repr(exc), retry_in=RETRY_SECONDS)
            self._synced.clear()
            await asyncio.sleep(RETRY_SECONDS)

    async def _watch(self) -> None:
        """List, then watch from the listing's resourceVersion: no change is missed between
        the two, and the pods that went away while no watch ran drop out with the relist."""
        for follower in list(self._followers):
            follower.relisted()
        listing = self._kube.list(Pod, namespace="*", fields=OURS)
        by_uid: dict[str, PodView] = {}
        async for pod in listing:
            self._tell("ADDED", pod)
            if (view := _view(pod)) is not None:
                by_uid[view.uid] = view
        self._by_uid = by_uid
        self._synced.set()
        async for event, pod in self._kube.watch(
            Pod, namespace="*", fields=OURS,
            resource_version=getattr(listing, "resourceVersion", None),
        ):
            self.apply(event, pod)

    def apply(self, event: str, pod: PodModel) -> None:
        """One watch event; an older copy than the one held changes nothing."""
        self._tell(event, pod)
        view = _view(pod)
        if view is None:
            return
        if event == "DELETED":
            self._by_uid.pop(view.uid, None)
            now = time.monotonic()
            self._deleted[view.uid] = now
            while self._deleted:  # oldest first (insertion order): stop at a young one
                uid, when = next(iter(self._deleted.items()))
                if when > now - DELETED_MEMORY_SECONDS:
                    break
                del self._deleted[uid]
            return
        known = self._by_uid.get(view.uid)
        if known is None or known.resource_version <= view.resource_version:
            self._by_uid[view.uid] = view

    def _tell(self, event: str, pod: PodModel) -> None:
        for follower in list(self._followers):
            try:
                follower.pod_changed(event, pod)
            except Exception:  # one follower's bug must not stop the cache nor the others
                log.exception("podcache.follower_failed", follower=type(follower).__name__)


def _view(pod: PodModel) -> PodView | None:
    try:
        return view_of(pod)
    except ValueError:
        return None
