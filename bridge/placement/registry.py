"""Which pods wait on which placeholder job, and each group's seats (seats.py)."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from bridge.jobs.owner import Owner
from bridge.link.ownership import LinkedPod
from bridge.placement.seats import SeatTable


@dataclass(frozen=True, slots=True)
class PodKey:
    namespace: str
    name: str
    uid: str


class PodRegistry:
    """Remembers pods seen by filter so the bridge can requeue them when Slurm allocates."""

    def __init__(self) -> None:
        self._by_owner: dict[Owner, dict[str, LinkedPod]] = {}
        self._owner_of: dict[str, Owner] = {}  # pod uid → owner
        self._created: dict[str, datetime] = {}  # pod uid → creationTimestamp (bind latency)
        self.seats = SeatTable()  # each group's seats: who holds which of its job's nodes
        # pods refused because Slurm could not be asked: requeued when it answers again
        self._slurm_trouble: dict[str, LinkedPod] = {}
        # pods whose filter answered "waiting": kube-scheduler parked them until they change
        self._parked: set[str] = set()
        self._touched: dict[Owner, float] = {}  # owner → monotonic time it was last remembered
        # pod uid → the job recorded on it (its release or Binding): the pod's job for good,
        # whichever other live job of its owner the index holds meanwhile
        self._job_of: dict[str, int] = {}

    def remember(self, pod: LinkedPod, created: datetime | None = None) -> None:
        """``created``: the pod's creationTimestamp (bind latency)."""
        before = self._owner_of.get(pod.uid)
        if before is not None and before != pod.owner:  # relabelled before it had a job
            self._by_owner.get(before, {}).pop(pod.uid, None)
        self._by_owner.setdefault(pod.owner, {})[pod.uid] = pod
        self._owner_of[pod.uid] = pod.owner
        self._touched[pod.owner] = time.monotonic()
        if created is not None:
            self._created[pod.uid] = created

    def created_at(self, pod_uid: str) -> datetime | None:
        return self._created.get(pod_uid)

    def owner_of(self, pod_uid: str) -> Owner | None:
        return self._owner_of.get(pod_uid)

    def note_slurm_trouble(self, pod: LinkedPod) -> None:
        self._slurm_trouble[pod.uid] = pod

    def take_slurm_trouble(self) -> list[LinkedPod]:
        taken, self._slurm_trouble = list(self._slurm_trouble.values()), {}
        return taken

    def park(self, pod_uid: str) -> None:
        self._parked.add(pod_uid)

    def parked(self, pod_uid: str) -> bool:
        """kube-scheduler set this pod aside after a "waiting" filter and needs a nudge."""
        return pod_uid in self._parked

    def unpark(self, pod_uid: str) -> None:
        self._parked.discard(pod_uid)

    def pods_of(self, owner: Owner) -> list[LinkedPod]:
        return list(self._by_owner.get(owner, {}).values())

    def forget_owner(self, owner: Owner) -> None:
        """The owner's job is gone for good: nothing left to requeue or reserve."""
        for pod_uid in self._by_owner.pop(owner, {}):
            self._parked.discard(pod_uid)
            self._owner_of.pop(pod_uid, None)
            self._created.pop(pod_uid, None)
            self._job_of.pop(pod_uid, None)
        self.seats.forget(owner)
        self._touched.pop(owner, None)

    def prune(self, still_tracked: Callable[[Owner], bool], idle_seconds: float) -> int:
        """Forget owners idle for ``idle_seconds`` whose job the index no longer tracks (it
        ended and left Slurm's listing): a long-running bridge must not grow with every pod
        it ever saw.  Returns how many were forgotten."""
        cutoff = time.monotonic() - idle_seconds
        idle = [o for o, t in self._touched.items() if t <= cutoff and not still_tracked(o)]
        for owner in idle:
            self.forget_owner(owner)
        return len(idle)

    def tie(self, pod_uid: str, job_id: int) -> None:
        """The job recorded on this pod: bind uses it, not the owner's latest in the index."""
        self._job_of[pod_uid] = job_id

    def tied_job(self, pod_uid: str) -> int | None:
        return self._job_of.get(pod_uid)
