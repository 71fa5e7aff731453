"""Slurm decides before kube-scheduler looks: gated pods on the real apiserver and scheduler.

The webhook gates every pod it enrols; the leader submits its job, and when Slurm runs it,
one write lifts the gate, records the job and narrows the pod to Slurm's node (node
affinity on a gated pod: the API server's own rule, KEP-3838).  A pod that comes without
the gate (the webhook skipped it) takes the filter path and still binds.
"""

from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    pod_manifest,
    quiet_namespace,
    slurm_job_view,
    wait_bound,
)
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


def _gates(pod: Pod) -> list[str]:
    return [g.name for g in (pod.spec.schedulingGates if pod.spec else None) or []]


def _node_terms(pod: Pod) -> list[dict[str, Any]]:
    affinity = pod.spec.affinity if pod.spec else None
    required = affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution \
        if affinity and affinity.nodeAffinity else None
    return [t.to_dict() for t in (required.nodeSelectorTerms if required else [])]


async def test_a_pod_waits_gated_while_slurm_is_full_and_binds_once_released(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "gated")
    holder = slurm.admin("sbatch", "--parsable", "-J", "native-full", "--exclusive", "-N", "4",
                         "-o", "/dev/null", "--wrap", "sleep 600").strip()
    try:
        await wait_for(lambda: slurm_job_view(slurm, holder)["state"] == "RUNNING", 30,
                       what="a native job holding every node")
        await create_pod(kube, ns, pod_manifest("waiter"))

        def queued() -> str:
            return slurm.admin("squeue", "-h", "-o", "%i %T", "-n", f"k8s:{ns}/waiter").strip()

        job_id, state = (await wait_for(queued, 30, what="the pod's job in squeue")).split()
        assert state == "PENDING"
        pod = await kube.get(Pod, "waiter", namespace=ns)
        assert _gates(pod) == [keys.SLURM_GATE]
        assert pod.spec is not None and not pod.spec.nodeName
        with pytest.raises(ApiError) as refused:  # a user cannot skip Slurm
            await kube.patch(Pod, "waiter", {"spec": {"schedulingGates": None}}, namespace=ns,
                             patch_type=PatchType.MERGE)
        assert keys.SLURM_GATE in str(refused.value.status.message)
    finally:
        slurm.admin("scancel", holder)
    pod = await wait_bound(kube, ns, "waiter")
    assert pod.spec is not None and pod.metadata is not None
    annotations = pod.metadata.annotations or {}
    assert annotations[keys.JOB_ID] == job_id
    assert annotations[keys.SLURM_NODE] == bridge_stack.slurm_node_of(pod.spec.nodeName or "")
    assert _gates(pod) == []
    assert _node_terms(pod) == [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [pod.spec.nodeName]}]}]
    reasons = [reason for reason, _ in await pod_events(kube, ns, "waiter")]
    assert "FailedScheduling" not in reasons, reasons  # kube-scheduler never tried in vain


async def test_a_pod_that_came_without_the_gate_binds_through_filter(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """The webhook never saw it (e.g. down with failurePolicy Ignore): today's path."""
    ns = await e2e_namespace("ungated", served=False)  # outside the webhook's selector
    # what the webhook would have added, but the gate
    manifest = PodBuilder("plain").cpu("2").memory("2Gi").tolerate(keys.MANAGED_TAINT).build()
    created = await create_pod(kube, ns, manifest)
    assert _gates(created) == []
    pod = await wait_bound(kube, ns, "plain")
    assert pod.spec is not None and pod.metadata is not None
    annotations = pod.metadata.annotations or {}
    job = slurm_job_view(bridge_stack.slurm, annotations[keys.JOB_ID])
    assert job["name"] == f"k8s:{ns}/plain"
    assert job["nodes"] == (bridge_stack.slurm_node_of(pod.spec.nodeName or ""),)
    assert _node_terms(pod) == []
