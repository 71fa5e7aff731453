"""One ask per group: a group is one Slurm job of identical nodes, built from one member.

A group whose members ask for different things (a CPU-only launcher beside GPU workers)
would run every member on what the first one asked for: workers on GPUs Slurm never gave
them.  Until such a group can be a Slurm heterogeneous job, it is refused, naming the
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


def mixed(group: str, asks: Sequence[tuple[str, JobRequest]]) -> str | None:
    """The refusal for a group whose members (name, ask) do not all ask the same (None:
    they do), naming the first two that differ and every field in which they do."""
    if not asks:
        return None
    first, first_ask = asks[0]
    for name, ask in asks[1:]:
        found = differences(first_ask, ask)
        if found:
            return (
                f"the members of group {group} ask Slurm for different things (pods {first} "
                f"and {name}: {'; '.join(found)}); slurmbridge runs a group as one Slurm job "
                "of identical nodes, built from one member: give every member the same "
                "requests and annotations, or make the differing pods a group of their own"
            )
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
