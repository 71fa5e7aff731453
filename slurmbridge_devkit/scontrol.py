"""Slurm's own view for end-to-end checks, parsed here and not by the product.

The bridge reads Slurm through slurmrestd's JSON (``bridge/slurm/``); a test that checks what
the bridge did asks Slurm's command-line tools instead and parses their text with this
module, so a bug in the bridge's parsing cannot confirm itself.  Formats as printed by
Slurm 24.11 and 26.05:

    scontrol show job -d -o     JobId=4 JobName=k8s:demo/g ... JobState=RUNNING Reason=None ...
                                NodeList=node[1-2] ... Nodes=node1 CPU_IDs=0 Mem=1024
                                GRES=gpu:1(IDX:6) Nodes=node2 CPU_IDs=0 Mem=1024 GRES=gpu:1(IDX:0)
                                (typed GPUs: GRES=gpu:1g.10gb:1(IDX:2); shards, the job's count of
                                each GPU's in index order: GRES=shard:2(0/4,2/4,0/4,...))
    squeue -h -o SQUEUE_FORMAT  4|k8s:demo/g|RUNNING|None|node[1-2]
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol


class Admin(Protocol):
    """Runs an admin's Slurm tool and returns its stdout (``slurm.SlurmTarget``)."""

    def admin(self, *args: str, check: bool = True) -> str: ...

SQUEUE_FORMAT = "%i|%j|%T|%r|%N"
_BRACKETS = re.compile(r"^(.*?)\[([^\]]+)\](.*)$")
_GPU_IDX = re.compile(r"gpu[^(,]*\(IDX:([0-9,\-]+)\)")
_SHARDS = re.compile(r"shard[^(,]*\(([0-9/,]+)\)")


@dataclass(frozen=True)
class JobView:
    """One job as ``scontrol show job -d`` shows it."""

    job_id: int
    name: str
    state: str
    reason: str
    nodes: tuple[str, ...]
    # Slurm node -> the GPU indices the job holds there (empty: none).
    gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    # Slurm node -> GPU index -> (shards the job holds of it, shards it has), for GPUs shared.
    shards: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueEntry:
    job_id: int
    name: str
    state: str
    reason: str
    nodes: tuple[str, ...]


def expand_hostlist(expr: str) -> tuple[str, ...]:
    """``node[1-2,05],gpu7`` -> node1, node2, node05, gpu7 (zero padding kept)."""
    names: list[str] = []
    for part in _split_outside_brackets(expr.strip()):
        names.extend(_expand_one(part))
    return tuple(names)


def index_list(text: str) -> tuple[int, ...]:
    """``0-2,5`` -> 0, 1, 2, 5."""
    found: list[int] = []
    for piece in filter(None, text.split(",")):
        low, _, high = piece.partition("-")
        found.extend(range(int(low), int(high or low) + 1))
    return tuple(found)


def shard_counts(gres: str) -> dict[int, tuple[int, int]]:
    """``shard:3(0/4,3/4)`` -> {1: (3, 4)}: the GPUs of which the job holds shards."""
    found: dict[int, tuple[int, int]] = {}
    for match in _SHARDS.finditer(gres):
        for gpu, pair in enumerate(match.group(1).split(",")):
            held, _, total = pair.partition("/")
            if int(held):
                found[gpu] = (int(held), int(total))
    return found


def parse_job_line(line: str) -> JobView:
    """One line of ``scontrol show job -d -o``."""
    fields: dict[str, str] = {}
    gpus: dict[str, tuple[int, ...]] = {}
    shards: dict[str, dict[int, tuple[int, int]]] = {}
    detail_nodes: tuple[str, ...] = ()
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep:
            continue
        if key == "Nodes":  # a per-node detail block starts
            detail_nodes = expand_hostlist(value)
        elif key == "GRES" and detail_nodes:
            held = tuple(i for m in _GPU_IDX.finditer(value) for i in index_list(m.group(1)))
            shared = shard_counts(value)
            for node in detail_nodes:
                gpus[node] = held
                if shared:
                    shards[node] = shared
        else:
            fields.setdefault(key, value)
    node_list = fields.get("NodeList", "")
    return JobView(
        job_id=int(fields["JobId"]),
        name=fields.get("JobName", ""),
        state=fields.get("JobState", ""),
        reason=fields.get("Reason", ""),
        nodes=expand_hostlist(node_list) if node_list not in ("", "(null)") else (),
        gpus=gpus,
        fields=fields,
        shards=shards,
    )


def parse_squeue(text: str) -> list[QueueEntry]:
    """Lines of ``squeue -h -o SQUEUE_FORMAT``."""
    entries = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, name, state, reason, nodes = line.split("|", 4)
        entries.append(QueueEntry(
            int(job_id), name, state, reason, expand_hostlist(nodes) if nodes.strip() else ()
        ))
    return entries


def show_job(slurm: Admin, job_id: int | str) -> JobView:
    return parse_job_line(slurm.admin("scontrol", "show", "job", "-d", "-o", str(job_id)).strip())


def show_jobs(slurm: Admin) -> list[JobView]:
    out = slurm.admin("scontrol", "show", "job", "-d", "-o")
    return [parse_job_line(line) for line in out.splitlines() if line.startswith("JobId=")]


def squeue(slurm: Admin, *args: str) -> list[QueueEntry]:
    return parse_squeue(slurm.admin("squeue", "-h", "-o", SQUEUE_FORMAT, *args))


def gpu_holders(slurm: Admin) -> dict[tuple[str, int], list[str]]:
    """(Slurm node, GPU index) -> ids of the running jobs holding it (two: a collision)."""
    holders: dict[tuple[str, int], list[str]] = {}
    for job in show_jobs(slurm):
        if job.state != "RUNNING":
            continue
        for node, indices in job.gpus.items():
            for idx in indices:
                holders.setdefault((node, idx), []).append(str(job.job_id))
    return holders


def gpu_overlaps(jobs: Iterable[JobView]) -> dict[tuple[str, int], list[str]]:
    """(Slurm node, GPU index) -> the running jobs on it, for every GPU held beyond what Slurm
    allows: whole by two jobs, whole by one and shared by another, or more of its shards
    held than it has.  Empty: no collision."""
    whole: dict[tuple[str, int], list[str]] = {}
    shared: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
    for job in jobs:
        if job.state != "RUNNING":
            continue
        for node, indices in job.gpus.items():
            for idx in indices:
                whole.setdefault((node, idx), []).append(str(job.job_id))
        for node, counts in job.shards.items():
            for idx, (held, total) in counts.items():
                shared.setdefault((node, idx), []).append((str(job.job_id), held, total))
    found: dict[tuple[str, int], list[str]] = {}
    for gpu in whole.keys() | shared.keys():
        holders, shares = whole.get(gpu, []), shared.get(gpu, [])
        over = bool(shares) and sum(h for _, h, _ in shares) > min(t for _, _, t in shares)
        if len(holders) + (1 if shares else 0) > 1 or over:
            found[gpu] = holders + [f"{job} ({held}/{total} shards)" for job, held, total in shares]
    return found


def _split_outside_brackets(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in [*parts, current] if p]


def _expand_one(name: str) -> list[str]:
    match = _BRACKETS.match(name)
    if not match:
        return [name]
    head, ranges, tail = match.groups()
    names = []
    for piece in ranges.split(","):
        low, _, high = piece.partition("-")
        for number in range(int(low), int(high or low) + 1):
            names.extend(_expand_one(f"{head}{number:0{len(low)}d}{tail}"))
    return names
