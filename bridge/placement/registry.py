"""The placement's tables of pods, one lifetime each (a group's seats: seats.py)."""

import time
from collections.abc import Callable

from bridge.jobs.owner import Owner
from bridge.link.views import PodView


class SeenPods:
    """The pods filter and intake met, as last read (the job recorded on each included), by
    owner: kept until their owner's job is cancelled or left Slurm's listing long ago."""

    def __init__(self) -> None:
        self._by_uid: dict[str, PodView] = {}
        self._by_owner: dict[Owner, dict[str, PodView]] = {}
        self._touched: dict[Owner, float] = {}  # owner → monotonic time it was last seen

    def remember(self, pod: PodView) -> None:
        before = self._by_uid.get(pod.uid)
        if before is not pod:
            if before is not None and before.owner != pod.owner:  # relabelled before its job
                self._by_owner.get(before.owner, {}).pop(pod.uid, None)
            self._by_uid[pod.uid] = pod
            self._by_owner.setdefault(pod.owner, {})[pod.uid] = pod
        self._touched[pod.owner] = time.monotonic()

    def get(self, pod_uid: str) -> PodView | None:
        return self._by_uid.get(pod_uid)

    def owner_of(self, pod_uid: str) -> Owner | None:
        pod = self._by_uid.get(pod_uid)
        return pod.owner if pod is not None else None

    def pods_of(self, owner: Owner) -> list[PodView]:
        return list(self._by_owner.get(owner, {}).values())

    def forget_owner(self, owner: Owner) -> None:
        """The owner's job is gone for good: nothing left to requeue or place."""
        for pod_uid in self._by_owner.pop(owner, {}):
            self._by_uid.pop(pod_uid, None)
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


class ParkedPods:
    """Pods kube-scheduler set aside after a "waiting" filter: each is owed a requeue nudge
    until it binds or its job's allocation is written on it."""

    def __init__(self) -> None:
        self._uids: set[str] = set()

    def park(self, pod_uid: str) -> None:
        self._uids.add(pod_uid)

    def parked(self, pod_uid: str) -> bool:
        return pod_uid in self._uids

    def unpark(self, pod_uid: str) -> None:
        self._uids.discard(pod_uid)

    def keep(self, known: Callable[[str], object]) -> None:
        """Drop the pods the bridge forgot (deleted before they were nudged)."""
        self._uids = {u for u in self._uids if known(u)}


class SlurmTrouble:
    """Pods turned away because Slurm could not be asked: nudged once it answers again."""

    def __init__(self) -> None:
        self._pods: dict[str, PodView] = {}

    def note(self, pod: PodView) -> None:
        self._pods[pod.uid] = pod

    def take(self) -> list[PodView]:
        taken, self._pods = list(self._pods.values()), {}
        return taken
