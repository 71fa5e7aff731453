"""The SOAK harness's parts that need no cluster: the seeded fault schedule, the invariant
checks on crafted snapshots, and how long a suspect may last before it is a violation."""

import asyncio
import itertools
import math
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from benchmarks.soak.cut import Relay
from benchmarks.soak.invariants import (
    BOUND_SECONDS,
    Bound,
    JobObs,
    PodObs,
    Snapshot,
    check_all,
)
from benchmarks.soak.kubelet import STOP_SECONDS, Kubelet
from benchmarks.soak.load import Load
from benchmarks.soak.observe import job_obs, jobs_obs
from benchmarks.soak.schedule import GAP_SECONDS, HOLD_SECONDS, fault_schedule, pick_one
from benchmarks.soak.tracker import Outage, Tracker, healthy_seconds
from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.scontrol import parse_job_line

NS = "soak"
NOW = 1_000_000.0


def test_a_seed_names_one_schedule_and_another_seed_another() -> None:
    one, again, other = fault_schedule(1, 1800), fault_schedule(1, 1800), fault_schedule(2, 1800)
    assert one == again and one != other
    assert 1800 / GAP_SECONDS[1] <= len(one) <= 1800 / GAP_SECONDS[0]
    gaps = [b.at - a.at for a, b in itertools.pairwise(one)]
    assert all(GAP_SECONDS[0] - 0.2 <= g <= GAP_SECONDS[1] + 0.2 for g in gaps)
    for fault in one:
        low, high = HOLD_SECONDS[fault.kind]
        assert low - 0.1 <= fault.hold <= high + 0.1 and 0 <= fault.pick < 1
    assert len({f.kind for f in one}) >= 6  # 30 minutes meet most kinds


def test_a_pick_names_a_victim_among_those_alive() -> None:
    assert pick_one([], 0.5) is None
    assert pick_one(["a", "b", "c"], 0.0) == "a"
    assert pick_one(["a", "b", "c"], 0.999) == "c"


def _job(job_id: str, owner: str = "", state: str = "RUNNING", *, node: str = "node1",
         gpus: tuple[int, ...] = (), name: str = "") -> JobObs:
    return JobObs(job_id, name or (f"k8s:{NS}/{job_id}" if owner else "native"), state,
                  "slurm" if owner else "alice", owner, (node,) if state == "RUNNING" else (),
                  {node: gpus} if gpus else {})


def _pod(name: str, job_id: str = "", **kw: object) -> PodObs:
    base: dict[str, object] = {"uid": f"uid-{name}", "created": NOW - 5, "phase": "Running",
                               "node": "kube-node1", "slurm_node": "node1", "job_id": job_id}
    return PodObs(name, **(base | kw))  # type: ignore[arg-type]


def _clean() -> Snapshot:
    return Snapshot(NOW, NS, (
        _pod("a", "10", gpu_ids=(0, 1)),
        _pod("waits", phase="Pending", node="", slurm_node="", told_why=True, created=NOW - 300),
        _pod("g-0", "12", group="g"), _pod("g-1", "12", group="g", node="kube-node2",
                                           slurm_node="node2"),
    ), (
        _job("10", "uid-a", gpus=(0, 1)),
        _job("11", "uid-waits", state="PENDING"),
        JobObs("12", f"k8s:{NS}/g", "RUNNING", "slurm", f"group:{NS}/g", ("node1", "node2")),
        _job("20", gpus=(2,)),  # alice's native job
        _job("9", "uid-gone", state="CANCELLED"),  # ended: no longer anyone's
    ))


def test_a_clean_state_raises_no_suspect() -> None:
    assert check_all(_clean(), frozenset()) == []


def _with(snap: Snapshot, pods: tuple[PodObs, ...] = (), jobs: tuple[JobObs, ...] = ()) -> Snapshot:
    return Snapshot(snap.at, snap.namespace, snap.pods + pods, snap.jobs + jobs)


def _invariants(snap: Snapshot, faulted: frozenset[str] = frozenset()) -> dict[str, Bound]:
    return {s.invariant: s.bound for s in check_all(snap, faulted)}


def test_a_pod_bound_where_its_job_does_not_run_is_flagged() -> None:
    snap = _with(_clean(), (_pod("moved", "30", slurm_node="node3", node="kube-node3"),),
                 (_job("30", "uid-moved", node="node4"),))
    assert _invariants(snap) == {"pod bound to a node its job does not hold": Bound.STRICT}
    assert _invariants(snap, frozenset({"30"})) == {
        "pod bound to a node its job does not hold": Bound.EVICT}


def test_a_pod_running_after_its_job_ended_is_flagged_strictly_unless_the_harness_ended_it(
) -> None:
    snap = _with(_clean(), (_pod("late", "31", gpu_ids=(5,)),),
                 (_job("31", "uid-late", state="CANCELLED"), _job("32", node="node1", gpus=(5,))))
    found = _invariants(snap)
    assert found == {"pod running without a live job": Bound.STRICT,
                     "two running things on one GPU": Bound.STRICT}
    assert set(_invariants(snap, frozenset({"31"})).values()) == {Bound.EVICT}


def test_two_jobs_on_one_gpu_index_are_flagged() -> None:
    snap = _with(_clean(), jobs=(_job("33", gpus=(1,)),))
    assert _invariants(snap) == {"two running things on one GPU": Bound.STRICT}


def _shards(job_id: str, owner: str = "", gpu: int = 3, held: int = 2) -> JobObs:
    return JobObs(job_id, f"k8s:{NS}/{job_id}" if owner else "native", "RUNNING",
                  "slurm" if owner else "alice", owner, ("node1",),
                  shards={"node1": {gpu: (held, 4)}})


def test_a_gpu_shared_by_shards_within_its_count_is_no_overlap() -> None:
    """A pod told the GPU its shards are on, beside a native job's shards of the same GPU."""
    snap = _with(_clean(), (_pod("sharer", "40", gpu_ids=(3,), shards=2),),
                 (_shards("40", "uid-sharer"), _shards("41", held=2)))
    assert _invariants(snap) == {}


def test_shards_beyond_the_gpus_count_or_beside_a_whole_gpu_are_flagged() -> None:
    over = _with(_clean(), jobs=(_shards("42", held=3), _shards("43", held=2)))
    assert _invariants(over) == {"two running things on one GPU": Bound.STRICT}
    beside = _with(_clean(), jobs=(_shards("44", gpu=2, held=1),))  # job 20 holds GPU 2 whole
    assert _invariants(beside) == {"two running things on one GPU": Bound.STRICT}
    late = _with(_clean(), (_pod("late", "45", gpu_ids=(3,), shards=3),),
                 (_job("45", "uid-late", state="CANCELLED"), _shards("46", held=2)))
    assert _invariants(late)["two running things on one GPU"] is Bound.STRICT


def test_orphans_duplicates_and_silent_pods_are_flagged_with_their_bounds() -> None:
    snap = _with(_clean(), (
        _pod("silent", phase="Pending", node="", slurm_node=""),
        _pod("done", "35", phase="Succeeded"),
    ), (
        _job("34", "uid-a", state="PENDING"),  # a second job for pod a
        _job("35", "uid-done"),  # the pod finished, its job still runs
        _job("36", f"group:{NS}/nobody", state="PENDING"),
    ))
    suspects = check_all(snap, frozenset())
    assert {(s.invariant, s.bound) for s in suspects} == {
        ("more than one live job for one owner", Bound.DUPLICATE),
        ("placeholder alive without its pod", Bound.ORPHAN),
        ("pod neither bound nor told why", Bound.SILENT),
    }
    assert sorted(s.key for s in suspects if s.bound is Bound.ORPHAN) == ["orphan:35", "orphan:36"]


def test_healthy_time_leaves_out_every_outage_once() -> None:
    outages = [Outage(10, 20), Outage(15, 30), Outage(50, 60)]
    assert healthy_seconds(0, 100, outages) == 100 - 20 - 10
    assert healthy_seconds(12, 25, outages) == 0
    assert healthy_seconds(0, 100, [Outage(40, math.inf)]) == 40


def test_a_strict_suspect_is_a_violation_on_its_second_sighting_and_reported_once() -> None:
    tracker = Tracker(seed=7, load_start=NOW - 100)
    tracker.fault("t+80s SIGKILL of the leader replica")
    snap = _with(_clean(), jobs=(_job("33", gpus=(1,)),))
    assert tracker.observe(check_all(snap, frozenset()), NOW) == []
    found = tracker.observe(check_all(snap, frozenset()), NOW + 5)
    assert len(found) == 1 and tracker.checks == 2
    text = found[0].describe()
    assert "seed 7" in text and "node1 GPU 1" in text and "SIGKILL of the leader" in text
    assert tracker.observe(check_all(snap, frozenset()), NOW + 10) == []


def test_a_bounded_suspect_waits_its_bound_in_time_the_bridge_could_act() -> None:
    tracker = Tracker(seed=1, load_start=NOW)
    orphan = _with(_clean(), jobs=(_job("36", f"group:{NS}/nobody", state="PENDING"),))
    bound = BOUND_SECONDS[Bound.ORPHAN]
    tracker.open_outage(NOW + 1)
    tracker.close_outage(0, NOW + 11)
    assert tracker.observe(check_all(orphan, frozenset()), NOW) == []
    assert tracker.observe(check_all(orphan, frozenset()), NOW + bound) == []  # 10 s away
    assert len(tracker.observe(check_all(orphan, frozenset()), NOW + bound + 10)) == 1


def test_a_suspect_that_clears_starts_afresh() -> None:
    tracker = Tracker(seed=1, load_start=NOW)
    orphan = _with(_clean(), jobs=(_job("36", f"group:{NS}/nobody", state="PENDING"),))
    tracker.observe(check_all(orphan, frozenset()), NOW)
    tracker.observe(check_all(_clean(), frozenset()), NOW + 30)
    tracker.observe(check_all(orphan, frozenset()), NOW + 40)
    assert tracker.observe(check_all(orphan, frozenset()), NOW + 60) == []


def test_slurms_own_text_reads_as_the_jobs_the_checks_take() -> None:
    line = ("JobId=4 JobName=k8s:demo/allreduce UserId=slurm(64030) JobState=RUNNING "
            "Reason=None Comment=slurmbridge.io/pod-uid=group:demo/allreduce NodeList=node[1-2] "
            "Nodes=node1 CPU_IDs=0-3 Mem=1024 GRES=gpu:1(IDX:6) Nodes=node2 CPU_IDs=0-3 "
            "Mem=1024 GRES=gpu:1(IDX:0)")
    job = job_obs(parse_job_line(line))
    assert (job.job_id, job.owner, job.user, job.nodes) == (
        "4", "group:demo/allreduce", "slurm", ("node1", "node2"))
    assert job.gpus == {"node1": (6,), "node2": (0,)}
    native = job_obs(parse_job_line("JobId=5 JobName=x UserId=alice(2001) JobState=PENDING "
                                    "Comment=(null) NodeList=(null)"))
    assert native.owner == "" and not native.nodes and native.live


class _Kube(FakeKube):
    """The dev kit's fake apiserver, taking the delete options the harness passes."""

    async def delete(self, res: Any, name: str, *, namespace: str | None = None,
                     grace_period: int | None = None, cascade: Any = None) -> None:
        await super().delete(res, name, namespace=namespace)


async def test_the_harness_kubelet_runs_a_bound_pod_ends_it_and_stops_a_deleted_one() -> None:
    kube = cast(AsyncClient, _Kube())  # the calls the kubelet makes, no more
    kubelet = Kubelet(kube, NS)
    for name in ("done", "deleted"):
        await create_pod(kube, NS, pod_manifest(name))
        await kube.patch(Pod, name, {"spec": {"nodeName": "kube-node1"}}, namespace=NS)
    kubelet.lifetimes["done"] = 0
    await kubelet.step()
    assert {p.metadata.name: p.status.phase async for p in kube.list(Pod, namespace=NS)
            if p.metadata and p.status} == {"done": "Running", "deleted": "Running"}
    await kube.patch(Pod, "deleted", {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}},
                     namespace=NS)
    await kubelet.step()
    done = await kube.get(Pod, "done", namespace=NS)
    assert done.status is not None and done.status.phase == "Succeeded"
    kubelet.stopping["deleted"] -= STOP_SECONDS  # its containers had their time to stop
    await kubelet.step()
    assert [p.metadata.name async for p in kube.list(Pod, namespace=NS) if p.metadata] == ["done"]
    assert kubelet.completed == 1 and len(kubelet.placed) == 2


async def test_the_cut_holds_every_byte_until_it_heals_and_loses_none() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)
            await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    relay = Relay("127.0.0.1", int(upstream.sockets[0].getsockname()[1]))
    await relay.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        writer.write(b"before")
        assert await asyncio.wait_for(reader.read(100), 5) == b"before"
        relay.cut()
        writer.write(b"during")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(100), 0.3)
        relay.heal()
        assert await asyncio.wait_for(reader.read(100), 5) == b"during"
        writer.close()
    finally:
        await relay.close()
        upstream.close()


# --- mixed groups: one heterogeneous job (issue 43, item 4) ----------------------------------

HET = ("JobId={id} HetJobId=29 HetJobOffset={offset} JobName=k8s:{ns}/mixed-1 "
       "UserId=slurm(64030) JobState=RUNNING Reason=None "
       "Comment=slurmbridge.io/pod-uid=group:{ns}/mixed-1 NodeList={nodes} {detail}")


def test_a_heterogeneous_jobs_components_read_as_one_job_the_checks_pass() -> None:
    """``scontrol show job -d`` lists each component as a job of its own id; the checks take
    them as the one job every member records (the leader's id), on every component's nodes."""
    lines = [
        HET.format(id=29, offset=0, ns=NS, nodes="node1",
                   detail="Nodes=node1 CPU_IDs=0 Mem=512 GRES="),
        HET.format(id=30, offset=1, ns=NS, nodes="node[2-3]",
                   detail="Nodes=node2 CPU_IDs=0 Mem=512 GRES=gpu:2(IDX:2-3) "
                          "Nodes=node3 CPU_IDs=0 Mem=512 GRES=gpu:2(IDX:2-3)"),
    ]
    jobs = jobs_obs([parse_job_line(line) for line in lines])
    assert [(j.job_id, j.nodes) for j in jobs] == [("29", ("node1", "node2", "node3"))]
    pods = (
        _pod("mixed-1-0", "29", group="mixed-1"),
        _pod("mixed-1-1", "29", group="mixed-1", node="kube-node2", slurm_node="node2",
             gpu_ids=(2, 3), gpus_asked=2),
        _pod("mixed-1-2", "29", group="mixed-1", node="kube-node3", slurm_node="node3",
             gpu_ids=(2, 3), gpus_asked=2),
    )
    assert check_all(Snapshot(NOW, NS, pods, jobs), frozenset()) == []


async def test_the_load_makes_mixed_groups_a_launcher_beside_gpu_workers() -> None:
    kube = cast(AsyncClient, _Kube())
    load = Load(kube, cast(Any, None), NS, Kubelet(kube, NS), seed=3)
    await load.act("mixed")
    made = {}
    async for pod in kube.list(Pod, namespace=NS):
        assert pod.metadata and pod.metadata.name and pod.spec
        limits = [c.resources.limits or {} for c in pod.spec.containers if c.resources]
        made[pod.metadata.name] = (
            (pod.metadata.labels or {}).get(keys.GROUP_COMPONENT),
            (pod.metadata.annotations or {}).get(keys.GROUP_COMPONENTS),
            sum(int(lim.get(keys.GPU_RESOURCE, 0)) for lim in limits))
    assert sorted(made) == ["mixed-1-0", "mixed-1-1", "mixed-1-2"], made
    assert [made[n][:2] for n in sorted(made)] == [
        ("launcher", "launcher=1,workers=2"), ("workers", "launcher=1,workers=2"),
        ("workers", "launcher=1,workers=2")]
    gpus = [made[n][2] for n in sorted(made)]
    assert gpus[0] == 0 and gpus[1] == gpus[2] > 0, made
