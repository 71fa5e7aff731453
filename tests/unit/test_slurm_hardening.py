"""The Slurm-side hardening, unit by unit (fakes only; the attacks run for real in
tests/e2e/test_attacks.py): who owns a job, whose jobs are placeholders, what an
unreadable answer does, and that the poller outlives any error."""

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import httpx
import pytest
from lightkube.models.core_v1 import Pod
from prometheus_client import REGISTRY

from bridge import keys
from bridge.config import SlurmSettings
from bridge.controllers.poller import Poller
from bridge.jobs.owner import GroupOwner, PodOwner
from bridge.jobs.request import JobRequest
from bridge.kube.nodecache import NodeCache
from bridge.link.ownership import owner_key
from bridge.placement.index import JobIndex
from bridge.placement.placer import Placer
from bridge.placement.registry import SeenPods
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmProtocolError
from bridge.slurm.types import JobState
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange

BRIDGE_USER = "slurm"


def _pod(labels: dict[str, str], annotations: dict[str, str] | None = None) -> Pod:
    return PodBuilder("p", "ns").uid("uid-1").labels(labels).annotations(annotations or {}).build()


def test_owner_recorded_by_the_bridge_outlives_a_relabel() -> None:
    assert owner_key(_pod({})) == PodOwner("uid-1")
    assert owner_key(_pod({keys.GROUP: "g"})) == GroupOwner("ns", "g")
    recorded = {keys.OWNER: "uid-1"}
    assert owner_key(_pod({keys.GROUP: "hijack"}, recorded)) == PodOwner("uid-1")
    grouped = {keys.OWNER: "group:ns/g"}
    assert owner_key(_pod({}, grouped)) == GroupOwner("ns", "g")


def _job(job_id: int, user: str, **fields: Any) -> dict[str, Any]:
    return {
        "job_id": job_id, "name": f"k8s:ns/p{job_id}", "user_name": user,
        "comment": f"{keys.COMMENT_OWNER}uid-{job_id}", "job_state": ["RUNNING"],
        "nodes": "node1", "gres_detail": ["gpu:1(IDX:0)"], **fields,
    }


class FakeRest:
    """slurmrestd answering from a list of job dicts; records submitted bodies."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs
        self.submitted: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.44/jobs/": {}}})
        if path.endswith("/job/submit"):
            self.submitted.append(json.loads(request.content))
            return httpx.Response(200, json={"job_id": 99})
        if path.endswith("/jobs/"):
            return httpx.Response(200, json={"jobs": self.jobs, "last_update": {"number": 1}})
        if "/job/" in path:
            job_id = int(path.rsplit("/", 1)[1])
            found = [j for j in self.jobs if j["job_id"] == job_id]
            return httpx.Response(200, json={"jobs": found})
        return httpx.Response(404)


def _client(rest: FakeRest) -> SlurmClient:
    settings = SlurmSettings(url=MOCK_SLURM_URL, user=BRIDGE_USER, token="t", retries=0)
    return SlurmClient(settings, exchange=HttpxExchange.mock(rest))


async def test_only_the_bridges_own_jobs_are_placeholders() -> None:
    rest = FakeRest([_job(1, BRIDGE_USER), _job(2, "researcher")])
    async with _client(rest) as client:
        listing = await client.list_jobs()
        forged = await client.get_job(2)
    assert {j.job_id: j.owner for j in listing} == {1: PodOwner("uid-1"), 2: None}
    assert forged.owner is None and forged.allocation is None


async def test_a_native_job_the_bridge_cannot_read_is_left_out_of_a_listing() -> None:
    odd = _job(2, "researcher", gres_detail=["gpu:1(IDX:0-1"], job_state=["NEW_STATE"])
    rest = FakeRest([_job(1, BRIDGE_USER), odd])
    async with _client(rest) as client:
        listing = await client.list_jobs()
    assert [j.job_id for j in listing] == [1]


async def test_a_placeholder_whose_allocation_is_unreadable_is_still_its_owners_job() -> None:
    """An unknown allocation, not an unreadable job (tests/unit/test_unreadable_allocation.py:
    the soak's new leader submitted a second job beside one it could not read)."""
    rest = FakeRest([_job(7, BRIDGE_USER, gres_detail=["gpu:1(IDX:0-1"])])
    async with _client(rest) as client:
        for job in (await client.get_job(7), (await client.list_jobs())[0]):
            assert job.owner is not None and job.allocation is None
            assert "gpu:1(IDX:0-1" in job.unreadable


async def test_placeholders_are_submitted_non_requeueable() -> None:
    rest = FakeRest([])
    async with _client(rest) as client:
        await client.submit(JobRequest(name="k8s:ns/p", owner=PodOwner("uid-1")))
    assert rest.submitted[0]["job"]["requeue"] is False


class BrokenOnce(FakeSlurm):
    """The dev kit's fake Slurm whose state poll raises a non-Slurm error once, then works."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.job = self.put(
            JobBuilder(1).build()
        )

    async def job_states(self, ids: Iterable[int]) -> dict[int, JobState]:
        self.calls += 1
        if self.calls == 1:
            raise KeyError("gres_detail")  # a bug meeting an answer nobody expected
        return await super().job_states(ids)


def _errors(kind: str) -> float:
    return REGISTRY.get_sample_value("slurmbridge_poll_errors_total", {"kind": kind}) or 0.0


async def test_the_poller_outlives_any_error_and_counts_it() -> None:
    fake = BrokenOnce()
    before = _errors("bug")
    poller = Poller(fake, JobIndex(fake), interval=0.01, fast_interval=0.01)
    task = asyncio.create_task(poller.run())
    try:
        for _ in range(200):
            if fake.calls >= 3:
                break
            await asyncio.sleep(0.01)
        assert not task.done(), "the poller task ended"
        assert fake.calls >= 3 and _errors("bug") == before + 1
        assert poller.read_within(1.0)
    finally:
        task.cancel()


async def test_known_placement_is_none_until_the_job_runs() -> None:
    """prioritize and bind ask from memory: a pending job is "no preference", not an error."""
    fake = BrokenOnce()
    index = JobIndex(fake)
    placer = Placer(index, NodeCache(FakeKube()), SeenPods())
    pod = _pod({})
    index.record(fake.job)
    verdict = await placer.filter(pod, ["node1"])
    assert verdict.keep == [] and "waiting for Slurm job 1" in verdict.message
    assert placer.known_placement("uid-1") is None
    index.record(
        JobBuilder(1).running("node1").build()
    )
    known = placer.known_placement("uid-1")
    assert known is not None and known.kube_node == "node1" and known.owner == PodOwner("uid-1")


def _resources(request: httpx.Request, version: str = "v0.0.45") -> httpx.Response:
    """slurmrestd 26.05: job 1 runs on node2 (GPUs 0, 1 and 3), job 2 pends."""
    path = request.url.path
    if path == "/openapi/v3":
        return httpx.Response(200, json={"paths": {f"/slurm/{version}/jobs/": {}}})
    if path.endswith("/resources/1"):
        return httpx.Response(200, json={"nodes": [{"node": "node2", "gres": [
            {"name": "gpu", "type": "", "count": 3, "index": "0-1,3"}]}], "errors": []})
    if path.endswith("/resources/2"):
        return httpx.Response(422, json={"nodes": [], "errors": [{
            "description": "Unable to query JobId=2", "error_number": 2085,
            "error": "Job is not running"}]})
    return httpx.Response(404)


async def test_a_started_jobs_allocation_is_the_small_answer_where_slurm_has_it() -> None:
    settings = SlurmSettings(url=MOCK_SLURM_URL, user=BRIDGE_USER, token="t", retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(_resources)) as client:
        allocation = await client.job_allocation(1)
        pending = await client.job_allocation(2)
    assert allocation is not None
    assert (allocation.nodes, allocation.gpu_ids) == (("node2",), {"node2": (0, 1, 3)})
    assert pending is None  # not running: the caller reads the whole job

    def older(request: httpx.Request) -> httpx.Response:
        return _resources(request, "v0.0.43")

    async with SlurmClient(settings, exchange=HttpxExchange.mock(older)) as client:
        assert await client.job_allocation(1) is None  # no such endpoint before v0.0.44


async def test_an_allocation_the_bridge_cannot_read_names_the_job() -> None:
    """A garbled GPU index list is Slurm's protocol error about that job, never a bare
    ValueError that would end the poller's cycle for every other job."""

    def garbled(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/resources/1"):
            return httpx.Response(200, json={"nodes": [{"node": "node2", "gres": [
                {"name": "gpu", "count": 1, "index": "0-"}]}], "errors": []})
        return _resources(request)

    settings = SlurmSettings(url=MOCK_SLURM_URL, user=BRIDGE_USER, token="t", retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(garbled)) as client:
        with pytest.raises(SlurmProtocolError, match="job 1"):
            await client.job_allocation(1)
