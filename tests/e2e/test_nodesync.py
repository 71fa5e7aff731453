"""Node health crosses over both ways, each side carrying the other's reason."""

import asyncio
import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from bridge import keys
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_manifest,
    quiet_namespace,
    slurm_job_view,
    wait_bound,
    wait_slurm_job,
)
from slurmbridge_devkit.kubelet import NodeFactory
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


async def _node(kube: AsyncClient, name: str) -> Node:
    return await kube.get(Node, name)


def _taints(node: Node) -> dict[str, Any]:
    return {t.key: t for t in (node.spec.taints if node.spec else None) or []}


def _condition(node: Node) -> Any:
    conditions = (node.status.conditions if node.status else None) or []
    return next((c for c in conditions if c.type == keys.NODE_CONDITION_SLURM), None)


def _drain_reason(stack: BridgeStack, slurm_node: str) -> str:
    return stack.slurm.admin("sinfo", "-h", "-R", "-o", "%E", "-n", slurm_node).strip()


async def _cordon(kube: AsyncClient, name: str, cordoned: bool) -> None:
    await kube.patch(Node, name, {"spec": {"unschedulable": cordoned}},
                     patch_type=PatchType.MERGE)


async def test_slurm_drain_taints_the_node_with_the_reason(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    with bridge_stack.slurm.drained("node3", "maint"):
        async def tainted() -> Node | None:
            node = await _node(kube, "kube-node3")
            cond = _condition(node)
            ok = keys.UNAVAILABLE_TAINT in _taints(node) and cond and cond.status == "False"
            return node if ok else None

        node = await wait_for(tainted, 15, what="slurm-unavailable taint on kube-node3")
        assert "maint" in _condition(node).message
        assert _taints(node)[keys.UNAVAILABLE_TAINT].effect == "NoSchedule"

    async def untainted() -> bool:
        node = await _node(kube, "kube-node3")
        cond = _condition(node)
        return keys.UNAVAILABLE_TAINT not in _taints(node) and cond and cond.status == "True"

    await wait_for(untainted, 15, what="taint removed after resume")
    assert keys.MANAGED_TAINT in _taints(await _node(kube, "kube-node3"))


async def test_cordon_drains_in_slurm_and_uncordon_resumes(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    await _cordon(kube, "kube-node4", True)
    try:
        reason = await wait_for(
            lambda: _drain_reason(bridge_stack, "node4").startswith(keys.DRAIN_REASON_PREFIX)
            and _drain_reason(bridge_stack, "node4"),
            15, what="a slurmbridge drain on node4",
        )
        assert "cordoned" in reason
    finally:
        await _cordon(kube, "kube-node4", False)
    await wait_for(lambda: not _drain_reason(bridge_stack, "node4"), 15,
                   what="node4 resumed after uncordon")


async def test_an_admins_drain_is_never_undone(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    with bridge_stack.slurm.drained("node2", "admin: bad dimm"):
        try:
            await _cordon(kube, "kube-node2", True)
            await asyncio.sleep(4)  # several controller periods (1 s each)
            assert _drain_reason(bridge_stack, "node2") == "admin: bad dimm"
            await _cordon(kube, "kube-node2", False)
            await asyncio.sleep(4)
            assert _drain_reason(bridge_stack, "node2") == "admin: bad dimm"
        finally:
            await _cordon(kube, "kube-node2", False)


def _units(stack: BridgeStack, slurm_node: str) -> dict[str, str]:
    """Slurm's own word on a node's topology units (``scontrol show node``: Topology=...)."""
    out = stack.slurm.admin("scontrol", "show", "node", slurm_node)
    text = next((w.split("=", 1)[1] for w in out.split() if w.startswith("Topology=")), "")
    return dict(p.split(":", 1) for p in text.split(",") if ":" in p)


def _topology_labels(node: Node) -> dict[str, str]:
    labels = (node.metadata.labels if node.metadata else None) or {}
    return {k.removeprefix(keys.TOPOLOGY_LABEL_PREFIX): v for k, v in labels.items()
            if k.startswith(keys.TOPOLOGY_LABEL_PREFIX)}


async def test_node_labels_carry_slurms_topology_and_follow_a_change(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    """recipe.sh gives Slurm 25.05+ a tree and a block topology with each node's units on its
    NodeName line; 24.11 stays flat, and its Nodes get no topology label."""
    for kube_node, slurm_node in bridge_stack.kube_nodes.items():
        units = _units(bridge_stack, slurm_node)
        await wait_for(functools.partial(_labelled, kube, kube_node, units), 15,
                       what=f"{kube_node}'s topology labels equal to Slurm's {units}")
    doctor = bridge_stack.cli("--log-level", "warning", "doctor", timeout=120).stdout
    topology = [line for line in doctor.splitlines() if "topology" in line]
    if not _units(bridge_stack, "node1"):
        assert bridge_stack.slurm.version == "24.11", "no topology on a 25.05+ Slurm"
        assert topology[0].startswith("WARN  Slurm topology: no node names a unit"), topology
        return
    assert topology == [f"PASS  Slurm topology: block, tree on {len(bridge_stack.kube_nodes)} "
                        f"of {len(bridge_stack.kube_nodes)} Slurm nodes"], topology
    slurm = bridge_stack.slurm
    slurm.admin("scontrol", "update", "nodename=node1", "topology=tree:leaf2")
    try:
        await wait_for(lambda: _labelled(kube, "kube-node1", {"tree": "leaf2"}), 15,
                       what="kube-node1's labels after node1 moved to leaf2, out of its block")
    finally:
        slurm.admin("scontrol", "update", "nodename=node1", "topology=tree:leaf1,block:b1")
    await wait_for(lambda: _labelled(kube, "kube-node1", {"tree": "leaf1", "block": "b1"}), 15,
                   what="kube-node1's labels back to leaf1 and b1")


async def _labelled(kube: AsyncClient, kube_node: str, units: dict[str, str]) -> bool:
    return _topology_labels(await _node(kube, kube_node)) == units


IMPOSTOR = "kube-impostor"
KUBELET_SLURM_NODE = "slurmbridge.io/slurm-node"  # a kubelet may set it on its own Node


@contextlib.contextmanager
def _only_node1(slurm: SlurmTarget) -> Iterator[None]:
    """Slurm's other nodes drained, so Slurm places every job on node1."""
    with contextlib.ExitStack() as drains:
        for other in ("node2", "node3", "node4"):
            drains.enter_context(slurm.drained(other, "e2e: only node1"))
        yield


async def _node_events(kube: AsyncClient, node: str, reason: str) -> list[str]:
    """What ``kubectl describe node`` lists under Events with ``reason``."""
    return [e.message or "" async for e in kube.list(Event, namespace="*", fields={
        "involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason})]


async def _label_slurm_node(kube: AsyncClient, node: str, slurm_node: str | None) -> None:
    """The Slurm node an admin says ``node`` is (None: the label removed)."""
    await kube.patch(Node, node, {"metadata": {"labels": {keys.NODE_SLURM_NODE: slurm_node}}},
                     patch_type=PatchType.MERGE)


async def test_a_node_naming_itself_slurms_node1_gets_none_of_its_pods_and_two_claims_are_told(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    make_node: NodeFactory,
) -> None:
    """Issue 41, case 7: NodeRestriction lets a compromised kubelet label its own Node
    slurmbridge.io/slurm-node=node1, and the node cache's last writer won: Slurm's pods for
    node1 went to it.  Only an admin's node-restriction.kubernetes.io/ label names a Slurm
    node now; two Nodes so labelled with one are neither used, and both are told."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "impostor")
    await make_node(IMPOSTOR, labels={KUBELET_SLURM_NODE: "node1"},
                    taints=[{"key": keys.MANAGED_TAINT, "effect": "NoSchedule"}])
    with _only_node1(slurm):
        await create_pod(kube, ns, pod_manifest("first"))
        first = await wait_bound(kube, ns, "first")
        assert first.spec is not None and first.spec.nodeName == "kube-node1"
        ignored = await wait_for(
            lambda: _node_events(kube, IMPOSTOR, keys.EventReason.NODE_LABEL_IGNORED), 15,
            interval=0.5, what=f"{IMPOSTOR} told its {KUBELET_SLURM_NODE} label is ignored")
        assert KUBELET_SLURM_NODE in ignored[0], ignored

        # An admin's mistake: a second Node labelled node1 with the label only admins set.
        await _label_slurm_node(kube, IMPOSTOR, "node1")
        for node in ("kube-node1", IMPOSTOR):
            told = await wait_for(
                functools.partial(_node_events, kube, node, keys.EventReason.NODE_CONTESTED),
                15, interval=0.5, what=f"{node} told that two Nodes claim node1")
            assert "Slurm node node1 is claimed by Nodes kube-impostor, kube-node1" in told[0]
        await create_pod(kube, ns, pod_manifest("second"))
        job_id = await wait_slurm_job(slurm, ns, "second")
        await wait_for(lambda: slurm_job_view(slurm, job_id)["state"] == "RUNNING", 30,
                       interval=0.5, what=f"job {job_id} of pod second running")
        assert slurm_job_view(slurm, job_id)["nodes"] == ("node1",)
        await asyncio.sleep(6)  # the release retries every 2 s: it never picks a Node
        waiting = (await kube.get(Pod, "second", namespace=ns)).spec
        assert waiting is not None and not waiting.nodeName, waiting

        await _label_slurm_node(kube, IMPOSTOR, None)  # the admin sets it right
        second = await wait_bound(kube, ns, "second", timeout=30)
        assert second.spec is not None and second.spec.nodeName == "kube-node1"
