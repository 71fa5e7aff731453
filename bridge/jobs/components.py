"""A mixed group's components: one Slurm heterogeneous job component per shape.

A launcher beside GPU workers, a JobSet's replicated jobs, an LWS's leader and workers: each
part asks Slurm for its own CPUs, memory and GPUs, and runs as one component of one
heterogeneous job.  Every member carries its component's name (label ``group-component``)
and the whole list with sizes (annotation ``group-components``, ``launcher=1,workers=2``),
so the bridge knows every component from any member.  Components hold consecutive ranks in
the listed order: a member of rank ``r`` is the ``r - offset``-th of its component, and runs
on that component's node of that index.  A group without these keys is one component.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import PodGroup, pod_group

# A label value (a JobSet replicated job's name, "leader", "worker", a user's own).
_PART = re.compile(r"([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)=([0-9]{1,6})", re.ASCII)
_FORM = (
    "the group's components in order with their sizes, e.g. launcher=1,workers=2: names as "
    "label values, sizes adding up to the group's"
)


@dataclass(frozen=True, slots=True)
class Component:
    """``size`` members holding the group's ranks ``offset`` .. ``offset + size - 1``."""

    name: str
    size: int
    offset: int


@dataclass(frozen=True, slots=True)
class Components:
    """Every component of the member's group, in order, and the member's own."""

    parts: tuple[Component, ...]
    own: Component

    def rank_in_own(self, rank: int | None) -> int | None:
        """The member's index within its component (None: no rank)."""
        return None if rank is None else rank - self.own.offset


def group_components(
    labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None
) -> Components | None:
    """The member's components, checked against its group labels; None: the group (if any)
    is one component.  Raises InvalidPodRequest naming the key and the accepted form."""
    component = (labels or {}).get(keys.GROUP_COMPONENT, "").strip()
    listed = (annotations or {}).get(keys.GROUP_COMPONENTS, "").strip()
    if not component and not listed:
        return None
    group = pod_group(labels)
    if group is None:
        raise InvalidPodRequest(keys.GROUP_COMPONENT, component or None,
                                f"a member of a group ({keys.GROUP}, {keys.GROUP_SIZE})",
                                kind="label")
    if not listed:
        raise InvalidPodRequest(keys.GROUP_COMPONENTS, None, _FORM, kind="annotation")
    parts = _parts(listed, group)
    own = next((p for p in parts if p.name == component), None)
    if own is None:
        names = ", ".join(p.name for p in parts)
        raise InvalidPodRequest(keys.GROUP_COMPONENT, component or None,
                                f"one of the group's components ({names})", kind="label")
    if group.rank is not None and not own.offset <= group.rank < own.offset + own.size:
        accepted = (f"a rank from {own.offset} to {own.offset + own.size - 1}: component "
                    f"{own.name}'s members hold consecutive ranks, in {keys.GROUP_COMPONENTS}'s "
                    "order")
        raise InvalidPodRequest(keys.GROUP_RANK, str(group.rank), accepted, kind="label")
    return Components(parts, own)


def _parts(text: str, group: PodGroup) -> tuple[Component, ...]:
    parts: list[Component] = []
    offset = 0
    for item in text.split(","):
        found = _PART.fullmatch(item.strip())
        size = int(found.group(3)) if found else 0
        if found is None or size < 1 or any(p.name == found.group(1) for p in parts):
            raise InvalidPodRequest(keys.GROUP_COMPONENTS, text, _FORM, kind="annotation")
        parts.append(Component(found.group(1), size, offset))
        offset += size
    if offset != group.size:
        raise InvalidPodRequest(
            keys.GROUP_COMPONENTS, text,
            f"{_FORM} ({keys.GROUP_SIZE} {group.size}; these add up to {offset})",
            kind="annotation")
    return tuple(parts)


def component_text(parts: tuple[tuple[str, int], ...]) -> str:
    """The annotation's value for ``(name, size)`` pairs in order."""
    return ",".join(f"{name}={size}" for name, size in parts)


def member_part(
    labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None
) -> tuple[str, int] | None:
    """The member's component and its offset in the group's heterogeneous job (``+1``): what
    it is told of Slurm's state and shown as (``<job id>+1``); None for any other pod (and
    for keys the webhook would refuse: such a pod has no job to tell of)."""
    try:
        found = group_components(labels, annotations)
    except InvalidPodRequest:
        return None
    return None if found is None else (found.own.name, found.parts.index(found.own))


def squeue_job_text(job_id: int, offset: int | None) -> str:
    """A job as squeue names it: ``29``, or a heterogeneous job's component ``29+1``."""
    return f"{job_id}+{offset}" if offset is not None else str(job_id)
