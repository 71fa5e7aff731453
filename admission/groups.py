"""A new pod's place in its group, weighed against the group's live members.

The group's labels (the workload's, as the mutating webhook wrote them, or the user's own)
say which group, its size and the pod's rank; the group is one Slurm job of ``size``
identical nodes, one member per node.  So a new member is refused when the group already
counts ``size`` live members, when a live member holds its rank (the two would share one
node and its GPUs), or when it asks Slurm for something other than the members already
there (bridge/jobs/group_ask.py).  A member that finished or is being deleted counts no
more: its replacement is admitted.  The bridge keeps the same rules at release
(bridge/placement/seats.py) for a pod that got past admission.
"""

from collections.abc import Awaitable, Callable

from lightkube import AsyncClient
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.jobs.group_ask import counted, mixed, pod_asks, rank_of
from bridge.jobs.options import PodGroup

MemberLister = Callable[[str, str], Awaitable[list[Pod]]]
"""The pods labelled ``slurmbridge.io/group=<group>`` in a namespace, as stored."""


def kube_member_lister(client: AsyncClient) -> MemberLister:
    """Lists through the API server, never kept: a group's members change member by member."""

    async def list_members(namespace: str, group: str) -> list[Pod]:
        return [p async for p in client.list(
            PodResource, namespace=namespace, labels={keys.GROUP: group})]

    return list_members


async def group_refusal(
    pod: Pod, group: PodGroup, list_members: MemberLister
) -> str | None:
    """Why ``pod`` (being created, a member of ``group``) cannot join it (None: it may)."""
    meta = pod.metadata
    assert meta is not None and meta.namespace
    listed = await list_members(meta.namespace, group.name)
    others = [p for p in listed if counted(p) and p.metadata and p.metadata.name != meta.name]
    where = f"group {group.name} (namespace {meta.namespace})"
    if len(others) >= group.size:
        return (
            f"{where} already has its {group.size} member(s) ({_names(others)}), one per node "
            "of its one Slurm job: another would share a member's node and GPUs; delete a "
            f"member first, or give this pod a group of its own ({keys.GROUP})"
        )
    holder = next((p for p in others if group.rank is not None and rank_of(p) == group.rank),
                  None)
    if holder is not None:
        return (
            f"{keys.GROUP_RANK} {group.rank} of {where} is taken by pod {_names([holder])}, "
            "which is still live: two pods of one rank would share one node and its GPUs; "
            "a replacement is admitted once its predecessor has finished or is being deleted"
        )
    # The members admitted so far ask alike (each was weighed so): one stands for them all.
    return mixed(group.name, pod_asks([*others[:1], pod]))


def _names(pods: list[Pod]) -> str:
    return ", ".join(sorted((p.metadata.name if p.metadata else None) or "?" for p in pods))
