"""job_request_for_pod: the placeholder job a Slurm admin sees for a pod in squeue."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lightkube.models.core_v1 import Pod, PodResourceClaim, PodSchedulingGate
from lightkube.models.meta_v1 import ObjectMeta

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.names import MAX_JOB_NAME, placeholder_job_name
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.jobs.translate import job_request_for_pod
from tests.unit.test_resources import GPU, container, make_pod


def test_plain_pod_becomes_a_one_node_job_with_slurm_defaults() -> None:
    pod = make_pod(container(requests={"cpu": "1500m", "memory": "4Gi"}))
    assert job_request_for_pod(pod) == JobRequest(
        name="k8s:ml/train", owner=PodOwner("6f1c0a9e-uid"), cpus=2, memory_mb=4096
    )


def test_annotations_reach_the_job() -> None:
    pod = make_pod(annotations={
        keys.PARTITION: "gpu", keys.ACCOUNT: "physics", keys.QOS: "high",
        keys.RESERVATION: "r1", keys.WCKEY: "w", keys.CONSTRAINTS: "a100",
        keys.PRIORITY: "7", keys.TIME_LIMIT: "2:00:00", keys.EXCLUSIVE: "true",
    })
    request = job_request_for_pod(pod)
    where = request.placement
    assert (where.partition, where.account, where.qos) == ("gpu", "physics", "high")
    assert (where.reservation, where.wckey, where.constraints) == ("r1", "w", "a100")
    assert (where.priority, request.time_limit_minutes, where.exclusive) == (7, 120, True)


def test_gpus_come_from_the_pod_resources() -> None:
    assert job_request_for_pod(make_pod(container(limits={GPU: "2"}))).gpus == 2


@pytest.mark.parametrize(("annotated", "gpus"), [("4", 4), ("0", 0)])
def test_webhook_gpu_annotation_wins_over_resources(annotated: str, gpus: int) -> None:
    pod = make_pod(container(limits={GPU: "2"}), annotations={keys.GPUS: annotated})
    assert job_request_for_pod(pod).gpus == gpus


@pytest.mark.parametrize(("seconds", "minutes"), [(60, 1), (61, 2), (3600, 60), (1, 1)])
def test_active_deadline_becomes_the_time_limit_rounded_up(seconds: int, minutes: int) -> None:
    assert job_request_for_pod(make_pod(deadline=seconds)).time_limit_minutes == minutes


def test_time_limit_annotation_wins_over_active_deadline() -> None:
    pod = make_pod(deadline=7200, annotations={keys.TIME_LIMIT: "30"})
    assert job_request_for_pod(pod).time_limit_minutes == 30


def test_active_deadline_beyond_slurm_range_is_capped() -> None:
    assert job_request_for_pod(make_pod(deadline=2**62)).time_limit_minutes == 2**32 - 3


def test_non_positive_active_deadline_is_refused() -> None:
    pod = make_pod()
    assert pod.spec is not None
    pod.spec.activeDeadlineSeconds = 0
    with pytest.raises(InvalidPodRequest, match=r"spec\.activeDeadlineSeconds"):
        job_request_for_pod(pod)


def test_group_pod_asks_for_one_node_per_member_with_its_own_size_per_node() -> None:
    labels = {keys.GROUP: "allreduce", keys.GROUP_SIZE: "4"}
    app = container(requests={"cpu": "8", "memory": "32Gi"}, limits={GPU: "8"})
    request = job_request_for_pod(make_pod(app, labels=labels, name="allreduce-0"))
    assert request.name == "k8s:ml/allreduce"
    assert (request.nodes, request.cpus, request.memory_mb, request.gpus) == (4, 8, 32768, 8)


@pytest.mark.parametrize(
    ("missing", "field"),
    [({"uid": None}, "metadata.uid"), ({"namespace": ""}, "metadata.namespace"),
     ({"name": ""}, "metadata.name")],
)
def test_pod_without_identity_is_refused(missing: dict[str, str | None], field: str) -> None:
    with pytest.raises(InvalidPodRequest, match=f"{field} is missing") as raised:
        job_request_for_pod(make_pod(**missing))  # type: ignore[arg-type]
    assert raised.value.field == field


def test_pod_without_spec_is_refused() -> None:
    pod = Pod(metadata=ObjectMeta(name="p", namespace="ml", uid="u"))
    with pytest.raises(InvalidPodRequest, match="spec"):
        job_request_for_pod(pod)


def test_first_bad_annotation_is_reported_as_a_value_error() -> None:
    pod = make_pod(annotations={keys.PRIORITY: "urgent"})
    with pytest.raises(ValueError, match=r'annotation slurmbridge\.io/priority="urgent"'):
        job_request_for_pod(pod)


SAFE_NAME = re.compile(r"k8s:[A-Za-z0-9_.:/-]*")


def test_unsafe_characters_in_names_are_replaced() -> None:
    name = placeholder_job_name("ml", "x\n$(rm -rf /);`id`\x1b[31m")
    assert name == "k8s:ml/x___rm_-rf_/___id___31m"


def test_long_names_are_cut() -> None:
    name = job_request_for_pod(make_pod(name="p" * 253, namespace="n" * 63)).name
    assert len(name) == MAX_JOB_NAME
    assert name.startswith("k8s:" + "n" * 63 + "/ppp")


@given(st.text(), st.text())
def test_any_name_yields_a_short_inert_job_name(namespace: str, name: str) -> None:
    job_name = placeholder_job_name(namespace, name)
    assert SAFE_NAME.fullmatch(job_name)
    assert len(job_name) <= MAX_JOB_NAME


def test_a_pod_bringing_its_own_resource_claims_is_refused_naming_them() -> None:
    """A claim the webhook did not read is one kube-scheduler would allocate, unknown to
    Slurm, which may give the same GPU to a native job."""
    pod = make_pod()
    assert pod.spec is not None
    pod.spec.resourceClaims = [
        PodResourceClaim(name="gpu", resourceClaimTemplateName="one-gpu"),
        PodResourceClaim(name="nic", resourceClaimName="rdma-0"),
    ]
    with pytest.raises(InvalidPodRequest) as raised:
        job_request_for_pod(pod)
    assert raised.value.field == "spec.resourceClaims"
    assert raised.value.value == "gpu, nic"
    assert keys.GPU_RESOURCE in raised.value.accepted


def test_claims_the_webhook_read_ask_slurm_for_their_gpus() -> None:
    """Gated, with the webhook's count of the claims' GPUs: the job asks Slurm for them; the
    same pod without the gate (kube-scheduler would allocate the claim) is refused."""
    pod = make_pod(annotations={keys.GPUS: "2", keys.GPU_TYPE: "1g.10gb"})
    assert pod.spec is not None
    pod.spec.resourceClaims = [PodResourceClaim(name="gpu", resourceClaimTemplateName="two")]
    with pytest.raises(InvalidPodRequest, match="gate"):
        job_request_for_pod(pod)
    pod.spec.schedulingGates = [PodSchedulingGate(name=keys.SLURM_GATE)]
    job = job_request_for_pod(pod)
    assert (job.gpus, job.gpu_type) == (2, "1g.10gb")
