"""``slurmbridge uninstall`` against the real Slurm and API server: what the bridge left is
gone from both, what an admin or a tenant made stays, a dry run changes nothing and a second
run finds nothing to do (issue 44, item 3)."""

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from bridge import keys
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.slurm.client import SlurmClient
from slurmbridge_cli.uninstall_kube import bridge_taint
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod, pod_events, pod_manifest, wait_bound
from slurmbridge_devkit.processes import BRIDGE_NS
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

HOLD = "slurmbridge.test/hold"  # another controller's gate: the pod stays gated by both


def _squeue(stack: BridgeStack, job_id: str) -> str:
    return stack.slurm.admin("squeue", "-h", "-j", job_id, "-o", "%T", check=False).strip()


def _drain_reason(stack: BridgeStack, slurm_node: str) -> str:
    return stack.slurm.admin("sinfo", "-h", "-R", "-o", "%E", "-n", slurm_node).strip()


async def _cordon(kube: AsyncClient, name: str, cordoned: bool) -> None:
    await kube.patch(Node, name, {"spec": {"unschedulable": cordoned}},
                     patch_type=PatchType.MERGE)


async def _forge(stack: BridgeStack, ns: str, uid: str) -> str:
    """A tenant's job named like a placeholder of ``ns`` naming the pod ``uid`` in its comment,
    without the bridge's signature (submitted as Slurm user researcher)."""
    token = stack.slurm.admin("scontrol", "token", "username=researcher", "lifespan=1800")
    forger = stack.slurm.settings(user="researcher", token_file=None, data_parser="v0.0.42",
                                  token=token.strip().removeprefix("SLURM_JWT="))
    async with SlurmClient(forger) as client:
        job_id = await client.submit(JobRequest(name=f"k8s:{ns}/forged", owner=PodOwner(uid),
                                                time_limit_minutes=30))
    return str(job_id)


def _bridge_marks(node: Node) -> list[str]:
    """What the bridge puts on a Node: its taints (an admin's managed taint has a value),
    topology labels and condition."""
    taints = [t.key for t in (node.spec.taints if node.spec else None) or [] if bridge_taint(t)]
    labels = [k for k in (node.metadata.labels if node.metadata else None) or {}
              if k.startswith(keys.TOPOLOGY_LABEL_PREFIX)]
    conditions = [c.type for c in (node.status.conditions if node.status else None) or []
                  if c.type == keys.NODE_CONDITION_SLURM]
    return taints + labels + conditions


async def _marked_nodes(kube: AsyncClient) -> dict[str, list[str]]:
    return {n.metadata.name: marks async for n in kube.list(Node)
            if n.metadata and n.metadata.name and (marks := _bridge_marks(n))}


@contextlib.asynccontextmanager
async def _extender_stopped(stack: BridgeStack) -> AsyncIterator[None]:
    """The extender stopped (SIGTERM: it hands its Lease over), started again after."""
    stack.extender.kill(signal.SIGTERM)
    try:
        yield
    finally:
        await asyncio.to_thread(stack.extender.start)


async def test_uninstall_leaves_nothing_of_the_bridge_in_kubernetes_or_slurm(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    stack = bridge_stack
    ns = await e2e_namespace("uninstall")
    await create_pod(kube, ns, pod_manifest("runs"))
    running = await wait_bound(kube, ns, "runs")
    assert running.metadata and running.metadata.uid and running.metadata.annotations
    job = running.metadata.annotations[keys.JOB_ID]
    await create_pod(kube, ns, PodBuilder("waits").gated(HOLD).build())
    forged = await _forge(stack, ns, running.metadata.uid)
    await _cordon(kube, "kube-node4", True)  # the bridge drains node4 in Slurm
    try:
        with stack.slurm.drained("node3", "admin: bad dimm"):
            await wait_for(lambda: _drain_reason(stack, "node4").startswith(
                keys.DRAIN_REASON_PREFIX), 15, what="the bridge's drain on node4")
            assert await _marked_nodes(kube)

            dry = stack.cli("uninstall", "--dry-run")
            assert dry.returncode == 0, dry.stderr
            assert f"would delete   pod {ns}/runs" in dry.stdout, dry.stdout
            assert _squeue(stack, job) == "RUNNING"

            async with _extender_stopped(stack):
                done = stack.cli("uninstall", "--yes", timeout=180)
                assert done.returncode == 0, done.stdout + done.stderr
                out = done.stdout
                for line in (f"deleted        pod {ns}/runs", f"deleted        pod {ns}/waits",
                             f"cancelled      slurm job {job} (k8s:{ns}/runs)",
                             "resumed        slurm node node4",
                             "left           slurm node node3: drained by someone else"):
                    assert line in out, out
                assert _squeue(stack, job) in ("", "CANCELLED", "COMPLETING")
                assert _squeue(stack, forged) in ("PENDING", "RUNNING"), out
                assert not _drain_reason(stack, "node4")
                assert _drain_reason(stack, "node3") == "admin: bad dimm"
                assert await _marked_nodes(kube) == {}
                with pytest.raises(ApiError):
                    await kube.get(Lease, "slurmbridge-controllers", namespace=BRIDGE_NS)
                events = await pod_events(kube, ns, "waits")
                assert keys.EventReason.UNINSTALLED in [reason for reason, _ in events]
                pods = [p.metadata.name async for p in kube.list(Pod, namespace=ns)
                        if p.metadata and not p.metadata.deletionTimestamp]
                assert pods == []

                again = stack.cli("uninstall", "--yes", timeout=180)
                assert again.returncode == 0, again.stderr
                assert again.stdout.splitlines()[-1].startswith(
                    "nothing of the bridge to remove"), again.stdout
    finally:
        await _cordon(kube, "kube-node4", False)
        stack.slurm.admin("scancel", forged, check=False)
