"""Every pod of the bridge, kept current by one watch per replica.

The pods with ``schedulerName: slurmbridge`` (bound ones included), by uid, as a ``PodView``
each (views.py), not the Pod; list + watch and relisting as every cache (kube/watchcache.py).
It serves the readers that used to list or fetch: the lifecycle controller (no LIST of every
pod each round) and the extender's filter (no GET per call, when the view is at least as
new as the pod the call names).  Followers (the leader's intake) get each event's whole Pod
as it passes, and a word before each relisting, so no reader needs a watch of its own.
"""

import time
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

import structlog
from lightkube.core.client import FieldSelector
from lightkube.models.core_v1 import Pod as PodModel
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.kube.watchcache import WatchCache
from bridge.link.views import PodView, view_of

log = structlog.get_logger(__name__)

DELETED_MEMORY_SECONDS = 600.0


class PodFollower(Protocol):
    """Told every change the cache sees, with the whole Pod, while it follows."""

    def relisted(self) -> None:
        """The watch starts over: every pod comes again (as ADDED), the gone ones do not."""
        ...

    def pod_changed(self, event: str, pod: PodModel) -> None: ...


class PodCache(WatchCache[PodView]):
    resource = Pod
    selection: ClassVar[FieldSelector | None] = {"spec.schedulerName": keys.SCHEDULER_NAME}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._followers: list[PodFollower] = []
        # uid → monotonic time its DELETED event came: "gone" only once the watch said so.
        self._deleted: dict[str, float] = {}

    def view(self, obj: Any) -> PodView | None:
        try:
            return view_of(obj)
        except ValueError:
            return None

    def deleted(self, uid: str) -> bool:
        """The watch reported this pod deleted (within the last ``DELETED_MEMORY_SECONDS``)."""
        return uid in self._deleted

    def oldest_gated_seconds(self) -> float:
        """How long the longest-waiting pod held by the bridge's gate alone (another gate's
        holder, Kueue say, is not Slurm's wait) has existed; 0 when none."""
        created = [v.created for v in self.views()
                   if v.gated and not v.held and not v.deleting and v.created is not None]
        if not created:
            return 0.0
        return max(0.0, (datetime.now(UTC) - min(created)).total_seconds())

    def follow(self, follower: PodFollower) -> None:
        self._followers.append(follower)

    def unfollow(self, follower: PodFollower) -> None:
        if follower in self._followers:
            self._followers.remove(follower)

    def relisting(self) -> None:
        for follower in list(self._followers):
            follower.relisted()

    def passing(self, event: str, obj: Any) -> None:
        for follower in list(self._followers):
            try:
                follower.pod_changed(event, obj)
            except Exception:  # one follower's bug must not stop the cache nor the others
                log.exception("podcache.follower_failed", follower=type(follower).__name__)

    def removed(self, view: PodView) -> None:
        super().removed(view)
        now = time.monotonic()
        self._deleted[view.uid] = now
        while self._deleted:  # oldest first (insertion order): stop at a young one
            uid, when = next(iter(self._deleted.items()))
            if when > now - DELETED_MEMORY_SECONDS:
                break
            del self._deleted[uid]
