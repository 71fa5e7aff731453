"""Slurm's nodes and the pods on them, attacked as a user would (issue 41, cases 5 and 6).

Only pods Slurm placed, and the DaemonSets an admin listed, may run on a node Slurm manages: a
pod of the default scheduler naming such a node, or tolerating the managed taint, is refused
by the API server itself (the chart's ValidatingAdmissionPolicies, in every namespace).  A
container added to a placed pod (`kubectl debug`) sees the pod's GPUs and no others.
"""

import contextlib
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod as PodModel
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod, pod_events, pod_manifest, wait_bound
from slurmbridge_devkit.kubelet import NodeFactory
from slurmbridge_devkit.namespaces import unique_name
from slurmbridge_devkit.processes import BRIDGE_NS
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.stack_objects import NODE_AGENT
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

EVERY_TAINT = {"operator": "Exists"}  # what many node agents tolerate
MANAGED = {"key": keys.MANAGED_TAINT, "operator": "Exists", "effect": "NoSchedule"}


def _foreign(name: str) -> PodBuilder:
    """A pod the bridge does not place (the default scheduler's), taking every GPU of the node
    it lands on."""
    return PodBuilder(name).scheduler(None).containers({
        "name": "main", "image": "nvidia/cuda",
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})


async def _refused(kube: AsyncClient, ns: str, pod: Pod) -> str:
    with pytest.raises(ApiError) as err:
        await create_pod(kube, ns, pod)
    assert err.value.status.code == 403, err.value.status
    return str(err.value.status.message)


async def test_a_pod_slurm_did_not_place_cannot_name_a_managed_node(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    make_node: NodeFactory,
) -> None:
    """spec.nodeName skips every scheduler, and the kubelet ignores NoSchedule taints."""
    served = await e2e_namespace("squat")
    unserved = await e2e_namespace("squat-unserved", served=False)  # no webhook looks there
    for ns in (served, unserved):
        message = await _refused(kube, ns, _foreign("squatter").node("kube-node1").build())
        assert "kube-node1" in message and keys.MANAGED_NODE_LABEL in message, message
        assert "managedNodes" in message, message
    # A node Slurm does not manage keeps its own rules.
    plain = unique_name("plain-node")
    await make_node(plain)
    await create_pod(kube, unserved, _foreign("elsewhere").node(plain).build())


async def test_a_pod_slurm_did_not_place_cannot_tolerate_the_managed_taint(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    """Tolerating the taint (or every taint) lets kube-scheduler put the pod on Slurm's node."""
    served = await e2e_namespace("tolerant")
    unserved = await e2e_namespace("tolerant-unserved", served=False)
    for ns in (served, unserved):
        for toleration in (MANAGED, EVERY_TAINT):
            pod = _foreign("tolerant").spec(tolerations=[toleration]).build()
            message = await _refused(kube, ns, pod)
            assert keys.MANAGED_TAINT in message and "managedNodes" in message, message
    # Tolerations may be added to a pod not yet scheduled: not this one.
    await create_pod(kube, unserved, _foreign("later").build())
    added = [{"op": "add", "path": "/spec/tolerations/-", "value": MANAGED}]
    with pytest.raises(ApiError) as err:
        await kube.patch(Pod, "later", added, namespace=unserved, patch_type=PatchType.JSON)
    assert err.value.status.code == 403, err.value.status
    assert keys.MANAGED_TAINT in str(err.value.status.message), err.value.status


def _daemon_set(name: str) -> DaemonSet:
    """A node agent tolerating every taint, as kube-proxy or a device plugin does; kept to
    kube-node1, one pod."""
    pinned = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["kube-node1"]}]}]}
    return cast(DaemonSet, DaemonSet.from_dict({
        "metadata": {"name": name, "namespace": BRIDGE_NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "tolerations": [EVERY_TAINT],
                    "affinity": {"nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": pinned}},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "agent", "image": "busybox",
                                    "command": ["sleep", "3600"]}],
                },
            },
        },
    }))


async def _pods_of(kube: AsyncClient, name: str) -> list[Pod]:
    return [p async for p in kube.list(Pod, namespace=BRIDGE_NS, labels={"app": name})]


async def test_only_the_daemonsets_an_admin_listed_run_on_managed_nodes(
    bridge_stack: BridgeStack, kube: AsyncClient,
) -> None:
    """The stack lists NODE_AGENT (chart values managedNodes.daemonSets), not the stray one;
    both pods are created by kube-controller-manager's DaemonSet controller."""
    stray = unique_name("stray-agent")
    try:
        for name in (NODE_AGENT, stray):
            await kube.create(_daemon_set(name))
        (agent,) = await wait_for(lambda: _pods_of(kube, NODE_AGENT), 60,
                                  what=f"a pod of the listed DaemonSet {NODE_AGENT}")
        assert agent.spec is not None and agent.spec.tolerations

        async def refused() -> str:
            return next((m for reason, m in await pod_events(kube, BRIDGE_NS, stray)
                         if reason == "FailedCreate"), "")

        message = await wait_for(refused, 60, what=f"the DaemonSet controller refused ({stray})")
        assert keys.MANAGED_TAINT in message and "managedNodes" in message, message
        assert await _pods_of(kube, stray) == []
    finally:  # no kubelet finishes the pods: gone at once
        for name in (NODE_AGENT, stray):
            with contextlib.suppress(ApiError):
                await kube.delete(DaemonSet, name, namespace=BRIDGE_NS)
            for pod in await _pods_of(kube, name):
                assert pod.metadata is not None and pod.metadata.name is not None
                with contextlib.suppress(ApiError):
                    await kube.delete(Pod, pod.metadata.name, namespace=BRIDGE_NS,
                                      grace_period=0)


def _debugger(name: str, **env: str) -> dict[str, Any]:
    """What `kubectl debug -it POD --image=nvidia/cuda --env=...` adds."""
    return {"name": name, "image": "nvidia/cuda", "targetContainerName": "main",
            "stdin": True, "tty": True, "env": [{"name": k, "value": v} for k, v in env.items()]}


async def _debug(kube: AsyncClient, ns: str, pod: str, container: dict[str, Any]) -> PodModel:
    patch = {"spec": {"ephemeralContainers": [container]}}
    result: PodModel = await kube.patch(Pod.Ephemeralcontainers, pod, patch, namespace=ns,
                                        patch_type=PatchType.STRATEGIC)
    return result


async def test_an_ephemeral_container_sees_the_pods_gpus_and_no_others(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    """`kubectl debug` on a placed pod: naming GPUs is refused; otherwise the new container
    gets the pod's own (the webhook), or is refused where no webhook gave them (the policy)."""
    served = await e2e_namespace("debug")
    unserved = await e2e_namespace("debug-unserved", served=False)
    await create_pod(kube, served, pod_manifest("trainer", gpus=2))
    ungated = PodBuilder("trainer").gpus(2).tolerate(keys.MANAGED_TAINT).build()
    await create_pod(kube, unserved, ungated)
    for ns in (served, unserved):
        await wait_bound(kube, ns, "trainer")
        with pytest.raises(ApiError) as err:
            await _debug(kube, ns, "trainer", _debugger("thief", NVIDIA_VISIBLE_DEVICES="all"))
        message = str(err.value.status.message)
        assert "thief" in message and "NVIDIA_VISIBLE_DEVICES" in message, message
        assert keys.GPU_IDS in message, message

    pod = await _debug(kube, served, "trainer", _debugger("looker"))
    assert pod.spec is not None and pod.spec.ephemeralContainers is not None
    (looker,) = pod.spec.ephemeralContainers
    sources = {v.name: v.valueFrom.fieldRef.fieldPath for v in looker.env or []
               if v.valueFrom is not None and v.valueFrom.fieldRef is not None}
    assert sources == {name: f"metadata.annotations['{source}']"
                       for name, source in keys.GPU_ENV_SOURCES.items()}, looker.env
    with pytest.raises(ApiError) as err:  # no webhook there to give it the pod's GPUs
        await _debug(kube, unserved, "trainer", _debugger("looker"))
    message = str(err.value.status.message)
    assert "looker" in message and "NVIDIA_VISIBLE_DEVICES" in message, message
