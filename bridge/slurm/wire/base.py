"""Response models shared by every supported data parser, and the family contract."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bridge.jobs.request import JobRequest, SlurmPlacement, TopologyAsk


class WireModel(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class NoVal(WireModel):
    """Slurm's optional number: ``{"set": bool, "infinite": bool, "number": n}``."""

    set: bool = False
    infinite: bool = False
    number: int = 0

    @classmethod
    def of(cls, value: int) -> "NoVal":
        return cls(set=True, number=value)


class ErrorEntry(WireModel):
    description: str = ""
    error: str = ""
    error_number: int = 0
    source: str = ""

    def text(self) -> str:
        parts = [p for p in (self.error, self.description) if p and p != "No error"]
        return ": ".join(dict.fromkeys(parts)) or f"error {self.error_number}"


class Envelope(WireModel):
    errors: list[ErrorEntry] = Field(default_factory=list)
    warnings: list[ErrorEntry] = Field(default_factory=list)


class JobInfo(WireModel):
    job_id: int
    name: str = ""
    comment: str = ""
    job_state: list[str] = Field(default_factory=list)
    state_reason: str = ""
    nodes: str = ""
    gres_detail: list[str] = Field(default_factory=list)
    partition: str = ""
    user_name: str = ""
    account: str = ""
    qos: str = ""
    preempt_time: NoVal = NoVal()  # set (non-zero) once Slurm signalled preemption
    start_time: NoVal = NoVal()  # a pending job's: the backfill's estimate (0: none)
    required_switches: int = 0  # --switches=N (0: not asked)
    maximum_switch_wait_time: int = 0  # seconds, as Slurm capped it (max_switch_wait)
    segment_size: int = 0  # --segment=N (data parser v0.0.43+)
    # A heterogeneous job lists one record per component: its own job id, the leader's id
    # (the component at offset 0, whose id the submit answered) and its offset.
    het_job_id: NoVal = NoVal()
    het_job_offset: NoVal = NoVal()

    @property
    def het_leader(self) -> int | None:
        """The leader's job id, for a component of a heterogeneous job (None: an ordinary job)."""
        return self.het_job_id.number if self.het_job_id.set and self.het_job_id.number else None


class JobsResponse(Envelope):
    jobs: list[JobInfo] = Field(default_factory=list)
    last_backfill: NoVal = NoVal()  # when the backfill scheduler last ran
    last_update: NoVal = NoVal()


class JobStateEntry(WireModel):
    """A job's id and state.  v0.0.45 writes the id as text (``"17"``); an array record Slurm
    has not split into tasks yet has one such as ``"4_[1-1000]"``; a heterogeneous job's
    components ``"<id>+<offset>"`` (v0.0.42 and v0.0.45 alike: ``"29+0"``, ``"30+1"``)."""

    job_id: int | str
    state: list[str] = Field(default_factory=list)

    @property
    def number(self) -> int | None:
        """The job id; None for an array record (the bridge never submits arrays, so such a
        record is never one of its jobs) and for a heterogeneous job's components past the
        first, whose leader (``+0``, the id the submit answered) stands for the whole job."""
        if isinstance(self.job_id, int):
            return self.job_id
        job_id, plus, offset = self.job_id.partition("+")
        if plus and offset != "0":
            return None
        return int(job_id) if job_id.isdigit() else None

    @property
    def leader(self) -> int | None:
        """For a heterogeneous job's component past the first (``"30+1"``), its leader's id:
        Slurm numbers the components of one submit consecutively, so id minus offset.  Only
        ever a reason to re-read that job whole (its records name the leader for certain)."""
        if isinstance(self.job_id, int):
            return None
        job_id, plus, offset = self.job_id.partition("+")
        if not (plus and job_id.isdigit() and offset.isdigit() and offset != "0"):
            return None
        return int(job_id) - int(offset)


class JobStatesResponse(Envelope):
    jobs: list[JobStateEntry] = Field(default_factory=list)


class PingEntry(WireModel):
    """One controller as slurmrestd's ping saw it: v0.0.41 says ``pinged: "UP"``, v0.0.45
    only ``responding: true``, v0.0.42 and v0.0.44 both."""

    pinged: str = ""
    responding: bool | None = None

    @property
    def up(self) -> bool:
        return self.responding if self.responding is not None else self.pinged == "UP"


class PingResponse(Envelope):
    pings: list[PingEntry] = Field(default_factory=list)


class SubmitResponse(Envelope):
    job_id: int | None = None
    job_submit_user_msg: str = ""


class GresAllocation(WireModel):
    name: str = ""
    type: str = ""
    count: int = 0
    index: str = ""  # "0-1,3": the indices on the node


class NodeResources(WireModel):
    node: str
    gres: list[GresAllocation] = Field(default_factory=list)


class ResourcesResponse(Envelope):
    """``GET /resources/{job_id}`` (v0.0.44+): a job's nodes and GRES indices, ~600 bytes
    where ``GET /job/{id}`` lists every core of each node (10-375 kB)."""

    nodes: list[NodeResources] = Field(default_factory=list)


class NodeInfo(WireModel):
    name: str
    state: list[str] = Field(default_factory=list)
    reason: str = ""
    cpus: int = 0
    real_memory: int = 0
    gres: str = ""
    topology: str = ""  # v0.0.43+: "tree:leaf1,block:b1", the node's units (NodeName Topology=)
    features: list[str] | str = Field(default_factory=list)  # a list, or CSV in some parsers
    partitions: list[str] | str = Field(default_factory=list)  # likewise


class NodesResponse(Envelope):
    nodes: list[NodeInfo] = Field(default_factory=list)
    last_update: NoVal = NoVal()  # slurmctld's clock when it answered


class NodeUpdate(WireModel):
    state: list[str]
    reason: str | None = None


class JobDescription(WireModel):
    """The fields of ``job_desc_msg`` the bridge sets (all parsers since v0.0.40)."""

    name: str
    comment: str
    current_working_directory: str = "/tmp"
    environment: list[str] = Field(default_factory=lambda: ["SLURMBRIDGE_PLACEHOLDER=1"])
    tasks: int = 1
    minimum_nodes: int = 1
    maximum_nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    memory_per_node: NoVal | None = None
    tres_per_node: str | None = None
    time_limit: NoVal | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    wckey: str | None = None
    constraints: str | None = None
    priority: NoVal | None = None
    shared: list[str] | None = None
    # Network topology (every parser since v0.0.41): --switches=N@wait, --segment=N.
    required_switches: NoVal | None = None
    wait_for_switch: int | None = None  # seconds
    segment_size: NoVal | None = None
    # Never requeued: a requeued job reads as PENDING while its pod still runs on the node
    # Slurm took back; the job ends instead and the pod is evicted with Slurm's reason.
    requeue: bool = False

    @classmethod
    def fields_for(cls, req: JobRequest, comment: str) -> dict[str, Any]:
        """The version-independent part of a placeholder's description."""
        return {
            "name": req.name,
            "comment": comment,
            "tasks": req.nodes,
            "minimum_nodes": req.nodes,
            "maximum_nodes": req.nodes,
            "cpus_per_task": req.cpus,
            "memory_per_node": NoVal.of(req.memory_mb) if req.memory_mb else None,
            "tres_per_node": _gres(req),
            "time_limit": NoVal.of(req.time_limit_minutes) if req.time_limit_minutes else None,
            "environment": ["SLURMBRIDGE_PLACEHOLDER=1"],
            **cls._placement(req.placement),
        }

    @staticmethod
    def _placement(where: SlurmPlacement) -> dict[str, Any]:
        """Slurm's names for the placement knobs; the user goes in the request's identity."""
        return {
            "partition": where.partition,
            "account": where.account,
            "qos": where.qos,
            "reservation": where.reservation,
            "wckey": where.wckey,
            "constraints": where.constraints,
            "priority": NoVal.of(where.priority) if where.priority is not None else None,
            "shared": ["none"] if where.exclusive else None,
            **_topology(where.topology),
        }


def _topology(ask: TopologyAsk | None) -> dict[str, Any]:
    if ask is None:
        return {}
    return {
        "required_switches": NoVal.of(ask.switches) if ask.switches is not None else None,
        "wait_for_switch": ask.wait_seconds,
        "segment_size": NoVal.of(ask.segment) if ask.segment is not None else None,
    }


def _gres(req: JobRequest) -> str | None:
    """The job's GRES per node: ``gres/gpu:N``, ``gres/gpu:<type>:N`` or ``gres/shard:N``."""
    if req.gpu_shards:
        return f"gres/shard:{req.gpu_shards}"
    if req.gpus:
        return f"gres/gpu:{req.gpu_type}:{req.gpus}" if req.gpu_type else f"gres/gpu:{req.gpus}"
    return None


@dataclass(frozen=True)
class WireFamily:
    """What differs between data-parser generations, behind one small interface."""

    versions: tuple[str, ...]
    placeholder: str  # "external" or "batch", for logs and `slurmbridge doctor`
    describe: Callable[[JobRequest, str], JobDescription]
