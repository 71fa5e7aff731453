"""Slurm jobs as the bridge reads them, for tests: one builder instead of hand-built
``SlurmJob(...)`` calls naming all six positional fields.

    JobBuilder(7).build()                                    # k8s:ns/p, pod uid-1's, pending
    JobBuilder(12).running("node1", gpus=(4, 5)).owner(GroupOwner("ns", "g")).build()
    JobBuilder(103, "native").owner(None).state(JobState.PENDING, "Priority").build()

Defaults: job 7 named ``k8s:ns/p``, owned by pod ``uid-1``, PENDING with Slurm's "None"
reason, no allocation, no partition, user, account or QOS.
"""

import dataclasses
from datetime import datetime
from typing import Any, Self

from bridge.jobs.owner import Owner, PodOwner
from bridge.jobs.request import TopologyAsk
from bridge.slurm.types import NO_REASON, Allocation, JobState, SlurmJob


class JobBuilder:
    def __init__(self, job_id: int = 7, name: str = "k8s:ns/p") -> None:
        self._job = SlurmJob(job_id, name, JobState.PENDING, NO_REASON, PodOwner("uid-1"), None)

    def _with(self, **fields: Any) -> Self:
        self._job = dataclasses.replace(self._job, **fields)
        return self

    def state(self, state: JobState, reason: str = NO_REASON) -> Self:
        return self._with(state=state, reason=reason)

    def owner(self, owner: Owner | None) -> Self:
        """Whose job it is (None: a native job, no marker in its comment)."""
        return self._with(owner=owner)

    def unsigned(self) -> Self:
        """Its owner marker lacks the bridge's signature: written by someone else."""
        return self._with(unsigned=True)

    def allocation(self, allocation: Allocation | None) -> Self:
        return self._with(allocation=allocation)

    def running(self, *nodes: str, gpus: tuple[int, ...] = ()) -> Self:
        """RUNNING on ``nodes`` (none: no allocation read), ``gpus`` on each of them."""
        allocation = Allocation(nodes, {n: gpus for n in nodes} if gpus else {}) if nodes else None
        return self._with(state=JobState.RUNNING, reason=NO_REASON, allocation=allocation)

    def tenancy(self, *, user: str = "", account: str = "", qos: str = "",
                partition: str = "") -> Self:
        """The Slurm user, account, QOS and partition it runs under."""
        return self._with(user=user, account=account, qos=qos, partition=partition)

    def qos(self, qos: str) -> Self:
        return self._with(qos=qos)

    def preempting(self) -> Self:
        """Signalled for preemption, still in its QOS's GraceTime."""
        return self._with(preempting=True)

    def expected_start(self, start: datetime | None, backfill_at: datetime | None = None) -> Self:
        return self._with(expected_start=start, backfill_at=backfill_at)

    def unreadable(self, why: str) -> Self:
        """Its allocation, as Slurm answered it, could not be read."""
        return self._with(unreadable=why)

    def topology(self, ask: TopologyAsk | None) -> Self:
        return self._with(topology=ask)

    def ended_as(self, state: JobState) -> Self:
        """COMPLETING after ending as ``state``."""
        return self._with(state=JobState.COMPLETING, ended_as=state)

    def build(self) -> SlurmJob:
        return self._job
