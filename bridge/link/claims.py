"""Who submits an owner's job, and which node each group member gets: records on the
API server, written with a resourceVersion precondition, so they hold across replicas
and outlive the replica that wrote them.

The claim object is the pod itself for a lone pod, and a Lease per group (records.py).
Before submitting, a replica writes ``slurmbridge.io/submitting=<identity>@<time>`` and
the owner on it with the object's resourceVersion as precondition: of two replicas racing
on the same version, exactly one write succeeds.  The loser answers "waiting" and adopts
the job once its id is recorded (on the pod with its job's first status, bound.py;
on a group's Lease right after submitting).  A claim whose holder died is taken over after
``stale_after`` seconds, and the taker first looks in Slurm for a job the holder may
have submitted before dying; anything a crash still leaves twice is cancelled by the
next resync (index.py).

A group's Lease also records the node each member got (``slurmbridge.io/group-nodes``,
JSON, written the same way), so two replicas filtering two members at once never give
out one node twice, and a replica that takes over binds each member where it was put.
"""

import json
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from bridge import keys
from bridge.jobs.owner import GroupOwner, Owner, owner_text
from bridge.kube.apierrors import is_not_found
from bridge.link.records import (
    Annotations,
    LeaseRecord,
    LeaseRecordKube,
    Outdated,
    PodRecord,
    PodRecordKube,
    Record,
)
from bridge.ports import KubeDelete, KubeList

log = structlog.get_logger(__name__)

_WRITE_ATTEMPTS = 5  # precondition failures in a row before a member's reservation gives up


class ClaimLost(Exception):
    """Another replica submits this owner's job: answer "waiting".

    ``retry_in`` is how long until that claim is stale and may be taken over (its
    holder may have died between claiming and recording the job id).
    """

    def __init__(self, message: str, retry_in: float) -> None:
        super().__init__(message)
        self.retry_in = retry_in


class AlreadySubmitted(Exception):
    """The job id is recorded (by another replica): adopt, don't submit."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} is recorded")
        self.job_id = job_id


class ClaimsKube(PodRecordKube, LeaseRecordKube, KubeList, KubeDelete, Protocol):
    """A claim's record (on the pod or the group's Lease); stale group Leases listed and
    deleted."""


class Claims:
    def __init__(
        self, kube: ClaimsKube, identity: str, *, namespace: str, stale_after: float = 30.0
    ) -> None:
        self._kube = kube
        self.identity = identity
        self._namespace = namespace  # where group claims live: the bridge's own namespace
        self._stale_after = stale_after

    def _record(self, pod: Pod, owner: Owner) -> Record:
        if isinstance(owner, GroupOwner):
            return LeaseRecord(self._kube, self._namespace, owner, self.identity)
        return PodRecord(self._kube, pod, owner)

    async def claim(self, pod: Pod, owner: Owner, *, replacing: int | None = None) -> bool:
        """Claim the owner's submission, reading once more if our copy is out of date.

        True when the claim was taken over from another replica (stale): that replica may
        have submitted before it died, so the caller looks in Slurm before submitting.
        ``replacing``: a recorded job id that ended, which the new job replaces.
        """
        record = self._record(pod, owner)
        try:
            return await self._claim(record, owner, replacing)
        except Outdated:
            return await self._claim(record, owner, replacing)

    async def _claim(self, record: Record, owner: Owner, replacing: int | None) -> bool:
        annotations, version = await record.read()
        recorded = annotations.get(keys.JOB_ID, "")
        if recorded.isdigit() and int(recorded) != replacing:
            raise AlreadySubmitted(int(recorded))
        held = annotations.get(keys.SUBMITTING, "")
        mine = not held or held.startswith(f"{self.identity}@")
        if not mine and not self._stale(held):
            raise ClaimLost(
                f"bridge replica {held.split('@')[0]} is submitting this pod's job",
                retry_in=self._stale_after - self._age(held),
            )
        stamp = f"{self.identity}@{int(time.time())}"
        changes: dict[str, str | None] = {keys.SUBMITTING: stamp, keys.OWNER: owner_text(owner)}
        if recorded:  # the ended job's id goes: the claim is for its successor
            changes[keys.JOB_ID] = None
        await record.write(changes, version)
        return not mine

    async def submitted(self, pod: Pod, owner: Owner, job_id: int) -> None:
        """Record a group's job id on its claim (a lone pod's: annotations.record_changes).

        If this fails the claim goes stale and its taker looks in Slurm first.
        """
        if not isinstance(owner, GroupOwner):
            return
        record = self._record(pod, owner)
        for _ in range(_WRITE_ATTEMPTS):
            _, version = await record.read()
            try:
                await record.write({keys.JOB_ID: str(job_id), keys.SUBMITTING: None}, version)
                return
            except Outdated:
                continue

    async def member_node(
        self, pod: Pod, owner: Owner, job_id: int, seat: Callable[[dict[str, str]], str],
    ) -> str:
        """The node of group job ``job_id`` reserved for this member: its earlier one, else
        what ``seat`` gives it from the other members' reservations (pod UID → node; it
        raises when there is none), recorded before any replica may bind it there."""
        meta = pod.metadata
        assert meta is not None and meta.uid
        record = self._record(pod, owner)
        for _ in range(_WRITE_ATTEMPTS):
            annotations, version = await record.read()
            taken = _member_nodes(annotations, job_id)
            if meta.uid in taken:
                return taken[meta.uid]
            free = seat(taken)
            others = {uid: node for uid, node in taken.items() if node != free}
            table = json.dumps({"job": job_id, "nodes": {**others, meta.uid: free}})
            try:
                await record.write({keys.GROUP_NODES: table, keys.JOB_ID: str(job_id)}, version)
            except Outdated:  # another member was given a node meanwhile: look again
                continue
            return free
        raise ClaimLost("the group's node reservations keep changing", retry_in=1.0)

    async def prune_groups(self, job_live: Callable[[int], Awaitable[bool]]) -> list[str]:
        """Delete group claims whose job is gone (or that never got one, long after their
        claim went stale): a group created again under its name starts afresh."""
        pruned = []
        async for lease in self._kube.list(
            Lease, namespace=self._namespace, labels={keys.GROUP_CLAIM: "true"}
        ):
            meta = lease.metadata or ObjectMeta()
            annotations = meta.annotations or {}
            recorded = annotations.get(keys.JOB_ID, "")
            if recorded.isdigit():
                gone = not await job_live(int(recorded))
            else:
                gone = self._age(annotations.get(keys.SUBMITTING, "")) > 2 * self._stale_after
            if gone and meta.name:
                try:
                    await self._kube.delete(Lease, meta.name, namespace=self._namespace)
                except ApiError as exc:
                    if not is_not_found(exc):
                        raise
                pruned.append(annotations.get(keys.OWNER, meta.name))
        if pruned:
            log.info("claims.groups_pruned", owners=pruned)
        return pruned

    def _stale(self, held: str) -> bool:
        return self._age(held) > self._stale_after

    @staticmethod
    def _age(held: str) -> float:
        _, _, stamp = held.rpartition("@")
        return time.time() - int(stamp) if stamp.isdigit() else float("inf")


def _member_nodes(annotations: Annotations, job_id: int) -> dict[str, str]:
    """Member pod UID → Slurm node, as recorded for ``job_id`` (a new job starts empty)."""
    try:
        table = json.loads(annotations.get(keys.GROUP_NODES) or "{}")
    except json.JSONDecodeError:
        return {}
    if not isinstance(table, dict) or table.get("job") != job_id:
        return {}
    nodes = table.get("nodes")
    if not isinstance(nodes, dict):
        return {}
    return {str(uid): str(node) for uid, node in nodes.items()}
