"""The answer ``workloads.py`` gives for a pod (its group, size, rank, components) and the
small rules every workload source shares: group names, ranks from a workload's own index."""

import hashlib
from dataclasses import dataclass, field

from admission.owners import WorkloadError
from bridge import keys
from bridge.jobs.components import component_text


@dataclass(frozen=True, slots=True)
class Membership:
    """A pod's group: ``size`` members, this one ``rank`` (None: any free node)."""

    name: str
    size: int
    rank: int | None
    source: str  # what said so, for messages: "Job ns/name", "PodGroup ns/name", ...
    # Slurm annotations the workload implies (a PodGroup's topology constraint), written
    # where the pod does not set them itself.
    asks: dict[str, str] = field(default_factory=dict)
    # A mixed group's parts in rank order, (name, size) each, and this member's: one Slurm
    # heterogeneous job component each (bridge/jobs/components.py); () and None: one part.
    components: tuple[tuple[str, int], ...] = ()
    component: str | None = None

    def labels(self) -> dict[str, str]:
        labels = {keys.GROUP: self.name, keys.GROUP_SIZE: str(self.size)}
        if self.rank is not None:
            labels[keys.GROUP_RANK] = str(self.rank)
        if self.component is not None:
            labels[keys.GROUP_COMPONENT] = self.component
        return labels

    def annotations(self) -> dict[str, str]:
        return {keys.GROUP_COMPONENTS: component_text(self.components)} \
            if self.component is not None else {}


def index(values: dict[str, str], key: str, where: str) -> int | None:
    """The workload's own index of a member (``key`` in its labels or annotations)."""
    text = values.get(key)
    if text is None:
        return None
    if not text.isdigit():
        raise WorkloadError(f"{where} {key}={text!r} is not a whole number")
    return int(text)


def ranked(rank: int | None, size: int) -> int | None:
    """A rank only where it names one of the group's nodes."""
    return rank if rank is not None and rank < size else None


def group_name(text: str) -> str:
    """A label value (<= 63 characters) that is also a Slurm job name part, unique for ``text``."""
    if len(text) <= 63:
        return text
    return f"{text[:50].rstrip('-_.')}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
