"""A new pod's place in its group, weighed against the group's live members.

The group's labels (the workload's, as the mutating webhook wrote them, or the user's own)
say which group, its size and the pod's rank; the group is one Slurm job of ``size``
identical nodes, one member per node (a mixed group: one heterogeneous job, one component of
identical nodes per part, bridge/jobs/components.py).  So a new member is refused when the
group already counts ``size`` live members, when a live member holds its rank (the two would
share one node and its GPUs), when it lists other components than the members already there,
or when it asks Slurm for something other than its component's members already there
(bridge/jobs/group_ask.py).  A member that finished or is being deleted counts no
more: its replacement is admitted.  The bridge keeps the same rules at release
(bridge/placement/seats.py) for a pod that got past admission.
"""

from collections.abc import Awaitable, Callable

from lightkube import AsyncClient
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.jobs.group_ask import component_of, counted, mixed, pod_asks, rank_of
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
    return _components_differ(where, pod, others) or _component_mixed(group.name, pod, others)


def _components_differ(where: str, pod: Pod, others: list[Pod]) -> str | None:
    """Every member must list the same components: each is one component of one job."""
    own = _listed(pod)
    other = next((p for p in others if _listed(p) != own), None)
    if other is None:
        return None
    return (
        f"pod {_names([pod])} lists {keys.GROUP_COMPONENTS}={own!r} but member "
        f"{_names([other])} of {where} lists {_listed(other)!r}: every member names the "
        "same components, each one component of the group's one Slurm job"
    )


def _component_mixed(group: str, pod: Pod, others: list[Pod]) -> str | None:
    """The members of the pod's component admitted so far ask alike (each was weighed so):
    one stands for them all."""
    own = component_of(pod)
    same = [p for p in others if component_of(p) == own]
    return mixed(group, pod_asks([*same[:1], pod]), own)


def _listed(pod: Pod) -> str:
    annotations: dict[str, str] = (pod.metadata.annotations if pod.metadata else None) or {}
    return annotations.get(keys.GROUP_COMPONENTS, "")


def _names(pods: list[Pod]) -> str:
    return ", ".join(sorted((p.metadata.name if p.metadata else None) or "?" for p in pods))
