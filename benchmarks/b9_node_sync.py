"""B9: what node sync's round costs Slurm and the bridge at site scale, Slurm's node table
read in full against asked "changed since?" and found unchanged (HTTP 304, Slurm 26.05).

The leader's node sync reads Slurm's node table every round (``controllers.interval_seconds``,
2 s) whether or not a node changed; nodes change rarely.  Per size (Slurm restarted with that
many slurmd, ``b6_setup.scale_slurm``; the default shape is put back afterwards), ``rounds``
calls of each kind one after the other per repeat, through the bridge's ``SlurmClient``:

- in full: ``node_table()``, i.e. ``GET /nodes/`` parsed into the core's nodes;
- unchanged: ``node_table_since(read_at)`` of a table read before any of them, i.e.
  ``GET /nodes/?update_time=`` answered 304 (a call that found a change is counted and says so).

Per call: wall ms, CPU-ms of slurmrestd + slurmctld, and of this process (the bridge's own
parse of the answer), from /proc.  No job runs meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from benchmarks import live
from benchmarks.b6_setup import Shape, scale_slurm
from benchmarks.common import Figure, Outcome
from bridge.slurm.client import SlurmClient
from slurmbridge_devkit.slurm import SlurmTarget

SLURM_KINDS = ("slurmrestd", "slurmctld")
SELF = "benchmark client"


@dataclass
class Config:
    repeats: int = 3
    nodes: tuple[int, ...] = (4, 1024)
    rounds: int = 100
    slurm_version: str = "26.05"


@dataclass
class Pass:
    wall_ms: float
    slurm_cpu_ms: float
    own_cpu_ms: float
    changed: int = 0  # unchanged pass only: calls that found a change after all


async def _pass(client: SlurmClient, read_at: int | None, rounds: int) -> Pass:
    """``rounds`` calls: in full when ``read_at`` is None, else asked "changed since?" as
    node sync asks it (a table that came back is the one asked about next)."""
    changed = 0
    cpu0, t0 = live.cpu_seconds(), time.perf_counter()
    for _ in range(rounds):
        if read_at is None:
            await client.node_table()
        elif (table := await client.node_table_since(read_at)) is not None:
            changed += 1
            read_at = table.read_at
    wall = time.perf_counter() - t0
    used = live.cpu_since(cpu0)
    slurm = sum(used.get(k, 0.0) for k in SLURM_KINDS)
    return Pass(wall * 1000 / rounds, slurm * 1000 / rounds, used.get(SELF, 0.0) * 1000 / rounds,
                changed)


async def _measure(slurm: SlurmTarget, cfg: Config) -> list[tuple[Pass, Pass]]:
    async with SlurmClient(slurm.settings()) as client:
        await asyncio.sleep(3)  # the nodes registered: none changes from here on
        table = await client.node_table()
        assert table.read_at is not None, "slurmrestd's node table carries no last_update"
        await asyncio.sleep(2)
        return [(await _pass(client, None, cfg.rounds),
                 await _pass(client, table.read_at, cfg.rounds)) for _ in range(cfg.repeats)]


def run(cfg: Config) -> Outcome:
    out = Outcome("B9", "node sync's round at site scale", repeats=cfg.repeats)
    for n in cfg.nodes:
        shape = Shape(nodes=n, native_running=0, native_pending=0)
        with scale_slurm(cfg.slurm_version, shape) as slurm:
            passes = asyncio.run(_measure(slurm, cfg))
        tag = f"[{n:,} nodes]"
        for kind, which in (("in full", 0), ("unchanged (304)", 1)):
            got = [p[which] for p in passes]
            out.figures += [
                Figure(f"{tag} {kind}: ms per round", "ms", [p.wall_ms for p in got]),
                Figure(f"{tag} {kind}: slurmrestd + slurmctld CPU-ms per round", "ms",
                       [p.slurm_cpu_ms for p in got]),
                Figure(f"{tag} {kind}: the bridge's CPU-ms per round", "ms",
                       [p.own_cpu_ms for p in got]),
            ]
        out.figures.append(Figure(
            f"{tag} Slurm's CPU per round, unchanged / in full", "x",
            [u.slurm_cpu_ms / f.slurm_cpu_ms if f.slurm_cpu_ms else float("nan")
             for f, u in passes]))
        found = sum(u.changed for _, u in passes)
        out.notes.append(f"{tag} {cfg.rounds} calls of each kind per repeat; of the "
                         f"\"changed since?\" calls {found} found a change")
    out.notes.append(
        f"Slurm {cfg.slurm_version}, nodes of 64 CPUs and 8 GPUs (one slurmd each), no job "
        "running; node sync's round comes every 2 s (`controllers.interval_seconds`), so a "
        "round's CPU-ms / 2,000 is the share of a core it keeps busy")
    return out
