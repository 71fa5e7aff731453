"""A group asks Slurm for network topology (issue 24 item 2): ``slurmbridge.io/switches``
becomes ``--switches=N@wait`` and ``slurmbridge.io/segment`` ``--segment=N``, and Slurm keeps
the group's nodes under one leaf switch or in one block, or makes it wait, the pods telling
why; a pod's own spread Slurm cannot keep is refused.

The local Slurm 25.05+ (deploy/slurm/recipe.sh) has a tree topology (leaf switches of two
nodes under a spine, partition ``tree``) and a block one (blocks of two nodes, partition
``block``); 24.11 stays flat (one topology plugin per cluster), where Slurm records the ask
and places the group anyway.  Units are read with the admin's ``scontrol show topology``,
not the product."""

import re

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
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
from slurmbridge_devkit.scontrol import expand_hostlist, show_job
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

WAIT = {keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "4:00"}
# topology -> (its units as scontrol shows them, the group's ask, words the pod is told)
ASKS = {
    "tree": (r"Level=0\b.*?\bNodes=(\S+)", WAIT, "at most 1 leaf switch"),
    "block": (r"BlockName=\S+.*?\bNodes=(\S+)", {keys.SEGMENT: "2"},
              "segments of 2, each within one block"),
}


def _units(slurm: SlurmTarget, topology: str) -> list[tuple[str, ...]]:
    """The nodes of each leaf switch (tree) or block of a topology, as the admin sees them."""
    out = slurm.admin("scontrol", "show", "topology", topology)
    return [expand_hostlist(m.group(1)) for m in re.finditer(ASKS[topology][0], out)]


def _native(slurm: SlurmTarget, node: str) -> str:
    return slurm.admin("sbatch", "--parsable", "-J", "native-unit", "--exclusive", "-w", node,
                       "-o", "/dev/null", "--wrap", "sleep 900").strip()


def _group(name: str, annotations: dict[str, str]) -> list[Pod]:
    labels = {keys.GROUP: name, keys.GROUP_SIZE: "2"}
    return [pod_manifest(f"{name}-{i}", labels=labels, annotations=annotations)
            for i in range(2)]


@pytest.mark.parametrize("topology", sorted(ASKS))
async def test_a_group_kept_in_one_unit_waits_saying_why_then_lands_in_one(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    topology: str,
) -> None:
    """One leaf switch (tree, ``switches: 1``) or one block (block, ``segment: 2``) for a
    group of 2: with one node of each unit busy, two nodes are free but in two units, so the
    group waits and is told why; it lands on the unit that frees up.  The local 24.11 stays
    flat (one topology plugin per cluster): Slurm takes the ask, records it, and places the
    group as it would without."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, topology)
    _, ask, words = ASKS[topology]
    if slurm.version == "24.11":
        for pod in _group("flat", ask):
            await create_pod(kube, ns, pod)
        job = show_job(slurm, await wait_slurm_job(slurm, ns, "flat"))
        if topology == "tree":
            assert job.fields.get("Switches") == "1@00:04:00", job.fields
        for i in range(2):
            await wait_bound(kube, ns, f"flat-{i}")
        return
    units = _units(slurm, topology)
    assert len(units) >= 2 and all(len(nodes) == 2 for nodes in units), units
    (a1, _), (b1, b2) = units[0], units[1]
    natives = [_native(slurm, a1), _native(slurm, b1)]
    try:
        await wait_for(lambda: all(show_job(slurm, j).state == "RUNNING" for j in natives), 60,
                       interval=0.5, what=f"native jobs {natives} RUNNING")
        for pod in _group("ring", {keys.PARTITION: topology, **ask}):
            await create_pod(kube, ns, pod)
        job_id = await wait_slurm_job(slurm, ns, "ring")
        if topology == "tree":
            assert show_job(slurm, job_id).fields.get("Switches") == "1@00:04:00"
        # scontrol says Resources (tree) or No_suitable_topology_unit_found (block, its
        # state_description); slurmrestd's state_reason is Resources for both.
        await wait_for(
            lambda: (j := show_job(slurm, job_id)).state == "PENDING"
            and j.reason not in ("", "None"),
            30, interval=0.5, what=f"job {job_id} pending with a reason")

        async def told() -> str | None:
            return next((m for r, m in await pod_events(kube, ns, "ring-0")
                         if r == keys.EventReason.PENDING.value and words in m), None)

        message = await wait_for(told, 60, interval=1, what=f"ring-0 told {words!r}")
        assert f"waiting for Slurm job {job_id} (PENDING, reason Resources)" in message, message
        for i in range(2):
            pod = await kube.get(Pod, f"ring-{i}", namespace=ns)
            assert pod.spec is not None and not pod.spec.nodeName
        slurm.admin("scancel", natives.pop())  # unit b is whole again
        bound = [await wait_bound(kube, ns, f"ring-{i}") for i in range(2)]
        nodes = sorted(bridge_stack.slurm_node_of(p.spec.nodeName or "") for p in bound if p.spec)
        assert nodes == sorted((b1, b2)), f"group placed on {nodes}, not in one unit {b1, b2}"
    finally:
        for native in natives:
            slurm.admin("scancel", native)


async def test_a_spread_slurm_cannot_keep_is_refused_by_the_webhook(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    ns = await e2e_namespace("spread")
    pod = PodBuilder("spread").spec(topologySpreadConstraints=[{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }]).build()
    with pytest.raises(ApiError) as refused:
        await create_pod(kube, ns, pod)
    message = str(refused.value.status.message)
    assert "slurmbridge cannot run this pod: spec.topologySpreadConstraints[0]" in message
    assert "may share a node" in message, message


async def test_a_group_larger_than_a_block_lands_in_whole_segments_and_an_uneven_one_is_refused(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    """More members than one block holds: 4 pods asking segments of 2 take two whole blocks
    (one node per pod, each segment within a block); 3 pods asking segments of 2 cannot be
    cut so, and the webhook says why before any job exists.  On the flat 24.11 Slurm takes
    the segment ask and places the group anyway."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "segments")
    ask = {keys.SEGMENT: "2"} if slurm.version == "24.11" else \
        {keys.SEGMENT: "2", keys.PARTITION: "block"}
    labels = {keys.GROUP: "wide", keys.GROUP_SIZE: "4"}
    for i in range(4):
        await create_pod(kube, ns, pod_manifest(f"wide-{i}", labels=labels, annotations=ask))
    bound = [await wait_bound(kube, ns, f"wide-{i}") for i in range(4)]
    nodes = {bridge_stack.slurm_node_of(p.spec.nodeName or "") for p in bound if p.spec}
    assert len(nodes) == 4, f"one node per pod, got {nodes}"
    if slurm.version != "24.11":
        blocks = _units(slurm, "block")
        assert all(set(b) <= nodes for b in blocks), f"{nodes} are not whole blocks {blocks}"

    uneven = {keys.GROUP: "odd", keys.GROUP_SIZE: "3"}
    with pytest.raises(ApiError) as refused:
        await create_pod(kube, ns, pod_manifest("odd-0", labels=uneven, annotations=ask))
    message = str(refused.value.status.message)
    assert keys.SEGMENT in message and "a divisor of the job's 3 node(s)" in message, message
    assert not slurm.admin("squeue", "-h", "-n", f"k8s:{ns}/odd", "-o", "%i").strip()
