"""One ask per component: a group's component is a set of identical nodes, built from one member.

A group is one Slurm job; a mixed group (a CPU-only launcher beside GPU workers) names its
components (bridge/jobs/components.py) and becomes one heterogeneous job, one component per
part.  Members of one component asking for different things would run on what the first
one asked for: workers on GPUs Slurm never gave them.  Such members are refused, naming the
members and what differs; the webhook (at creation) and the bridge (at submit and at
release) ask the same question here.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import pod_group
from bridge.jobs.request import JobRequest
from bridge.jobs.translate import member_ask

# What a user wrote, for the fields whose name is not already what they set.
_SAID_AS = {
    "name": "Slurm job name",
    "nodes": keys.GROUP_SIZE,
    "memory_mb": "memory (MiB)",
    "time_limit_minutes": "time limit (minutes)",
}


def differences(a: JobRequest, b: JobRequest) -> list[str]:
    """What two members ask for differently, as ``field a-value vs b-value`` (the owner,
    which is each pod's own, aside)."""
    left, right = _flat(a), _flat(b)
    return [f"{_SAID_AS.get(k, k)} {left[k]} vs {right[k]}" for k in left
            if k != "owner" and left[k] != right[k]]


def _flat(request: Any, prefix: str = "") -> dict[str, Any]:
    """Every field, nested ones (placement, topology) by their own name."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(request):
        value = getattr(request, f.name)
        if dataclasses.is_dataclass(value):
            found |= _flat(value, f"{f.name}." if f.name == "topology" else "")
        else:
            found[prefix + f.name] = "none" if value is None else value
    return found


def mixed(group: str, asks: Sequence[tuple[str, JobRequest]],
          component: str | None = None) -> str | None:
    """The refusal for members (name, ask) of one component that do not all ask the same
    (None: they do), naming the first two that differ and every field in which they do."""
    if not asks:
        return None
    where = f"component {component} of group {group}" if component else f"group {group}"
    first, first_ask = asks[0]
    for name, ask in asks[1:]:
        found = differences(first_ask, ask)
        if found:
            return (
                f"the members of {where} ask Slurm for different things (pods {first} "
                f"and {name}: {'; '.join(found)}); slurmbridge runs each component of a group "
                "as identical nodes, built from one member: give every member of it the same "
                "requests and annotations, or make the differing pods a component of their "
                f"own (label {keys.GROUP_COMPONENT}, annotation {keys.GROUP_COMPONENTS})"
            )
    return None


def component_of(pod: Pod) -> str | None:
    """The member's component as labelled (None: its group is one component)."""
    labels = (pod.metadata.labels if pod.metadata else None) or {}
    return labels.get(keys.GROUP_COMPONENT) or None


def members_mixed(group: str, pods: Sequence[Pod]) -> str | None:
    """Why some component's members ask for different things (None: each asks alike)."""
    by_component: dict[str | None, list[Pod]] = {}
    for pod in pods:
        by_component.setdefault(component_of(pod), []).append(pod)
    for component, members in by_component.items():
        found = mixed(group, pod_asks(members), component)
        if found:
            return found
    return None


def counted(pod: Pod) -> bool:
    """A member the group still counts on: neither finished nor being deleted (its
    replacement may come meanwhile)."""
    phase = pod.status.phase if pod.status else None
    return phase not in ("Succeeded", "Failed") and not (
        pod.metadata and pod.metadata.deletionTimestamp)


def rank_of(pod: Pod) -> int | None:
    """The member's rank label (None: none, or labels the webhook would have refused)."""
    try:
        group = pod_group(pod.metadata.labels if pod.metadata else None)
    except InvalidPodRequest:
        return None
    return group.rank if group is not None else None


def pod_asks(pods: Sequence[Pod]) -> list[tuple[str, JobRequest]]:
    """Each pod's name and ask, the pods whose ask cannot be read (refused on their own at
    submit) left out."""
    found = []
    for pod in pods:
        try:
            ask = member_ask(pod)
        except ValueError:  # InvalidPodRequest: such a member is refused on its own
            continue
        found.append(((pod.metadata.name if pod.metadata else None) or "?", ask))
    return found
