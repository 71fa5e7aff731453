"""B2: slurmrestd requests per second issued by the bridge while 100, then 1,000 pods pend.

Setup per repeat: ``start_stack`` (poll interval 1 s, resync 30 s, 5 reasons per cycle);
every Slurm node is filled by one native blocker job (the placeholder mechanism, no pod UID),
so each bench pod's job stays PENDING (reason Resources/Priority) while the Kubernetes
Nodes, which know nothing of the blockers, keep passing kube-scheduler's own filters: the
pods come back to the extender on every kube-scheduler retry.

For each level (100, then 1,000 pods in total): create the missing pods, wait until the
extender has submitted a job for every one (its ``submit`` counter) and one more resync
interval has passed, then read ``slurmbridge_slurm_request_seconds_count`` (summed over
operations) from the extender's ``/metrics/`` before and after a ``window``; the rate is the
difference over the window.  Target: flat (we call it flat when 1,000 / 100 <= 1.2).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import live
from benchmarks.common import Figure, Outcome, at_most, fmt
from bridge import keys
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest, SlurmPlacement
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import JobState
from slurmbridge_devkit.kube import ControlPlane, create_namespace, unique_name
from slurmbridge_devkit.slurm import SlurmTarget

FLAT = 1.2
RESYNC_SECONDS = 30.0  # start_stack's SLURMBRIDGE_PLACEMENT__RESYNC_INTERVAL_SECONDS


@dataclass
class Config:
    repeats: int = 3
    levels: tuple[int, ...] = (100, 1_000)
    window: float = 60.0
    slurm_version: str = "26.05"
    create_parallel: int = 50
    timeout: float = 900


async def block_nodes(slurm: SlurmTarget) -> list[int]:
    """One native job per Slurm node holding all its CPUs; returns their ids once RUNNING."""
    async with SlurmClient(slurm.settings()) as client:
        await client.connect()
        nodes = await client.list_nodes()
        ids = [
            await client.submit(JobRequest(
                name="bench-b2-blocker", owner=PodOwner(""), cpus=n.cpus, memory_mb=1024,
                placement=SlurmPlacement(exclusive=True),
            ))
            for n in nodes
        ]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = await client.job_states()
            if all(states.get(i) is JobState.RUNNING for i in ids):
                return ids
            await asyncio.sleep(0.5)
    raise TimeoutError("blocker jobs did not start")


async def wait_submitted(port: int, before: float, n: int, timeout: float) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = (await asyncio.to_thread(live.slurm_requests, port)).get("submit", 0) - before
        if done >= n:
            return
        await asyncio.sleep(1)
    raise TimeoutError(f"the extender did not submit {n} jobs in {timeout:.0f} s")


async def rate(port: int, window: float) -> tuple[float, dict[str, float]]:
    first = await asyncio.to_thread(live.slurm_requests, port)
    t0 = time.monotonic()
    await asyncio.sleep(window)
    second = await asyncio.to_thread(live.slurm_requests, port)
    elapsed = time.monotonic() - t0
    per_op = {op: (second[op] - first.get(op, 0)) / elapsed for op in second}
    return sum(per_op.values()), per_op


def run(cfg: Config) -> Outcome:
    slurm = live.slurm_target(cfg.slurm_version)
    with live.control_plane() as cp:
        return asyncio.run(_run(cfg, slurm, cp))


async def _run(cfg: Config, slurm: SlurmTarget, cp: ControlPlane) -> Outcome:
    kube = live.kube_client(cp)
    figs = {n: Figure(f"slurmrestd requests/s with {n:,} pods pending", "req/s")
            for n in cfg.levels}
    ratio = Figure(f"ratio {cfg.levels[-1]:,} / {cfg.levels[0]:,} pods", "x")
    breakdown: dict[int, dict[str, float]] = {}
    try:
        for rep in range(cfg.repeats):
            work = Path(tempfile.mkdtemp(prefix="slurmbridge-b2-"))
            async with live.bridge_stack(slurm, cp, kube, work) as stack:
                port = stack.health_port  # metrics
                blockers = await block_nodes(slurm)
                ns = unique_name("bench-b2")
                await create_namespace(kube, ns)
                try:
                    made = 0
                    rates: dict[int, float] = {}
                    for level in cfg.levels:
                        before = live.slurm_requests(port).get("submit", 0)
                        pods = [
                            live.bench_pod(f"p{i:04d}", keys.SCHEDULER_NAME, "bench-b2")
                            for i in range(made, level)
                        ]
                        await live.create_pods(kube, ns, pods, cfg.create_parallel)
                        await wait_submitted(port, before, level - made, cfg.timeout)
                        made = level
                        await asyncio.sleep(RESYNC_SECONDS)  # settle: retries, reasons, resync
                        rates[level], breakdown[level] = await rate(port, cfg.window)
                        figs[level].samples.append(rates[level])
                    ratio.samples.append(rates[cfg.levels[-1]] / rates[cfg.levels[0]])
                    print(f"  B2 repeat {rep + 1}/{cfg.repeats}: " + ", ".join(
                        f"{n} pods {fmt(r)} req/s" for n, r in rates.items()), flush=True)
                finally:
                    await live.drop_namespace(kube, ns)
                    await asyncio.to_thread(live.cancel_jobs, slurm, blockers)
                    await asyncio.to_thread(
                        slurm.admin, "scancel", "-u", slurm.user, check=False
                    )
                    await live.wait_slurm_quiet(slurm)
    finally:
        await kube.close()
    at_most(ratio, FLAT, f"flat (<= {FLAT:g}x)")
    notes = [
        f"Slurm {slurm.version}; bridge from `start_stack` (poll 1 s, resync 30 s, 5 pending "
        f"reasons per cycle); window {cfg.window:g} s per level after a {RESYNC_SECONDS:g} s "
        "settle; counts from the extender's `/metrics/` "
        "(`slurmbridge_slurm_request_seconds_count`, every HTTP attempt, all operations).",
        "Per operation in the last repeat (req/s): " + "; ".join(
            f"{n:,} pods: " + ", ".join(f"{op} {v:.2f}" for op, v in sorted(ops.items()) if v)
            for n, ops in breakdown.items()),
    ]
    return Outcome(
        bench="B2", title="Slurm load while pods pend",
        figures=[*figs.values(), ratio], notes=notes, repeats=cfg.repeats,
    )

