"""The slurmrestd client against a real Slurm: parsers, tokens, failures."""

import asyncio
import os
import time
import uuid
from pathlib import Path

import pytest

from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest, SlurmPlacement
from bridge.slurm import negotiate
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import (
    SlurmAuthError,
    SlurmJobNotFound,
    SlurmRejected,
    SlurmUnavailable,
)
from bridge.slurm.types import JobState
from bridge.slurm.wire import FAMILIES
from slurmbridge_devkit.slurm import SlurmTarget

pytestmark = pytest.mark.integration


def _request(**kw: object) -> JobRequest:
    uid = str(uuid.uuid4())
    owner = PodOwner(uid)
    return JobRequest(name=f"k8s:itest/client-{uid[:8]}", owner=owner, **kw)  # type: ignore[arg-type]


async def test_every_offered_parser_round_trips_a_placeholder(slurm: SlurmTarget) -> None:
    async with SlurmClient(slurm.settings()) as probe:
        await probe.connect()
        resp = await probe.rest.exchange.send(  # the document the negotiation reads
            "GET", "/openapi/v3",
            headers={"X-SLURM-USER-NAME": slurm.user, "X-SLURM-USER-TOKEN": slurm.mint_token()},
        )
    usable = sorted(negotiate.offered_versions(resp.json()) & set(FAMILIES))
    assert usable, "this slurmrestd offers no parser the bridge speaks"
    for parser in usable:
        async with SlurmClient(slurm.settings(data_parser=parser)) as client:
            assert await client.connect() == parser
            req = _request(cpus=2, memory_mb=1024, gpus=1, time_limit_minutes=30)
            job_id = await client.submit(req)
            job = await client.get_job(job_id)
            assert (job.name, job.owner) == (req.name, req.owner)
            assert job.state in (JobState.PENDING, JobState.RUNNING)
            states = await client.job_states([job_id, 2**31 - 1])  # the second: unknown
            assert list(states) == [job_id]
            every = await client.every_job_state()  # what a resync reads instead of GET /jobs/
            # The same state, or Slurm started the job between the two reads.
            assert (states[job_id], every[job_id]) in (
                (JobState.PENDING, JobState.PENDING), (JobState.RUNNING, JobState.RUNNING),
                (JobState.PENDING, JobState.RUNNING),
            )
            await client.cancel(job_id)
            assert (await client.get_job(job_id)).state in (
                JobState.CANCELLED, JobState.COMPLETING,
            )


async def test_a_running_jobs_allocation_reads_as_the_whole_job_says(slurm: SlurmTarget) -> None:
    """``GET /resources/{id}`` (v0.0.44+) gives the nodes and GPU indices ``GET /job/{id}``
    does, in a fraction of the bytes; older parsers have no such endpoint (None)."""
    async with SlurmClient(slurm.settings()) as client:
        parser = await client.connect()
        job_id = await client.submit(_request(gpus=2))
        try:
            deadline = time.monotonic() + 30
            while (job := await client.get_job(job_id)).state is not JobState.RUNNING:
                assert time.monotonic() < deadline, f"job {job_id} never ran: {job.reason}"
                await asyncio.sleep(0.2)
            allocation = await client.job_allocation(job_id)
            if negotiate.at_least(parser, "v0.0.44"):
                assert allocation is not None and allocation == job.allocation
                assert [len(g) for g in allocation.gpu_ids.values()] == [2]
            else:
                assert allocation is None
        finally:
            await client.cancel(job_id)
        if negotiate.at_least(parser, "v0.0.44"):
            assert await client.job_allocation(job_id) is None  # not running any more


async def test_negotiates_newest_common_parser(
    slurm: SlurmTarget, slurm_client: SlurmClient
) -> None:
    parser = await slurm_client.connect()
    expected = {"24.11": ("v0.0.42", "batch"), "26.05": ("v0.0.45", "external")}
    if slurm.version in expected:
        assert (parser, slurm_client.family.placeholder) == expected[slurm.version]


async def test_token_file_rotation_is_picked_up(slurm: SlurmTarget, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(slurm.mint_token())
    async with SlurmClient(slurm.settings(token_file=token_file)) as client:
        await client.list_nodes()
        replacement = tmp_path / "token.new"
        replacement.write_text("not-a-jwt")
        os.replace(replacement, token_file)  # how Secrets and rotators swap files
        with pytest.raises(SlurmAuthError, match="scontrol token"):
            await client.list_nodes()
        replacement.write_text(slurm.mint_token())
        os.replace(replacement, token_file)
        nodes = await client.list_nodes()
        assert len(nodes) >= 1


async def test_slurm_rejection_carries_slurms_words(slurm_client: SlurmClient) -> None:
    with pytest.raises(SlurmRejected, match="Invalid partition name specified"):
        await slurm_client.submit(_request(placement=SlurmPlacement(partition="no-such-partition")))


async def test_unknown_job_is_typed_not_found(slurm_client: SlurmClient) -> None:
    with pytest.raises(SlurmJobNotFound):
        await slurm_client.get_job(987654321)
    await slurm_client.cancel(987654321)  # cancelling what is gone is not an error


async def test_unreachable_slurmrestd_fails_fast_and_clearly(slurm: SlurmTarget) -> None:
    settings = slurm.settings(url="http://127.0.0.1:9", retries=2, backoff_seconds=0.05)
    started = time.monotonic()
    async with SlurmClient(settings) as client:
        with pytest.raises(SlurmUnavailable, match=r"127\.0\.0\.1:9 failed negotiate after 3"):
            await client.list_nodes()
    assert time.monotonic() - started < 5


async def test_drain_and_resume_carry_the_reason(
    slurm: SlurmTarget, slurm_client: SlurmClient
) -> None:
    node = (await slurm_client.list_nodes())[-1].name
    # Not "slurmbridge: ...": a running bridge's node controller resumes its own drains.
    reason = "integration test: drain and resume"
    await slurm_client.drain(node, reason)
    try:
        drained = next(n for n in await slurm_client.list_nodes() if n.name == node)
        assert "DRAIN" in drained.states and drained.unavailable
        assert drained.reason == reason
        reasons = slurm.admin("sinfo", "-h", "-R", "-o", "%E", "-n", node)
        assert reason in reasons
    finally:
        await slurm_client.resume(node)
    resumed = next(n for n in await slurm_client.list_nodes() if n.name == node)
    assert "DRAIN" not in resumed.states


def _leaf_of(slurm: SlurmTarget) -> dict[str, str]:
    """node → its leaf switch in topology ``tree``, as ``scontrol show topology`` says."""
    leaves: dict[str, str] = {}
    for line in slurm.admin("scontrol", "show", "topology", "tree").splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if fields.get("Level") == "0":
            for node in slurm.admin("scontrol", "show", "hostnames", fields["Nodes"]).split():
                leaves[node] = fields["SwitchName"]
    return leaves


async def test_nodes_carry_the_topology_units_slurm_shows(
    slurm: SlurmTarget, slurm_client: SlurmClient
) -> None:
    """recipe.sh gives 25.05+ a tree and a block topology (partitions ``tree``, ``block``);
    24.11 has no topology.yaml and its parser no node topology."""
    nodes = await slurm_client.list_nodes()
    if tuple(int(p) for p in slurm.version.split(".")[:2]) < (25, 5):
        assert all(n.topology == () for n in nodes)
        return
    leaves = _leaf_of(slurm)
    assert len(set(leaves.values())) == 2, leaves  # two leaf switches under the spine
    for node in nodes:
        assert ("tree", leaves[node.name]) in node.topology, (node.name, node.topology)
        assert [name for name, _ in node.topology] == ["tree", "block"]


async def test_the_node_table_is_read_again_only_when_a_node_changed(
    slurm: SlurmTarget, slurm_client: SlurmClient
) -> None:
    """26.05's slurmrestd answers "changed since?" (HTTP 304 while no node did); 24.11's cannot
    (HTTP 500 "Unable to query partitions"), so the table comes in full there.  A drain is a
    change on both."""
    unchanged = False
    for _ in range(5):  # a job of an earlier test may still be ending on a node
        table = await slurm_client.node_table()
        assert table.read_at is not None and table.nodes
        await asyncio.sleep(2)
        again = await slurm_client.node_table_since(table.read_at)
        if slurm.version == "24.11":
            assert again is not None and {n.name for n in again.nodes} == {
                n.name for n in table.nodes}
        unchanged = again is None
        if unchanged:
            break
    assert unchanged is (slurm.version != "24.11")

    table = await slurm_client.node_table()
    assert table.read_at is not None
    node = table.nodes[-1].name
    await slurm_client.drain(node, "integration test: a change")
    try:
        changed = await slurm_client.node_table_since(table.read_at)
        assert changed is not None
        drained = next(n for n in changed.nodes if n.name == node)
        assert drained.reason == "integration test: a change"
    finally:
        await slurm_client.resume(node)
