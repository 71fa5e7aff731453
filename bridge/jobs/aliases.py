"""SchedMD slurm-bridge's ``slurmjob.slinky.slurm.net/`` pod annotations, as the bridge's own.

A site moving from slurm-bridge keeps its manifests: each alias it can honour means its
``slurmbridge.io/`` annotation, everywhere the bridge reads one (the translation, the namespace
policy and tenancy in the webhook and before submit), so an alias is never a way around the
policy.  An alias and its bridge key that disagree, and an alias the bridge cannot honour,
are refused naming the annotation: never silently dropped.  The table is in
docs/workloads.md ("Coming from slurm-bridge").
"""

from collections.abc import Mapping
from typing import Final

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest

# alias -> the bridge annotation it stands for.
ALIASES: Final[Mapping[str, str]] = {
    keys.SLINKY_ACCOUNT: keys.ACCOUNT,
    keys.SLINKY_PARTITION: keys.PARTITION,
    keys.SLINKY_QOS: keys.QOS,
    keys.SLINKY_RESERVATION: keys.RESERVATION,
    keys.SLINKY_TIME_LIMIT: keys.TIME_LIMIT,
    keys.SLINKY_JOB_NAME: keys.JOB_NAME,
    keys.SLINKY_CONSTRAINTS: keys.CONSTRAINTS,
    keys.SLINKY_WCKEY: keys.WCKEY,
    keys.SLINKY_EXCLUSIVE: keys.EXCLUSIVE,
}

_ONE_NODE = (
    "a pod runs on one node; for a job of several nodes make the pods one group "
    f"(labels {keys.GROUP} and {keys.GROUP_SIZE}, or a gang Job), one pod per node"
)
# alias -> why the bridge refuses it.
REFUSED: Final[Mapping[str, str]] = {
    keys.SLINKY_LICENSES: "slurmbridge does not ask Slurm for licenses",
    keys.SLINKY_MIN_NODES: _ONE_NODE,
    keys.SLINKY_MAX_NODES: _ONE_NODE,
    keys.SLINKY_GRES: (
        f"slurmbridge asks Slurm for the GPUs the pod requests: set {keys.GPU_RESOURCE} in the "
        "containers' resources instead"
    ),
    keys.SLINKY_CPU_PER_TASK: (
        "slurmbridge asks Slurm for the CPUs the pod requests: set the containers' "
        "resources.requests.cpu instead"
    ),
    keys.SLINKY_MEM_PER_NODE: (
        "slurmbridge asks Slurm for the memory the pod requests: set the containers' "
        "resources.requests.memory instead"
    ),
}


def canonical_key(key: str) -> str:
    """The bridge annotation ``key`` stands for (itself if it is no alias)."""
    return ALIASES.get(key, key)


def keys_set(annotations: Mapping[str, str] | None) -> set[str]:
    """The bridge keys a pod sets, itself or through an alias (non-blank values): what the
    tenancy checks before filling in a default.  Never raises (the webhook and the
    translation refuse what ``resolve`` refuses)."""
    return {canonical_key(k) for k in _present(annotations)}


def _present(annotations: Mapping[str, str] | None) -> dict[str, str]:
    return {k: v.strip() for k, v in (annotations or {}).items() if v and v.strip()}


def resolve(annotations: Mapping[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """The non-blank annotations with every alias replaced by its bridge key, stripped; and,
    for each bridge key read from an alias, that alias (for messages).

    Raises InvalidPodRequest for an alias the bridge cannot honour, and for an alias whose
    bridge key is also set to another value (naming both).
    """
    present = _present(annotations)
    values = {k: v for k, v in present.items() if k not in ALIASES and k not in REFUSED}
    sources: dict[str, str] = {}
    for alias, value in present.items():
        if alias in REFUSED:
            raise InvalidPodRequest(
                alias, value, f"it removed: {REFUSED[alias]}", kind="annotation"
            )
        key = ALIASES.get(alias)
        if key is None:
            continue
        if key in values and values[key] != value:
            raise InvalidPodRequest(
                alias, value,
                f"the value of {key} ({values[key]!r}), or only one of the two "
                f"({alias} is slurm-bridge's name for {key})",
                kind="annotation",
            )
        values[key] = value
        sources[key] = alias
    return values, sources
