"""Binding a pod where Slurm put it (Binder), in a bridge wired over the in-memory fakes."""

from typing import cast

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from bridge import keys
from bridge.binding.binder import BindError
from bridge.jobs.owner import GroupOwner, PodOwner
from bridge.runtime import Bridge
from slurmbridge_cli.compose import build_bridge
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, fake_settings

UID = "0000-pod-uid"
JOB = 7


def _world(node: str = "node1", gpus: tuple[int, ...] = (4, 5)) -> tuple[Bridge, FakeKube]:
    """Pod ns/p carries the leader's record of its job, which Slurm runs on ``node`` with
    ``gpus``."""
    kube, slurm = FakeKube(), FakeSlurm()
    slurm.put(JobBuilder(JOB).owner(PodOwner(UID)).running(node, gpus=gpus).build())
    kube.add(PodBuilder("p", "ns").uid(UID).annotate(keys.JOB_ID, str(JOB))
             .annotate(keys.SLURM_NODE, node).build())
    return _bridge(slurm, kube), kube


def _bridge(slurm: FakeSlurm, kube: FakeKube) -> Bridge:
    """The bridge over the fakes, as the Slurm user the fake shows for the bridge's jobs."""
    return build_bridge(fake_settings(), slurm=slurm, kube=kube)


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
    kube.add(Node(metadata=ObjectMeta(name="kube-a", labels={keys.NODE_SLURM_NODE: "gpu017"})))
    async for node in kube.list(Node):
        bridge.nodes.apply("ADDED", node)
    await bridge.binder.bind("ns", "p", UID, "kube-a")
    pod = _pod(kube)
    assert pod.spec is not None and pod.spec.nodeName == "kube-a"
    assert pod.metadata is not None and pod.metadata.annotations is not None
    assert pod.metadata.annotations[keys.SLURM_NODE] == "gpu017"


async def test_a_released_member_is_bound_with_the_job_its_release_recorded() -> None:
    """SOAK seed 2 (Slurm 24.11): submits that timed out during a cut to slurmrestd had
    landed, so the group had two live jobs (322, and 352 submitted after); the release
    recorded 322 on both members, but bind took the index's latest job of the owner, 352, and
    wrote it in member 1's Binding.  The next resync kept 322 (the release's) and cancelled
    352: member 1 ran without a live job until evicted.  The release write makes a job the
    pod's; bind must keep it."""
    kube, slurm = FakeKube(), FakeSlurm()
    owner = GroupOwner("ns", "g")
    released = JobBuilder(322, "k8s:ns/g").owner(owner).running("node1", "node2").build()
    later = JobBuilder(352, "k8s:ns/g").owner(owner).running("node2", "node3").build()
    for job in (released, later):
        slurm.put(job)
    member = (PodBuilder("g-1", "ns").uid(UID).group("g", 2)
              .annotate(keys.JOB_ID, "322").annotate(keys.SLURM_NODE, "node2").build())
    kube.add(member)
    bridge = _bridge(slurm, kube)
    for job in (later, released):  # 352 submitted here; 322 found by the resync after
        bridge.index.record(job)
    bridge.pod_cache.apply("ADDED", member)
    view = bridge.pod_cache.get(UID)
    assert view is not None
    verdict = bridge.placer.filter_known(view, ["node2"])  # filter, from the pod cache
    assert verdict is not None and verdict.keep == ["node2"]
    await bridge.binder.bind("ns", "g-1", UID, "node2")
    found = kube.obj(Pod, "g-1", "ns")
    assert found is not None
    assert found["metadata"]["annotations"][keys.JOB_ID] == "322"
