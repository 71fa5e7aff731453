"""The job request: the core's version-independent description of a placeholder job."""

from dataclasses import dataclass, field

from bridge.jobs.owner import Owner


@dataclass(frozen=True, slots=True)
class TopologyAsk:
    """How the job's nodes keep to the network: ``switches`` leaf switches at most, waited for
    up to ``wait_seconds`` (None: Slurm's max_switch_wait), or segments of ``segment`` nodes,
    each within one block.  The partition's topology plugin applies the one it reads."""

    switches: int | None = None
    wait_seconds: int | None = None
    segment: int | None = None


@dataclass(frozen=True, slots=True)
class SlurmPlacement:
    """Where and under whose name Slurm runs the job: the knobs a pod sets by annotation.

    ``None`` leaves Slurm's own default (default partition, user's default account, ...).
    """

    partition: str | None = None
    account: str | None = None
    user: str | None = None  # Slurm user the job runs as; None: the bridge's own (slurm.user)
    qos: str | None = None
    reservation: str | None = None
    wckey: str | None = None
    constraints: str | None = None
    priority: int | None = None
    exclusive: bool = False
    topology: TopologyAsk | None = None


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What to ask Slurm for on behalf of one pod (or one pod group).

    Sizes are per node; ``nodes`` > 1 only for pod groups.  Optional fields left
    ``None`` fall back to Slurm's own defaults (default partition, user's
    default account, ...).
    """

    name: str  # k8s:<namespace>/<pod-or-group>, already sanitized
    owner: Owner  # in the job comment (owner.py): the link survives restarts
    cpus: int = 1
    memory_mb: int = 0  # 0 = let Slurm apply DefMemPerCPU / DefMemPerNode
    gpus: int = 0  # whole GPUs per node
    gpu_type: str | None = None  # Slurm's GPU type of those (gres/gpu:<type>:N); None: any
    gpu_shards: int = 0  # Slurm gres/shard per node (a share of one GPU), instead of gpus
    nodes: int = 1
    time_limit_minutes: int | None = None
    placement: SlurmPlacement = field(default_factory=SlurmPlacement)
    # A mixed group's job: one Slurm heterogeneous job whose components are these requests,
    # in rank order (each its own nodes, sizes and placement); () for an ordinary job.
    components: tuple["JobRequest", ...] = ()
