"""The GPU map for people: a table of every index and its holder, one bar per node, and the
disagreements, loudly; or the map as plain data (``-o json|yaml``).  Shared by
``slurmbridge gpus`` and ``kubectl slurmbridge gpus`` (the base install: no server import)."""

from dataclasses import asdict
from typing import Any

from bridge.gpumap.model import Gpu, GpuMap, Holder, Kind

ANOTHER_NAMESPACE = "another namespace"
# One character per GPU in a node's bar; the legend names them.
_BAR = {"free": "░", str(Kind.NATIVE): "█", str(Kind.PLACEHOLDER): "▓", str(Kind.POD): "▓",
        str(Kind.CLAIM): "▓", "disagreement": "✗"}
_SHARED = "▚"
_UNSEEN = "·"
LEGEND = ("█ native Slurm job   ▓ the bridge's pods and claims   ▚ shards   ░ free   "
          "✗ disagreement")
KUBECTL_LEGEND = ("▓ your namespace   █ another namespace   ▚ shards   ✗ disagreement   "
                  "· no pod of the bridge seen (free, or a Slurm job's)")


def as_data(gpu_map: GpuMap) -> dict[str, Any]:
    return {"nodes": [asdict(n) for n in gpu_map.nodes],
            "disagreements": [asdict(d) for d in gpu_map.disagreements]}


def _holder_cell(holder: Holder) -> str:
    if holder.kind is Kind.NATIVE:
        return f"native job {holder.job_id} ({holder.user or '?'})"
    pods = sorted({p or ANOTHER_NAMESPACE for p in holder.pods})
    to = ", ".join(pods + holder.claims) or (holder.owner or "no pod yet")
    job = f"job {holder.job_id}" if holder.job_id is not None else "no job recorded"
    share = ", shards" if holder.shared else ""
    return f"{holder.kind} {job}{share} → {to}"


def _symbol(gpu: Gpu, mine: str | None) -> str:
    if gpu.problems or not gpu.holders:
        return _BAR[gpu.state]
    if all(h.shared for h in gpu.holders):
        return _SHARED
    if mine is not None:  # a researcher's view: theirs or someone else's
        return "▓" if any(h.namespace == mine for h in gpu.holders) else "█"
    return _BAR[gpu.state]


def bars(gpu_map: GpuMap, mine: str | None = None) -> list[str]:
    """A character per index from 0 (``·``: an index nothing said anything about)."""
    width = max((len(n.node) for n in gpu_map.nodes), default=0)
    lines = []
    for node in gpu_map.nodes:
        known = {g.index: _symbol(g, mine) for g in node.gpus}
        drawn = "".join(known.get(i, _UNSEEN) for i in range(max(known, default=-1) + 1))
        lines.append(f"{node.node.ljust(width)}  {drawn}")
    return lines


def table(gpu_map: GpuMap, mine: str | None = None) -> str:
    """Every index a line, then a bar a node with its legend, then the disagreements."""
    header = ("NODE", "KUBE NODE", "GPU", "TYPE", "HOLDER")
    rows = [(n.node, n.kube_node or "-", str(g.index), g.type or "-",
             "; ".join(_holder_cell(h) for h in g.holders) or "free")
            for n in gpu_map.nodes for g in n.gpus]
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    lines += ["", *bars(gpu_map, mine), "", KUBECTL_LEGEND if mine is not None else LEGEND]
    found = gpu_map.disagreements
    if found:
        lines += ["", f"!! {len(found)} DISAGREEMENT(S) between Slurm and the bridge's records:"]
        lines += [f"!! {d.node} GPU {d.index} [{d.problem}]: {d.text}" for d in found]
    return "\n".join(lines)
