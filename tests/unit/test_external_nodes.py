"""Kubernetes Nodes without slurmd registered as EXTERNAL Slurm nodes (ExternalNodes), against
the in-memory fakes of Slurm and the apiserver.  What real slurmctld 26.05 said to the same
requests is in the issue note (POST /new/node/, gres.conf, delete) and the e2e test."""

from dataclasses import replace
from typing import Any

import pytest
from lightkube.models.core_v1 import NodeCondition, NodeStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from bridge import keys
from bridge.controllers.external import ExternalNodes, node_conf, slurm_size
from bridge.kube.nodecache import Allocatable, NodeCache, allocatable
from bridge.slurm.errors import SlurmUnsupported
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, idle_node

FEATURE = "slurmbridge-external"


def _node(name: str, *, external: bool = True, cpu: str = "4", memory: str = "8Gi",
          gpus: str | None = None) -> Node:
    labels = {keys.EXTERNAL_NODE: "true"} if external else {}
    offered = {"cpu": cpu, "memory": memory, **({keys.GPU_RESOURCE: gpus} if gpus else {})}
    return Node(
        metadata=ObjectMeta(name=name, labels=labels),
        status=NodeStatus(allocatable=offered,
                          conditions=[NodeCondition(type="Ready", status="True")]),
    )


def _world(*nodes: Node) -> tuple[ExternalNodes, FakeKube, FakeSlurm]:
    kube, slurm = FakeKube(), FakeSlurm(("node1",))
    for node in nodes:
        kube.add(node)
    return ExternalNodes(kube, slurm, NodeCache(kube), FEATURE), kube, slurm


def _condition(kube: FakeKube, name: str) -> dict[str, Any] | None:
    node = kube.obj(Node, name)
    assert node is not None
    conditions = node.get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == keys.NODE_CONDITION_SLURM), None)


def test_the_node_conf_carries_what_the_node_offers_rounded_down() -> None:
    size = allocatable({"cpu": "3500m", "memory": "8Gi", keys.GPU_RESOURCE: "2"})
    assert size == Allocatable(cpus=3, memory_mb=8192, gpus=2)
    assert node_conf("kext1", size, FEATURE) == (
        "NodeName=kext1 CPUs=3 RealMemory=8192 Gres=gpu:2 Features=slurmbridge-external "
        "State=EXTERNAL")
    assert "Gres" not in node_conf("kext1", Allocatable(4, 1024, 0), FEATURE)
    assert allocatable({"cpu": "lots"}) == Allocatable(0, 0, 0)


async def test_a_labelled_node_is_registered_once_and_an_unlabelled_one_never() -> None:
    ext, _, slurm = _world(_node("kext1"), _node("laptop", external=False))
    await ext.reconcile_once()
    await ext.reconcile_once()
    assert slurm.node_confs == [
        "NodeName=kext1 CPUs=4 RealMemory=8192 Features=slurmbridge-external State=EXTERNAL"]
    registered = slurm.nodes["kext1"]
    assert {"EXTERNAL", "DYNAMIC_NORM"} <= registered.states and FEATURE in registered.features
    assert "laptop" not in slurm.nodes


async def test_a_resized_node_is_registered_again_once_no_job_holds_it() -> None:
    ext, kube, slurm = _world(_node("kext1"))
    await ext.reconcile_once()
    kube.add(_node("kext1", cpu="8"))
    idle = slurm.nodes["kext1"]
    slurm.nodes["kext1"] = replace(idle, states=idle.states | {"MIXED"})
    await ext.reconcile_once()
    assert slurm.nodes["kext1"].cpus == 4  # a job holds it: left as it is
    slurm.nodes["kext1"] = idle
    await ext.reconcile_once()
    assert slurm.nodes["kext1"].cpus == 8 and len(slurm.node_confs) == 2


async def test_a_deleted_node_is_drained_while_jobs_run_then_deleted_from_slurm() -> None:
    ext, kube, slurm = _world(_node("kext1"))
    await ext.reconcile_once()
    running = slurm.nodes["kext1"]
    slurm.nodes["kext1"] = replace(running, states=running.states | {"ALLOCATED"})
    await kube.delete(Node, "kext1")
    await ext.reconcile_once()
    drained = slurm.nodes["kext1"]
    assert "DRAIN" in drained.states and drained.reason.startswith("slurmbridge: Kubernetes node")
    slurm.nodes["kext1"] = replace(drained, states=drained.states - {"ALLOCATED"})
    await ext.reconcile_once()
    assert "kext1" not in slurm.nodes


async def test_an_admins_external_node_and_the_hybrid_nodes_are_never_deleted() -> None:
    ext, _, slurm = _world()
    slurm.nodes["theirs"] = idle_node("theirs", "IDLE", "EXTERNAL", "DYNAMIC_NORM")
    await ext.reconcile_once()
    assert set(slurm.nodes) == {"node1", "theirs"}


async def test_gpus_slurm_refuses_are_said_on_the_node_with_the_gres_conf_line() -> None:
    ext, kube, slurm = _world(_node("kext2", gpus="2"))
    slurm.refuse_nodes = "Failure to create node: Invalid argument"
    await ext.reconcile_once()
    condition = _condition(kube, "kext2")
    assert condition is not None and condition["status"] == "False"
    assert condition["reason"] == keys.REASON_EXTERNAL_NOT_REGISTERED
    assert "NodeName=kext2 Name=gpu File=/dev/nvidia[0-1]" in condition["message"]
    writes = kube.writes
    await ext.reconcile_once()  # asked again each round, said once
    assert len(slurm.node_confs) == 2 and kube.writes == writes
    slurm.refuse_nodes = ""
    await ext.reconcile_once()
    assert "kext2" in slurm.nodes


async def test_a_slurm_before_25_11_is_named_on_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    ext, kube, slurm = _world(_node("kext1"))

    async def too_old(node_conf: str) -> None:
        raise SlurmUnsupported("slurmrestd speaks data parser v0.0.42 at most, without POST "
                               "/new/node/: registering a node needs Slurm 25.11+ (v0.0.44)")

    monkeypatch.setattr(slurm, "add_node", too_old)
    await ext.reconcile_once()
    condition = _condition(kube, "kext1")
    assert condition is not None and "needs Slurm 25.11+" in condition["message"]


async def test_no_slurm_listing_per_round_while_there_is_nothing_external() -> None:
    ext, _, slurm = _world()
    await ext.reconcile_once()  # the first round looks for leftovers
    await ext.reconcile_once()
    await ext.reconcile_once()
    assert slurm.requests["list_nodes"] == 1


def test_the_slurm_size_reads_typed_and_plain_gpus() -> None:
    assert slurm_size(idle_node("n")).gpus == 4
    typed = replace(idle_node("n"), cpus=8, memory_mb=100,
                    gres="gpu:1g.10gb:4,gpu:3g.40gb:4,shard:32")
    assert slurm_size(typed) == Allocatable(8, 100, 8)
