"""A mixed group's heterogeneous job through its life (issue 43, item 4): each member told its
own component's state and reason, the end of any component the end of the whole group, and
``slurmbridge status`` naming each member's component."""

import asyncio
from typing import Any

import httpx
import httpx2
import pytest
from lightkube import AsyncClient, KubeConfig

from bridge import keys
from bridge.controllers.lifecycle import Lifecycle
from bridge.link.bound import holds
from bridge.link.podcache import PodCache
from bridge.link.views import view_of
from bridge.placement.index import JobIndex
from bridge.placement.notifier import PodNotifier
from bridge.placement.registry import SeenPods
from bridge.slurm.types import JobState
from slurmbridge_cli.status_view import collect, render_table
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm
from tests.unit.test_accounting_paths import writes
from tests.unit.test_hetjob import PARTS, HetRest, het_client

OWNER = f"{keys.COMMENT_OWNER}group:ns/g"


def _pending(rest: HetRest, reasons: tuple[str, str]) -> HetRest:
    for record, reason in zip(rest.jobs, reasons, strict=True):
        record.update(job_state=["PENDING"], state_reason=reason, nodes="", gres_detail=[])
    return rest


async def test_a_component_that_ended_ends_the_whole_job_for_the_bridge() -> None:
    """``scancel 29+1``: Slurm keeps the launcher's component running; the bridge reads the
    job as ending, so no worker keeps GPUs Slurm gave back."""
    rest = HetRest()
    rest.jobs[1]["job_state"] = ["CANCELLED"]
    async with het_client(rest) as client:
        job = await client.get_job(29)
    assert (job.state, job.ended_as) == (JobState.COMPLETING, JobState.CANCELLED)
    assert "+1" in job.reason, job.reason
    worker = {keys.SLURM_NODE: "node2", keys.GPU_IDS: "0,1"}
    assert not holds(worker, job)
    assert not holds({keys.SLURM_NODE: "node1", keys.GPU_IDS: ""}, job)


async def test_the_state_list_tells_a_component_that_ended() -> None:
    """The cheap poll: the leader listed RUNNING beside its ended component reads ending, so
    the poller re-reads the whole job at once."""
    class Listing(HetRest):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/jobs/state/"):
                return httpx.Response(200, json={"jobs": [
                    {"job_id": "29+0", "state": ["RUNNING"]},
                    {"job_id": "30+1", "state": ["CANCELLED"]}]})
            return super().__call__(request)

    async with het_client(Listing()) as client:
        assert await client.job_states([29]) == {29: JobState.COMPLETING}


async def test_the_state_list_tells_a_component_that_ended_and_still_completes() -> None:
    """``PREEMPTED,COMPLETING``: the component ended, its nodes not free yet."""
    class Listing(HetRest):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/jobs/state/"):
                return httpx.Response(200, json={"jobs": [
                    {"job_id": "29+0", "state": ["RUNNING"]},
                    {"job_id": "30+1", "state": ["PREEMPTED", "COMPLETING"]}]})
            return super().__call__(request)

    async with het_client(Listing()) as client:
        assert await client.job_states([29]) == {29: JobState.COMPLETING}


def _member(name: str, rank: int, component: str) -> Any:
    return (PodBuilder(name, "ns").uid(f"uid-{name}").group("g", 3)
            .label(keys.GROUP_RANK, str(rank)).label(keys.GROUP_COMPONENT, component)
            .annotate(keys.GROUP_COMPONENTS, PARTS).gated().containers().build())


async def test_each_member_is_told_its_own_components_state_and_reason() -> None:
    async with het_client(_pending(HetRest(), ("Resources", "Priority"))) as client:
        job = await client.get_job(29)
    pods = [_member("launcher", 0, "launcher"), _member("worker-0", 1, "workers")]
    kube, registry = FakeKube(), SeenPods()
    for pod in pods:
        registry.remember(view_of(pod))
    notifier = PodNotifier(kube, registry, quiet_seconds=0.01)
    for pod in pods:
        await notifier.job_known(view_of(pod), job)
    await asyncio.sleep(0.05)
    await notifier.drain()
    said = {e["involvedObject"]["name"]: e["message"]
            for e in kube.events(keys.EventReason.PENDING.value)}
    assert ("Slurm job 29 (PENDING, reason Resources), component launcher (+0) of "
            "heterogeneous job 29") in said["launcher"], said
    assert ("Slurm job 29 (PENDING, reason Priority), component workers (+1) of "
            "heterogeneous job 29") in said["worker-0"], said
    assert "other jobs come first" in said["worker-0"]


def _kube(pods: list[dict[str, Any]]) -> AsyncClient:
    def api(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json={"apiVersion": "v1", "kind": "PodList",
                                          "metadata": {}, "items": pods})

    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "http://k8s"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    })
    return AsyncClient(config=config, transport=httpx2.MockTransport(api))


async def test_status_shows_each_members_component_of_the_job() -> None:
    rest = _pending(HetRest(), ("Resources", "Priority"))
    pods = [PodBuilder(n, "ns").uid(f"uid-{n}").group("g", 3).label(keys.GROUP_RANK, str(r))
            .label(keys.GROUP_COMPONENT, c).annotate(keys.GROUP_COMPONENTS, PARTS)
            .scheduler(keys.SCHEDULER_NAME).manifest()
            for n, r, c in (("launcher", 0, "launcher"), ("worker-0", 1, "workers"))]
    async with het_client(rest) as slurm:
        table = render_table(await collect(_kube(pods), slurm)).splitlines()
    lines = {line.split()[0]: line.split() for line in table[1:]}
    assert lines["ns/launcher"][1:4] == ["29+0", "PENDING", "Resources"], table
    assert lines["ns/worker-0"][1:4] == ["29+1", "PENDING", "Priority"], table


# --- one component preempted (issue 43, item 4) --------------------------------------------

_SIGNALLED = {"set": True, "infinite": False, "number": 1764921600}


@pytest.mark.parametrize(
    "workers",
    [
        {"job_state": ["PREEMPTED"]},  # PreemptMode CANCEL, its GraceTime over
        {"job_state": ["PREEMPTED", "COMPLETING"]},  # ended, its nodes not free yet
        {"preempt_time": _SIGNALLED},  # signalled: still RUNNING, in its GraceTime
    ],
    ids=["ended", "completing", "in-grace"],
)
async def test_a_preempted_component_evicts_its_members_as_a_preempted_job_does(
    workers: dict[str, Any],
) -> None:
    """Slurm preempts the workers' component of a QOS ``low`` group: each member is told it
    was preempted and keeps its own grace period to stop, as a pod of an ordinary preempted
    job is (tests/unit/test_accounting_paths.py), never a plain "job ended"."""
    rest = HetRest()
    for record in rest.jobs:
        record["qos"] = "low"
    rest.jobs[1].update(workers)
    async with het_client(rest) as client:
        job = await client.get_job(29)
    worker = (PodBuilder("worker-0", "ns").uid("uid-w0").group("g", 3)
              .label(keys.GROUP_RANK, "1").label(keys.GROUP_COMPONENT, "workers")
              .annotate(keys.GROUP_COMPONENTS, PARTS)
              .annotations({keys.JOB_ID: "29", keys.SLURM_NODE: "node2", keys.GPU_IDS: "0,1"})
              .node("kube-node2").grace(45).containers().build())
    kube, slurm = FakeKube(), FakeSlurm()
    kube.add(worker)
    slurm.put(job)  # the lifecycle's confirming read
    index = JobIndex(slurm)
    index.record(job)
    await Lifecycle(kube, slurm, index, SeenPods(), PodCache(kube)).reconcile_once()
    assert writes(kube)[0] == ("evict", "worker-0")
    (reason, message, kind), = [w[1] for w in writes(kube) if w[0] == "event"]
    assert (reason, kind) == (keys.EventReason.PREEMPTED, "Warning"), message
    assert "preempted by Slurm" in message and "QOS low" in message, message
    assert "terminationGracePeriodSeconds=45" in message, message
    assert [w[1] for w in writes(kube) if w[0] == "condition"] == [
        (keys.REASON_PREEMPTED, message)]
