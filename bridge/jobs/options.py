"""The Slurm options a researcher sets on a pod through ``slurmbridge.io/`` annotations and labels.

slurm-bridge's ``slurmjob.slinky.slurm.net/`` annotations are read as aliases (aliases.py).

Every value ends up in a Slurm job field, so each is checked against the form Slurm
takes; an error names the annotation and that form. The admission webhook runs the
same checks so that a bad pod is refused at ``kubectl apply`` rather than left pending.
An empty (or blank) value counts as unset, as a templated-out value usually means.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from bridge import keys
from bridge.jobs.aliases import resolve
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.request import SlurmPlacement, TopologyAsk
from bridge.jobs.timelimit import ACCEPTED as TIME_LIMIT_FORM
from bridge.jobs.timelimit import SLURM_UINT32_MAX, parse_duration_seconds, parse_time_limit

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)
_NAME_FORM = "a Slurm name: 1-64 characters among letters, digits, '_', '.', '-'"
_CONSTRAINTS = re.compile(r"[A-Za-z0-9_\-.&|,\[\]()*:!]{1,1024}", re.ASCII)
_CONSTRAINTS_FORM = (
    "a Slurm feature expression (e.g. a100&ib or [rack1|rack2]): "
    "letters, digits and _-.&|,[]()*:! only"
)
_COUNT = re.compile(r"[0-9]{1,10}", re.ASCII)
SLURM_UINT16_MAX = 2**16 - 3

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """The job options taken from a pod's annotations; ``None`` leaves Slurm's default.

    ``placement`` goes to the job as is; the time limit and GPU count are only the pod's
    say, which the translation weighs against its deadline and resource requests.
    """

    placement: SlurmPlacement = field(default_factory=SlurmPlacement)
    time_limit_minutes: int | None = None
    gpus: int | None = None  # written by the webhook when it moves the GPU request
    gpu_shards: int | None = None  # Slurm gres/shard: a share of one GPU
    gpu_type: str | None = None  # Slurm's GPU type (gres/gpu:<type>:N), e.g. 1g.10gb
    job_name: str | None = None  # the placeholder is named k8s:<namespace>/<job_name>


@dataclass(frozen=True, slots=True)
class PodGroup:
    """Pods sharing one multi-node Slurm job: ``size`` nodes, one pod per node.

    ``rank``: this member's place, which runs on the job's ``rank``-th node (None: any).
    """

    name: str
    size: int
    rank: int | None = None


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise ValueError(_NAME_FORM)
    return text


def _name_list(text: str) -> str:
    """Partitions and reservations: Slurm takes a comma-separated list and uses the first fit."""
    names = [item.strip() for item in text.split(",")]
    if not all(_NAME.fullmatch(name) for name in names):
        raise ValueError(f"{_NAME_FORM}, or a comma-separated list of such names")
    return ",".join(names)


def _gpu_type(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise ValueError(f"a Slurm GPU type as gres.conf names it (e.g. 1g.10gb): {_NAME_FORM}")
    return text


def _constraints(text: str) -> str:
    if not _CONSTRAINTS.fullmatch(text):
        raise ValueError(_CONSTRAINTS_FORM)
    return text


def _count(text: str, minimum: int = 0) -> int:
    if not _COUNT.fullmatch(text) or not minimum <= int(text) <= SLURM_UINT32_MAX:
        raise ValueError(f"a whole number from {minimum} to {SLURM_UINT32_MAX}")
    return int(text)


def _positive(text: str) -> int:
    return _count(text, minimum=1)


def _segment(text: str) -> int:
    """Slurm keeps the segment size in 16 bits, the top two values reserved."""
    if not _COUNT.fullmatch(text) or not 1 <= int(text) <= SLURM_UINT16_MAX:
        raise ValueError(f"a whole number from 1 to {SLURM_UINT16_MAX}")
    return int(text)


def _time_limit(text: str) -> int:
    try:
        return parse_time_limit(text)
    except ValueError:
        raise ValueError(TIME_LIMIT_FORM) from None


def _duration(text: str) -> int:
    try:
        return parse_duration_seconds(text)
    except ValueError:
        raise ValueError(TIME_LIMIT_FORM.replace("minutes", "a wait in minutes", 1)) from None


def _text(text: str) -> str:
    return text  # made safe and cut to length by names.placeholder_job_name


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError('"true" or "false"')
    return text.lower() == "true"


def _reader(
    values: Mapping[str, str] | None, kind: str, sources: Mapping[str, str] | None = None
) -> Callable[[str, Callable[[str], T]], T | None]:
    """A lookup that strips values, skips blank ones and parses the rest.

    Parsers raise ValueError carrying the accepted form; the lookup turns it into
    an InvalidPodRequest naming the key (``sources``: the alias a key's value came from).
    """
    present = {k: v.strip() for k, v in (values or {}).items() if v and v.strip()}
    named = sources or {}

    def read(key: str, parse: Callable[[str], T]) -> T | None:
        text = present.get(key)
        if text is None:
            return None
        try:
            return parse(text)
        except ValueError as error:
            raise InvalidPodRequest(named.get(key, key), text, str(error), kind=kind) from None

    return read


def slurm_options(annotations: Mapping[str, str] | None) -> SlurmOptions:
    """Parse the bridge annotations of a pod (and slurm-bridge's aliases of them); raises
    InvalidPodRequest on the first bad one."""
    values, sources = resolve(annotations)
    read = _reader(values, "annotation", sources)
    placement = SlurmPlacement(
        partition=read(keys.PARTITION, _name_list),
        account=read(keys.ACCOUNT, _name),
        user=read(keys.SLURM_USER, _name),  # the namespace's (tenancy), set by the webhook
        qos=read(keys.QOS, _name),
        reservation=read(keys.RESERVATION, _name_list),
        wckey=read(keys.WCKEY, _name),
        constraints=read(keys.CONSTRAINTS, _constraints),
        priority=read(keys.PRIORITY, _count),
        exclusive=read(keys.EXCLUSIVE, _flag) or False,
        topology=_topology(read, values),
    )
    return SlurmOptions(
        placement,
        time_limit_minutes=read(keys.TIME_LIMIT, _time_limit),
        gpus=read(keys.GPUS, _count),
        gpu_shards=read(keys.GPU_SHARDS, _positive),
        gpu_type=read(keys.GPU_TYPE, _gpu_type),
        job_name=read(keys.JOB_NAME, _text),
    )


def _topology(
    read: Callable[[str, Callable[[str], int]], int | None], values: Mapping[str, str]
) -> TopologyAsk | None:
    """--switches=N@wait and --segment=N.  Each is read by one topology plugin, tree or block;
    Slurm takes both on any partition and applies the one its topology reads, so a group
    that must stay within one unit, whatever the kind, asks both."""
    switches, segment = read(keys.SWITCHES, _positive), read(keys.SEGMENT, _segment)
    wait = read(keys.TOPOLOGY_WAIT, _duration)
    if wait is not None and switches is None:
        accepted = f"a wait for the switches of {keys.SWITCHES}: set that annotation too"
        raise InvalidPodRequest(keys.TOPOLOGY_WAIT, values[keys.TOPOLOGY_WAIT], accepted,
                               kind="annotation")
    if switches is None and segment is None:
        return None
    return TopologyAsk(switches=switches, wait_seconds=wait, segment=segment)


def pod_group(labels: Mapping[str, str] | None) -> PodGroup | None:
    """The group a pod belongs to, from its group labels; None for a lone pod."""
    read = _reader(labels, "label")
    name = read(keys.GROUP, _name)
    size = read(keys.GROUP_SIZE, _positive)
    if name is None and size is None:
        return None
    if name is None:
        accepted = f"a group name alongside {keys.GROUP_SIZE}"
        raise InvalidPodRequest(keys.GROUP, None, accepted, kind="label")
    if size is None:
        accepted = f"the number of pods in group {name!r}"
        raise InvalidPodRequest(keys.GROUP_SIZE, None, accepted, kind="label")
    rank = read(keys.GROUP_RANK, _count)
    if rank is not None and rank >= size:
        accepted = f"a rank from 0 to {size - 1} (the group has {size} pods)"
        raise InvalidPodRequest(keys.GROUP_RANK, str(rank), accepted, kind="label")
    return PodGroup(name, size, rank)
