"""Slurm's allocation strings (node hostlists, per-node GPU ``gres_detail``) as core types.

A job's shards (``gres/shard``) count as the GPUs they are on: that GPU is what the pod is
told, and Slurm keeps it from being any other job's whole GPU.

These are what the pod is bound to: a node list or GPU index read wrongly would put
a pod on GPUs Slurm gave to someone else, so anything unexpected is an error, never
a guess.
"""

import re
from collections.abc import Iterable, Iterator, Sequence

import hostlist

from bridge.slurm.types import Allocation

# Slurm node names are host names; anything else ("(null)", "None assigned") is no node.
_NODE_NAME = re.compile(r"[A-Za-z0-9_.-]+", re.ASCII)
_COUNT = re.compile(r"[0-9]+", re.ASCII)
_SHARD_COUNT = re.compile(r"([0-9]+)/[0-9]+", re.ASCII)
_INDEX_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?", re.ASCII)


def expand_nodes(expr: str) -> tuple[str, ...]:
    """Node names of a hostlist such as ``gpu[01-04,07]``, in Slurm's order."""
    try:
        names = hostlist.expand_hostlist(expr.strip())
    except hostlist.BadHostlist as error:
        raise ValueError(f"bad Slurm node list {expr!r}: {error}") from None
    for name in names:
        if not _NODE_NAME.fullmatch(name):
            raise ValueError(f"bad Slurm node list {expr!r}: {name!r} is not a node name")
    return tuple(names)


def _split_top_level(text: str) -> Iterator[str]:
    """Split on commas outside parentheses: ``gpu:2(IDX:0,3),shard:0`` has two parts."""
    depth, start = 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ValueError(f"unbalanced parentheses in gres {text!r}")
        if char == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced parentheses in gres {text!r}")
    yield text[start:]


def index_list(idx: str) -> tuple[int, ...]:
    """Indices of a list such as ``0-1,4-5`` (empty text: none)."""
    return tuple(_indices(idx, idx)) if idx else ()


def _indices(idx: str, entry: str) -> Iterator[int]:
    """Indices of an IDX list such as ``0-1,4-5``."""
    for part in idx.split(","):
        match = _INDEX_RANGE.fullmatch(part)
        if match is None or int(match[2] or match[1]) < int(match[1]):
            raise ValueError(f"bad GPU index list {idx!r} in gres {entry!r}")
        yield from range(int(match[1]), int(match[2] or match[1]) + 1)


def _gpu_indices_of(gres: str, entry: str) -> Iterator[int]:
    """GPU indices of one ``name[:type][:count][(...)]`` item; nothing unless it is a GPU or a
    shard of one."""
    head, paren, detail = gres.partition("(")
    fields = head.split(":")
    if fields[0] not in ("gpu", "shard"):
        return
    count = int(fields[-1]) if len(fields) > 1 and _COUNT.fullmatch(fields[-1]) else None
    if not paren:
        if count != 0:  # GPUs granted but their indices unknown: binding would be a guess
            raise ValueError(f"no GPU indices (IDX) in gres {entry!r}")
        return
    if fields[0] == "shard":
        gpus = tuple(_shard_gpus(detail, entry))
        if count and not gpus:
            raise ValueError(f"shards on no GPU in gres {entry!r}")
        yield from gpus
        return
    if not (detail.startswith("IDX:") and detail.endswith(")")):
        raise ValueError(f"bad GPU detail in gres {entry!r}")
    idx = detail[len("IDX:") : -1]
    if idx == "" and count == 0:  # a type the job got none of: gpu:3g.40gb:0(IDX:)
        return
    if idx != "N/A":
        yield from _indices(idx, entry)


def _shard_gpus(detail: str, entry: str) -> Iterator[int]:
    """The GPUs a job's shards are on: Slurm lists, GPU by GPU in index order, the shards the
    job holds of each (``shard:3(0/4,3/4)``: 3 of GPU 1's 4)."""
    held = [_SHARD_COUNT.fullmatch(part) for part in detail.removesuffix(")").split(",")]
    if not detail.endswith(")") or not all(held):
        raise ValueError(f"bad shard detail in gres {entry!r}")
    yield from (gpu for gpu, match in enumerate(held) if match and int(match[1]))


def gpu_slots(gres: str) -> tuple[tuple[str, int], ...]:
    """A node's configured GPUs (its ``gres``, e.g. ``gpu:8,shard:32`` or
    ``gpu:1g.10gb:4(S:0),gpu:3g.40gb:4``) as (type, shards) per index: indices count up in
    the order the node lists its GPU types, as gres.conf declares their files; a node's shards
    are spread evenly over its GPUs ("" and 0: untyped, none)."""
    types: list[str] = []
    shards = 0
    for item in _split_top_level(gres.strip()) if gres.strip() else ():
        fields = item.strip().partition("(")[0].split(":")
        count = int(fields[-1]) if len(fields) > 1 and _COUNT.fullmatch(fields[-1]) else 1
        if fields[0] == "gpu":
            types += [fields[1] if len(fields) == 3 else ""] * count
        elif fields[0] == "shard":
            shards += count
    per_gpu = shards // len(types) if types else 0
    return tuple((kind, per_gpu) for kind in types)


def gpu_indices(gres_detail_entry: str, *, shards_only: bool = False) -> tuple[int, ...]:
    """GPU indices Slurm allocated on one node, sorted, from its ``gres_detail`` entry;
    ``shards_only``: those the job holds shards of."""
    entry = gres_detail_entry.strip()
    found = {i for gres in (_split_top_level(entry) if entry else ())
             if not shards_only or gres.strip().startswith("shard")
             for i in _gpu_indices_of(gres.strip(), entry)}
    return tuple(sorted(found))


def allocation_from(nodes_expr: str, gres_detail: Sequence[str]) -> Allocation | None:
    """The allocation of a job from its node list and ``gres_detail`` (one entry per node).

    None while the job has no nodes. Every node is a key of ``gpu_ids`` (empty when
    it holds no GPU); ``gres_detail`` may be empty when the job has no gres at all.
    """
    nodes = expand_nodes(nodes_expr)
    if not nodes:
        return None
    if gres_detail and len(gres_detail) != len(nodes):
        raise ValueError(
            f"gres_detail {list(gres_detail)!r} does not have one entry per node of {nodes_expr!r}"
        )
    entries = dict(zip(nodes, gres_detail or [""] * len(nodes), strict=True))
    return Allocation(
        nodes=nodes,
        gpu_ids={node: gpu_indices(entry) for node, entry in entries.items()},
        shared={node: shared for node, entry in entries.items()
                if (shared := gpu_indices(entry, shards_only=True))},
    )


def format_gpu_ids(ids: Iterable[int]) -> str:
    """The ``slurmbridge.io/gpu-ids`` value and GPU env var: ``"0,1"``, ``""`` for none."""
    return ",".join(str(i) for i in ids)
