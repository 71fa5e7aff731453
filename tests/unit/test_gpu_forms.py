"""Slurm's GPU forms besides a count of whole GPUs: shards of one GPU (``gres/shard``) and
GPUs of one Slurm type (``gres/gpu:<type>:N``, MIG-style slices), from the pod's annotations
to the job's GRES request, and back from Slurm's allocation to the GPU the pod is told."""

from collections.abc import AsyncIterator

import httpx
import pytest

from admission.webhook import create_app
from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.translate import job_request_for_pod
from bridge.slurm.allocation import allocation_from, gpu_indices
from bridge.slurm.convert import allocation, slurm_job
from bridge.slurm.types import JobState
from bridge.slurm.wire.base import ResourcesResponse
from bridge.slurm.wire.v0041 import describe as describe_batch
from bridge.slurm.wire.v0044 import describe as describe_external
from tests.unit.slurm_answers import captured_job
from tests.unit.test_admission import OPEN, SETTINGS, denial, lookups, make_review
from tests.unit.test_admission import make_pod as admission_pod
from tests.unit.test_resources import GPU, container, make_pod

ADMITTED = {keys.ACCOUNT: "physics", keys.QOS: "normal"}  # test_admission's namespace policy


def _gres(annotations: dict[str, str], gpus: str | None = None) -> str | None:
    limits = {GPU: gpus} if gpus is not None else None
    request = job_request_for_pod(make_pod(container(limits=limits), annotations=annotations))
    batch = describe_batch(request, "c").tres_per_node
    assert describe_external(request, "c").tres_per_node == batch  # every data parser alike
    return batch


@pytest.mark.parametrize(
    ("annotations", "gpus", "gres"),
    [
        ({keys.GPU_SHARDS: "3"}, None, "gres/shard:3"),
        ({keys.GPU_SHARDS: " 1 "}, None, "gres/shard:1"),
        ({keys.GPU_TYPE: "1g.10gb"}, "2", "gres/gpu:1g.10gb:2"),
        ({keys.GPU_TYPE: "3g.40gb", keys.GPUS: "1"}, None, "gres/gpu:3g.40gb:1"),
        ({keys.GPU_SHARDS: "2", keys.GPUS: "0"}, None, "gres/shard:2"),  # webhook's 0: no GPU
        ({}, "2", "gres/gpu:2"),
        ({keys.GPU_TYPE: ""}, "1", "gres/gpu:1"),  # blank: unset
        ({}, None, None),
    ],
)
def test_the_gpu_annotations_become_the_jobs_gres_request(
    annotations: dict[str, str], gpus: str | None, gres: str | None
) -> None:
    assert _gres(annotations, gpus) == gres


@pytest.mark.parametrize(
    ("annotations", "gpus", "field", "words"),
    [
        ({keys.GPU_SHARDS: "2"}, "1", keys.GPU_SHARDS, "not both"),
        ({keys.GPU_SHARDS: "2", keys.GPUS: "1"}, None, keys.GPU_SHARDS, "not both"),
        ({keys.GPU_SHARDS: "0"}, None, keys.GPU_SHARDS, "a whole number from 1"),
        ({keys.GPU_SHARDS: "half"}, None, keys.GPU_SHARDS, "a whole number from 1"),
        ({keys.GPU_TYPE: "1g.10gb"}, None, keys.GPU_TYPE, f"alongside a {GPU} request"),
        ({keys.GPU_TYPE: "1g.10gb", keys.GPU_SHARDS: "1"}, None, keys.GPU_TYPE, "shards have no"),
        ({keys.GPU_TYPE: "a100:2"}, "1", keys.GPU_TYPE, "Slurm GPU type"),
        ({keys.GPU_TYPE: "1g 10gb"}, "1", keys.GPU_TYPE, "Slurm GPU type"),
    ],
)
def test_gpu_requests_slurm_cannot_express_are_refused_naming_the_annotation(
    annotations: dict[str, str], gpus: str | None, field: str, words: str
) -> None:
    with pytest.raises(InvalidPodRequest, match=words) as refused:
        _gres(annotations, gpus)
    assert refused.value.field == field


@pytest.fixture
async def webhook() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, lookups(), tenancy=OPEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        yield c


async def test_the_webhook_refuses_shards_with_whole_gpus_and_a_bad_type(
    webhook: httpx.AsyncClient,
) -> None:
    both = admission_pod(annotations={**ADMITTED, keys.GPU_SHARDS: "2", keys.GPUS: "1"})
    message = await denial(webhook, make_review(both))
    assert message.startswith("slurmbridge cannot run this pod: annotation " + keys.GPU_SHARDS)
    assert "not both" in message
    bad = admission_pod(annotations={**ADMITTED, keys.GPU_TYPE: "1g:10gb", keys.GPUS: "1"})
    message = await denial(webhook, make_review(bad))
    assert keys.GPU_TYPE in message and "1g:10gb" in message and "Slurm GPU type" in message


def test_shards_read_from_slurm_24_11_are_the_gpu_they_are_on() -> None:
    """Real answers: whole GPUs 0-2 for one job, two shard jobs sharing GPU 3 (node2)."""
    whole = captured_job("24.11-v0.0.42-job-gpu3_idx0-2.json")
    two = captured_job("24.11-v0.0.42-job-shard2_on_gpu3.json")
    one = captured_job("24.11-v0.0.42-job-shard1_on_gpu3.json")
    assert two.gres_detail == ["shard:2(0/4,0/4,0/4,2/4,0/4,0/4,0/4,0/4)"]
    for info, gpus in ((whole, (0, 1, 2)), (two, (3,)), (one, (3,))):
        found = allocation_from(info.nodes, info.gres_detail)
        assert found is not None and found.gpu_ids == {"node2": gpus}


def test_typed_slices_read_from_slurm_24_11_are_the_slices_index() -> None:
    """Real answers: three 1g.10gb slices, then the fourth, then none left (pending)."""
    three = captured_job("24.11-v0.0.42-job-typed1g.10gb3_idx0-2.json")
    last = captured_job("24.11-v0.0.42-job-typed1g.10gb1_idx3.json")
    waiting = captured_job("24.11-v0.0.42-job-typed1g.10gb1_pending_resources.json")
    for info, gpus in ((three, (0, 1, 2)), (last, (3,))):
        found = allocation_from(info.nodes, info.gres_detail)
        assert found is not None and found.gpu_ids == {"node4": gpus}
    job = slurm_job(waiting, owned=True, signed=True)
    assert (job.state, job.reason, job.allocation) == (JobState.PENDING, "Resources", None)


def test_an_untyped_request_on_a_typed_node_reads_as_the_gpus_it_got() -> None:
    """Real answer: ``gres/gpu:2`` on node4 (1g.10gb and 3g.40gb slices) lists the type it got
    none of with an empty index list, which is no GPU and no error."""
    info = captured_job("24.11-v0.0.42-job-untyped2_on_typed_node.json")
    assert info.gres_detail == ["gpu:1g.10gb:2(IDX:0-1),gpu:3g.40gb:0(IDX:)"]
    found = allocation_from(info.nodes, info.gres_detail)
    assert found is not None and found.gpu_ids == {"node4": (0, 1)}


@pytest.mark.parametrize(
    ("entry", "gpus"),
    [
        ("shard:3(3/4,0/4,0/4,0/4)", (0,)),
        ("shard:4(0/4,2/4,2/4)", (1, 2)),  # a job allowed shards of several GPUs
        ("shard:0", ()),
        ("gpu:1g.10gb:1(IDX:2)", (2,)),
        ("gpu:1g.10gb:1(IDX:0),gpu:3g.40gb:1(IDX:5)", (0, 5)),
        ("gpu:1g.10gb:0(IDX:),gpu:3g.40gb:2(IDX:6-7)", (6, 7)),
    ],
)
def test_shard_and_typed_details_give_the_gpu_indices(entry: str, gpus: tuple[int, ...]) -> None:
    assert gpu_indices(entry) == gpus


@pytest.mark.parametrize(
    "bad", ["shard:2", "shard:2(IDX:3)", "shard:2(2/4,x)", "shard:2(0/4,0/4)", "shard:1(1/4",
            "gpu:1g.10gb:1(IDX:)"]
)
def test_unreadable_shard_detail_is_an_error_never_a_guess(bad: str) -> None:
    with pytest.raises(ValueError, match=r"shard|IDX|index|parentheses"):
        gpu_indices(bad)


def test_resources_answer_gives_shards_and_typed_gpus_their_gpu_index() -> None:
    """``GET /resources/{id}`` (v0.0.44+): a shard's index is the GPU it is on."""
    answer = ResourcesResponse.model_validate({"nodes": [
        {"node": "node1", "gres": [{"name": "shard", "type": "", "count": 2, "index": "3"}]},
        {"node": "node4", "gres": [{"name": "gpu", "type": "1g.10gb", "count": 1, "index": "2"},
                                   {"name": "gpu", "type": "3g.40gb", "count": 1, "index": "5"}]},
        {"node": "node2", "gres": []},
    ]})
    assert allocation(answer).gpu_ids == {"node1": (3,), "node4": (2, 5)}
