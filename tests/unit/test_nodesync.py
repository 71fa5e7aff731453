"""Node health both ways (NodeSync), against the in-memory fakes of Slurm and the apiserver."""

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from lightkube.models.core_v1 import (
    NodeCondition,
    NodeSpec,
    NodeStatus,
    Taint,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from bridge import keys
from bridge.controllers.nodesync import NodeSync, topology_labels
from bridge.kube.nodecache import NodeCache, node_view
from bridge.link.podcache import PodCache
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, idle_node


def _node(name: str, *, ready: bool = True, cordoned: bool = False,
          slurm_name: str | None = None) -> Node:
    labels = {keys.NODE_SLURM_NODE: slurm_name} if slurm_name else {}
    return Node(
        metadata=ObjectMeta(name=name, labels=labels),
        spec=NodeSpec(unschedulable=cordoned or None),
        status=NodeStatus(conditions=[NodeCondition(
            type="Ready", status="True" if ready else "False")]),
    )


def _world(*nodes: Node) -> tuple[NodeSync, FakeKube, FakeSlurm]:
    """NodeSync over a fake apiserver holding ``nodes`` and a fake Slurm with node1."""
    kube, fake_slurm = FakeKube(), FakeSlurm(("node1",))
    for node in nodes:
        kube.add(node)
    return NodeSync(kube, fake_slurm, NodeCache(kube), PodCache(kube)), kube, fake_slurm


def _taints(kube: FakeKube, name: str) -> dict[str, str]:
    node = kube.obj(Node, name)
    assert node is not None
    return {t["key"]: t.get("value", "") for t in node.get("spec", {}).get("taints") or []}


def _condition(kube: FakeKube, name: str) -> dict[str, Any]:
    node = kube.obj(Node, name)
    assert node is not None
    conditions = node.get("status", {}).get("conditions") or []
    return next(c for c in conditions if c["type"] == keys.NODE_CONDITION_SLURM)


async def test_a_slurm_node_gets_the_managed_taint_and_an_available_condition() -> None:
    sync, kube, _ = _world(_node("node1"), _node("laptop"))
    await sync.reconcile_once()
    assert _taints(kube, "node1") == {keys.MANAGED_TAINT: ""}
    assert _condition(kube, "node1")["status"] == "True"
    assert _taints(kube, "laptop") == {}  # no Slurm node of that name: not ours


async def test_a_node_slurm_drained_is_tainted_with_slurms_reason_and_never_resumed() -> None:
    sync, kube, slurm = _world(_node("kube-a", slurm_name="node1"))
    slurm.nodes["node1"] = idle_node("node1", "IDLE", "DRAIN", reason="admin: bad fan")
    await sync.reconcile_once()
    assert _taints(kube, "kube-a") == {keys.MANAGED_TAINT: "", keys.UNAVAILABLE_TAINT: "drain"}
    condition = _condition(kube, "kube-a")
    assert condition["status"] == "False" and "admin: bad fan" in condition["message"]
    await sync.reconcile_once()
    assert "DRAIN" in slurm.nodes["node1"].states  # an admin's drain is not the bridge's to undo


async def test_the_taint_goes_when_slurm_resumes_the_node() -> None:
    sync, kube, slurm = _world(_node("node1"))
    slurm.nodes["node1"] = idle_node("node1", "DOWN", reason="not responding")
    await sync.reconcile_once()
    assert _taints(kube, "node1")[keys.UNAVAILABLE_TAINT] == "down"
    slurm.nodes["node1"] = idle_node("node1")
    await sync.reconcile_once()
    assert _taints(kube, "node1") == {keys.MANAGED_TAINT: ""}
    assert _condition(kube, "node1")["status"] == "True"


async def test_a_cordoned_node_is_drained_in_slurm_and_resumed_when_uncordoned() -> None:
    sync, kube, slurm = _world(_node("node1", cordoned=True))
    await sync.reconcile_once()
    drained = slurm.nodes["node1"]
    assert "DRAIN" in drained.states and drained.reason.startswith(keys.DRAIN_REASON_PREFIX)
    assert "cordoned" in drained.reason
    assert keys.UNAVAILABLE_TAINT in _taints(kube, "node1")  # Slurm's view, told back

    await kube.patch(Node, "node1", {"spec": {"unschedulable": None}},  # kubectl uncordon
                     patch_type=PatchType.MERGE)
    await sync.reconcile_once()
    assert "DRAIN" not in slurm.nodes["node1"].states
    assert keys.UNAVAILABLE_TAINT not in _taints(kube, "node1")


async def test_a_not_ready_node_is_drained_in_slurm() -> None:
    sync, _, slurm = _world(_node("node1", ready=False))
    await sync.reconcile_once()
    assert "NotReady" in slurm.nodes["node1"].reason


async def test_other_taints_on_the_node_are_kept() -> None:
    node = _node("node1")
    assert node.spec is not None
    node.spec.taints = [Taint(key="gpu-vendor", value="x", effect="NoSchedule")]
    sync, kube, slurm = _world(node)
    slurm.nodes["node1"] = idle_node("node1", "DRAIN", reason="admin")
    await sync.reconcile_once()
    assert _taints(kube, "node1") == {
        "gpu-vendor": "x", keys.MANAGED_TAINT: "", keys.UNAVAILABLE_TAINT: "drain",
    }


async def _watched(kube: FakeKube) -> tuple[NodeCache, asyncio.Task[None]]:
    cache = NodeCache(kube)
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(cache.wait_synced(), 2)
    return cache, task


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(2):
        while not condition():
            await asyncio.sleep(0.01)


async def test_node_sync_reads_the_watched_nodes_instead_of_listing_them_each_round() -> None:
    kube, slurm = FakeKube(), FakeSlurm(("node1",))
    kube.add(_node("node1"))
    cache, task = await _watched(kube)
    try:
        sync = NodeSync(kube, slurm, cache, PodCache(kube))
        listed = kube.lists["Node"]
        await sync.reconcile_once()
        assert _taints(kube, "node1") == {keys.MANAGED_TAINT: ""}
        await kube.patch(Node, "node1", {"spec": {"unschedulable": True}},
                         patch_type=PatchType.MERGE)  # a cordon, seen through the watch
        await _until(lambda: (v := cache.get("node1")) is not None and v.unschedulable)
        await sync.reconcile_once()
        assert "DRAIN" in slurm.nodes["node1"].states
        assert kube.lists["Node"] == listed
    finally:
        task.cancel()


async def test_a_relabelled_or_deleted_node_maps_to_its_new_slurm_node_at_once() -> None:
    kube = FakeKube()
    kube.add(_node("kube-a", slurm_name="node1"))
    cache, task = await _watched(kube)
    try:
        assert (cache.kube_name("node1"), cache.slurm_name("kube-a")) == ("kube-a", "node1")
        await kube.patch(Node, "kube-a",
                         {"metadata": {"labels": {keys.NODE_SLURM_NODE: "node2"}}},
                         patch_type=PatchType.MERGE)
        await _until(lambda: cache.kube_name("node2") == "kube-a")
        assert (cache.kube_name("node1"), cache.slurm_name("kube-a")) == ("node1", "node2")
        await kube.delete(Node, "kube-a")
        await _until(lambda: cache.get("kube-a") is None)
        assert (cache.kube_name("node2"), cache.slurm_name("kube-a")) == ("node2", "kube-a")
    finally:
        task.cancel()


def _running_pod(name: str, job_id: int, node: str = "node1") -> Pod:
    return (PodBuilder(name, "research").annotate(keys.JOB_ID, str(job_id)).node(node)
            .running().build())


async def test_a_not_ready_node_names_the_pods_that_may_still_run_and_keeps_their_jobs() -> None:
    """A kubelet that stops answering may leave its containers running: the drain says which
    pods' jobs (and GPUs) stay taken, for the Slurm admin reading sinfo."""
    sync, kube, slurm = _world(_node("node1", ready=False))
    kube.add(_running_pod("train", 12))
    kube.add(_running_pod("elsewhere", 13, node="node2"))
    await sync.reconcile_once()
    reason = slurm.nodes["node1"].reason
    assert "NotReady" in reason and "research/train (job 12)" in reason, reason
    assert "may still run" in reason and "elsewhere" not in reason, reason


async def test_a_pod_deleted_while_its_node_is_not_ready_stays_named_as_deleted() -> None:
    sync, kube, slurm = _world(_node("node1", ready=False))
    kube.add(_running_pod("train", 12))
    kube.add(_running_pod("other", 14))
    await sync.reconcile_once()
    await kube.delete(Pod, "train", namespace="research")  # kubectl delete --force
    await sync.reconcile_once()
    reason = slurm.nodes["node1"].reason
    still, _, gone = reason.partition("deleted, jobs cancelled")
    assert "research/other (job 14)" in still and "research/train (job 12)" in gone, reason
    assert "containers may remain" in gone, reason
    assert "DRAIN" in slurm.nodes["node1"].states


async def test_a_deleted_node_keeps_its_drain_saying_so_and_an_admins_drain_is_untouched() -> None:
    sync, kube, slurm = _world(_node("node1", ready=False))
    slurm.nodes["node2"] = idle_node("node2", "DRAIN", reason="disk swap")  # an admin's
    kube.add(_running_pod("train", 12))
    await sync.reconcile_once()
    await kube.delete(Pod, "train", namespace="research")  # the pod GC, after the Node went
    await kube.delete(Node, "node1")
    await sync.reconcile_once()
    reason = slurm.nodes["node1"].reason
    assert "DRAIN" in slurm.nodes["node1"].states, "a deleted Node's host may still run pods"
    assert "Kubernetes node deleted" in reason and "research/train (job 12)" in reason, reason
    assert slurm.nodes["node2"].reason == "disk swap"

    kube.add(_node("node1"))  # the kubelet registers the Node again: its pods are gone
    await sync.reconcile_once()
    assert "DRAIN" not in slurm.nodes["node1"].states


def _labels(kube: FakeKube, name: str) -> dict[str, str]:
    node = kube.obj(Node, name)
    assert node is not None
    return dict(node.get("metadata", {}).get("labels") or {})


async def test_a_nodes_topology_labels_follow_slurms_units_and_leave_other_labels_alone() -> None:
    node = _node("node1")
    assert node.metadata is not None
    node.metadata.labels = {"team": "ml", f"{keys.TOPOLOGY_LABEL_PREFIX}old": "x"}
    sync, kube, slurm = _world(node)
    slurm.nodes["node1"] = dataclasses.replace(
        slurm.nodes["node1"], topology=(("tree", "leaf1"), ("block", "b1")))
    await sync.reconcile_once()
    assert _labels(kube, "node1") == {
        "team": "ml", f"{keys.TOPOLOGY_LABEL_PREFIX}tree": "leaf1",
        f"{keys.TOPOLOGY_LABEL_PREFIX}block": "b1",
    }
    # scontrol reconfigure after the admin moved the node to the other leaf and out of blocks
    slurm.nodes["node1"] = dataclasses.replace(slurm.nodes["node1"], topology=(("tree", "leaf2"),))
    await sync.reconcile_once()
    assert _labels(kube, "node1") == {"team": "ml", f"{keys.TOPOLOGY_LABEL_PREFIX}tree": "leaf2"}
    writes = kube.writes
    await sync.reconcile_once()  # nothing changed: no write
    assert kube.writes == writes


def test_a_unit_no_label_can_carry_is_left_out() -> None:
    view = node_view(_node("node1"))
    assert view is not None
    sn = dataclasses.replace(idle_node("node1"), topology=(("tree", "leaf 1!"), ("block", "b1")))
    assert topology_labels(view, sn) == {f"{keys.TOPOLOGY_LABEL_PREFIX}block": "b1"}


async def test_node_sync_lists_slurms_nodes_only_when_one_changed_and_still_drains_a_cordon(
) -> None:
    """Slurm's node table is read again only when a node changed (bridge/slurm/node_listing.py,
    tests/unit/test_node_listing.py): a round still acts on what changed in Kubernetes."""
    sync, kube, slurm = _world(_node("node1"))
    for _ in range(3):
        await sync.reconcile_once()
    assert (slurm.requests["list_nodes"], slurm.requests["nodes_unchanged"]) == (1, 2)

    await kube.patch(Node, "node1", {"spec": {"unschedulable": True}},  # kubectl cordon
                     patch_type=PatchType.MERGE)
    await sync.reconcile_once()  # Slurm's table unchanged: the Kubernetes side still counts
    assert "DRAIN" in slurm.nodes["node1"].states
    assert "cordoned" in slurm.nodes["node1"].reason

    slurm.nodes["node1"] = dataclasses.replace(slurm.nodes["node1"], reason="admin: fan")
    await sync.reconcile_once()  # an admin's change in Slurm: read, and told on the Node
    assert _condition(kube, "node1")["message"].endswith(": admin: fan")
