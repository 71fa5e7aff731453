"""Binding a pod where Slurm put it (Binder), in a bridge wired over the in-memory fakes."""

from typing import cast

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from bridge import keys
from bridge.binding.binder import BindError
from bridge.config import Settings
from bridge.jobs.owner import PodOwner
from bridge.runtime import Bridge
from slurmbridge_cli.compose import build_bridge
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm

UID = "0000-pod-uid"
JOB = 7


def _world(node: str = "node1", gpus: tuple[int, ...] = (4, 5)) -> tuple[Bridge, FakeKube]:
    """Pod ns/p carries the id of its job, which Slurm runs on ``node`` with ``gpus``."""
    kube, slurm = FakeKube(), FakeSlurm()
    slurm.put(JobBuilder(JOB).owner(PodOwner(UID)).running(node, gpus=gpus).build())
    kube.add(PodBuilder("p", "ns").uid(UID).annotate(keys.JOB_ID, str(JOB)).build())
    return build_bridge(Settings(), slurm=slurm, kube=kube), kube


def _pod(kube: FakeKube) -> Pod:
    found = kube.obj(Pod, "p", "ns")
    assert found is not None
    return cast(Pod, Pod.from_dict(found))


async def test_the_pod_is_bound_to_slurms_node_and_told_its_gpus() -> None:
    bridge, kube = _world()
    await bridge.binder.bind("ns", "p", UID, "node1")
    pod = _pod(kube)
    assert pod.spec is not None and pod.spec.nodeName == "node1"
    assert pod.metadata is not None and pod.metadata.annotations is not None
    annotations = pod.metadata.annotations
    assert annotations[keys.JOB_ID] == str(JOB)
    assert annotations[keys.SLURM_NODE] == "node1"
    assert annotations[keys.GPU_IDS] == "4,5"
    assert annotations[keys.CUDA_DEVICES] == "0,1"  # the container sees its two GPUs as 0, 1


async def test_a_bind_to_another_node_than_slurms_is_refused() -> None:
    bridge, kube = _world()
    with pytest.raises(BindError, match="holds node1"):
        await bridge.binder.bind("ns", "p", UID, "node2")
    pod = _pod(kube)
    assert pod.spec is not None and not pod.spec.nodeName


async def test_a_recreated_pod_is_not_bound_in_its_predecessors_place() -> None:
    bridge, kube = _world()
    with pytest.raises(BindError, match="recreated"):
        await bridge.binder.bind("ns", "p", "uid-of-the-deleted-pod", "node1")
    pod = _pod(kube)
    assert pod.spec is not None and not pod.spec.nodeName


async def test_binding_again_to_the_same_node_succeeds() -> None:
    """kube-scheduler retries a bind whose answer it lost: the second is not an error."""
    bridge, kube = _world()
    await bridge.binder.bind("ns", "p", UID, "node1")
    await bridge.binder.bind("ns", "p", UID, "node1")
    pod = _pod(kube)
    assert pod.spec is not None and pod.spec.nodeName == "node1"


async def test_a_kubernetes_node_named_otherwise_is_found_by_its_slurm_label() -> None:
    bridge, kube = _world(node="gpu017")
    kube.add(Node(metadata=ObjectMeta(name="kube-a", labels={keys.SLURM_NODE: "gpu017"})))
    async for node in kube.list(Node):
        bridge.nodes.apply("ADDED", node)
    await bridge.binder.bind("ns", "p", UID, "kube-a")
    pod = _pod(kube)
    assert pod.spec is not None and pod.spec.nodeName == "kube-a"
    assert pod.metadata is not None and pod.metadata.annotations is not None
    assert pod.metadata.annotations[keys.SLURM_NODE] == "gpu017"
