"""The core's view of Slurm objects, independent of the data-parser version."""

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from bridge.jobs.owner import Owner
from bridge.jobs.request import TopologyAsk

# Slurm's reason for a job it has not looked at yet (and the bridge's before reading one).
NO_REASON = "None"


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"

    @property
    def is_live(self) -> bool:
        """Still holds (or may yet hold) resources."""
        return self in _LIVE

    @property
    def holds_allocation(self) -> bool:
        """Holds its nodes and GPUs now (a live job may be pending, a requeued one too)."""
        return self in _HOLDING


_LIVE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})
_HOLDING = _LIVE - {JobState.PENDING}


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where Slurm put a job: nodes in Slurm's order, GPU indices per node."""

    nodes: tuple[str, ...]
    gpu_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Of ``gpu_ids``, the GPUs held as shards (other jobs' shards may share them), per node;
    # read from ``gres_detail`` (``GET /resources`` does not say).
    shared: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # A heterogeneous job's nodes per component, in offset order (``nodes`` is all of them
    # in that order; Slurm gives no node to two components); () for an ordinary job.
    components: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class ComponentState:
    """One component of a heterogeneous job as Slurm lists it: each has its own state and
    reason (its members are told their own), and its own record of Slurm's preemption signal
    and end (a time limit ends one component alone)."""

    state: JobState
    reason: str
    ended_as: JobState | None = None  # as SlurmJob.ended_as: ended, its nodes not free yet
    preempting: bool = False  # as SlurmJob.preempting: signalled, in its QOS's GraceTime

    @property
    def ended(self) -> bool:
        return not self.state.is_live or self.ended_as is not None


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: int
    name: str
    state: JobState
    reason: str  # Slurm's state_reason, "None" when there is none
    owner: Owner | None  # from the comment marker; None: a native job
    allocation: Allocation | None  # None until Slurm allocated it
    partition: str = ""
    user: str = ""
    account: str = ""
    qos: str = ""
    # Slurm signalled preemption (QOS preemption with a GraceTime): the job still runs for
    # the grace time, then ends PREEMPTED; the pod must stop within it.
    preempting: bool = False
    # A pending job's start as Slurm's backfill expects it (its start_time), and when that
    # backfill cycle ran (the answer's last_backfill): what a waiting pod is told besides
    # the reason.  None when Slurm has no estimate.
    expected_start: datetime | None = None
    backfill_at: datetime | None = None
    # Why the allocation Slurm answered cannot be read ("": it could): the job is still its
    # owner's, and an unknown allocation is never a reason to release, bind or evict.
    unreadable: str = ""
    topology: TopologyAsk | None = None  # the switches or segment it asked Slurm for
    # How a COMPLETING job ended (Slurm lists e.g. [CANCELLED, COMPLETING] until its nodes
    # are free): what its pod is told; None otherwise.
    ended_as: JobState | None = None
    # Its comment's owner marker lacks the bridge's signature (bridge/slurm/signing.py) and
    # its Slurm user is not the bridge's own: whatever owner it names, no placeholder.
    unsigned: bool = False
    # A heterogeneous job's component count (0: an ordinary job): its allocation is read
    # from all of them, never from the leader's alone.
    het_components: int = 0
    # Each component's state and reason as Slurm read them, in offset order (() until read,
    # and for an ordinary job).
    parts: tuple[ComponentState, ...] = ()

    @property
    def state_text(self) -> str:
        """``CANCELLED, COMPLETING`` while an ended job still completes, else the state."""
        return f"{self.ended_as}, {self.state}" if self.ended_as else str(self.state)

    @property
    def end_state(self) -> JobState:
        """How Slurm ended it (while it completes too), else its state."""
        return self.ended_as or self.state


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    states: frozenset[str]  # e.g. {"IDLE"}, {"MIXED", "DRAIN"}
    reason: str  # admin's reason ("" when none)
    cpus: int
    memory_mb: int
    gres: str  # as configured, e.g. "gpu:8"
    # (topology, unit) pairs, e.g. (("tree", "leaf1"), ("block", "b1")): what slurmrestd shows of
    # Slurm's topology (25.05+, a node's Topology=); () on 24.11 or a node that names none.
    topology: tuple[tuple[str, str], ...] = ()
    features: frozenset[str] = frozenset()
    partitions: frozenset[str] = frozenset()  # the partitions the node is in

    @property
    def unavailable(self) -> bool:
        return bool(self.states & {"DRAIN", "DOWN", "FAIL", "FAILING", "NOT_RESPONDING"})


@dataclass(frozen=True, slots=True)
class NodeTable:
    """Slurm's nodes as one answer listed them, and slurmctld's clock (whole seconds) when it
    answered: where to ask "changed since?" from (None: the answer did not say)."""

    nodes: tuple[SlurmNode, ...]
    read_at: int | None


@dataclass(frozen=True, slots=True)
class SlurmQos:
    name: str
    grace_seconds: int  # GraceTime: how long a preempted job keeps running once signalled
    preempts: tuple[str, ...]  # the QOS whose jobs this one may preempt


@dataclass(frozen=True, slots=True)
class Accounting:
    """What slurmdbd knows of the names a tenancy uses (``slurmbridge doctor``, grace checks)."""

    accounts: frozenset[str]
    associations: frozenset[tuple[str, str]]  # (user, account)
    qos: dict[str, SlurmQos]

    def preemptable(self, qos: str) -> bool:
        """Some QOS may preempt jobs of ``qos``."""
        return any(qos in other.preempts for other in self.qos.values())
