"""A mixed group's topology ask (issue 43, item 5) as Slurm applies it to a heterogeneous job:
each component's own ``--segment`` (and ``--switches``), on its own nodes.  On 26.05 the group
asks partition ``block`` (blocks of two nodes, deploy/slurm/recipe.sh); 24.11 has one topology
plugin per cluster and stays flat, where Slurm takes the ask and places the job anyway."""

import re

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_events, pod_manifest, quiet_namespace, wait_bound
from slurmbridge_devkit.scontrol import expand_hostlist, parse_job_line
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


def _member(group: str, name: str, rank: int, component: str, **asks: str) -> Pod:
    labels = {keys.GROUP: group, keys.GROUP_SIZE: "3", keys.GROUP_RANK: str(rank),
              keys.GROUP_COMPONENT: component}
    annotations = {keys.GROUP_COMPONENTS: "launcher=1,workers=2", **asks}
    return pod_manifest(f"{group}-{name}", gpus=0 if component == "launcher" else 1,
                        labels=labels, annotations=annotations)


async def test_the_workers_segment_is_their_components_and_one_the_launcher_cannot_take_is_refused(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "hettopo")
    where = {keys.PARTITION: "block"} if slurm.version != "24.11" else {}
    segment = {keys.SEGMENT: "2", **where}
    pods = [_member("seg", "launcher", 0, "launcher", **where),
            _member("seg", "worker-0", 1, "workers", **segment),
            _member("seg", "worker-1", 2, "workers", **segment)]
    for pod in pods:
        await create_pod(kube, ns, pod)
    bound = [await wait_bound(kube, ns, f"seg-{n}", timeout=120)
             for n in ("launcher", "worker-0", "worker-1")]
    meta = bound[0].metadata
    assert meta is not None and meta.annotations is not None
    job_id = meta.annotations[keys.JOB_ID]
    shown = slurm.admin("scontrol", "show", "job", "-o", job_id).splitlines()
    parts = {int(v.fields["HetJobOffset"]): v for v in map(parse_job_line, shown)}
    print(f"slurm {slurm.version} {job_id}: "
          f"{[(o, p.nodes, p.fields.get('SegmentSize')) for o, p in sorted(parts.items())]}")
    assert sorted(parts) == [0, 1], shown
    if slurm.version != "24.11":
        assert (parts[0].fields.get("SegmentSize"), parts[1].fields.get("SegmentSize")) == (
            None, "2"), shown
        blocks = slurm.admin("scontrol", "show", "topology", "block")
        assert any(set(parts[1].nodes) <= set(b) for b in _blocks(blocks)), (parts[1], blocks)
    # segment 2 on every member: the launcher's one node cannot be split in 2.
    for name, rank, component in (("launcher", 0, "launcher"), ("worker-0", 1, "workers"),
                                  ("worker-1", 2, "workers")):
        await create_pod(kube, ns, _member("odd", name, rank, component, **segment))

    async def told() -> str | None:
        return next((m for r, m in await pod_events(kube, ns, "odd-launcher")
                     if r == keys.EventReason.SUBMIT_REFUSED.value), None)

    message = await wait_for(told, 60, interval=1, what="odd-launcher told why")
    assert f'annotation {keys.SEGMENT}="2"' in message, message
    assert "component launcher's 1 node(s)" in message, message
    assert not slurm.admin("squeue", "-h", "-n", f"k8s:{ns}/odd", "-o", "%i").strip()


def _blocks(text: str) -> list[tuple[str, ...]]:
    """Each block's nodes, as ``scontrol show topology block`` lists them."""
    return [expand_hostlist(m.group(1))
            for m in re.finditer(r"BlockName=\S+.*?\bNodes=(\S+)", text)]
