"""The GPU map (issue 45): who holds each GPU index, from Slurm's allocation and the bridge's
records, and each kind of disagreement flagged; a clean state flags none.  Drawn over the dev
kit's fakes as ``slurmbridge gpus`` reads them (FakeSlurm's jobs and nodes, FakeKube's pods
and Nodes), as ``kubectl slurmbridge gpus`` does (pods alone), and as the bridge exports it."""

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast

import httpx
from click.testing import CliRunner
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim
from prometheus_client import REGISTRY
from prometheus_client.samples import Sample

from bridge import keys
from bridge.config import SlurmSettings
from bridge.devices.marks import DeviceId, PinRecord
from bridge.gpumap.exported import bridge_map, export
from bridge.gpumap.model import ClaimHold, Facts, GpuMap, JobHold, Kind, Problem, build
from bridge.jobs.owner import GroupOwner, PodOwner
from bridge.link.views import view_of
from bridge.slurm.allocation import allocation_from
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import Allocation, JobState
from slurmbridge_cli import gpumap_text, gpumap_view
from slurmbridge_cli.kubectl import Session, Target
from slurmbridge_cli.kubectl import main as plugin
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube, api_error
from slurmbridge_devkit.fakes import FakeSlurm
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange
from tests.unit.test_claim_pinning import DRIVER, claim, gpu_slice
from tests.unit.test_slurm_hardening import FakeRest

BRIDGE_USER = "slurm"


def _believe(user: str, owner: object, name: str, namespace: str | None) -> bool:
    """The tenancy's word as the tests have it: the bridge's user, or team-a's for ns-a."""
    return user == BRIDGE_USER or (user == "alice" and namespace == "ns-a")


def _pod(name: str, ns: str, job: int, node: str, ids: str, **more: str) -> Pod:
    return PodBuilder(name, ns).uid(f"uid-{name}").node(f"k-{node}").running().annotations(
        {keys.JOB_ID: str(job), keys.SLURM_NODE: node, keys.GPU_IDS: ids, **more}).build()


def _world() -> tuple[FakeSlurm, FakeKube]:
    """node1 (4 GPUs): native job 200 of bob on 0-1, placeholder 101 on 2 released to ns-a/a,
    3 free; node2: a group's placeholder 102 on 0 with its two members."""
    slurm, kube = FakeSlurm(("node1", "node2")), FakeKube()
    for job in (
        JobBuilder(200, "train").owner(None).running("node1", gpus=(0, 1)).tenancy(user="bob"),
        JobBuilder(101, "k8s:ns-a/a").owner(PodOwner("uid-a")).running("node1", gpus=(2,))
        .tenancy(user=BRIDGE_USER),
        JobBuilder(102, "k8s:ns-b/g").owner(GroupOwner("ns-b", "g")).running("node2", gpus=(0,))
        .tenancy(user=BRIDGE_USER),
    ):
        slurm.put(job.build())
    for node in ("node1", "node2"):
        kube.add(Node(metadata=ObjectMeta(name=f"k-{node}", labels={
            keys.NODE_SLURM_NODE: node})))
    for pod in _pods():
        kube.add(pod)
    return slurm, kube


def _pods() -> list[Pod]:
    """Pod a released to placeholder 101, the two members of group g to 102."""
    return [_pod("a", "ns-a", 101, "node1", "2"),
            *(_pod(member, "ns-b", 102, "node2", "0") for member in ("g-0", "g-1"))]


def _admin_map(slurm: FakeSlurm, kube: FakeKube) -> GpuMap:
    return asyncio.run(gpumap_view.collect(kube, slurm, _believe))


def _holders(gpu_map: GpuMap) -> dict[tuple[str, int], list[tuple[str, int | None]]]:
    return {(n.node, g.index): [(str(h.kind), h.job_id) for h in g.holders]
            for n in gpu_map.nodes for g in n.gpus}


def test_a_clean_state_maps_every_index_and_flags_nothing() -> None:
    gpu_map = _admin_map(*_world())
    assert gpu_map.disagreements == []
    assert _holders(gpu_map) == {
        ("node1", 0): [("native", 200)], ("node1", 1): [("native", 200)],
        ("node1", 2): [("placeholder", 101)], ("node1", 3): [],
        ("node2", 0): [("placeholder", 102)], ("node2", 1): [], ("node2", 2): [],
        ("node2", 3): [],
    }
    node1, node2 = gpu_map.nodes
    assert (node1.kube_node, node2.kube_node) == ("k-node1", "k-node2")
    native, placeholder = node1.gpus[0].holders[0], node1.gpus[2].holders[0]
    assert (native.user, native.pods) == ("bob", [])
    assert (placeholder.pods, placeholder.owner, placeholder.namespace) == \
        (["ns-a/a"], "uid-a", "ns-a")
    assert sorted(node2.gpus[0].holders[0].pods) == ["ns-b/g-0", "ns-b/g-1"]
    assert node2.gpus[0].holders[0].owner == "group:ns-b/g"


def test_a_pod_whose_gpu_ids_are_outside_its_jobs_idx_is_flagged() -> None:
    slurm, kube = _world()
    kube.add(_pod("stray", "ns-a", 101, "node1", "3"))
    (found,) = _admin_map(slurm, kube).disagreements
    assert (found.problem, found.node, found.index) == (Problem.POD_OUTSIDE_JOB, "node1", 3)
    assert "pod ns-a/stray says GPU 3 for job 101; Slurm: IDX 2" in found.text


def test_two_jobs_holding_one_index_whole_are_flagged_shards_are_not() -> None:
    slurm, kube = _world()
    slurm.put(JobBuilder(300, "other").owner(None).running("node1", gpus=(1,)).build())
    (found,) = _admin_map(slurm, kube).disagreements
    assert (found.problem, found.node, found.index) == (Problem.TWO_HOLDERS, "node1", 1)
    assert "native job 200" in found.text and "native job 300" in found.text
    shared = Allocation(("node2",), {"node2": (3,)}, {"node2": (3,)})
    for job_id in (301, 302):
        slurm.put(JobBuilder(job_id, "s").owner(None).allocation(shared)
                  .state(JobState.RUNNING).build())
    gpu_map = _admin_map(slurm, kube)
    assert [d.index for d in gpu_map.disagreements] == [1]
    assert _holders(gpu_map)[("node2", 3)] == [("native", 301), ("native", 302)]


def test_a_claim_pinned_on_a_device_slurm_gave_another_job_is_flagged() -> None:
    jobs = [JobHold("node1", 200, (0,), "bob"), JobHold("node1", 101, (1,), owner="uid-a")]
    clean = build(Facts(jobs=jobs, claims=[ClaimHold("node1", "ns-a/c", 101, (1,))]))
    assert clean.disagreements == []
    assert clean.nodes[0].gpus[1].holders[0].claims == ["ns-a/c"]
    wrong = build(Facts(jobs=jobs, claims=[ClaimHold("node1", "ns-a/c", 101, (0,))]))
    problems = sorted(str(d.problem) for d in wrong.disagreements)
    assert problems == ["claim-outside-job", "two-holders"], wrong.disagreements
    assert "Slurm gave it job 200" in wrong.disagreements[0].text


def test_a_forged_placeholder_is_the_native_job_of_its_user() -> None:
    """mallory names pod a's owner in her job's comment: not believed, so never drawn as the
    bridge's placeholder, and pod a's record still disagrees with nothing."""
    slurm, kube = _world()
    slurm.put(JobBuilder(400, "k8s:ns-a/a").owner(PodOwner("uid-a")).running(
        "node1", gpus=(3,)).tenancy(user="mallory").build())
    gpu_map = _admin_map(slurm, kube)
    forged = gpu_map.nodes[0].gpus[3].holders
    assert [(h.kind, h.job_id, h.user, h.owner) for h in forged] == \
        [(Kind.NATIVE, 400, "mallory", "")]
    assert gpu_map.disagreements == []


def test_the_table_draws_a_bar_per_node_and_shouts_disagreements() -> None:
    slurm, kube = _world()
    assert gpumap_text.bars(_admin_map(slurm, kube)) == ["node1  ██▓░", "node2  ▓░░░"]
    kube.add(_pod("stray", "ns-a", 101, "node1", "3"))
    text = gpumap_text.table(_admin_map(slurm, kube))
    assert "node1  k-node1    2    -     placeholder job 101 → ns-a/a" in text, text
    assert "node1  ██▓✗" in text and gpumap_text.LEGEND in text
    assert "!! node1 GPU 3 [pod-outside-job]: pod ns-a/stray" in text


def _plugin(kube: FakeKube, *args: str) -> str:
    @asynccontextmanager
    async def connect(target: Target) -> AsyncIterator[Session]:
        yield Session(kube, "ns-a", "https://apiserver.test:6443", datetime.now(UTC))

    done = CliRunner().invoke(plugin, ["gpus", *args], obj=connect)
    assert done.exit_code == 0, done.output
    return done.output


def test_kubectl_gpus_names_only_the_readers_pods() -> None:
    _, kube = _world()
    table = _plugin(kube)
    assert "ns-a/a" in table and "→ another namespace" in table, table
    assert "ns-b" not in table and "g-0" not in table, table
    assert "node1  ··▓\nnode2  █" in table and gpumap_text.KUBECTL_LEGEND in table
    data = json.loads(_plugin(kube, "-o", "json"))
    pods = [p for n in data["nodes"] for g in n["gpus"] for h in g["holders"] for p in h["pods"]]
    assert sorted(pods) == ["", "", "ns-a/a"] and "ns-b" not in json.dumps(data)


def test_kubectl_gpus_flags_two_jobs_on_one_index_and_reads_its_namespace_if_forbidden() -> None:
    _, kube = _world()
    kube.add(_pod("b", "ns-b", 103, "node1", "2"))
    assert "!! node1 GPU 2 [two-holders]" in _plugin(kube)

    class NamespaceOnly(FakeKube):
        def list(self, res: Any, *, namespace: str | None = None, labels: Any = None,
                 fields: Any = None) -> AsyncIterable[Any]:
            if namespace == "*":
                raise api_error(403, "pods is forbidden at the cluster scope")
            return super().list(res, namespace=namespace, labels=labels, fields=fields)

    narrow = NamespaceOnly()
    for pod in _pods():
        narrow.add(pod)
    table = _plugin(narrow)
    assert "ns-a/a" in table and "→ another namespace" not in table, table


def test_the_bridge_exports_its_map_with_bounded_labels() -> None:
    slurm, _ = _world()
    pods = [view_of(p) for p in _pods()]
    placeholders = [j for j in slurm.jobs.values() if j.owner is not None]
    export(bridge_map(placeholders, pods))
    held = {tuple(s.labels.values()) for s in _samples("slurmbridge_gpu_held")}
    assert held == {("node1", "2", "placeholder", "ns-a"), ("node2", "0", "placeholder", "ns-b")}
    assert {s.labels["kind"]: s.value for s in _samples("slurmbridge_gpu_disagreements")} == \
        {"pod-outside-job": 0, "two-holders": 0, "claim-outside-job": 0}
    stray = view_of(_pod("stray", "ns-a", 101, "node1", "3"))
    export(bridge_map(placeholders, [*pods, stray]))
    assert {s.labels["kind"]: s.value for s in _samples("slurmbridge_gpu_disagreements")}[
        "pod-outside-job"] == 1
    assert ("node1", "3", "pod", "ns-a") in {
        tuple(s.labels.values()) for s in _samples("slurmbridge_gpu_held")}


def _samples(name: str) -> list[Sample]:
    return [s for f in REGISTRY.collect() for s in f.samples if s.name == name]


def test_typed_slices_and_shards_as_gres_conf_declares_them() -> None:
    slurm, kube = _world()
    slurm.nodes["node1"] = dataclasses.replace(slurm.nodes["node1"], gres="gpu:2,shard:8(S:0)")
    slurm.nodes["node2"] = dataclasses.replace(
        slurm.nodes["node2"], gres="gpu:1g.10gb:1(S:0),gpu:3g.40gb:1")
    slurm.put(JobBuilder(500, "s").owner(None).state(JobState.RUNNING).allocation(
        allocation_from("node1", ["gpu:0(IDX:N/A),shard:3(0/4,3/4)"])).build())
    node1, node2 = _admin_map(slurm, kube).nodes
    assert [(g.index, g.type, g.shards) for g in node2.gpus] == [(0, "1g.10gb", 0),
                                                                  (1, "3g.40gb", 0)]
    assert [(g.index, g.shards) for g in node1.gpus[:2]] == [(0, 4), (1, 4)]
    (shards,) = [h for h in node1.gpus[1].holders if h.job_id == 500]
    assert shards.shared


def _pinned(name: str, job: int, device: str) -> ResourceClaim:
    """A claim as the bridge pins it (bridge/devices/pinning.py): finalizer, record, status."""
    record = PinRecord(job=job, pod=f"uid-{name}",
                       devices=frozenset({DeviceId(DRIVER, "k-node1", device)}))
    return cast(ResourceClaim, ResourceClaim.from_dict({
        "metadata": {"name": name, "namespace": "ns-a", "finalizers": [keys.CLAIM_FINALIZER],
                     "annotations": {keys.CLAIM_PINNED: record.model_dump_json()}},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "k-node1", "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}]},
    }))


def test_claims_the_bridge_pinned_are_read_from_their_record_and_the_nodes_slices() -> None:
    slurm, kube = _world()
    kube.add(gpu_slice("k-node1", 4))
    kube.add(_pinned("c", 101, "gpu-2"))
    kube.add(claim("unpinned"))  # no record: not the bridge's, not drawn

    def drawn() -> GpuMap:
        return asyncio.run(gpumap_view.collect(kube, slurm, _believe, {"index"}))

    clean = drawn()
    assert clean.disagreements == [] and clean.nodes[0].gpus[2].holders[0].claims == ["ns-a/c"]
    kube.add(_pinned("wrong", 101, "gpu-0"))
    assert sorted((d.problem, d.index) for d in drawn().disagreements) == [
        (Problem.CLAIM_OUTSIDE_JOB, 0), (Problem.TWO_HOLDERS, 0)]


class NodesToo(FakeRest):
    """slurmrestd answering the node listing as well (one node, 4 GPUs)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/nodes/"):
            return httpx.Response(200, json={"nodes": [{"name": "node1", "gres": "gpu:4"}]})
        return super().__call__(request)


def _slurmrestd_job(job_id: int, user: str, gres: str, comment: str = "") -> dict[str, Any]:
    return {"job_id": job_id, "name": f"job{job_id}", "user_name": user, "comment": comment,
            "job_state": ["RUNNING"], "nodes": "node1", "gres_detail": [gres]}


async def test_the_admins_map_reads_native_jobs_allocations_from_slurmrestd() -> None:
    """The client reads no native job's allocation for the bridge (not its business); the
    admin's map asks for every job's: a native job, one forging the bridge's marker, and one
    whose GPU detail cannot be read (left off the map, never a guess)."""
    rest = NodesToo([
        _slurmrestd_job(5, "bob", "gpu:2(IDX:0-1)"),
        _slurmrestd_job(6, "mallory", "gpu:1(IDX:3)", f"{keys.COMMENT_OWNER}uid-a"),
        _slurmrestd_job(7, "eve", "gpu:1(IDX:2-1)"),
    ])
    settings = SlurmSettings(url=MOCK_SLURM_URL, user=BRIDGE_USER, token="t", retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest)) as client:
        gpu_map = await gpumap_view.collect(FakeKube(), client, _believe)
    assert _holders(gpu_map) == {("node1", 0): [("native", 5)], ("node1", 1): [("native", 5)],
                                 ("node1", 2): [], ("node1", 3): [("native", 6)]}


class TwoNodes(FakeRest):
    """slurmrestd answering the node listing as well (two nodes, 4 GPUs each)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/nodes/"):
            return httpx.Response(200, json={"nodes": [{"name": n, "gres": "gpu:4"}
                                                       for n in ("node1", "node2")]})
        return super().__call__(request)


def _component(job_id: int, offset: int, nodes: str, gres: list[str]) -> dict[str, Any]:
    """One record of a native heterogeneous job (``sbatch ... : ...``) as slurmrestd lists
    it: its own job id, the leader's (``het_job_id``) and its offset."""
    return {"job_id": job_id, "name": "native-het", "user_name": "bob", "comment": "",
            "job_state": ["RUNNING"], "nodes": nodes, "gres_detail": gres,
            "het_job_id": {"set": True, "infinite": False, "number": 40},
            "het_job_offset": {"set": True, "infinite": False, "number": offset}}


async def test_a_native_heterogeneous_job_holds_the_gpus_of_every_component() -> None:
    """Issue 43: a Slurm user's ``sbatch --gres=gpu:1 : -N1 --gres=gpu:2``: the map shows
    the GPUs of both components (as ``40``, the job's id), not the first component's alone."""
    rest = TwoNodes([_component(40, 0, "node1", ["gpu:1(IDX:0)"]),
                     _component(41, 1, "node2", ["gpu:2(IDX:2-3)"])])
    settings = SlurmSettings(url=MOCK_SLURM_URL, user=BRIDGE_USER, token="t", retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest)) as client:
        gpu_map = await gpumap_view.collect(FakeKube(), client, _believe)
    held = {at: who for at, who in _holders(gpu_map).items() if who}
    assert held == {("node1", 0): [("native", 40)], ("node2", 2): [("native", 40)],
                    ("node2", 3): [("native", 40)]}, held
