"""A Kubernetes Node without slurmd, labelled
``node-restriction.kubernetes.io/slurmbridge-external-node=true``, becomes an EXTERNAL Slurm
node (issue 24 item 3): Slurm places a pod there, and the node leaves Slurm with the Node. The
local 26.05 (deploy/slurm/recipe.sh) has MaxNodeCount and partition ``external`` (the NodeSet of
feature ``slurmbridge-external``); 24.11's slurmrestd cannot create nodes, and the Node says so.
Slurm's side is read with the admin's tools."""

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest, slurm_idle, wait_bound, wait_slurm_job
from slurmbridge_devkit.kubelet import NodeFactory, delete_node
from slurmbridge_devkit.scontrol import show_job
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

NODE = "kext1"


def _sinfo(slurm: SlurmTarget) -> dict[str, tuple[str, str]]:
    """Slurm node -> (state, features) as ``sinfo -N`` lists them (one line per node)."""
    out = slurm.admin("sinfo", "-h", "-N", "-p", "external", "-o", "%N %T %f")
    return {name: (state, features) for name, state, features in
            (line.split() for line in out.splitlines() if line.strip())}


async def _condition(kube: AsyncClient) -> tuple[str, str, str] | None:
    node = await kube.get(Node, NODE)
    for c in (node.status.conditions if node.status else None) or []:
        if c.type == keys.NODE_CONDITION_SLURM:
            return c.status, c.reason or "", c.message or ""
    return None


async def test_an_external_node_takes_a_pod_slurm_places_there_and_leaves_with_its_node(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    make_node: NodeFactory,
) -> None:
    slurm = bridge_stack.slurm
    await slurm_idle(slurm)
    await make_node(NODE, cpu="4", memory="8Gi", labels={keys.EXTERNAL_NODE: "true"})
    if slurm.version == "24.11":
        said = await wait_for(lambda: _condition(kube), 30, interval=0.5,
                              what=f"{NODE}'s Slurm condition")
        assert said[:2] == ("False", keys.REASON_EXTERNAL_NOT_REGISTERED), said
        assert "needs Slurm 25.11+" in said[2] and "scontrol create" in said[2], said
        return
    listed = await wait_for(lambda: _sinfo(slurm).get(NODE), 30, interval=0.5,
                            what=f"{NODE} in sinfo -p external")
    assert listed[1] == "slurmbridge-external", listed
    assert "EXTERNAL" in slurm.admin("scontrol", "show", "node", NODE)
    ns = await e2e_namespace("external")
    await create_pod(kube, ns, pod_manifest("outside", annotations={keys.PARTITION: "external"}))
    pod = await wait_bound(kube, ns, "outside")
    assert pod.spec is not None and pod.spec.nodeName == NODE
    job = show_job(slurm, await wait_slurm_job(slurm, ns, "outside"))
    assert job.nodes == (NODE,) and job.state == "RUNNING", job
    await kube.delete(type(pod), "outside", namespace=ns)
    await wait_for(lambda: show_job(slurm, job.job_id).state != "RUNNING", 60, interval=0.5,
                   what=f"job {job.job_id} of the deleted pod to end")
    await delete_node(kube, NODE)
    await wait_for(lambda: NODE not in slurm.admin("sinfo", "-h", "-N", "-o", "%N").split(), 60,
                   interval=0.5, what=f"{NODE} gone from Slurm with its Node")
