"""Which Node is which Slurm node: only what a kubelet cannot write on its own Node says so,
and two Nodes claiming one Slurm node are both refused and told, never last-writer-wins
(issue 41, case 7).  NodeRestriction lets a kubelet set any ``slurmbridge.io/`` label on its
own Node, never one under ``node-restriction.kubernetes.io/``."""

from typing import Any, cast

import pytest
from lightkube.models.core_v1 import NodeCondition, NodeStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from structlog.testing import capture_logs

from bridge import keys
from bridge.binding.binder import BindError
from bridge.controllers.external import ExternalNodes
from bridge.controllers.nodesync import NodeSync
from bridge.jobs.owner import PodOwner
from bridge.kube.nodecache import NodeCache
from bridge.link.podcache import PodCache
from bridge.placement.outcomes import Outcome, PlacementError
from slurmbridge_cli.compose import build_bridge
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, fake_settings

# What a compromised kubelet writes on its own Node (what the bridge read before).
KUBELET_SLURM_NODE = "slurmbridge.io/slurm-node"
KUBELET_EXTERNAL = "slurmbridge.io/external-node"
UID = "uid-p"


def _node(name: str, labels: dict[str, str]) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels=labels),
        status=NodeStatus(allocatable={"cpu": "4", "memory": "8Gi"},
                          conditions=[NodeCondition(type="Ready", status="True")]),
    )


async def _cache(kube: FakeKube) -> NodeCache:
    """A node cache fed the apiserver's Nodes in the order they were written."""
    cache = NodeCache(kube)
    async for node in kube.list(Node):
        cache.apply("ADDED", node)
    return cache


def _taint_keys(kube: FakeKube, name: str) -> set[str]:
    node = kube.obj(Node, name)
    assert node is not None
    return {t["key"] for t in node.get("spec", {}).get("taints") or []}


def _events_on(kube: FakeKube, reason: str) -> dict[str, str]:
    """Node name → the message of its event with ``reason``."""
    return {e["involvedObject"]["name"]: e["message"] for e in kube.events(reason)
            if e["involvedObject"]["kind"] == "Node"}


async def test_a_node_labelling_itself_another_slurm_node_with_a_kubelet_label_is_not_it() -> None:
    kube = FakeKube()
    kube.add(_node("kube-node1", {keys.NODE_SLURM_NODE: "node1"}))
    kube.add(_node("evil", {KUBELET_SLURM_NODE: "node1"}))  # written last
    cache = await _cache(kube)
    assert cache.kube_name("node1") == "kube-node1"
    assert cache.slurm_name("evil") == "evil"
    sync = NodeSync(kube, FakeSlurm(("node1",)), cache, PodCache(kube))
    await sync.reconcile_once()
    assert keys.MANAGED_TAINT in _taint_keys(kube, "kube-node1")
    assert keys.MANAGED_TAINT not in _taint_keys(kube, "evil")
    told = _events_on(kube, keys.EventReason.NODE_LABEL_IGNORED)
    assert set(told) == {"evil"}
    assert KUBELET_SLURM_NODE in told["evil"] and keys.NODE_SLURM_NODE in told["evil"]


def _contest() -> tuple[FakeKube, FakeSlurm]:
    """kube-node1 and kube-node5 both labelled (as only an admin can) Slurm's node1, where
    Slurm runs pod ns/p's job."""
    kube, slurm = FakeKube(), FakeSlurm(("node1",))
    kube.add(_node("kube-node1", {keys.NODE_SLURM_NODE: "node1"}))
    kube.add(_node("kube-node5", {keys.NODE_SLURM_NODE: "node1"}))
    slurm.put(JobBuilder(7).owner(PodOwner(UID)).running("node1", gpus=(0,)).build())
    kube.add(PodBuilder("p", "ns").uid(UID).annotate(keys.JOB_ID, "7")
             .annotate(keys.SLURM_NODE, "node1").build())  # the leader's record
    return kube, slurm


async def test_two_nodes_claiming_one_slurm_node_are_neither_used_and_both_told() -> None:
    kube, slurm = _contest()
    bridge = build_bridge(fake_settings(), slurm=slurm, kube=kube)
    async for node in kube.list(Node):
        bridge.nodes.apply("ADDED", node)
    pod = cast(Pod, Pod.from_dict(cast(dict[str, Any], kube.obj(Pod, "p", "ns"))))
    verdict = await bridge.placer.filter(pod, ["kube-node1", "kube-node5"])
    assert verdict.outcome is Outcome.PENDING and not verdict.keep
    assert "kube-node1" in verdict.reason and "kube-node5" in verdict.reason
    assert bridge.placer.known_placement(UID) is None  # prioritize prefers neither
    for node in ("kube-node1", "kube-node5"):
        with pytest.raises((BindError, PlacementError)):
            await bridge.binder.bind("ns", "p", UID, node)
    bound = kube.obj(Pod, "p", "ns")
    assert bound is not None and not bound["spec"].get("nodeName")

    sync = NodeSync(kube, slurm, bridge.nodes, PodCache(kube))
    with capture_logs() as logs:
        await sync.reconcile_once()
        await sync.reconcile_once()  # told once, not every round
    told = _events_on(kube, keys.EventReason.NODE_CONTESTED)
    assert set(told) == {"kube-node1", "kube-node5"}
    assert len(kube.events(keys.EventReason.NODE_CONTESTED)) == 2
    assert all("kube-node1, kube-node5" in m and "node1" in m for m in told.values())
    contested = [e for e in logs if e["event"] == "nodesync.slurm_node_contested"]
    assert [(e["slurm_node"], e["nodes"]) for e in contested] == [
        ("node1", ["kube-node1", "kube-node5"])]
    assert not _taint_keys(kube, "kube-node1") and not _taint_keys(kube, "kube-node5")


async def test_a_contest_ends_when_an_admin_removes_one_claim() -> None:
    kube, _ = _contest()
    cache = await _cache(kube)
    cache.apply("DELETED", _node("kube-node5", {keys.NODE_SLURM_NODE: "node1"}))
    assert cache.kube_name("node1") == "kube-node1"


async def test_a_node_labelling_itself_external_with_a_kubelet_label_is_not_registered() -> None:
    kube, slurm = FakeKube(), FakeSlurm(("node1",))
    kube.add(_node("evil", {KUBELET_EXTERNAL: "true"}))
    ext = ExternalNodes(kube, slurm, await _cache(kube), "slurmbridge-external")
    await ext.reconcile_once()
    assert slurm.node_confs == [] and "evil" not in slurm.nodes


async def test_two_nodes_claiming_one_external_slurm_node_register_neither_and_are_told() -> (
    None
):
    kube, slurm = FakeKube(), FakeSlurm(("node1",))
    kube.add(_node("kext1", {keys.EXTERNAL_NODE: "true"}))
    kube.add(_node("evil", {keys.EXTERNAL_NODE: "true", keys.NODE_SLURM_NODE: "kext1"}))
    cache = await _cache(kube)
    await ExternalNodes(kube, slurm, cache, "slurmbridge-external").reconcile_once()
    assert slurm.node_confs == [] and "kext1" not in slurm.nodes
    await NodeSync(kube, slurm, cache, PodCache(kube)).reconcile_once()
    assert set(_events_on(kube, keys.EventReason.NODE_CONTESTED)) == {"kext1", "evil"}
