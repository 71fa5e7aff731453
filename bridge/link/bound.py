"""What the bridge writes on a pod about its job, and reads back.

One record, written by the leader once the job runs (its release, placement/release.py)
and again in the Binding: the job and where it put the pod (Slurm node, GPU indices and
CUDA's numbering of them).  A bound pod's job must keep running there, or the pod no longer
has what it was bound to.
"""

from collections.abc import Mapping
from typing import Literal

from bridge import keys
from bridge.jobs.owner import Owner, owner_text
from bridge.slurm.allocation import format_gpu_ids
from bridge.slurm.types import JobState, SlurmJob

CudaNumbering = Literal["renumbered", "physical"]


def cuda_visible_devices(gpu_ids: str, numbering: CudaNumbering) -> str:
    """CUDA_VISIBLE_DEVICES for a container given Slurm's GPU indices (``"4,5"``).

    The NVIDIA container runtime mounts only the devices in NVIDIA_VISIBLE_DEVICES and CUDA
    numbers them from 0: physical indices there would hide every GPU.  An empty value stays
    empty (no GPU, never someone else's).
    """
    if numbering == "physical" or not gpu_ids:
        return gpu_ids
    return ",".join(str(i) for i in range(len(gpu_ids.split(","))))


def bound(
    job_id: int, owner: Owner, slurm_node: str, gpu_ids: str, cuda_devices: str, *,
    component: int | None = None,
) -> dict[str, str]:
    """The annotations the Binding carries: applied with the node name in one write, so a
    container starting on the node always finds its GPUs through the downward API.
    ``component``: a heterogeneous job's member's offset, recorded at release (the Binding's
    annotations add to the pod's, so the Binding leaves it out)."""
    return {
        keys.JOB_ID: str(job_id),
        keys.OWNER: owner_text(owner),
        keys.SLURM_NODE: slurm_node,
        keys.GPU_IDS: gpu_ids,
        keys.CUDA_DEVICES: cuda_devices,
        **({keys.JOB_COMPONENT: str(component)} if component is not None else {}),
    }


def holds(annotations: Mapping[str, str], job: SlurmJob) -> bool:
    """The job still runs on the Slurm node and GPUs the pod was bound to."""
    allocation = job.allocation
    if job.state is JobState.RUNNING and allocation is None and job.unreadable:
        return True  # an allocation the bridge cannot read is no evidence the pod lost it
    if job.state is not JobState.RUNNING or allocation is None or job.preempting:
        return False
    node = annotations.get(keys.SLURM_NODE, "")
    gpus = format_gpu_ids(allocation.gpu_ids.get(node, ()))
    return node in allocation.nodes and annotations.get(keys.GPU_IDS, "") == gpus
