"""A group asks Slurm for network topology (issue 24 item 2): ``slurmbridge.io/switches``
becomes ``--switches=N@wait``, and Slurm keeps the group's nodes under one leaf switch or
makes it wait, the pods telling why; a pod's own spread Slurm cannot keep is refused.

The local Slurm 25.05+ (deploy/slurm/recipe.sh) has a tree topology, leaf switches of two
nodes under a spine, used by partition ``tree``; 24.11 stays flat (one topology plugin per
cluster), where Slurm records the ask and places the group anyway.  Leaves are read with the
admin's ``scontrol show topology``, not the product."""

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
    slurm_idle,
    wait_bound,
    wait_slurm_job,
)
from slurmbridge_devkit.kube import wait_for
from slurmbridge_devkit.scontrol import expand_hostlist, show_job
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory

pytestmark = pytest.mark.e2e

ASK = {keys.PARTITION: "tree", keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "4:00"}


def _leaves(slurm: SlurmTarget) -> list[tuple[str, ...]]:
    """The nodes under each leaf switch (level 0) of topology ``tree``."""
    out = slurm.admin("scontrol", "show", "topology", "tree")
    return [expand_hostlist(m.group(1))
            for m in re.finditer(r"Level=0\b.*?\bNodes=(\S+)", out)]


def _native(slurm: SlurmTarget, node: str) -> str:
    return slurm.admin("sbatch", "--parsable", "-J", "native-leaf", "--exclusive", "-w", node,
                       "-o", "/dev/null", "--wrap", "sleep 900").strip()


def _group(name: str, annotations: dict[str, str]) -> list[Pod]:
    labels = {keys.GROUP: name, keys.GROUP_SIZE: "2"}
    return [pod_manifest(f"{name}-{i}", labels=labels, annotations=annotations)
            for i in range(2)]


async def test_a_group_asking_one_switch_gets_one_leaf_or_waits_saying_why(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    slurm = bridge_stack.slurm
    await slurm_idle(slurm)
    ns = await e2e_namespace("switches")
    if slurm.version == "24.11":
        for pod in _group("flat", {keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "4:00"}):
            await create_pod(kube, ns, pod)
        job = show_job(slurm, await wait_slurm_job(slurm, ns, "flat"))
        assert job.fields.get("Switches") == "1@00:04:00", job.fields
        for i in range(2):
            await wait_bound(kube, ns, f"flat-{i}")
        return
    leaves = _leaves(slurm)
    assert len(leaves) >= 2 and all(len(nodes) == 2 for nodes in leaves), leaves
    (a1, _), (b1, b2) = leaves[0], leaves[1]
    # One node of each leaf busy: two nodes are free, but under two switches.
    natives = [_native(slurm, a1), _native(slurm, b1)]
    try:
        await wait_for(lambda: all(show_job(slurm, j).state == "RUNNING" for j in natives), 60,
                       interval=0.5, what=f"native jobs {natives} RUNNING")
        for pod in _group("ring", ASK):
            await create_pod(kube, ns, pod)
        job_id = await wait_slurm_job(slurm, ns, "ring")
        job = show_job(slurm, job_id)
        assert job.fields.get("Switches") == "1@00:04:00", job.fields
        reason = await wait_for(
            lambda: (j.reason if (j := show_job(slurm, job_id)).state == "PENDING"
                     and j.reason not in ("", "None") else None),
            30, interval=0.5, what=f"job {job_id} pending with a reason")

        async def told() -> str | None:
            return next((m for r, m in await pod_events(kube, ns, "ring-0")
                         if r == keys.EventReason.PENDING.value and f"reason {reason}" in m), None)

        message = await wait_for(told, 60, interval=1, what=f"ring-0 told Slurm's {reason}")
        assert "switch" in message.lower(), message  # in words, not only Slurm's code
        for i in range(2):
            pod = await kube.get(Pod, f"ring-{i}", namespace=ns)
            assert pod.spec is not None and not pod.spec.nodeName
        slurm.admin("scancel", natives.pop())  # leaf b is whole again
        bound = [await wait_bound(kube, ns, f"ring-{i}") for i in range(2)]
        nodes = sorted(bridge_stack.slurm_node_of(p.spec.nodeName or "") for p in bound if p.spec)
        assert nodes == sorted((b1, b2)), f"group placed on {nodes}, not under one leaf {b1, b2}"
    finally:
        for native in natives:
            slurm.admin("scancel", native)


async def test_a_spread_slurm_cannot_keep_is_refused_by_the_webhook(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    ns = await e2e_namespace("spread")
    pod = PodBuilder("spread").build()
    assert pod.spec is not None
    pod.spec.topologySpreadConstraints = [{  # type: ignore[list-item]
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }]
    with pytest.raises(ApiError) as refused:
        await create_pod(kube, ns, pod)
    message = str(refused.value.status.message)
    assert "slurmbridge cannot run this pod: spec.topologySpreadConstraints[0]" in message
    assert "may share a node" in message, message
