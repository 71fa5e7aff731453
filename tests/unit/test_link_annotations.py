"""What the bridge writes on a pod about its job: the Binding's annotations the containers
read their GPUs from, and whether the job still holds what the pod was bound to."""


from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import GroupOwner
from bridge.link.bound import bound, holds
from bridge.slurm.types import Allocation, JobState, SlurmJob
from slurmbridge_devkit.builders import JobBuilder, PodBuilder


def _pod(**annotations: str) -> Pod:
    return PodBuilder("p", "ns").uid("u1").annotations(annotations).build()


def _job(state: JobState = JobState.RUNNING, gpus: tuple[int, ...] = (4, 5)) -> SlurmJob:
    allocation = Allocation(("n1",), {"n1": gpus}) if state is JobState.RUNNING else None
    return (JobBuilder(12, "k8s:ns/g").owner(GroupOwner("ns", "g")).state(state)
            .allocation(allocation).build())


def test_the_binding_carries_where_the_job_put_the_pod() -> None:
    assert bound(12, GroupOwner("ns", "g"), "n1", "4,5", "0,1") == {
        keys.JOB_ID: "12", keys.OWNER: "group:ns/g", keys.SLURM_NODE: "n1",
        keys.GPU_IDS: "4,5", keys.CUDA_DEVICES: "0,1",
    }


def test_a_bound_pod_keeps_its_job_only_on_the_same_node_and_gpus() -> None:
    annotations = bound(12, GroupOwner("ns", "g"), "n1", "4,5", "0,1")
    assert holds(annotations, _job())
    assert not holds(annotations, _job(gpus=(6, 7)))  # requeued onto other GPUs
    assert not holds(annotations, _job(JobState.PENDING))
