"""Will a mixed group's heterogeneous job ever start?  Slurm puts no two components of one
heterogeneous job on one node (24.11 and 26.05: ``sbatch -N1 : -N2`` on two idle nodes pends
for ever, reason Resources), so components needing more nodes together than their partitions
hold would wait for ever while their members are told they wait for resources: such a job is
refused before it is submitted.  Down and drained nodes count: they may come back.
"""

from collections.abc import Sequence

from bridge.jobs.owner import GroupOwner
from bridge.jobs.request import JobRequest
from bridge.slurm.types import SlurmNode


def never_fits(
    owner: GroupOwner, names: Sequence[str], request: JobRequest, nodes: Sequence[SlurmNode],
) -> str | None:
    """Why ``request``, a heterogeneous job of components ``names``, can never start on
    ``nodes``; None if it may (an ordinary job, or a partition no node lists: Slurm's own
    refusal names it).  A component without a partition may use every node: which partition
    is Slurm's default the node listing does not say, so the refusal is never wrong."""
    if not request.components or not nodes:
        return None
    asked = {p.strip() for c in request.components
             for p in (c.placement.partition or "").split(",")}
    known = set().union(*(n.partitions for n in nodes))
    if "" in asked:
        usable, where = len(nodes), "Slurm has"
    elif asked <= known:
        usable = sum(1 for n in nodes if n.partitions & asked)
        listed = ", ".join(sorted(asked))
        where = f"partition {listed} has" if len(asked) == 1 else f"partitions {listed} have"
    else:
        return None
    needed = sum(c.nodes for c in request.components)
    if needed <= usable:
        return None
    each = ", ".join(f"{name} {c.nodes}" for name, c in zip(names, request.components,
                                                             strict=True))
    return (f"group {owner.namespace}/{owner.group} can never start: Slurm puts no two "
            "components of one heterogeneous job on one node, so its components need "
            f"{needed} nodes together ({each}) and {where} {usable} nodes (down or drained "
            "ones counted); put fewer members in a component, or ask for partitions with more "
            "nodes")
