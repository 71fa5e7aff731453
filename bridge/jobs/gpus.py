"""The GPU form a pod asks Slurm for: whole GPUs (of any type, or of one Slurm GPU type) or
shards of one GPU (Slurm's ``gres/shard``).

Slurm gives a GPU either whole or as shards, never both to one job: a pod asking both would
get a job Slurm cannot read the way the pod meant, so it is refused with how to fix it.
"""

from dataclasses import dataclass

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import SlurmOptions


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """Per node: ``gpus`` whole GPUs (of ``gpu_type`` when set), or ``shards`` shards."""

    gpus: int = 0
    gpu_type: str | None = None
    shards: int = 0


def gpu_ask(options: SlurmOptions, requested_gpus: int) -> GpuAsk:
    """The pod's GPU form; ``requested_gpus``: its ``nvidia.com/gpu`` request, which the
    webhook's ``slurmbridge.io/gpus`` annotation replaces once it moved it."""
    gpus = requested_gpus if options.gpus is None else options.gpus
    shards = options.gpu_shards or 0
    if shards and gpus:
        raise InvalidPodRequest(
            keys.GPU_SHARDS, str(shards),
            f"shards or whole GPUs, not both: the pod also asks for {gpus} {keys.GPU_RESOURCE} "
            "(Slurm gives a GPU either whole or as shards); drop one of the two",
            kind="annotation",
        )
    if options.gpu_type is not None and not gpus:
        accepted = (
            f"a type for the pod's whole GPUs, alongside a {keys.GPU_RESOURCE} request "
            "(shards have no type)" if shards else
            f"a type for the pod's GPUs, alongside a {keys.GPU_RESOURCE} request"
        )
        raise InvalidPodRequest(keys.GPU_TYPE, options.gpu_type, accepted, kind="annotation")
    return GpuAsk(gpus=gpus, gpu_type=options.gpu_type if gpus else None, shards=shards)
