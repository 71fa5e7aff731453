"""What trying to place a pod came to, as types: filter, intake and bind tell the kinds
apart by class, never by the wording of a message (which is for the pod's owner)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from bridge.jobs.owner import Owner


class Outcome(StrEnum):
    ALLOCATED = "allocated"  # the job runs: the pod goes to its node
    PENDING = "pending"  # Slurm has not started the job yet, or the apiserver is away
    REFUSED = "refused"  # it will not be placed as it is (Slurm or policy said no, job ended)
    SLURM_UNAVAILABLE = "slurm_unavailable"  # slurmrestd did not answer usefully

    @property
    def metric_label(self) -> str:
        """The label of ``slurmbridge_filter_total``: allocated, waiting or refused."""
        if self is Outcome.PENDING:
            return "waiting"
        return "allocated" if self is Outcome.ALLOCATED else "refused"


class PlacementError(Exception):
    """The pod cannot be placed (yet); the message is meant for the pod's owner."""

    outcome = Outcome.REFUSED


class Refused(PlacementError):
    """Not as things are: someone must change the pod, the tenancy or Slurm."""


class Pending(PlacementError):
    """Not yet: asking again later may succeed without anyone doing anything."""

    outcome = Outcome.PENDING


@dataclass(frozen=True, slots=True)
class Verdict:
    """Filter outcome: nodes kept; or none, every candidate failed with ``reason``, a
    message the user will read.

    The candidates are held, not copied into a map: kube-scheduler sends thousands and
    the reason is the same for each, so the edge writes the answer from these (B3).
    """

    outcome: Outcome
    keep: list[str] = field(default_factory=list)
    candidates: Sequence[str] = ()
    reason: str = ""
    message: str = ""

    def failed(self) -> list[str]:
        """The candidates kube-scheduler is told failed: every one when none is kept (their
        statuses name the reason and, unresolvable, keep its preemption from evicting pods
        for this one), none when one is kept (it schedules there and never reads them: a
        list of thousands would only cost both sides, B3)."""
        return [] if self.keep else list(self.candidates)

    @property
    def unresolvable(self) -> dict[str, str]:
        """Each candidate not kept, with the reason."""
        return dict.fromkeys(self.failed(), self.reason)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: Kubernetes node, Slurm node, job and GPU indices."""

    job_id: int
    owner: Owner
    kube_node: str
    slurm_node: str
    gpu_ids: str
