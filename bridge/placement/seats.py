"""A group's seats: one per node of its running job, each given to one live member at most.

Seat ``i`` is Slurm's ``i``-th node of the job (of a heterogeneous job: of the member's own
component, ``i`` its index within it: components.py), with that node's GPUs: the member of rank
``i`` sits there, a member without a rank at the first seat nobody holds and no live member
is ranked for.  A released member holds the seat its release recorded for this job
(``slurmbridge.io/slurm-node``) until it has finished, or was deleted with nothing left
running: until then no other pod is released there, whatever rank it claims, or two pods
would share one GPU set.  A member whose seat is held, or whose rank is beyond the job's
nodes, stays gated and is told why.

The release computes them from the group's members as listed, so any leader reaches the same
answer, and keeps them in the one store (``SeatTable``) that filter and bind read a member's
node from (and add to, from the seat recorded on a member they read): the one place that says
who sits where.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.jobs.components import group_components
from bridge.jobs.group_ask import counted, members_mixed
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import pod_group
from bridge.jobs.owner import GroupOwner, Owner
from bridge.link.gate import gated, released_node
from bridge.link.ownership import owner_key
from bridge.link.views import view_of
from bridge.ports import KubeList
from bridge.slurm.types import Allocation, SlurmJob


@dataclass(frozen=True, slots=True)
class Member:
    """A member as the seats see it: ``seat``, the node it holds (released there and still
    running); ``live``: neither finished nor gone, so its rank stays its own."""

    name: str
    uid: str
    rank: int | None
    seat: str | None
    live: bool
    unreadable: str | None = None  # why its group labels cannot be read: no seat at all


class SeatRefused(Exception):
    """No seat for this member now; the message says why and what to do."""


async def members_of(kube: KubeList, owner: GroupOwner) -> list[Pod]:
    """The group's pods as the API server lists them now (its label, its recorded owner)."""
    return [p async for p in kube.list(
        PodResource, namespace=owner.namespace, labels={keys.GROUP: owner.group}
    ) if owner_key(p) == owner]


def members_differ(owner: GroupOwner, members: list[Pod]) -> str | None:
    """Why the group's live members cannot be one job (None: each component's ask alike)."""
    return members_mixed(owner.group, [p for p in members if counted(p)])


def member_of(pod: Pod, job_id: int, offset: int = 0) -> Member:
    """``pod`` (a listed member) as a seat holder or seeker of job ``job_id``; its rank
    counted from ``offset`` (its component's first rank)."""
    view = view_of(pod)
    holds = not gated(pod) and not view.releases_job
    seat = released_node(pod, job_id) if holds else None
    try:
        group = pod_group(pod.metadata.labels if pod.metadata else None)
    except InvalidPodRequest as err:  # labels the webhook would have refused
        return Member(view.name, view.uid, None, seat, counted(pod), f"pod {view.name}: {err}")
    rank = group.rank - offset if group and group.rank is not None else None
    return Member(view.name, view.uid, rank, seat, counted(pod))


def member_slot(
    allocated: tuple[str, ...], taken: set[str], rank: int | None,
    ranked: frozenset[int] = frozenset(),
) -> str | None:
    """The seat rule: a member of ``rank`` sits at Slurm's ``rank``-th node (rank 0 at the
    first) unless it is ``taken``; one without a rank at the first node neither taken nor
    ``ranked`` for a live member.  None: no seat."""
    if rank is not None:
        node = allocated[rank] if rank < len(allocated) else None
        return node if node not in taken else None
    free = (n for i, n in enumerate(allocated) if n not in taken and i not in ranked)
    return next(free, None)


class Seats:
    """The seats of one job (of one component of a heterogeneous job): seat ``i`` is Slurm's
    ``i``-th node of ``allocated``, held by one pod (uid) at most, and a pod holds one seat
    at most."""

    def __init__(
        self, group: str, job_id: int, allocated: tuple[str, ...], members: Iterable[Member],
    ) -> None:
        """``allocated``: the job's nodes in Slurm's order; ``members``: every listed member."""
        self._group = group
        self._job_id = job_id
        self._allocated = allocated
        self._holder: dict[str, tuple[str, str]] = {}  # node → uid and name holding its seat
        self._seat: dict[str, str] = {}  # uid → the node of its seat
        listed = list(members)
        nodes = frozenset(allocated)
        for member in listed:
            if member.seat in nodes:
                self.hold(member.uid, member.name, member.seat)
        self._ranked = frozenset(m.rank for m in listed if m.live and m.rank is not None)

    def seat_of(self, uid: str) -> str | None:
        return self._seat.get(uid)

    def hold(self, uid: str, name: str, node: str) -> None:
        """Pod ``uid`` (``name``) sits at ``node``, one of the job's (a seat recorded on it):
        whoever held that seat before no longer does, nor does it hold another."""
        was = self._seat.get(uid)
        if was is not None:
            del self._holder[was]
        before = self._holder.get(node)
        if before is not None:
            del self._seat[before[0]]
        self._holder[node] = uid, name
        self._seat[uid] = node

    def vacate(self, uid: str) -> None:
        """The pod is gone, or its seat was not recorded on it: the seat is free again."""
        node = self._seat.pop(uid, None)
        if node is not None:
            del self._holder[node]

    def take(self, member: Member) -> str:
        """The node ``member`` (waiting) sits at, held by it from now on; raises SeatRefused."""
        if member.unreadable is not None:
            raise SeatRefused(member.unreadable)
        taken = {n for n, (uid, _) in self._holder.items() if uid != member.uid}
        node = member_slot(self._allocated, taken, member.rank, self._ranked)
        if node is None:
            raise SeatRefused(self._refusal(member))
        if self._seat.get(member.uid) != node:
            self.hold(member.uid, member.name, node)
        return node

    def _refusal(self, member: Member) -> str:
        where = f"group {self._group} (Slurm job {self._job_id})"
        if member.rank is None:
            return (
                f"pod {member.name} joins {where}, but every seat of its job "
                f"({','.join(self._allocated)}) is held by, or ranked for, another member: is "
                f"{keys.GROUP_SIZE} too small? It waits, gated, until a member has finished"
            )
        if member.rank >= len(self._allocated):
            return (
                f"pod {member.name} has {keys.GROUP_RANK} {member.rank}, beyond the "
                f"{len(self._allocated)} node(s) of {where}: ranks run from 0 to "
                f"{len(self._allocated) - 1}; it waits, gated: delete it, or fix its labels"
            )
        node = self._allocated[member.rank]
        return (
            f"pod {member.name} has {keys.GROUP_RANK} {member.rank} of {where}, whose seat "
            f"(Slurm node {node} and its GPUs) pod {self._holder[node][1]} holds and still "
            "runs on: it waits, gated, until that pod has finished; delete whichever of the "
            "two is the duplicate"
        )


class Seating:
    """A group job's seats: one set per component of a heterogeneous job, whose members sit
    among their own component's nodes alone; one set for an ordinary job."""

    def __init__(
        self, group: str, job_id: int, allocation: Allocation, members: Sequence[Pod]
    ) -> None:
        self.job_id = job_id
        self._split = bool(allocation.components)
        parts = allocation.components or (allocation.nodes,)
        self._seats = [Seats(group, job_id, nodes, [self.member(p) for p in members
                                                    if self._where(p)[0] == i])
                       for i, nodes in enumerate(parts)]
        self._seats_at = {n: self._seats[i] for i, nodes in enumerate(parts) for n in nodes}

    def member(self, pod: Pod) -> Member:
        return member_of(pod, self.job_id, self._where(pod)[1])

    def seat_of(self, uid: str) -> str | None:
        for seats in self._seats:
            node = seats.seat_of(uid)
            if node is not None:
                return node
        return None

    def hold(self, uid: str, node: str) -> None:
        """The pod ``uid`` holds ``node``'s seat, as recorded on it (filter read it)."""
        seats = self._seats_at.get(node)
        if seats is not None and seats.seat_of(uid) != node:  # filter's every call: no change
            seats.hold(uid, uid, node)

    def vacate(self, uid: str) -> None:
        for seats in self._seats:
            seats.vacate(uid)

    def take(self, pod: Pod) -> str:
        """The node ``pod`` (waiting) sits at; raises SeatRefused."""
        part, _ = self._where(pod)
        if not 0 <= part < len(self._seats):
            name = view_of(pod).name
            raise SeatRefused(
                f"pod {name} names no component of Slurm job {self.job_id}, a heterogeneous "
                f"job of {len(self._seats)} components: its {keys.GROUP_COMPONENT} label and "
                f"{keys.GROUP_COMPONENTS} annotation must be its group's; it waits, gated")
        return self._seats[part].take(self.member(pod))

    def _where(self, pod: Pod) -> tuple[int, int]:
        """The member's component (its index in the job) and that component's first rank."""
        if not self._split:
            return 0, 0
        meta = pod.metadata
        try:
            found = group_components(meta.labels if meta else None,
                                     meta.annotations if meta else None)
        except InvalidPodRequest:
            found = None
        if found is None:
            return -1, 0
        return found.parts.index(found.own), found.own.offset


class SeatTable:
    """Every group's seats, one ``Seating`` per group for its current job: the one store the
    release gives seats from and filter and bind read a member's node from."""

    def __init__(self) -> None:
        self._by_owner: dict[Owner, Seating] = {}

    def seated(self, owner: GroupOwner, job: SlurmJob, members: Sequence[Pod]) -> Seating:
        """The group's seats as its members, listed now, hold them (the release): a member
        gone, finished or deleted with nothing running holds none any more."""
        assert job.allocation is not None
        seating = Seating(owner.group, job.job_id, job.allocation, members)
        self._by_owner[owner] = seating
        return seating

    def hold(self, owner: GroupOwner, job: SlurmJob, uid: str, node: str) -> None:
        """A member's seat read from the record on it (filter, on any replica)."""
        seating = self._by_owner.get(owner)
        if seating is None or seating.job_id != job.job_id:
            if job.allocation is None:
                return
            seating = self._by_owner[owner] = Seating(owner.group, job.job_id,
                                                      job.allocation, [])
        seating.hold(uid, node)

    def seat_of(self, owner: GroupOwner, job_id: int, uid: str) -> str | None:
        seating = self._by_owner.get(owner)
        return seating.seat_of(uid) if seating is not None and seating.job_id == job_id else None

    def prune(self, tracked: Callable[[int], bool]) -> None:
        """Drop the seats of the jobs the index no longer ``tracked``: they hold no node."""
        self._by_owner = {o: s for o, s in self._by_owner.items() if tracked(s.job_id)}
