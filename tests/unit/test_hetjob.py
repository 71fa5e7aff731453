"""A mixed group as one Slurm heterogeneous job (issue 43): one submit of a list of job
descriptions, the components' records read back as one job, and each member released to a
node of its own component with that node's GPUs, none before every component is allocated."""

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge import keys
from bridge.config import SlurmSettings
from bridge.jobs.owner import GroupOwner
from bridge.jobs.request import JobRequest
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import JobState
from bridge.slurm.wire.base import JobStateEntry
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fakes import intake_running
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange
from slurmbridge_devkit.waiting import wait_for
from tests.unit.test_release import World, until

PARTS = "launcher=1,workers=2"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path)
    async with intake_running(world.bridge):
        yield world


def _part(name: str, rank: int, component: str, *, gpus: int = 0, cpu: str = "1") -> Any:
    return (PodBuilder(name, "ns").group("g", 3).label(keys.GROUP_RANK, str(rank))
            .label(keys.GROUP_COMPONENT, component).annotate(keys.GROUP_COMPONENTS, PARTS)
            .cpu(cpu).gpus(gpus).gated().build())


def _add_group(world: World, *, worker_gpus: int = 2, launcher_cpu: str = "1") -> None:
    world.kube.add(_part("launcher", 0, "launcher", cpu=launcher_cpu))
    for i in range(2):
        world.kube.add(_part(f"worker-{i}", 1 + i, "workers", gpus=worker_gpus))


async def _submitted(world: World) -> tuple[int, JobRequest]:
    await until(lambda: len(world.slurm.submitted) == 1)
    [job_id] = world.slurm.jobs
    owner = world.slurm.jobs[job_id].owner
    assert owner == GroupOwner("ns", "g")
    await until(lambda: len(world.bridge.seen.pods_of(owner)) == 3)
    return job_id, world.slurm.submitted[0]


async def test_a_launcher_and_gpu_workers_are_one_heterogeneous_job(world: World) -> None:
    _add_group(world)
    _, request = await _submitted(world)
    assert [(c.nodes, c.cpus, c.gpus) for c in request.components] == [(1, 1, 0), (2, 1, 2)]
    assert {c.name for c in request.components} == {request.name} == {"k8s:ns/g"}
    assert {c.owner for c in request.components} == {request.owner}


async def test_each_member_goes_to_its_components_node_by_rank_with_its_gpus(
    world: World,
) -> None:
    _add_group(world)
    job_id, _ = await _submitted(world)
    world.slurm.start_components(job_id, (("node3",), ()), (("node2", "node1"), (2, 3)))
    await world.bridge.poller.poll_once()
    await until(lambda: not any(world.pod(n)["spec"].get("schedulingGates")
                                for n in ("launcher", "worker-0", "worker-1")))
    placed = {n: (world.pod(n)["metadata"]["annotations"][keys.SLURM_NODE],
                  world.pod(n)["metadata"]["annotations"][keys.GPU_IDS])
              for n in ("launcher", "worker-0", "worker-1")}
    assert placed == {"launcher": ("node3", ""), "worker-0": ("node2", "2,3"),
                      "worker-1": ("node1", "2,3")}


async def test_each_member_records_its_component_of_the_job(world: World) -> None:
    """What ``kubectl slurmbridge status`` (Kubernetes only) shows as ``<job>+<offset>``, as
    squeue does; a group whose parts ask alike is an ordinary job: its members record none."""
    _add_group(world)
    job_id, _ = await _submitted(world)
    world.slurm.start_components(job_id, (("node3",), ()), (("node2", "node1"), (2, 3)))
    await world.bridge.poller.poll_once()
    names = ("launcher", "worker-0", "worker-1")
    await until(lambda: not any(world.pod(n)["spec"].get("schedulingGates") for n in names))
    recorded = {n: world.pod(n)["metadata"]["annotations"].get(keys.JOB_COMPONENT)
                for n in names}
    assert recorded == {"launcher": "0", "worker-0": "1", "worker-1": "1"}


async def test_members_of_an_ordinary_job_record_no_component(world: World) -> None:
    _add_group(world, worker_gpus=0)
    job_id, _ = await _submitted(world)
    world.slurm.start(job_id, "node1", "node2", "node3")
    await world.bridge.poller.poll_once()
    names = ("launcher", "worker-0", "worker-1")
    await until(lambda: not any(world.pod(n)["spec"].get("schedulingGates") for n in names))
    assert not [n for n in names
                if keys.JOB_COMPONENT in world.pod(n)["metadata"]["annotations"]]


async def test_no_member_is_released_before_every_component_is_allocated(
    world: World,
) -> None:
    """Slurm lists the leader RUNNING while a component has no nodes yet: the client reads
    that job as unallocated (below), and the bridge releases nobody."""
    _add_group(world)
    job_id, _ = await _submitted(world)
    world.slurm.put(dataclasses.replace(world.slurm.jobs[job_id], state=JobState.RUNNING))
    await world.bridge.poller.poll_once()
    await world.bridge.releaser.drain()
    assert all(world.pod(n)["spec"].get("schedulingGates")
               for n in ("launcher", "worker-0", "worker-1"))


async def test_a_group_whose_components_ask_alike_stays_one_ordinary_job(world: World) -> None:
    _add_group(world, worker_gpus=0)
    _, request = await _submitted(world)
    assert (request.components, request.nodes) == ((), 3)


# --- the wire: what slurmrestd answered here (26.05 v0.0.45; 24.11 v0.0.42 alike) -----------

def _record(job_id: int, offset: int, nodes: str, gres: list[str]) -> dict[str, Any]:
    return {"job_id": job_id, "name": "k8s:ns/g", "user_name": "slurm",
            "comment": f"{keys.COMMENT_OWNER}group:ns/g", "job_state": ["RUNNING"],
            "nodes": nodes, "gres_detail": gres, "account": "physics",
            "het_job_id": {"set": True, "infinite": False, "number": 29},
            "het_job_offset": {"set": True, "infinite": False, "number": offset}}


class HetRest:
    """slurmrestd with one heterogeneous job 29 (components 29+0 and 30+1)."""

    def __init__(self, worker_nodes: str = "node[2-3]") -> None:
        gres = ["gpu:2(IDX:0-1)", "gpu:2(IDX:0-1)"] if worker_nodes else []
        self.jobs = [_record(29, 0, "node1", []), _record(30, 1, worker_nodes, gres)]
        self.submitted: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.45/jobs/": {}}})
        if path.endswith("/job/submit"):
            self.submitted.append(json.loads(request.content))
            return httpx.Response(200, json={"job_id": 29})
        if path.endswith("/jobs/state/"):
            return httpx.Response(200, json={"jobs": [{"job_id": "29+0", "state": ["RUNNING"]},
                                                      {"job_id": "30+1", "state": ["RUNNING"]}]})
        if path.endswith("/jobs/"):
            return httpx.Response(200, json={"jobs": self.jobs})
        if path.endswith("/job/29"):  # the leader's id: every component's record
            return httpx.Response(200, json={"jobs": self.jobs})
        return httpx.Response(404)


def het_client(rest: HetRest) -> SlurmClient:
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token="t")
    return SlurmClient(settings, exchange=HttpxExchange(httpx.MockTransport(rest)),
                       signer=None)


def test_a_state_list_names_a_heterogeneous_job_by_its_leader_alone() -> None:
    numbers = [JobStateEntry(job_id=t).number for t in ("29+0", "30+1", "31", "4_[1-9]")]
    assert numbers == [29, None, 31, None]


async def test_a_heterogeneous_job_is_submitted_as_a_list_of_job_descriptions() -> None:
    rest = HetRest()
    async with het_client(rest) as client:
        launcher = JobRequest("k8s:ns/g", GroupOwner("ns", "g"), cpus=1)
        workers = JobRequest("k8s:ns/g", GroupOwner("ns", "g"), cpus=4, gpus=2, nodes=2)
        await client.submit(JobRequest("k8s:ns/g", GroupOwner("ns", "g"), nodes=3,
                                       components=(launcher, workers)))
        assert (await client.job_states([29])) == {29: JobState.RUNNING}
    [body] = rest.submitted
    assert "job" not in body
    assert [(j["minimum_nodes"], j["cpus_per_task"], j.get("tres_per_node"))
            for j in body["jobs"]] == [(1, 1, None), (2, 4, "gres/gpu:2")]
    assert all(j["flags"] == ["EXTERNAL_JOB"] and j["name"] == "k8s:ns/g"
               and keys.COMMENT_OWNER in j["comment"] for j in body["jobs"])


async def test_the_components_records_read_as_one_job_with_each_components_nodes() -> None:
    async with het_client(HetRest()) as client:
        job = await client.get_job(29)
        [listed] = await client.list_jobs()
    assert listed == job and job.het_components == 2
    assert job.allocation is not None
    assert job.allocation.components == (("node1",), ("node2", "node3"))
    assert job.allocation.gpu_ids == {"node1": (), "node2": (0, 1), "node3": (0, 1)}


async def test_a_component_without_nodes_yet_leaves_the_job_unallocated() -> None:
    async with het_client(HetRest(worker_nodes="")) as client:
        job = await client.get_job(29)
    assert job.state is JobState.RUNNING and job.allocation is None




async def test_the_job_waits_untold_until_every_component_has_a_member(world: World) -> None:
    """Built from the launcher alone, the job would miss its workers' component."""
    world.kube.add(_part("launcher", 0, "launcher"))
    await asyncio.sleep(0.3)
    assert world.slurm.submitted == []
    assert not world.kube.events(keys.EventReason.SUBMIT_REFUSED)
    world.kube.add(_part("worker-0", 1, "workers", gpus=2))
    await wait_for(lambda: len(world.slurm.submitted) == 1, 5, interval=0.05,
                   what="the job submitted once a worker exists")
    assert len(world.slurm.submitted[0].components) == 2
