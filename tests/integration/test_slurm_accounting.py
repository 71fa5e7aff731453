"""Accounting, identity and QOS on a real Slurm with slurmdbd, checked with the admin's own
tools (sacct, squeue, scontrol).  The account tree is the one deploy/slurm/recipe.sh creates:
accounts team-a (alice) and team-b (bob), QOS normal, low (preemptable, GraceTime), high
(preempts low) and gpu2 (GrpTRES gres/gpu=2)."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest, SlurmPlacement
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmAuthError
from bridge.slurm.types import JobState, SlurmJob
from slurmbridge_devkit.slurm import SlurmTarget

pytestmark = pytest.mark.integration

MAPPED = {"team-a": "alice", "team-b": "bob"}  # namespace -> Slurm user, as a tenancy maps them


def _trust(user: str, job_name: str) -> bool:
    namespace = job_name.removeprefix("k8s:").split("/", 1)[0]
    return MAPPED.get(namespace) == user


def _request(namespace: str, gpus: int = 0, qos: str | None = None) -> JobRequest:
    uid = str(uuid.uuid4())
    return JobRequest(
        name=f"k8s:{namespace}/acct-{uid[:8]}", owner=PodOwner(uid), cpus=1, memory_mb=512,
        gpus=gpus, placement=SlurmPlacement(user=MAPPED[namespace], account=namespace, qos=qos),
    )


@pytest.fixture
def key_file(slurm: SlurmTarget, tmp_path: Path) -> Path:
    path = tmp_path / "jwt_hs256.key"
    _swap(path, slurm.jwt_key())
    return path


@pytest.fixture(params=["jwt_key_file", "token_file"])
async def tenant_client(
    request: pytest.FixtureRequest, slurm: SlurmTarget, key_file: Path
) -> AsyncIterator[SlurmClient]:
    """The bridge's client as it acts for mapped users: with the cluster's JWT key, or with
    the single token of SlurmUser (which Slurm lets act as any user)."""
    settings = slurm.settings(jwt_key_file=key_file if request.param == "jwt_key_file" else None)
    async with SlurmClient(settings, trust=_trust) as client:
        await client.connect()
        yield client


async def _wait(
    client: SlurmClient, job_id: int, *states: JobState, within: float = 60
) -> SlurmJob:
    async with asyncio.timeout(within):
        while (job := await client.get_job(job_id)).state not in states:
            await asyncio.sleep(0.5)
    return job


async def _sacct(slurm: SlurmTarget, job_id: int, fields: str) -> list[str]:
    """One job's accounting record (slurmctld sends it to slurmdbd within seconds)."""
    async with asyncio.timeout(30):
        while True:
            out = slurm.admin("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", fields)
            rows = [r.split("|") for r in out.splitlines() if r]
            if rows and all(rows[0]):
                return rows[0]
            await asyncio.sleep(1)


async def test_placeholder_is_accounted_to_its_user_and_account_with_gpus(
    slurm: SlurmTarget, tenant_client: SlurmClient
) -> None:
    reqs = [_request("team-a", gpus=1), _request("team-b", gpus=2)]
    ids = [await tenant_client.submit(r) for r in reqs]
    try:
        for req, job_id in zip(reqs, ids, strict=True):
            job = await _wait(tenant_client, job_id, JobState.RUNNING)
            assert (job.user, job.account) == (req.placement.user, req.placement.account)
            assert job.owner == req.owner  # the bridge still recognises its placeholder
            user, account, tres = await _sacct(slurm, job_id, "User,Account,AllocTRES")
            assert (user, account) == (req.placement.user, req.placement.account)
            assert f"gres/gpu={req.gpus}" in tres.split(","), tres
    finally:
        for job_id in ids:  # cancelling a mapped user's job: the bridge acts as SlurmUser
            await tenant_client.cancel(job_id)
    for job_id in ids:
        assert (await _wait(tenant_client, job_id, JobState.CANCELLED)).state is JobState.CANCELLED


async def test_a_job_of_an_unmapped_user_is_not_a_placeholder(
    slurm: SlurmTarget, tenant_client: SlurmClient
) -> None:
    """bob forging the marker for team-a's namespace: read, never taken for a placeholder."""
    forged = JobRequest(
        name="k8s:team-a/forged", owner=PodOwner(str(uuid.uuid4())), cpus=1, memory_mb=512,
        placement=SlurmPlacement(user="bob", account="team-b"),
    )
    job_id = await tenant_client.submit(forged)
    try:
        job = await tenant_client.get_job(job_id)
        assert job.user == "bob"
        assert job.owner is None
    finally:
        await tenant_client.cancel(job_id)


async def test_over_the_qos_gpu_limit_stays_pending_with_the_qos_reason(
    slurm: SlurmTarget, tenant_client: SlurmClient
) -> None:
    reqs = [_request(ns, gpus=1, qos="gpu2") for ns in ("team-a", "team-b", "team-a")]
    ids: list[int] = []
    try:
        for req in reqs[:2]:
            ids.append(await tenant_client.submit(req))
            await _wait(tenant_client, ids[-1], JobState.RUNNING)
        ids.append(await tenant_client.submit(reqs[2]))
        third = await _wait(tenant_client, ids[2], JobState.PENDING)
        async with asyncio.timeout(30):  # Slurm states its reason at its next scheduling pass
            while third.reason in ("None", "Priority"):
                await asyncio.sleep(0.5)
                third = await tenant_client.get_job(ids[2])
        assert third.state is JobState.PENDING
        assert third.reason == "QOSGrpGRES", third.reason
        squeue = slurm.admin("squeue", "-h", "-j", str(ids[2]), "-o", "%T|%r|%q|%u|%a")
        assert squeue.strip() == "PENDING|QOSGrpGRES|gpu2|alice|team-a"
        await tenant_client.cancel(ids[0])  # a GPU of the QOS freed: the third one starts
        await _wait(tenant_client, ids[2], JobState.RUNNING)
    finally:
        for job_id in ids:
            await tenant_client.cancel(job_id)


async def test_high_qos_job_preempts_a_low_qos_placeholder_after_grace(
    slurm: SlurmTarget, key_file: Path
) -> None:
    grace = int(slurm.admin("sacctmgr", "-n", "-P", "show", "qos", "low", "format=GraceTime")
                .strip().rsplit(":", 1)[1])
    async with SlurmClient(slurm.settings(jwt_key_file=key_file), trust=_trust) as client:
        low_id = await client.submit(_request("team-b", gpus=8, qos="low"))
        allocation = (await _wait(client, low_id, JobState.RUNNING)).allocation
        assert allocation is not None
        high = slurm.admin(
            "sbatch", "--parsable", "--qos=high", "--gres=gpu:8", "-w", allocation.nodes[0],
            "-c", "1", "--mem=512", "-o", "/dev/null", "-J", "native-high", "--wrap", "sleep 300",
        ).strip()
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            seen: set[tuple[JobState, bool]] = set()
            async with asyncio.timeout(grace + 30):
                while (job := await client.get_job(low_id)).state.is_live:
                    seen.add((job.state, job.preempting))
                    await asyncio.sleep(0.25)
            ended_after = loop.time() - started
            async with asyncio.timeout(30):  # the GPUs went to the native high-QOS job
                while slurm.admin("squeue", "-h", "-j", high, "-o", "%T").strip() != "RUNNING":
                    await asyncio.sleep(0.5)
            state = (await _sacct(slurm, low_id, "State"))[0]
            print(f"Slurm {slurm.version}: low-QOS placeholder ended {job.state} ({job.reason}) "
                  f"{ended_after:.1f}s after the high-QOS job came (GraceTime {grace}s); "
                  f"sacct State {state}; seen while live: {sorted(seen)}")
            assert job.state is JobState.PREEMPTED, (job.state, job.reason)
            assert state == "PREEMPTED"
            assert (JobState.RUNNING, True) in seen  # signalled, still holding its GPUs
        finally:
            slurm.admin("scancel", high)
            await client.cancel(low_id)


def _swap(path: Path, data: bytes) -> None:
    replacement = path.with_suffix(".new")
    replacement.write_bytes(data)
    replacement.replace(path)  # how Secrets and rotators swap files


async def test_key_file_put_right_on_disk_is_used_without_a_restart(
    slurm: SlurmTarget, tmp_path: Path
) -> None:
    right = slurm.jwt_key()
    key_file = tmp_path / "jwt.key"
    _swap(key_file, b"0" * len(right))  # a stale key: Slurm refuses what it signs
    async with SlurmClient(slurm.settings(jwt_key_file=key_file), trust=_trust) as client:
        with pytest.raises(SlurmAuthError, match=str(key_file)):
            await client.submit(_request("team-a"))
        _swap(key_file, right)
        job_id = await client.submit(_request("team-a"))
        try:
            assert (await client.get_job(job_id)).user == "alice"
        finally:
            await client.cancel(job_id)
