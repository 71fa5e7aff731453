"""``kubectl slurmbridge`` run by the real kubectl (the plugin found on PATH) against the real
apiserver and the e2e bridge, as a researcher whose RBAC reads only the pods and events of
their namespace: no Slurm credentials, nothing but what the bridge wrote on Kubernetes."""

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.rbac_v1 import PolicyRule
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    pod_manifest,
    quiet_namespace,
    wait_bound,
    wait_slurm_job,
)
from slurmbridge_devkit.kube import ControlPlane
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.namespaces import kubectl_plugin as _kubectl
from slurmbridge_devkit.namespaces import namespace_user
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

Job = create_namespaced_resource("batch", "v1", "Job", "jobs")
READ_PODS_AND_EVENTS = [
    PolicyRule(apiGroups=[""], resources=["pods"], verbs=["get", "list"]),
    PolicyRule(apiGroups=[""], resources=["events"], verbs=["list"]),
]


async def _slurm_refused(kube: AsyncClient, ns: str, name: str) -> bool:
    pod = await kube.get(Pod, name, namespace=ns)
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == keys.POD_CONDITION_SLURM and c.reason == "InvalidPartition"
               for c in conditions)


def _refused_job(ns: str, name: str) -> Any:
    """A Job whose pods carry a bridge-owned annotation: the webhook refuses every one."""
    pod = PodBuilder("x").annotate(keys.GPU_IDS, "0").manifest()
    template = {"metadata": {"annotations": pod["metadata"]["annotations"]},
                "spec": {**pod["spec"], "restartPolicy": "Never"}}
    return Job.from_dict({"apiVersion": "batch/v1", "kind": "Job",
                          "metadata": {"name": name, "namespace": ns},
                          "spec": {"backoffLimit": 0, "template": template}})


async def _running(stack: BridgeStack, kube: AsyncClient, ns: str) -> tuple[str, str, str]:
    """A pod Slurm placed and the (played) kubelet started: (job id, node, Slurm node)."""
    await create_pod(kube, ns, pod_manifest("runs"))
    pod = await set_pod_phase(kube, await wait_bound(kube, ns, "runs"), "Running")
    assert pod.spec is not None and pod.metadata is not None
    node = pod.spec.nodeName or ""
    return (pod.metadata.annotations or {})[keys.JOB_ID], node, stack.slurm_node_of(node)


async def _refused(kube: AsyncClient, ns: str) -> None:
    """One pod Slurm refuses (a partition it does not have; the namespace's policy allows
    any), and a Job whose pods the webhook refuses: its FailedCreate events are all there is."""
    await create_pod(kube, ns, pod_manifest("refused", annotations={keys.PARTITION: "nosuch"}))
    await kube.create(_refused_job(ns, "rejected"))

    async def both() -> bool:
        events = await pod_events(kube, ns, "rejected")
        return await _slurm_refused(kube, ns, "refused") and any(
            r == "FailedCreate" for r, _ in events)

    await wait_for(both, 60, interval=0.5, what="InvalidPartition and the Job's FailedCreate")


async def _pending(
    stack: BridgeStack, kube: AsyncClient, ns: str, researcher: Path
) -> tuple[str, subprocess.CompletedProcess[str]]:
    """A pod whose job waits (native jobs hold every GPU): its job id, and ``why`` about it
    once the bridge's words say PENDING."""
    slurm, cp = stack.slurm, stack.control_plane
    blockers = [slurm.admin("sbatch", "--parsable", "--gres=gpu:8", "-w", f"node{k}",
                            "-o", "/dev/null", "--wrap", "sleep 900").strip()
                for k in range(1, 5)]
    try:
        await wait_for(lambda: slurm.admin("squeue", "-h", "-j", ",".join(blockers), "-o",
                                           "%T").split() == ["RUNNING"] * 4,
                       30, interval=0.5, what=f"blockers {blockers} running")
        await create_pod(kube, ns, pod_manifest("waits", gpus=1))
        job = await wait_slurm_job(slurm, ns, "waits")

        def pending_said() -> bool:
            answer = _kubectl(cp, researcher, "why", "waits", "-o", "json")
            return bool(answer.stdout) and json.loads(answer.stdout)["slurm_state"] == "PENDING"

        await wait_for(pending_said, 60, interval=1, what="kubectl slurmbridge why: PENDING")
        return job, _kubectl(cp, researcher, "why", "waits")
    finally:
        slurm.admin("scancel", *blockers)


async def test_kubectl_slurmbridge_why_and_status_for_running_refused_and_pending_pods(
    bridge_stack: BridgeStack, kube: AsyncClient, control_plane: ControlPlane,
    e2e_namespace: NamespaceFactory, tmp_path: Path,
) -> None:
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "kubectl")
    researcher = tmp_path / "researcher.kubeconfig"
    config = await namespace_user(kube, control_plane, ns, READ_PODS_AND_EVENTS)
    researcher.write_text(yaml.safe_dump(config))
    runs_job, node, slurm_node = await _running(bridge_stack, kube, ns)
    await _refused(kube, ns)

    running = _kubectl(control_plane, researcher, "why", "runs")
    assert running.returncode == 0, running.stdout + running.stderr
    lines = running.stdout.splitlines()
    assert f"Pod:        {ns}/runs" in lines and "State:      running" in lines, running.stdout
    assert f"Slurm job:  {runs_job} (RUNNING)" in lines, running.stdout
    assert f"Node:       {node} (Slurm node {slurm_node})" in lines, running.stdout
    assert lines[-1].startswith(f"Next:       Nothing to do: it runs on {node} "), running.stdout

    refused = _kubectl(control_plane, researcher, "why", "refused", "-n", ns)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "State:      refused (InvalidPartition)" in refused.stdout, refused.stdout
    assert "Slurm refused the pod's job: Slurm has no partition 'nosuch'" in refused.stdout
    assert "SlurmSubmitRefused" in refused.stdout

    rejected = _kubectl(control_plane, researcher, "why", "rejected")
    assert rejected.returncode == 1, rejected.stdout + rejected.stderr
    assert "State:      not found" in rejected.stdout, rejected.stdout
    assert "Job/rejected" in rejected.stdout and "denied the request" in rejected.stdout
    assert keys.GPU_IDS in rejected.stdout

    waits_job, pending = await _pending(bridge_stack, kube, ns, researcher)
    assert pending.returncode == 1, pending.stdout + pending.stderr
    lines = pending.stdout.splitlines()
    assert any(ln.startswith("State:      pending") for ln in lines), pending.stdout
    assert any(ln.startswith(f"Slurm job:  {waits_job} (PENDING, reason ")
               for ln in lines), pending.stdout
    assert lines[-1].startswith(
        f"Next:       Nothing to do: the pod starts as soon as Slurm job {waits_job} starts"
    ), pending.stdout

    status = _kubectl(control_plane, researcher, "status", "-o", "json")
    assert status.returncode == 0, status.stderr
    rows = {r["pod"]: r for r in json.loads(status.stdout)}
    assert set(rows) == {"runs", "refused", "waits"}
    assert {k: rows["runs"][k] for k in ("namespace", "job_id", "state", "node", "slurm_node")} \
        == {"namespace": ns, "job_id": int(runs_job), "state": "running", "node": node,
            "slurm_node": slurm_node}
    # Nodes need a cluster-wide read: the admin's view.
    nodes = _kubectl(control_plane, control_plane.kubeconfig, "nodes", "-o", "json")
    assert nodes.returncode == 0, nodes.stderr
    mapped = {r["node"]: r["slurm_node"] for r in json.loads(nodes.stdout)}
    assert {k: mapped.get(k) for k in bridge_stack.kube_nodes} == bridge_stack.kube_nodes
