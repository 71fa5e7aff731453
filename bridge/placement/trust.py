"""Whose placeholder a job read from Slurm is, as the job index asks it of every job.

The owner marker must carry the bridge's signature (``bridge/slurm/signing.py``; a job of the
bridge's own Slurm user needs none), and the tenancy decides (``bridge/policy/tenancy.py``,
``owner_trust``: the job's Slurm user must be the one the owner's namespace runs as, or the
bridge's own); this hands it the namespace of the pod a UID owner names, from the pod cache,
and tells each forged job once.  Without the signature a job naming the UID of a pod deleted
since would pass for a placeholder of the namespace in its name, and be cancelled as orphaned.
A job it does not believe is no placeholder to the index: never adopted, kept, released into or
cancelled.
"""

import dataclasses
from typing import Protocol

import structlog

from bridge.jobs.owner import PodOwner
from bridge.link.views import PodView
from bridge.policy.tenancy import OwnerTrust
from bridge.slurm.types import SlurmJob

log = structlog.get_logger(__name__)


class KnownPods(Protocol):
    """The bridge's pods by UID (the pod cache)."""

    def get(self, key: str) -> PodView | None: ...


class JobTrust:
    def __init__(self, trust: OwnerTrust, pods: KnownPods) -> None:
        self._trust = trust
        self._pods = pods
        self._told: set[int] = set()  # forged jobs already logged

    def screened(self, job: SlurmJob) -> SlurmJob:
        """``job`` while the owner in its comment is believed, else a job like any native one."""
        if job.owner is None or self._believed(job):
            return job
        return dataclasses.replace(job, owner=None, allocation=None, unreadable="",
                                   topology=None)

    def _believed(self, job: SlurmJob) -> bool:
        owner = job.owner
        assert owner is not None
        pod = self._pods.get(owner.uid) if isinstance(owner, PodOwner) else None
        if not job.unsigned and self._trust(job.user, owner, job.name,
                                            pod.namespace if pod else None):
            return True
        if job.job_id not in self._told:
            self._told.add(job.job_id)
            log.warning(
                "placement.forged_placeholder_ignored", job_id=job.job_id, job_name=job.name,
                user=job.user, owner=str(owner), pod=str(pod) if pod else None,
                unsigned=job.unsigned,
                hint="its comment's owner marker lacks the bridge's signature, or names an owner "
                "whose namespace the tenancy does not run as this Slurm user: the bridge leaves "
                "the job alone; an admin asks its user why",
            )
        return False
