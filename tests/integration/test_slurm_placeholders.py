"""Placeholders on a real Slurm, checked through the admin's own tools."""

import asyncio
import re
import uuid

import pytest

from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.placement.index import JobIndex
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import JobState, SlurmJob
from slurmbridge_devkit.scontrol import gpu_holders
from slurmbridge_devkit.slurm import SlurmTarget

pytestmark = pytest.mark.integration



def _request(pod: str, **kw: object) -> JobRequest:
    uid = str(uuid.uuid4())
    owner = PodOwner(uid)
    return JobRequest(name=f"k8s:itest/{pod}-{uid[:8]}", owner=owner, **kw)  # type: ignore[arg-type]


async def _wait_running(client: SlurmClient, job_id: int) -> SlurmJob:
    async with asyncio.timeout(60):
        while (job := await client.get_job(job_id)).state is not JobState.RUNNING:
            await asyncio.sleep(0.5)
    return job


def _squeue(slurm: SlurmTarget) -> dict[str, list[str]]:
    out = slurm.admin("squeue", "-h", "-o", "%i|%j|%T|%C|%m|%b")
    return {f[0]: f for f in (line.split("|") for line in out.splitlines())}


async def test_placeholders_show_in_admin_tools_without_gpu_collisions(
    slurm: SlurmTarget, slurm_client: SlurmClient
) -> None:
    native = [
        slurm.admin(
            "sbatch", "--parsable", "--gres=gpu:3", "-c", "2", "--mem=1000", "-o", "/dev/null",
            "-J", "native-gpu", "--wrap", "sleep 600",
        ).strip()
        for _ in range(2)
    ]
    reqs = [
        _request("cpu", cpus=2, memory_mb=2048),
        _request("gpu", cpus=4, memory_mb=8192, gpus=2),
        _request("small", cpus=1, memory_mb=512),
    ]
    try:
        ids = [await slurm_client.submit(r) for r in reqs]
        jobs = [await _wait_running(slurm_client, i) for i in ids]
        queue = _squeue(slurm)
        for req, job in zip(reqs, jobs, strict=True):
            row = queue[str(job.job_id)]
            assert row[1] == req.name
            assert row[2] == "RUNNING"
            assert int(row[3]) == req.cpus
            assert row[4] == f"{req.memory_mb}M" or row[4] == f"{req.memory_mb // 1024}G"
            assert row[5] == (f"gres/gpu:{req.gpus}" if req.gpus else "N/A")
        gpu_job = jobs[1]
        assert gpu_job.allocation is not None
        (node,) = gpu_job.allocation.nodes
        assert len(gpu_job.allocation.gpu_ids[node]) == 2
        detail = slurm.admin("scontrol", "show", "job", "-d", "-o", str(gpu_job.job_id))
        assert f"Nodes={node} " in detail
        idx = ",".join(map(str, gpu_job.allocation.gpu_ids[node]))
        assert re.search(rf"GRES=gpu:2\(IDX:({idx}|{idx.replace(',', '-')})\)", detail)
        holders = gpu_holders(slurm)
        shared = {k: v for k, v in holders.items() if len(v) > 1}
        assert not shared, f"GPU indices held by two jobs: {shared}"
        assert {j for v in holders.values() for j in v} >= {*native, str(gpu_job.job_id)}
    finally:
        for i in ids:
            await slurm_client.cancel(i)
        slurm.admin("scancel", *native)
    live = {k for k, row in _squeue(slurm).items() if row[2] in ("RUNNING", "PENDING")}
    assert not live & {str(i) for i in ids}


async def test_twenty_concurrent_submits_leave_one_job(
    slurm: SlurmTarget, slurm_client: SlurmClient
) -> None:
    index = JobIndex(slurm_client)
    req = _request("burst")
    jobs = await asyncio.gather(*(index.ensure(req) for _ in range(20)))
    try:
        assert len({j.job_id for j in jobs}) == 1
        names = [row[1] for row in _squeue(slurm).values()]
        assert names.count(req.name) == 1
    finally:
        await slurm_client.cancel(jobs[0].job_id)


async def test_racing_processes_converge_to_one_live_job(
    slurm: SlurmTarget, slurm_client: SlurmClient
) -> None:
    """Two bridge processes (two indexes) submit for one pod; a resync cancels the extra."""
    req = _request("race")
    async with SlurmClient(slurm.settings()) as other_client:
        first, second = await asyncio.gather(
            JobIndex(slurm_client).ensure(req), JobIndex(other_client).ensure(req)
        )
    assert first.job_id != second.job_id
    index = JobIndex(slurm_client)
    cancelled = (await index.resync()).cancelled
    kept = index.by_owner(req.owner)
    try:
        assert kept is not None and len(cancelled) == 1
        assert {kept.job_id, *cancelled} == {first.job_id, second.job_id}
        live = [r for r in _squeue(slurm).values() if r[1] == req.name and r[2] != "COMPLETING"]
        assert len(live) == 1
        assert await index.ensure(req) == kept  # idempotent after a restart
    finally:
        await slurm_client.cancel(kept.job_id if kept else first.job_id)
