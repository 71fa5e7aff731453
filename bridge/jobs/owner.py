"""Who owns a placeholder job: one pod (``PodOwner``) or one pod group (``GroupOwner``).

The owner is written as text into the job's Slurm comment and the pod's (or group
Lease's) ``slurmbridge.io/owner`` annotation, so the link survives restarts.  That text is
the pod UID, or ``group:<namespace>/<group>``: ``owner_text`` writes it and
``parse_owner`` reads it back, and nothing else handles the text form.
"""

from dataclasses import dataclass

GROUP_PREFIX = "group:"


@dataclass(frozen=True, slots=True)
class PodOwner:
    """A lone pod's job: keyed by the pod's UID (a pod re-created under its name is new)."""

    uid: str

    def __str__(self) -> str:
        return owner_text(self)


@dataclass(frozen=True, slots=True)
class GroupOwner:
    """A pod group's one job: keyed by namespace and group name, whichever members exist."""

    namespace: str
    group: str

    def __str__(self) -> str:
        return owner_text(self)


Owner = PodOwner | GroupOwner


def owner_text(owner: Owner) -> str:
    """The text form, as recorded in Slurm comments and annotations (byte for byte the same
    as every earlier bridge wrote)."""
    if isinstance(owner, GroupOwner):
        return f"{GROUP_PREFIX}{owner.namespace}/{owner.group}"
    return owner.uid


def parse_owner(text: str) -> Owner:
    """The owner a recorded text names.  Text the bridge never writes (``group:`` without
    a namespace and a name) is kept verbatim as a pod owner no pod has: its job is an
    orphan, as it always was."""
    namespace, slash, group = text.removeprefix(GROUP_PREFIX).partition("/")
    if text.startswith(GROUP_PREFIX) and slash and namespace and group:
        return GroupOwner(namespace, group)
    return PodOwner(text)
