"""Slurm's side of the GPU map: the jobs holding GPUs now and the nodes' declared GPUs."""

from collections.abc import Callable, Iterable

from bridge.gpumap.model import JobHold, Slot
from bridge.jobs.owner import owner_text
from bridge.slurm.allocation import gpu_slots
from bridge.slurm.types import SlurmJob, SlurmNode

Believed = Callable[[SlurmJob], bool]
"""Is this job's owner believed (``bridge/placement/trust.py``'s word)?  A job whose owner is
not is shown as the native job of its user, never as a placeholder."""


def job_holds(jobs: Iterable[SlurmJob], believed: Believed) -> list[JobHold]:
    """Per node, the GPU indices each job holding an allocation has there."""
    holds = []
    for job in jobs:
        alloc = job.allocation
        if alloc is None or not job.state.holds_allocation:
            continue
        owner = owner_text(job.owner) if job.owner is not None and believed(job) else ""
        holds += [JobHold(node, job.job_id, indices, job.user, owner,
                          frozenset(alloc.shared.get(node, ())))
                  for node, indices in alloc.gpu_ids.items() if indices]
    return holds


def node_slots(nodes: Iterable[SlurmNode]) -> dict[str, tuple[Slot, ...]]:
    """Each node's GPUs as its gres says (typed slices, shards per GPU)."""
    return {n.name: tuple(Slot(i, kind, shards) for i, (kind, shards) in
                          enumerate(gpu_slots(n.gres)))
            for n in nodes}
